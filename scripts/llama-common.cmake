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
