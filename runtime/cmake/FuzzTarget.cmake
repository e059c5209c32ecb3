# libFuzzer targets built with clang (ASan + UBSan) while the rest of the
# tree may build with another compiler: each target compiles its harness and
# the sources it exercises with clang, one object each, and links them,
# outside the main targets.
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
  set(compile -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined
              -fno-sanitize-recover=undefined ${F_FLAGS})
  # One object per source, so that the sources compile in parallel with
  # each other and the rest of the build, and a source two targets of this
  # directory compile with the same flags (the runtime's readers) compiles
  # once: the object's name is a hash of the source and the flags. The C++
  # compiler launcher (ccache), when the build has one, caches them.
  set(objects "")
  foreach(source "${harness}" ${F_SOURCES})
    get_filename_component(stem "${source}" NAME_WE)
    string(MD5 key "${source};${compile}")
    string(SUBSTRING "${key}" 0 12 key)
    set(object "${CMAKE_CURRENT_BINARY_DIR}/fuzz-objects/${stem}-${key}.o")
    list(APPEND objects "${object}")
    get_property(made DIRECTORY PROPERTY FUZZ_OBJECTS)
    if("${object}" IN_LIST made)
      continue()
    endif()
    set_property(DIRECTORY APPEND PROPERTY FUZZ_OBJECTS "${object}")
    add_custom_command(
      OUTPUT "${object}"
      COMMAND ${CMAKE_CXX_COMPILER_LAUNCHER} "${FUZZ_CXX}" ${compile} -MD -MF "${object}.d" -c "${source}"
              -o "${object}"
      DEPENDS "${source}" ${F_DEPENDS}
      DEPFILE "${object}.d"
      COMMENT "Compiling ${stem} for fuzzing (libFuzzer, ASan + UBSan)"
      VERBATIM COMMAND_EXPAND_LISTS)
  endforeach()
  add_custom_command(
    OUTPUT "${out}"
    COMMAND "${FUZZ_CXX}" -g -fsanitize=fuzzer,address,undefined ${objects}
            ${F_LINK} -o "${out}"
    DEPENDS ${objects} ${F_DEPENDS}
    COMMENT "Linking the fuzz target ${name} (libFuzzer, ASan + UBSan)"
    VERBATIM COMMAND_EXPAND_LISTS)
  add_custom_target(${name}_build ALL DEPENDS "${out}")
endfunction()
