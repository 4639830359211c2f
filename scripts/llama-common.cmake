# Injected into llama.cpp's CMake build (CMAKE_PROJECT_INCLUDE, which llama-cpp-sys-2 passes
# on from the environment; .cargo/config.toml sets it). It trims what Hearth never runs from
# the C++ build, the longest part of a cold build, and compiles ggml's CPU ops with Hearth's
# patch (patches/ggml-cpu); docs/ARCHITECTURE.md says so too.
#
# llama-cpp-2 always builds llama.cpp's `common` helpers (argument parsing, chat parsers, a
# Jinja engine, an HTTP client: 52 files and httplib). Its C shim (wrapper_common.cpp) reaches
# 14 of them: the JSON-schema-to-grammar converter, GPU fitting (`fit`), speculation and what
# they call. Only those are compiled, without optimisation (Hearth runs the converter once per
# request that asks for a JSON format, fitting once per load), and the library is linked with
# --no-undefined: a llama.cpp update that makes them call another file fails the build there,
# naming the symbol, and a program that calls one more helper fails its own link. Add the
# file to the list below then.
set(HEARTH_COMMON_SOURCES
  common.cpp fit.cpp json-schema-to-grammar.cpp json-schema.cpp json.cpp log.cpp
  ngram-cache.cpp ngram-map.cpp ngram-mod.cpp reasoning-budget.cpp sampling.cpp
  speculative.cpp trie.cpp unicode.cpp)
get_property(_hearth_deferred GLOBAL PROPERTY HEARTH_COMMON_TRIM SET)
if(NOT _hearth_deferred)
  set_property(GLOBAL PROPERTY HEARTH_COMMON_TRIM TRUE)
  function(_hearth_trim_common)
    if(NOT TARGET llama-common)
      return()
    endif()
    get_target_property(_sources llama-common SOURCES)
    set(_kept)
    foreach(_s IN LISTS _sources)
      get_filename_component(_name "${_s}" NAME)
      get_filename_component(_dir "${_s}" DIRECTORY)
      # The files named above (in common/ itself, not jinja/ or parsers/) and every header.
      if(NOT _s MATCHES "\\.(c|cc|cpp)$"
         OR (_name IN_LIST HEARTH_COMMON_SOURCES AND (_dir STREQUAL "" OR _dir MATCHES "/common$")))
        list(APPEND _kept "${_s}")
      endif()
    endforeach()
    set_property(TARGET llama-common PROPERTY SOURCES ${_kept})
    get_target_property(_links llama-common LINK_LIBRARIES)
    list(REMOVE_ITEM _links cpp-httplib)
    set_property(TARGET llama-common PROPERTY LINK_LIBRARIES ${_links})
    if(TARGET cpp-httplib)
      set_property(TARGET cpp-httplib PROPERTY EXCLUDE_FROM_ALL TRUE)
    endif()
    target_compile_options(llama-common PRIVATE -O0)
    target_link_options(llama-common PRIVATE -Wl,--no-undefined)
  endfunction()
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _hearth_trim_common)
endif()

# Debug and test builds (cargo's debug profile builds under .../debug/build/) run on the machine
# that builds them, and trim more; release builds (`make run`, `make package`, `make bench`)
# keep all of it.
# - ggml's CPU backend is built in 14 x86-64 variants (GGML_CPU_ALL_VARIANTS), one shared
#   library each, ~40 s of compiling apiece. One is built: the best this machine runs by
#   /proc/cpuinfo (zen4: AVX-512 with VBMI, VNNI and BF16; else haswell: AVX2; else x64, any
#   x86-64), or x64, haswell and zen4 where /proc/cpuinfo names no flags. The others are
#   compiled from an empty file, with no score function, which ggml's loader skips; the flags
#   checked here include every feature ggml's score function asks of the variant kept.
# - The Vulkan backend's ~160 generated sources are arrays of SPIR-V bytes: compiled without
#   optimisation. Its host code (ggml-vulkan.cpp), which only the software Vulkan device of the
#   GPU tests runs there, the multimodal library (image and audio preprocessing) and llama's
#   own sources (loading, tokenizing, sampling, building each step's graph) at -O1; ggml's
#   compute kernels, where the time goes, keep -O3.
function(_hearth_debug_cpu_variants out)
  set(_zen4 sse4_2 avx avx2 fma f16c bmi2 avx512f avx512cd avx512vl avx512dq avx512bw
            avx512vbmi avx512_vnni avx512_bf16)
  set(_haswell sse4_2 avx avx2 fma f16c bmi2)
  set(_flags "")
  if(EXISTS /proc/cpuinfo)
    file(STRINGS /proc/cpuinfo _flags REGEX "^flags" LIMIT_COUNT 1)
  endif()
  if(_flags STREQUAL "")
    set(${out} x64 haswell zen4 PARENT_SCOPE)
    return()
  endif()
  set(_kept x64)
  foreach(_variant zen4 haswell)
    set(_all TRUE)
    foreach(_f IN LISTS _${_variant})
      if(NOT _flags MATCHES "[ \t]${_f}( |$)")
        set(_all FALSE)
      endif()
    endforeach()
    if(_all)
      set(_kept ${_variant})
      break()
    endif()
  endforeach()
  set(${out} ${_kept} PARENT_SCOPE)
endfunction()

if(CMAKE_BINARY_DIR MATCHES "/debug/build/")
  get_property(_hearth_stubs_deferred GLOBAL PROPERTY HEARTH_CPU_STUBS SET)
  if(NOT _hearth_stubs_deferred)
    set_property(GLOBAL PROPERTY HEARTH_CPU_STUBS TRUE)
    function(_hearth_trim_debug_backends)
      set(_empty "${CMAKE_BINARY_DIR}/hearth-left-out-cpu-variant.c")
      file(WRITE "${_empty}" "/* A CPU variant debug builds leave out: scripts/llama-common.cmake. */\n")
      _hearth_debug_cpu_variants(_kept)
      message(STATUS "Hearth: debug build, CPU variants ${_kept}")
      foreach(_v x64 sse42 sandybridge ivybridge piledriver haswell skylakex cannonlake
                 cascadelake icelake cooperlake zen4 alderlake sapphirerapids)
        if(TARGET ggml-cpu-${_v} AND NOT _v IN_LIST _kept)
          set_property(TARGET ggml-cpu-${_v} PROPERTY SOURCES "${_empty}")
          # Not even the feature check: a library without ggml_backend_score is never picked.
          set_property(TARGET ggml-cpu-${_v} PROPERTY LINK_LIBRARIES ggml-base)
        endif()
      endforeach()
      if(TARGET ggml-vulkan)
        get_target_property(_dir ggml-vulkan SOURCE_DIR)
        get_target_property(_shaders ggml-vulkan SOURCES)
        list(FILTER _shaders INCLUDE REGEX "\\.comp\\.cpp$")
        if(_shaders)
          set_source_files_properties(${_shaders} TARGET_DIRECTORY ggml-vulkan
                                      PROPERTIES COMPILE_OPTIONS -O0)
        endif()
        set_source_files_properties("${_dir}/ggml-vulkan.cpp" TARGET_DIRECTORY ggml-vulkan
                                    PROPERTIES COMPILE_OPTIONS -O1)
      endif()
      foreach(_t llama mtmd)
        if(TARGET ${_t})
          target_compile_options(${_t} PRIVATE -O1)
        endif()
      endforeach()
    endfunction()
    cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _hearth_trim_debug_backends)
  endif()
endif()

# Every build: ggml's CPU backend (each variant, or the one ggml-cpu library of a build without
# them) compiles a patched copy of ggml-cpu/ops.cpp: flash attention over a quantized KV cache
# (patches/ggml-cpu/PATCH.md). A change to the patch bumps GGML_HEARTH_CPU_PATCH in
# .cargo/config.toml, which makes cargo run llama-cpp-sys-2's build script again; its CMake
# build then regenerates itself (CMake tracks the files this one includes) and the compiler
# tracks the .inc.
include("${CMAKE_CURRENT_LIST_DIR}/../patches/ggml-cpu/patch.cmake")

# Every target of `dir` and the folders under it.
function(_hearth_all_targets dir out)
  get_property(_targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  get_property(_subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(_sub IN LISTS _subdirs)
    _hearth_all_targets("${_sub}" _more)
    list(APPEND _targets ${_more})
  endforeach()
  set(${out} ${_targets} PARENT_SCOPE)
endfunction()

get_property(_hearth_patch_deferred GLOBAL PROPERTY HEARTH_GGML_CPU_PATCH SET)
if(NOT _hearth_patch_deferred)
  set_property(GLOBAL PROPERTY HEARTH_GGML_CPU_PATCH TRUE)
  function(_hearth_patch_cpu_backends)
    set(_patched "${CMAKE_BINARY_DIR}/hearth-ggml-cpu/ops.cpp")
    set(_done "")
    # Whatever the variants are named (x86's, ARM's, a build without variants): every target
    # that compiles ggml-cpu/ops.cpp. The debug trim above, deferred first, has left the
    # variants it drops without it.
    _hearth_all_targets("${CMAKE_SOURCE_DIR}" _targets)
    foreach(_t IN LISTS _targets)
      get_target_property(_type ${_t} TYPE)
      if(_type STREQUAL "INTERFACE_LIBRARY" OR _type STREQUAL "UTILITY")
        continue()
      endif()
      get_target_property(_all ${_t} SOURCES)
      set(_ops ${_all})
      list(FILTER _ops INCLUDE REGEX "(^|/)ggml-cpu/ops\\.cpp$")
      if(NOT _ops)
        continue()
      endif()
      if(NOT _done)
        if(NOT IS_ABSOLUTE "${_ops}")
          get_target_property(_dir ${_t} SOURCE_DIR)
          set(_ops "${_dir}/${_ops}")
        endif()
        hearth_patch_ggml_ops("${_ops}" "${_patched}")
      endif()
      list(TRANSFORM _all REPLACE "^(.*/)?ggml-cpu/ops\\.cpp$" "${_patched}")
      set_property(TARGET ${_t} PROPERTY SOURCES "${_all}")
      list(APPEND _done ${_t})
    endforeach()
    if(NOT _done)
      message(FATAL_ERROR "Hearth: no target compiles ggml-cpu/ops.cpp to patch")
    endif()
    message(STATUS "Hearth: ggml CPU ops patched in ${_done}")
  endfunction()
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _hearth_patch_cpu_backends)
endif()
