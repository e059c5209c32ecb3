# The cuda backend's tests (included by CMakeLists.txt, also where the
# runtime is built with DSRT_WITH_CPU=OFF).

# The cuda backend's tests that run anywhere: every function of kernels.h
# linked from libdsrt_cuda.a (a missing one fails the link) and defined by
# both backends' sources; a program linked with it, run without a GPU,
# failing with "no CUDA device" and exit status 1. dsrt_cuda_kernel_test,
# the kernel cases on the GPU, is built here but run only where there is a
# GPU (docs/runtime.md, "The cuda backend").
set(DSRT_CUDA_TEST_TARGETS)
if(DSRT_HAVE_CUDA)
  add_executable(dsrt_cuda_kernel_table cuda/kernel_table.cpp)
  target_link_libraries(dsrt_cuda_kernel_table PRIVATE dsrt_cuda)
  add_executable(dsrt_cuda_no_device cuda/no_device.cpp)
  target_link_libraries(dsrt_cuda_no_device PRIVATE dsrt_cuda)
  target_compile_options(dsrt_cuda_no_device PRIVATE -fexceptions)
  # With cuda/mma_test.cu (nvcc): on a GPU the tensor-core instruction
  # itself against the PTX ISA's fragment layouts; cuda/reduce_order_test.cpp:
  # reduce's column kernel sums in the backend's fixed order, to the bit;
  # cuda/row_align_test.cpp: layer norm rows that start off a 16-byte
  # boundary take the block kernels and agree with aligned ones.
  add_executable(dsrt_cuda_kernel_test $<TARGET_OBJECTS:dsrt_kernel_case_objects> cuda/mma_test.cu
                                       cuda/reduce_order_test.cpp cuda/row_align_test.cpp)
  target_link_libraries(dsrt_cuda_kernel_test PRIVATE dsrt_cuda GTest::gtest)
  target_include_directories(dsrt_cuda_kernel_test PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/../src")
  target_compile_options(dsrt_cuda_kernel_test PRIVATE
                         $<$<COMPILE_LANGUAGE:CXX>:-fexceptions>
                         $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fexceptions>)
  add_executable(dsrt_cuda_start cuda/start.cpp)
  target_link_libraries(dsrt_cuda_start PRIVATE dsrt_cuda)
  target_compile_options(dsrt_cuda_start PRIVATE -fexceptions)
  set(DSRT_CUDA_TEST_TARGETS dsrt_cuda_kernel_table dsrt_cuda_no_device dsrt_cuda_start
                             dsrt_cuda_kernel_test)
  # The fake CUDA runtime (cudart, cuBLASLt, NCCL) that test/Compile/
  # cuda-fake-run.test preloads into a generated cuda program to run its
  # host side without a GPU (docs/runtime.md, "The fake CUDA runtime").
  add_library(dsrt_fake_cudart SHARED cuda/fake_cudart.cpp)
  target_include_directories(dsrt_fake_cudart PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  if(DSRT_WITH_NCCL AND DSRT_NCCL_INCLUDE_DIR)
    target_include_directories(dsrt_fake_cudart PRIVATE "${DSRT_NCCL_INCLUDE_DIR}")
  else()
    target_compile_definitions(dsrt_fake_cudart PRIVATE DSRT_FAKE_NO_NCCL=1)
  endif()
  set_target_properties(dsrt_fake_cudart PROPERTIES CXX_STANDARD 17
                        LIBRARY_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/lib")
  list(APPEND DSRT_CUDA_TEST_TARGETS dsrt_fake_cudart)
  # The fake's per-stream device clocks (cuda/fake_clock.cpp).
  add_executable(dsrt_cuda_fake_clock cuda/fake_clock.cpp)
  target_link_libraries(dsrt_cuda_fake_clock PRIVATE CUDA::cudart)
  list(APPEND DSRT_CUDA_TEST_TARGETS dsrt_cuda_fake_clock)
  add_test(NAME dsrt_cuda_fake_clock COMMAND dsrt_cuda_fake_clock)
  set_tests_properties(dsrt_cuda_fake_clock PROPERTIES LABELS dsrt_cuda TIMEOUT 60
                       PASS_REGULAR_EXPRESSION "fake clock: ok"
                       ENVIRONMENT "LD_PRELOAD=$<TARGET_FILE:dsrt_fake_cudart>")

  add_test(NAME dsrt_cuda_kernel_table COMMAND dsrt_cuda_kernel_table)
  set(_src "${CMAKE_CURRENT_SOURCE_DIR}/../src")
  add_test(NAME dsrt_cuda_kernel_names
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/check_kernel_table.py"
            --header "${CMAKE_CURRENT_SOURCE_DIR}/../include/dsrt/kernels.h"
            --table "${CMAKE_CURRENT_SOURCE_DIR}/cuda/kernel_table.cpp"
            --backend "cpu=${_src}/cpu,${_src}/workspace.cpp"
            --backend "cuda=${_src}/cuda,${_src}/workspace.cpp")
  # The check must also fail for a backend that lacks kernels.
  add_test(NAME dsrt_cuda_kernel_names_rejects
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/check_kernel_table.py"
            --header "${CMAKE_CURRENT_SOURCE_DIR}/../include/dsrt/kernels.h"
            --backend "bad=${CMAKE_CURRENT_SOURCE_DIR}/backend_neutral_bad")
  set_tests_properties(dsrt_cuda_kernel_names_rejects PROPERTIES
                       PASS_REGULAR_EXPRESSION "backend bad: missing unary")
  add_test(NAME dsrt_cuda_no_device
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/expect_failure.py" 1
            "error: dsrt: no CUDA device" --
            $<TARGET_FILE:dsrt_cuda_no_device> --inputs "${CMAKE_CURRENT_BINARY_DIR}"
            --outputs "${CMAKE_CURRENT_BINARY_DIR}")
  set_tests_properties(dsrt_cuda_no_device PROPERTIES SKIP_RETURN_CODE 77)
  # On a GPU none of the library's kernel images runs on (the fake's A100,
  # DSRT_FAKE_CUDA_CC=80, with DSRT_FAKE_CUDA_NO_KERNEL_IMAGE=1), the
  # backend refuses it at the start, naming the architectures and what to
  # rebuild; on the fake's usual GPU the same program starts.
  add_test(NAME dsrt_cuda_no_kernel_image
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/expect_failure.py" 1
            "error: dsrt: CUDA device 0 is sm_80, and libdsrt_cuda has no kernels that run on it (built for CUDA architectures ${_dsrt_cuda_archs}; cudaFuncGetAttributes: no kernel image is available for execution on the device (fake cudart)): rebuild dsopt with -DCMAKE_CUDA_ARCHITECTURES=\"80;${_dsrt_cuda_archs}\""
            -- $<TARGET_FILE:dsrt_cuda_start> --inputs "${CMAKE_CURRENT_BINARY_DIR}"
            --outputs "${CMAKE_CURRENT_BINARY_DIR}")
  add_test(NAME dsrt_cuda_start
    COMMAND $<TARGET_FILE:dsrt_cuda_start> --inputs "${CMAKE_CURRENT_BINARY_DIR}"
            --outputs "${CMAKE_CURRENT_BINARY_DIR}")
  set_tests_properties(dsrt_cuda_no_kernel_image PROPERTIES ENVIRONMENT
    "LD_PRELOAD=$<TARGET_FILE:dsrt_fake_cudart>;DSRT_FAKE_CUDA_NO_KERNEL_IMAGE=1;DSRT_FAKE_CUDA_CC=80")
  set_tests_properties(dsrt_cuda_start PROPERTIES ENVIRONMENT
    "LD_PRELOAD=$<TARGET_FILE:dsrt_fake_cudart>")
  set_tests_properties(dsrt_cuda_kernel_table dsrt_cuda_kernel_names
                       dsrt_cuda_kernel_names_rejects dsrt_cuda_no_device
                       dsrt_cuda_no_kernel_image dsrt_cuda_start
                       PROPERTIES LABELS dsrt_cuda TIMEOUT 60)
endif()

# The CUDA emulation (cuda/emu/, docs/runtime.md "The CUDA emulation"): the
# cuda backend's sources compiled as C++ with the emulation's prelude, their
# launches rewritten, on the fake runtime built to compute (cuBLASLt on the
# host), so that the kernel cases run on the cuda kernels without a GPU:
# dsrt_cuda_emu_kernel_test, the same sources as dsrt_cuda_kernel_test.
# Only the host compiler and the toolkit's headers are needed.
if(CUDAToolkit_FOUND AND DEFINED DSRT_CASES_DIR)
  set(_emu_src "${CMAKE_CURRENT_SOURCE_DIR}/../src/cuda")
  set(_emu_out "${CMAKE_CURRENT_BINARY_DIR}/cuda_emu")
  set(_emu_script "${CMAKE_CURRENT_SOURCE_DIR}/cuda/emu/rewrite_launches.py")
  set(_emu_prelude "${CMAKE_CURRENT_SOURCE_DIR}/cuda/emu/prelude.h")
  set(_emu_sources)
  foreach(name backend common elementwise linalg norm attention reduce movement loss conv optimizer
               random)
    add_custom_command(
      OUTPUT "${_emu_out}/${name}.cpp"
      COMMAND "${CMAKE_COMMAND}" -E make_directory "${_emu_out}"
      COMMAND "${DSRT_PYTHON}" "${_emu_script}" "${_emu_src}/${name}.cu"
              "${_emu_out}/${name}.cpp"
      DEPENDS "${_emu_script}" "${_emu_src}/${name}.cu"
      COMMENT "Rewriting the launches of src/cuda/${name}.cu for the CUDA emulation"
      VERBATIM)
    list(APPEND _emu_sources "${_emu_out}/${name}.cpp")
  endforeach()
  set_source_files_properties(${_emu_sources} PROPERTIES
                              COMPILE_OPTIONS "-include;${_emu_prelude}"
                              OBJECT_DEPENDS "${_emu_prelude}")
  add_library(dsrt_cuda_emu STATIC ${_emu_sources} cuda/emu/emu.cpp cuda/fake_cudart.cpp
                                   $<TARGET_OBJECTS:dsrt_core>)
  set_target_properties(dsrt_cuda_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  target_include_directories(dsrt_cuda_emu PUBLIC "${CMAKE_CURRENT_SOURCE_DIR}/../include"
                             ${CUDAToolkit_INCLUDE_DIRS})
  target_include_directories(dsrt_cuda_emu PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/../src"
                             "${CMAKE_CURRENT_SOURCE_DIR}/cuda/emu")
  # With MPI and nccl.h the emulation has the NCCL transport
  # (src/nccl/nccl_transport.cpp, plain C++) and the fake's NCCL moves data
  # over MPI (cuda/emu/nccl_mpi.cpp), so that a program runs on several
  # ranks under mpirun; otherwise it runs one process.
  if(DSRT_HAVE_MPI AND DSRT_WITH_NCCL AND DSRT_NCCL_INCLUDE_DIR)
    target_sources(dsrt_cuda_emu PRIVATE ../src/nccl/nccl_transport.cpp cuda/emu/nccl_mpi.cpp)
    target_include_directories(dsrt_cuda_emu PRIVATE "${DSRT_NCCL_INCLUDE_DIR}")
    target_compile_definitions(dsrt_cuda_emu PRIVATE DSRT_FAKE_EMULATE=1 DSRT_FAKE_NCCL_MPI=1
                                                     DSRT_HAVE_NCCL=1)
  else()
    target_compile_definitions(dsrt_cuda_emu PRIVATE DSRT_FAKE_EMULATE=1 DSRT_FAKE_NO_NCCL=1)
  endif()
  # No FMA contraction: a product and a sum round separately, as the cpu
  # backend's do.
  # nvcc does not warn of the unsigned threadIdx compared with an int; the
  # host compiler ignores nvcc's `#pragma unroll`.
  target_compile_options(dsrt_cuda_emu PRIVATE -O2 -fexceptions -ffp-contract=off -Wno-sign-compare
                                               -Wno-unknown-pragmas)
  target_link_libraries(dsrt_cuda_emu PUBLIC OpenMP::OpenMP_CXX)
  if(DSRT_HAVE_URING)
    target_link_libraries(dsrt_cuda_emu PUBLIC PkgConfig::DSRT_URING)
  endif()
  if(DSRT_HAVE_MPI)
    target_link_libraries(dsrt_cuda_emu PUBLIC MPI::MPI_CXX)
  endif()
  # The emulation as a dsrt package (tests/cuda_emu_package/lib/cmake/dsrt, in the
  # build tree only): dsrt::dsrt_cuda is libdsrt_cuda_emu.a, which generated
  # programs rebuilt with cuda/emu/program/ link (scripts/gpu-check.sh
  # --device --emulate).
  set(_emu_includes "${CMAKE_CURRENT_SOURCE_DIR}/../include;${CUDAToolkit_INCLUDE_DIRS}")
  configure_file(cuda/emu/dsrtConfig.cmake.in "${_emu_out}/dsrtConfig.cmake.in" @ONLY)
  file(GENERATE OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/cuda_emu_package/lib/cmake/dsrt/dsrtConfig.cmake"
       INPUT "${_emu_out}/dsrtConfig.cmake.in")
  # The unit test of the tensor-core product (cuda/mma_test.cu), rewritten
  # as the backend's sources are, and the reduce order test run in the same
  # binary.
  add_custom_command(
    OUTPUT "${_emu_out}/mma_test.cpp"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${_emu_out}"
    COMMAND "${DSRT_PYTHON}" "${_emu_script}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/mma_test.cu"
            "${_emu_out}/mma_test.cpp"
    DEPENDS "${_emu_script}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/mma_test.cu"
    COMMENT "Rewriting the launches of tests/cuda/mma_test.cu for the CUDA emulation"
    VERBATIM)
  set_source_files_properties("${_emu_out}/mma_test.cpp" PROPERTIES
                              COMPILE_OPTIONS
                              "-include;${_emu_prelude};-ffp-contract=off;-Wno-sign-compare;-Wno-unknown-pragmas"
                              OBJECT_DEPENDS "${_emu_prelude}")
  add_executable(dsrt_cuda_emu_kernel_test $<TARGET_OBJECTS:dsrt_kernel_case_objects>
                                           "${_emu_out}/mma_test.cpp" cuda/reduce_order_test.cpp
                                           cuda/row_align_test.cpp)
  target_link_libraries(dsrt_cuda_emu_kernel_test PRIVATE dsrt_cuda_emu GTest::gtest)
  target_include_directories(dsrt_cuda_emu_kernel_test PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/../src")
  target_compile_options(dsrt_cuda_emu_kernel_test PRIVATE -fexceptions)
  list(APPEND DSRT_CUDA_TEST_TARGETS dsrt_cuda_emu_kernel_test)
  # The emulation's own checks (cuda/emu/emu_test.cu: the thread and block
  # orders of DSRT_EMU_SCHEDULE show a missing barrier, DSRT_FAKE_CUDA_FILL
  # fills fresh memory), in the emulated kernel test only.
  add_custom_command(
    OUTPUT "${_emu_out}/emu_test.cpp"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${_emu_out}"
    COMMAND "${DSRT_PYTHON}" "${_emu_script}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/emu/emu_test.cu"
            "${_emu_out}/emu_test.cpp"
    DEPENDS "${_emu_script}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/emu/emu_test.cu"
    COMMENT "Rewriting the launches of tests/cuda/emu/emu_test.cu for the CUDA emulation"
    VERBATIM)
  set_source_files_properties("${_emu_out}/emu_test.cpp" PROPERTIES
                              COMPILE_OPTIONS "-include;${_emu_prelude};-Wno-unknown-pragmas"
                              OBJECT_DEPENDS "${_emu_prelude}")
  target_sources(dsrt_cuda_emu_kernel_test PRIVATE "${_emu_out}/emu_test.cpp")
  # The alignment variant: copies of the emulation and of its kernel test
  # (sources, include directories, definitions, options, libraries; the
  # test linked with the copy), compiled with UBSan's alignment check
  # (-fsanitize=alignment, aborting with the file and line), so that a load
  # or store a GPU would fault on as a misaligned address (a uint4 or float4
  # cast of a pointer that is not 16-byte aligned) stops the case. UBSan's
  # alignment check needs no shadow memory, so the fibers' stacks are fine.
  set(_emu_align -fsanitize=alignment -fno-sanitize-recover=alignment)
  add_library(dsrt_cuda_emu_align STATIC)
  add_executable(dsrt_cuda_emu_align_kernel_test)
  foreach(_pair "dsrt_cuda_emu;dsrt_cuda_emu_align"
                "dsrt_cuda_emu_kernel_test;dsrt_cuda_emu_align_kernel_test")
    list(GET _pair 0 _from)
    list(GET _pair 1 _to)
    foreach(_prop SOURCES INCLUDE_DIRECTORIES COMPILE_DEFINITIONS COMPILE_OPTIONS LINK_LIBRARIES
                  INTERFACE_INCLUDE_DIRECTORIES INTERFACE_LINK_LIBRARIES CXX_STANDARD
                  CXX_STANDARD_REQUIRED)
      get_target_property(_value ${_from} ${_prop})
      if(_value)
        list(TRANSFORM _value REPLACE "^dsrt_cuda_emu$" "dsrt_cuda_emu_align")
        set_property(TARGET ${_to} PROPERTY ${_prop} "${_value}")
      endif()
    endforeach()
  endforeach()
  target_compile_options(dsrt_cuda_emu_align PRIVATE ${_emu_align})
  target_link_options(dsrt_cuda_emu_align INTERFACE ${_emu_align})
  target_compile_options(dsrt_cuda_emu_align_kernel_test PRIVATE ${_emu_align})
  target_compile_definitions(dsrt_cuda_emu_align_kernel_test PRIVATE DSEMU_ALIGNMENT_CHECK=1)
  list(APPEND DSRT_CUDA_TEST_TARGETS dsrt_cuda_emu_align_kernel_test)
  # Every kernel case again on the alignment variant, the block's threads
  # resumed in reverse order and fresh device memory all-ones bytes: a
  # missing barrier before a higher thread reads what a lower one wrote, a
  # read of a workspace or arena range nothing wrote and a misaligned
  # vector access fail here as they would on a GPU. Large f16/bf16 products
  # with an unaligned leading dimension must reach cuBLASLt staged (aligned),
  # in chunks of 64 rows, so that the staged cases run several chunks.
  add_test(NAME dsrt_cuda_emu_kernels_reverse_nan_align
    COMMAND dsrt_cuda_emu_align_kernel_test --cases "${DSRT_CASES_DIR}")
  set_tests_properties(dsrt_cuda_emu_kernels_reverse_nan_align PROPERTIES LABELS dsrt_cuda
                       TIMEOUT 300 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_EMU_SCHEDULE=reverse;DSRT_FAKE_CUDA_FILL=nan;DSRT_MATMUL_STAGE_ROWS=64;DSRT_EMU_REQUIRE_ALIGNED_LD=1")
  # The cases are written by check-runtime (dsrt_kernel_cases) before CTest
  # runs, and again by the dsrt_make_cases test: run after it, never while
  # it rewrites them.
  add_test(NAME dsrt_cuda_emu_kernels
    COMMAND dsrt_cuda_emu_kernel_test --cases "${DSRT_CASES_DIR}")
  set_tests_properties(dsrt_cuda_emu_kernels PROPERTIES LABELS dsrt_cuda TIMEOUT 300
                       FIXTURES_REQUIRED dsrt_cases)
  # The tensor-core attention kernels at head width 128 (the full-attention
  # cases) on a device that lets a block opt in to no more than 48 KiB of
  # shared memory: the launches fall back to single-buffered tiles in
  # static shared memory (the two-stage forms' 68 and 70 KiB would be
  # refused) and the cases still pass.
  add_test(NAME dsrt_cuda_emu_attention_optin_48k
    COMMAND dsrt_cuda_emu_kernel_test --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_attention*.mma_head128_full_*")
  set_tests_properties(dsrt_cuda_emu_attention_optin_48k PROPERTIES LABELS dsrt_cuda TIMEOUT 60
                       FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_FAKE_CUDA_SHARED_OPTIN=49152")
  # The attention cases on the tensor-core kernels' rows32 tiling
  # (DSRT_ATTENTION_KERNEL=rows32: a warp's 32 query rows in the forward and
  # dQ, dK·dV blocks of 128 keys, at Dh <= 64), on the alignment variant
  # with the threads resumed in reverse and fresh memory NaN bytes, as
  # dsrt_cuda_emu_kernels_reverse_nan_align runs them with rows16 (the
  # default); and an unknown DSRT_ATTENTION_KERNEL failing with its name.
  add_test(NAME dsrt_cuda_emu_attention_rows32
    COMMAND dsrt_cuda_emu_align_kernel_test --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_attention*")
  set_tests_properties(dsrt_cuda_emu_attention_rows32 PROPERTIES LABELS dsrt_cuda TIMEOUT 120
                       FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_ATTENTION_KERNEL=rows32;DSRT_EMU_SCHEDULE=reverse;DSRT_FAKE_CUDA_FILL=nan;DSRT_EMU_REQUIRE_ALIGNED_LD=1")
  add_test(NAME dsrt_cuda_emu_attention_kernel_unknown
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/expect_failure.py" 1
            "DSRT_ATTENTION_KERNEL must be rows16 or rows32, not 'rows64'" --
            $<TARGET_FILE:dsrt_cuda_emu_kernel_test> --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_attention.mma_causal_bf16")
  set_tests_properties(dsrt_cuda_emu_attention_kernel_unknown PROPERTIES LABELS dsrt_cuda
                       TIMEOUT 60 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_ATTENTION_KERNEL=rows64")
  # The tensor-core attention cases on the kernels at the compiler's
  # registers, DSRT_ATTENTION_FORWARD_BLOCKS=3 and DSRT_ATTENTION_DQ_BLOCKS=2
  # (the defaults, 4 and 3, cap the rows16 forward's and dQ's registers at
  # Dh <= 64; the emulation ignores __launch_bounds__, so this runs the
  # other instantiations' code), and an unknown value of each failing with
  # its name.
  add_test(NAME dsrt_cuda_emu_attention_uncapped
    COMMAND dsrt_cuda_emu_kernel_test --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_attention*.mma_*:Kernel_attention_packed*")
  set_tests_properties(dsrt_cuda_emu_attention_uncapped PROPERTIES LABELS dsrt_cuda
                       TIMEOUT 60 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_ATTENTION_FORWARD_BLOCKS=3;DSRT_ATTENTION_DQ_BLOCKS=2")
  add_test(NAME dsrt_cuda_emu_attention_forward_blocks_unknown
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/expect_failure.py" 1
            "DSRT_ATTENTION_FORWARD_BLOCKS must be 4 or 3, not '5'" --
            $<TARGET_FILE:dsrt_cuda_emu_kernel_test> --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_attention.mma_causal_bf16")
  set_tests_properties(dsrt_cuda_emu_attention_forward_blocks_unknown PROPERTIES
                       LABELS dsrt_cuda TIMEOUT 60 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_ATTENTION_FORWARD_BLOCKS=5")
  add_test(NAME dsrt_cuda_emu_attention_dq_blocks_unknown
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/expect_failure.py" 1
            "DSRT_ATTENTION_DQ_BLOCKS must be 3 or 2, not '4'" --
            $<TARGET_FILE:dsrt_cuda_emu_kernel_test> --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_attention_grad.mma_causal_bf16")
  set_tests_properties(dsrt_cuda_emu_attention_dq_blocks_unknown PROPERTIES
                       LABELS dsrt_cuda TIMEOUT 60 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_ATTENTION_DQ_BLOCKS=4")
  # The attention gradient cases on the one-pass tensor-core backward
  # (DSRT_ATTENTION_GRAD=atomic: dK, dV and dQ's f32 atomics in one kernel
  # per 64 keys, then dq from the accumulator), on the alignment variant
  # with the threads resumed in reverse and fresh memory NaN bytes; the
  # same on a device that lets a block opt in to only 48 KiB, where it does
  # not fit and the split kernels run instead; and an unknown
  # DSRT_ATTENTION_GRAD failing with its name.
  add_test(NAME dsrt_cuda_emu_attention_grad_atomic
    COMMAND dsrt_cuda_emu_align_kernel_test --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_attention*grad.*:CudaAttentionWorkspace.*")
  set_tests_properties(dsrt_cuda_emu_attention_grad_atomic PROPERTIES LABELS dsrt_cuda
                       TIMEOUT 120 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_ATTENTION_GRAD=atomic;DSRT_EMU_SCHEDULE=reverse;DSRT_FAKE_CUDA_FILL=nan;DSRT_EMU_REQUIRE_ALIGNED_LD=1")
  add_test(NAME dsrt_cuda_emu_attention_grad_atomic_optin_48k
    COMMAND dsrt_cuda_emu_kernel_test --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_attention*grad.mma_*:Kernel_attention_packed_grad.*")
  set_tests_properties(dsrt_cuda_emu_attention_grad_atomic_optin_48k PROPERTIES
                       LABELS dsrt_cuda TIMEOUT 60 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_ATTENTION_GRAD=atomic;DSRT_FAKE_CUDA_SHARED_OPTIN=49152")
  add_test(NAME dsrt_cuda_emu_attention_grad_unknown
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/expect_failure.py" 1
            "DSRT_ATTENTION_GRAD must be split or atomic, not 'atomics'" --
            $<TARGET_FILE:dsrt_cuda_emu_kernel_test> --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_attention_grad.mma_causal_bf16")
  set_tests_properties(dsrt_cuda_emu_attention_grad_unknown PROPERTIES LABELS dsrt_cuda
                       TIMEOUT 60 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_ATTENTION_GRAD=atomics")
  # softmax_cross_entropy_with_grad's cases on a device that lets a block
  # opt in to no more shared memory than its static part: no row fits, so
  # every case takes the two-read kernel instead of the row in shared
  # memory, against the same references.
  add_test(NAME dsrt_cuda_emu_cross_entropy_no_shared_row
    COMMAND dsrt_cuda_emu_kernel_test --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_softmax_cross_entropy_with_grad.*")
  set_tests_properties(dsrt_cuda_emu_cross_entropy_no_shared_row PROPERTIES LABELS dsrt_cuda
                       TIMEOUT 60 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_FAKE_CUDA_SHARED_OPTIN=1024")
  # The memory-bound kernels' cases on a grid of one block
  # (DSRT_CUDA_MAX_BLOCKS=1, stream_blocks in common.cuh): every thread
  # loops over many vectors or rows, as on a GPU with large tensors, so
  # the stepping of a thread's position from one to the next is checked;
  # and the fused loss's shared-row kernel, whose one block then takes
  # every row (its next row copied while it writes the last where the rows
  # share their alignment, else after it).
  add_test(NAME dsrt_cuda_emu_one_block
    COMMAND dsrt_cuda_emu_kernel_test --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_binary.*:Kernel_gather.*:Kernel_softmax_cross_entropy_with_grad.*")
  set_tests_properties(dsrt_cuda_emu_one_block PROPERTIES LABELS dsrt_cuda TIMEOUT 60
                       FIXTURES_REQUIRED dsrt_cases ENVIRONMENT "DSRT_CUDA_MAX_BLOCKS=1")
  # The same epilogue cases when cuBLASLt's heuristic has no algorithm for
  # an epilogue: the fallback (plain product, then the bias add, the
  # column sums or the pointwise GELU) against the same references.
  add_test(NAME dsrt_cuda_emu_epilogue_fallback
    COMMAND dsrt_cuda_emu_kernel_test --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_matmul_bias.*:Kernel_matmul_bias_grad.*:Kernel_matmul_lhs_bias_grad.*:Kernel_matmul_bias_gelu.*:Kernel_matmul_dgelu.*")
  set_tests_properties(dsrt_cuda_emu_epilogue_fallback PROPERTIES LABELS dsrt_cuda TIMEOUT 60
                       FIXTURES_REQUIRED dsrt_cases ENVIRONMENT "DSRT_EMU_NO_EPILOGUE_ALGO=1")
  # DSRT_BIAS_GRAD=separate: the weight gradients' cases with their bias
  # gradients as the plain product and the column sums, on a cuBLASLt that
  # fails any request for a bias-gradient epilogue (so the run shows none
  # was made), against the same references; the same fake failing the
  # default run (the epilogue asked for, the run stopped with cuBLASLt's
  # error); an unknown DSRT_BIAS_GRAD and a DSRT_CUBLASLT_WORKSPACE that is
  # no byte count failing with their values named.
  add_test(NAME dsrt_cuda_emu_bias_grad_separate
    COMMAND dsrt_cuda_emu_kernel_test --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_matmul_bias_grad.*:Kernel_matmul_lhs_bias_grad.*")
  set_tests_properties(dsrt_cuda_emu_bias_grad_separate PROPERTIES LABELS dsrt_cuda TIMEOUT 60
                       FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_BIAS_GRAD=separate;DSRT_EMU_FAIL_BIAS_GRAD_EPILOGUE=1")
  add_test(NAME dsrt_cuda_emu_bias_grad_epilogue_asked
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/expect_failure.py" 1
            "DSRT_EMU_FAIL_BIAS_GRAD_EPILOGUE=1" --
            $<TARGET_FILE:dsrt_cuda_emu_kernel_test> --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_matmul_bias_grad.*")
  set_tests_properties(dsrt_cuda_emu_bias_grad_epilogue_asked PROPERTIES LABELS dsrt_cuda
                       TIMEOUT 60 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_EMU_FAIL_BIAS_GRAD_EPILOGUE=1")
  add_test(NAME dsrt_cuda_emu_bias_grad_unknown
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/expect_failure.py" 1
            "DSRT_BIAS_GRAD must be epilogue or separate, not 'fused'" --
            $<TARGET_FILE:dsrt_cuda_emu_kernel_test> --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_matmul_bias_grad.*")
  set_tests_properties(dsrt_cuda_emu_bias_grad_unknown PROPERTIES LABELS dsrt_cuda
                       TIMEOUT 60 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_BIAS_GRAD=fused")
  add_test(NAME dsrt_cuda_emu_cublaslt_workspace_bad
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/expect_failure.py" 1
            "DSRT_CUBLASLT_WORKSPACE must be a byte count (a non-negative integer), not '32MiB'" --
            $<TARGET_FILE:dsrt_cuda_emu_kernel_test> --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_matmul.*")
  set_tests_properties(dsrt_cuda_emu_cublaslt_workspace_bad PROPERTIES LABELS dsrt_cuda
                       TIMEOUT 60 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_CUBLASLT_WORKSPACE=32MiB")
  # DSRT_CUBLASLT_TUNE=4: the products' cases (the staged ones, seconds
  # each on the host, left out) with each product's first
  # call timing the emulated heuristic's 4 algorithms (the fake's last is
  # the fastest, fake_cudart.cpp) against the same references; the fake's
  # report shows the fastest kept (check_tune_report.py); an out-of-range
  # count fails with its value named.
  add_test(NAME dsrt_cuda_emu_cublaslt_tune
    COMMAND sh -c "\"$1\" --cases \"$2\" --gtest_filter='Kernel_matmul*.*:Kernel_gemm.*:-Kernel_matmul.staged_*' && \"$3\" \"$4\" 4 \"$5\""
            sh $<TARGET_FILE:dsrt_cuda_emu_kernel_test> "${DSRT_CASES_DIR}" "${DSRT_PYTHON}"
            "${CMAKE_CURRENT_SOURCE_DIR}/cuda/check_tune_report.py"
            "${CMAKE_CURRENT_BINARY_DIR}/cublaslt_tune_report.json")
  set_tests_properties(dsrt_cuda_emu_cublaslt_tune PROPERTIES LABELS dsrt_cuda TIMEOUT 120
                       FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_CUBLASLT_TUNE=4;DSRT_FAKE_CUDA_REPORT=${CMAKE_CURRENT_BINARY_DIR}/cublaslt_tune_report.json")
  add_test(NAME dsrt_cuda_emu_cublaslt_tune_bad
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/expect_failure.py" 1
            "DSRT_CUBLASLT_TUNE must be a count of algorithms from 0 to 16, not '17'" --
            $<TARGET_FILE:dsrt_cuda_emu_kernel_test> --cases "${DSRT_CASES_DIR}"
            "--gtest_filter=Kernel_matmul.*")
  set_tests_properties(dsrt_cuda_emu_cublaslt_tune_bad PROPERTIES LABELS dsrt_cuda
                       TIMEOUT 60 FIXTURES_REQUIRED dsrt_cases
                       ENVIRONMENT "DSRT_CUBLASLT_TUNE=17")
  # The NCCL transport's device test (nccl_device_test.cpp) on the
  # emulation's NCCL over MPI, 3 ranks: uneven ring chunks (the grouped
  # broadcasts and reductions), a split into communicators of 2 and 1 ranks.
  if(DSRT_HAVE_MPI AND DSRT_NCCL_INCLUDE_DIR AND MPIEXEC_EXECUTABLE)
    add_executable(dsrt_cuda_emu_nccl_test nccl_device_test.cpp)
    target_link_libraries(dsrt_cuda_emu_nccl_test PRIVATE dsrt_cuda_emu GTest::gtest
                                                          GTest::gtest_main)
    target_compile_options(dsrt_cuda_emu_nccl_test PRIVATE -fexceptions)
    list(APPEND DSRT_CUDA_TEST_TARGETS dsrt_cuda_emu_nccl_test)
    add_test(NAME dsrt_cuda_emu_nccl_np3
      COMMAND "${MPIEXEC_EXECUTABLE}" ${MPIEXEC_NUMPROC_FLAG} 3 ${MPIEXEC_PREFLAGS}
              $<TARGET_FILE:dsrt_cuda_emu_nccl_test> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(dsrt_cuda_emu_nccl_np3 PROPERTIES LABELS dsrt_cuda TIMEOUT 90
                         ENVIRONMENT "${DSRT_COMM_ENV};DSRT_FAKE_CUDA_DEVICES=3")
  endif()
endif()

# dsrt_nccl_device_test: the NCCL transport on GPUs (scripts/gpu-check.sh
# runs it; it needs a GPU, so it is not part of check-runtime).
if(DSRT_HAVE_NCCL AND TARGET dsrt_cuda)
  add_executable(dsrt_nccl_device_test nccl_device_test.cpp)
  target_link_libraries(dsrt_nccl_device_test PRIVATE dsrt_cuda GTest::gtest GTest::gtest_main)
  target_compile_options(dsrt_nccl_device_test PRIVATE -fexceptions)
endif()

# Warp-stall sampling (bench/pc_sampling.cpp, a CUPTI injection library that
# scripts/gpu-check.sh's stalls stage loads into the GPT-2 benchmark's
# program on a GPU): its aggregation and JSON (bench/pc_sampling_aggregate.h,
# fed records of the test's own by cuda/pc_sampling_records.cpp) and
# bench/pc_stalls.py's table of them, everywhere; the library itself built
# where the toolkit has CUPTI and, with no GPU here, loaded by hand: it must
# say why it samples nothing and return (skipped where libcupti cannot load).
set(_pcs_bench "${CMAKE_CURRENT_SOURCE_DIR}/../../bench")
if(EXISTS "${_pcs_bench}/pc_sampling_aggregate.h")
  add_executable(dsrt_pc_sampling_records cuda/pc_sampling_records.cpp)
  target_include_directories(dsrt_pc_sampling_records PRIVATE "${_pcs_bench}")
  target_compile_options(dsrt_pc_sampling_records PRIVATE -fexceptions)
  set_target_properties(dsrt_pc_sampling_records PROPERTIES CXX_STANDARD 17)
  list(APPEND DSRT_CUDA_TEST_TARGETS dsrt_pc_sampling_records)
  add_test(NAME dsrt_pc_sampling_report
    COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/pc_sampling_test.py" report
            --records $<TARGET_FILE:dsrt_pc_sampling_records>
            --formatter "${_pcs_bench}/pc_stalls.py"
            --work "${CMAKE_CURRENT_BINARY_DIR}/pc_sampling_report")
  set_tests_properties(dsrt_pc_sampling_report PROPERTIES LABELS dsrt_cuda TIMEOUT 60)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cupti)
    add_library(dsrt_pc_sampling SHARED "${_pcs_bench}/pc_sampling.cpp")
    target_include_directories(dsrt_pc_sampling PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
    target_link_libraries(dsrt_pc_sampling PRIVATE CUDA::cupti ${CMAKE_DL_LIBS})
    set_target_properties(dsrt_pc_sampling PROPERTIES CXX_STANDARD 17)
    list(APPEND DSRT_CUDA_TEST_TARGETS dsrt_pc_sampling)
    add_test(NAME dsrt_pc_sampling_no_driver
      COMMAND "${DSRT_PYTHON}" "${CMAKE_CURRENT_SOURCE_DIR}/cuda/pc_sampling_test.py" no-driver
              --library $<TARGET_FILE:dsrt_pc_sampling>
              --work "${CMAKE_CURRENT_BINARY_DIR}/pc_sampling_no_driver")
    set_tests_properties(dsrt_pc_sampling_no_driver PROPERTIES LABELS dsrt_cuda TIMEOUT 60
                         SKIP_RETURN_CODE 77)
  elseif(CUDAToolkit_FOUND)
    message(STATUS "dsrt: the CUDA toolkit has no CUPTI: bench/pc_sampling.cpp (warp-stall "
                   "sampling) is not built")
  else()
    message(STATUS "dsrt: no CUDA toolkit: bench/pc_sampling.cpp (warp-stall sampling) is not built")
  endif()
endif()
