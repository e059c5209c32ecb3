# lit configuration of the dsopt test suite.
import os
import shutil

import lit.formats

config.name = "dsopt"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.excludes = ["Inputs", "lit", "oracles"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.dsopt_obj_root, "test")

# Tools first on PATH: dsopt, dsopt-opt, dsopt-pipeline, then FileCheck, not,
# split-file; and before them an mpirun that gives each launch its own
# session directory (lit/mpirun-shim/mpirun: Open MPI's launches in one
# TMPDIR race on its shared session directory, and a test failed so).
config.environment["PATH"] = os.pathsep.join(
    [os.path.join(config.test_source_root, "lit", "mpirun-shim"), config.dsopt_tools_dir,
     config.llvm_tools_dir, config.environment.get("PATH", "")])
# Torch and onnx live in Debian's system Python; keep user site-packages out.
config.environment["PYTHONNOUSERSITE"] = "1"
config.environment["OMP_NUM_THREADS"] = "1"

# Generated programs compile through a compiler cache (ccache when it is on
# PATH, or whatever DSOPT_HOST_LAUNCHER names; empty: none): their sources
# are deterministic, so a rerun of the suite, or a test compiling a program
# another test compiled, takes the cached object instead of a -O3 compile.
# (They record the model file's absolute path, so another checkout does not
# hit.)
launcher = os.environ.get("DSOPT_HOST_LAUNCHER")
if launcher is None:
    launcher = shutil.which("ccache") or ""
config.environment["DSOPT_HOST_LAUNCHER"] = launcher
for name, value in os.environ.items():
    if name.startswith("CCACHE_"):
        config.environment[name] = value

# `REQUIRES: cuda-toolkit`: tests that compile generated CUDA with nvcc;
# `REQUIRES: dsrt-cuda`: tests that also link against libdsrt_cuda.
if config.dsopt_nvcc and os.access(config.dsopt_nvcc, os.X_OK):
    config.available_features.add("cuda-toolkit")
else:
    lit_config.note("no CUDA toolkit (nvcc) found: the cuda target's compile tests are unsupported")
if config.dsopt_have_dsrt_cuda:
    config.available_features.add("dsrt-cuda")
# `REQUIRES: nccl`: cuda programs on several ranks (mpirun), whose world is
# NCCL's: libdsrt_cuda built with the NCCL transport, which MPI bootstraps
# (and the CUDA emulation's NCCL over MPI).
if config.dsopt_have_dsrt_cuda:
    if config.dsopt_have_nccl and config.dsopt_have_mpi:
        config.available_features.add("nccl")
    elif not config.dsopt_have_nccl:
        lit_config.note("libdsrt_cuda was built without NCCL (nccl.h and libnccl not found, "
                        "or DSRT_WITH_NCCL=OFF): the multi-rank cuda tests are unsupported")
    else:
        lit_config.note("libdsrt was built without MPI, which bootstraps NCCL: the "
                        "multi-rank cuda tests are unsupported")
# `REQUIRES: fake-cudart`: tests that run a cuda program's host side behind
# the fake CUDA runtime (runtime/tests/cuda/fake_cudart.cpp, built with
# libdsrt_cuda by check-runtime).
fake_cudart = os.path.join(config.dsopt_obj_root, "lib", "libdsrt_fake_cudart.so")
if os.path.exists(fake_cudart):
    config.available_features.add("fake-cudart")
# `REQUIRES: cuda-emu`: tests that run a cuda program's kernels under the
# CUDA emulation (runtime/tests/cuda/emu/, libdsrt_cuda_emu.a, built by
# check-runtime).
cuda_emu = os.path.join(config.dsopt_obj_root, "lib", "libdsrt_cuda_emu.a")
if os.path.exists(cuda_emu):
    config.available_features.add("cuda-emu")
# `REQUIRES: libfuzzer`: the in-process fuzz targets (runtime/fuzz,
# tools/fuzz), built
# when clang with libFuzzer was found (scripts/install-deps.sh installs it).
if all(os.access(os.path.join(config.dsopt_tools_dir, f), os.X_OK)
       for f in ("dsrt_npy_fuzz", "dsrt_checkpoint_fuzz", "dsopt_config_fuzz",
                 "dsopt_import_fuzz")):
    config.available_features.add("libfuzzer")
else:
    lit_config.note("no fuzz targets built (clang-22 with libFuzzer not found): "
                    "the in-process fuzzing tests are unsupported")

src = config.dsopt_src_root
py = config.python
config.substitutions.extend([
    ("%python", py),
    ("%onnx-import", f"{py} {src}/test/lit/onnx_import.py"),
    ("%onnx-assemble", f"{py} {src}/test/lit/onnx_import.py --write"),
    ("%zoo-export", f"{py} {src}/test/oracles/export_zoo.py"),
    ("%gen-gpt", f"{py} {src}/test/oracles/gen_gpt.py"),
    # Training parity with PyTorch (docs/training.md).
    ("%zoo-train", f"{py} {src}/test/oracles/check_zoo_train.py"),
    ("%torch-dsopt", f"{py} {src}/test/oracles/torch_dsopt.py"),
    # Data parallelism and ZeRO against one rank, PyTorch and the plan.
    ("%zoo-dp", f"{py} {src}/test/oracles/check_zoo_dp.py"),
    # Tensor parallelism against one rank, PyTorch and the plan.
    ("%zoo-tp", f"{py} {src}/test/oracles/check_zoo_tp.py"),
    # Pipeline parallelism against one rank, PyTorch and the plan.
    ("%zoo-pp", f"{py} {src}/test/oracles/check_zoo_pp.py"),
    # Every zoo model's programs compile (and link) for --target cuda.
    ("%cuda-zoo", f"{py} {src}/test/oracles/check_cuda_zoo.py"),
    ("%nvcc", config.dsopt_nvcc or "nvcc"),
    # A cuda training program's host side behind the fake CUDA runtime.
    ("%fake-cuda", f"{py} {src}/test/oracles/check_fake_cuda.py --fake {fake_cudart}"),
    # A cuda training program's kernels under the CUDA emulation, against cpu.
    ("%cuda-emu", f"{py} {src}/test/oracles/check_cuda_emu.py --emu-lib {cuda_emu}"),
    ("%cuda-bin", os.path.dirname(config.dsopt_nvcc or "/usr/local/cuda/bin/nvcc")),
    ("%skip-model", f"{py} {src}/test/Pipeline/Inputs/skip_model.py"),
    ("%srcroot", src),
    ("%objroot", config.dsopt_obj_root),
])
