# Injected into llama.cpp's CMake build (CMAKE_PROJECT_INCLUDE, which llama-cpp-sys-2 passes
# on from the environment; .cargo/config.toml sets it). Hearth calls llama.cpp's core (llama,
# ggml); llama-cpp-2 always builds its `common` helpers too (argument parsing, chat parsers,
# an HTTP client), which are about 40% of the C++ build. They are compiled without
# optimisation here: of them Hearth runs only the JSON-schema-to-grammar converter, once per
# request that asks for a JSON format, and -O0 takes a fraction of the time.
get_property(_hearth_deferred GLOBAL PROPERTY HEARTH_COMMON_O0 SET)
if(NOT _hearth_deferred)
  set_property(GLOBAL PROPERTY HEARTH_COMMON_O0 TRUE)
  function(_hearth_unoptimized_common)
    foreach(_t llama-common llama-common-base cpp-httplib)
      if(TARGET ${_t})
        target_compile_options(${_t} PRIVATE -O0)
      endif()
    endforeach()
  endfunction()
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _hearth_unoptimized_common)
endif()

# Debug and test builds (cargo's debug profile builds under .../debug/build/): ggml's CPU backend
# is built in 14 x86-64 variants (GGML_CPU_ALL_VARIANTS), one shared library each, the largest
# part of a cold `make test` build. There, nine of them are compiled from an empty file, with no
# score function, which ggml's loader skips: x64 (any x86-64), haswell (AVX2), skylakex and
# icelake (AVX-512) and zen4 stay, so every machine loads one that runs well on it. Release
# builds (`make run`, `make package`, `make bench`) keep every variant.
if(CMAKE_BINARY_DIR MATCHES "/debug/build/")
  get_property(_hearth_stubs_deferred GLOBAL PROPERTY HEARTH_CPU_STUBS SET)
  if(NOT _hearth_stubs_deferred)
    set_property(GLOBAL PROPERTY HEARTH_CPU_STUBS TRUE)
    function(_hearth_stub_cpu_variants)
      set(_empty "${CMAKE_BINARY_DIR}/hearth-left-out-cpu-variant.c")
      file(WRITE "${_empty}" "/* A CPU variant debug builds leave out: scripts/llama-common.cmake. */\n")
      foreach(_v sse42 sandybridge ivybridge piledriver cannonlake cascadelake cooperlake alderlake sapphirerapids)
        if(TARGET ggml-cpu-${_v})
          set_property(TARGET ggml-cpu-${_v} PROPERTY SOURCES "${_empty}")
          # Not even the feature check: a library without ggml_backend_score is never picked.
          set_property(TARGET ggml-cpu-${_v} PROPERTY LINK_LIBRARIES ggml-base)
        endif()
      endforeach()
    endfunction()
    cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _hearth_stub_cpu_variants)
  endif()
endif()
