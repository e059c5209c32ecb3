# libFuzzer targets built with clang (ASan + UBSan) while the rest of the
# tree may build with another compiler: each target is one clang command
# over its harness and the sources it exercises, outside the main targets.
#
#   fuzz_toolchain_found(VAR)   VAR: ON when clang with libFuzzer works
#   fuzz_target(NAME HARNESS SOURCES s... [FLAGS f...] [LINK l...] [DEPENDS t...])
#     builds <runtime output dir>/NAME; LINK items go to the link line
#     (generator expressions allowed), DEPENDS are targets built first.
include_guard(GLOBAL)

function(fuzz_toolchain_found var)
  find_program(FUZZ_CXX NAMES clang++-22 clang++ DOC "clang with libFuzzer, for fuzz targets")
  # Probed once per configure run, whichever directory asks first.
  get_property(probed GLOBAL PROPERTY FUZZ_TOOLCHAIN_OK SET)
  if(probed)
    get_property(ok GLOBAL PROPERTY FUZZ_TOOLCHAIN_OK)
    set(${var} ${ok} PARENT_SCOPE)
    return()
  endif()
  set(ok OFF)
  if(FUZZ_CXX)
    set(probe "${CMAKE_BINARY_DIR}/fuzz-probe.cpp")
    file(WRITE "${probe}" "#include <cstddef>\n#include <cstdint>\n"
         "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t *, size_t) { return 0; }\n")
    execute_process(
      COMMAND "${FUZZ_CXX}" -fsanitize=fuzzer,address,undefined "${probe}"
              -o "${CMAKE_BINARY_DIR}/fuzz-probe"
      RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0)
      set(ok ON)
    endif()
  endif()
  set_property(GLOBAL PROPERTY FUZZ_TOOLCHAIN_OK ${ok})
  set(${var} ${ok} PARENT_SCOPE)
endfunction()

function(fuzz_target name harness)
  cmake_parse_arguments(F "" "" "SOURCES;FLAGS;LINK;DEPENDS" ${ARGN})
  set(bin "${CMAKE_RUNTIME_OUTPUT_DIRECTORY}")
  if(NOT bin)
    set(bin "${CMAKE_CURRENT_BINARY_DIR}")
  endif()
  set(out "${bin}/${name}")
  add_custom_command(
    OUTPUT "${out}"
    COMMAND "${FUZZ_CXX}" -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined
            -fno-sanitize-recover=undefined ${F_FLAGS} -MD -MF "${out}.d"
            "${harness}" ${F_SOURCES} ${F_LINK} -o "${out}"
    DEPENDS "${harness}" ${F_SOURCES} ${F_DEPENDS}
    DEPFILE "${out}.d"
    COMMENT "Building the fuzz target ${name} (libFuzzer, ASan + UBSan)"
    VERBATIM COMMAND_EXPAND_LISTS)
  add_custom_target(${name}_build ALL DEPENDS "${out}")
endfunction()
