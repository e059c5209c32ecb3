#!/usr/bin/env bash
# The stage functions run through `stage`, which shellcheck cannot follow.
# shellcheck disable=SC2317
# The GPU check of dsopt's cuda target, on one NVIDIA GPU (sized for an H200,
# about 8 minutes). It comes in two halves, so that the GPU machine needs
# neither LLVM/MLIR nor dsopt:
#
#   --prepare DIR     where dsopt is built (no GPU needed): scripts/gpu_prepare.py
#                     exports the zoo, generates every cuda program's source
#                     tree (dsopt --target cuda --sources-only), runs the cpu
#                     programs for reference (checked against PyTorch) and
#                     writes DIR/manifest.json; DIR stays under 64 MiB
#   --device DIR OUT  on the GPU machine, with only the source tree and DIR:
#                     builds runtime/ standalone with CUDA (no OpenBLAS, no
#                     LLVM), builds every program's src/CMakeLists.txt against
#                     it in parallel, runs the stages below and writes
#                     OUT/report.md
#   OUT               both on one machine: builds dsopt with CUDA, prepares
#                     OUT/prep, then runs the device half
#
# The device half's stages:
#
#   runtime   libdsrt_cuda and the kernel and NCCL tests, standalone
#   programs  every program of DIR (cmake + ninja, in parallel)
#   kernels   the cuda kernel tests (dsrt_cuda_kernel_test) on DIR's cases
#   forward   every zoo model's forward on cuda against the cpu run (rel 1e-4)
#   train     20 training steps of every zoo model on cuda against the cpu
#             run (loss rel 1e-4); each run checks its memory spaces
#             against the plan itself
#   bf16      the same in bf16 (loss rel 2e-2)
#   bench     bench/gpu_bench.py --prepared: GPT-2 124M bf16 tokens/s, MFU,
#             the runtime settings (gpu_bench.py's SETTINGS) against the
#             default in pairs of short runs, and the per-op times of one
#             traced step (OUT/bench/ops.md)
#   stalls    why the step's kernels wait: bench/pc_sampling.cpp (a CUPTI
#             injection library, built here) samples the warps of every
#             kernel of 2 steps of the bench stage's program, each sample
#             with its stall reason (CUPTI's PC Sampling API; no Nsight
#             Compute needed), and OUT/stalls.md tables the kernels with the
#             most samples and the attention kernels by reason
#             (bench/pc_stalls.py); SKIP where CUPTI says this GPU, driver or
#             user may not sample, and under --emulate
#   zero3     GPT-2's ZeRO-3 program on one GPU, a one-rank NCCL world
#             (NCCL initialized; one rank makes no collective: those are
#             the nccl stage's), whose losses equal the plain program's
#   offload   GPT-2 with its optimizer offloaded (--offload-optimizer cpu:
#             states in pinned host memory, copies on the communication
#             stream, the update's kernels over the pinned arena), and with
#             ZeRO-3's parameters offloaded (offload_param cpu, every
#             trained parameter: fetched ahead of each read), whose losses
#             equal the plain program's
#   checkpoint  GPT-2's plain program saving a checkpoint after step 2
#             (its losses the cpu's), resuming it (steps 3.. equal to the
#             saving run's, loss and gradient norm to the bit), and resuming
#             the cpu program's checkpoint of step 2 (the cpu's losses)
#   trace     one step's timeline (nsys when installed) and the runtime's
#             per-op Chrome trace, timed by cudaEvents on each op's stream,
#             of the plain, ZeRO-3 and both offload programs:
#             gpu_device.py trace reports how long communication overlapped
#             compute, and fails the parameter offload's trace (whose
#             fetches are issued ahead of their readers) where none did
#   nccl      the NCCL transport on one GPU (dsrt_nccl_device_test)
#   ranks2    mlp's dp-2 ZeRO-3 program under mpirun -np 2 on the one GPU:
#             NCCL cannot put two ranks of a communicator on one device, so
#             the check is that rank 1 is refused at once with dsrt's message
#             (its local rank has no GPU of its own) and the job exits 1
#             instead of hanging; a SKIP line without mpirun
#
# --emulate rehearses the device half without a GPU, every stage through its
# own code here, on the CUDA emulation (docs/runtime.md, "The CUDA
# emulation"): the runtime stage builds runtime/ for it (libdsrt_cuda_emu.a
# and its dsrt package, the emulated kernel and NCCL tests), the programs
# stage rebuilds each program through runtime/tests/cuda/emu/program/ (its
# src/CMakeLists.txt read, its sources' launches rewritten, compiled as C++
# with the host compiler), and every later stage runs and compares exactly
# as on the GPU. The report says it is a rehearsal and labels every stage
# emulated; the trace's timings and the benchmark's tokens/s, MFU (against
# the nominal H200 peak: gemm_peak.cu is built, not run) and device peak
# are the emulation's. What only the GPU run shows: nvcc's device build of
# the programs and runtime, the device math and FMA contraction, tensor
# cores/TF32, races and stream ordering on the device, real NCCL (two ranks
# refused on one device: under the emulation rank 1 is refused by dsrt's
# own device count), the offload's pinned copies, and every timing.
# Prepare the rehearsal small: --steps 3, --bench-size tiny (a 2-layer GPT),
# --variants-model mlp (ZeRO-3 and offload on mlp); the defaults are the
# GPU run's. scripts/cuda-emu-sweep.sh runs more programs (dp-2, pp-2,
# tp-2 under mpirun) under the emulation against the cpu programs.
#
# --prepare needs dsopt built (--build, default build/) and a python3 with
# torch, onnx and numpy. --device needs the CUDA toolkit (nvcc, cuBLASLt),
# NCCL (under the toolkit, NCCL_ROOT, or python3's nvidia-nccl wheel), CMake,
# ninja, a C++ compiler with OpenMP and python3 with numpy (and onnx for the
# benchmark); it checks these first and names what is missing. mpirun is
# optional (a program started without it is a world of one rank).
#
# Usage: scripts/gpu-check.sh --prepare DIR [--build BUILD] [--models M,...]
#                              [--stages S,...] [--steps N] [--variants-model M]
#                              [--no-bench] [--bench-size 124m|tiny] [--bench-batch N]
#                              [--no-kernel-cases]
#        scripts/gpu-check.sh --device DIR OUT [--build-only] [--only STAGE,...]
#                              [--jobs N] [--runtime PREFIX] [--timeout-scale K]
#                              [--emulate] [--deadline S] [--dry-run]
#        scripts/gpu-check.sh [--build DIR] [--skip-build] [--only STAGE,...]
#                              [--dry-run] OUT
#   --build DIR   dsopt's build (--prepare: default build/; the one-machine
#                 form builds it with CUDA, default build-gpu)
#   --build-only  --device: build everything, then run each executable without
#                 a GPU (CUDA_VISIBLE_DEVICES='') expecting exit 1 and "no CUDA
#                 device"; no stage runs on the GPU
#   --runtime PREFIX  --device: use the libdsrt_cuda installed at PREFIX
#                 (cmake --install of a runtime built with CUDA) instead of
#                 building runtime/ (no kernels or nccl tests then); with
#                 --emulate, the emulation's package of a runtime build
#                 (<build>/runtime/tests/cuda_emu_package in dsopt's build)
#   --emulate     --device (or OUT): the stages on the CUDA emulation, no
#                 GPU (above); not with --build-only
#   --timeout-scale K  every stage's timeout times K (a slower machine)
#   --deadline S  end within S seconds of the start: each stage's timeout is
#                 cut to what is left, and a stage with under 20 s left is
#                 not run (reported FAILED: not run), so the report is
#                 written even when a device lease ends the run
#   --only        run only these stages (a rerun; later stages use what
#                 earlier ones left in OUT/work)
#   --models      --prepare: only these zoo models (default: all five)
#   --stages      --prepare: only these stages' programs (forward, train,
#                 bf16, zero3, offload, checkpoint, ranks2; default: all)
#   --steps N     --prepare: training steps of every program (default 20)
#   --variants-model M  --prepare: the zoo model of the zero3, offload and
#                 checkpoint stages (default gpt2)
#   --no-bench    --prepare: leave out the GPT-2 124M benchmark
#   --bench-batch N  --prepare: the benchmark's micro-batch (default: the
#                 largest of 256, 192, 128, 96, 64, ... whose plan fits 90%
#                 of the GPU; 64 is llm.c's per GPU and the runs' before
#                 this list grew)
#   --bench-size  --prepare: the benchmark's model, 124m (GPT-2 124M, the
#                 default) or tiny (2 layers of width 64, for --emulate)
#   --no-kernel-cases  --prepare: leave out the kernel cases (no kernels stage)
#   --dry-run     print the stages and their commands, run nothing
#
# Every stage has a timeout; a failing stage does not stop the next ones.
# Exits 0 when every stage passed (or was skipped with a reason), else 1.
set -u
set -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODE=all
BUILD=""
DRY_RUN=0
SKIP_BUILD=0
BUILD_ONLY=0
NO_BENCH=0
NO_CASES=0
EMULATE=0
BENCH_SIZE=""
BENCH_BATCH=""
STEPS=""
VARIANTS=""
RUNTIME_PREFIX=""
STAGES=""
SCALE=1
DEADLINE=""
MODELS=""
ONLY=""
PREP=""
OUT=""
JOBS="$(nproc 2>/dev/null || echo 4)"
usage="usage: scripts/gpu-check.sh --prepare DIR | --device DIR OUT | OUT (see --help)"
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare|--device)
      [ $# -ge 2 ] || { echo "gpu-check: $1 needs a directory" >&2; exit 2; }
      MODE="${1#--}"; PREP="$2"; shift ;;
    --dry-run) DRY_RUN=1 ;;
    --skip-build) SKIP_BUILD=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    --no-bench) NO_BENCH=1 ;;
    --no-kernel-cases) NO_CASES=1 ;;
    --emulate) EMULATE=1 ;;
    --build|--only|--models|--stages|--jobs|--runtime|--timeout-scale|--deadline|--steps|--bench-size|--bench-batch|--variants-model)
      [ $# -ge 2 ] || { echo "gpu-check: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --build) BUILD="$2" ;;
        --only) ONLY=",$2," ;;
        --models) MODELS="$2" ;;
        --stages) STAGES="$2" ;;
        --jobs) JOBS="$2" ;;
        --runtime) RUNTIME_PREFIX="$2" ;;
        --timeout-scale) SCALE="$2" ;;
        --deadline) DEADLINE="$2" ;;
        --steps) STEPS="$2" ;;
        --bench-size) BENCH_SIZE="$2" ;;
        --bench-batch) BENCH_BATCH="$2" ;;
        --variants-model) VARIANTS="$2" ;;
      esac
      shift ;;
    -h|--help) sed -n '4,/^# Exits 0/p' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *)
      [ -z "$OUT" ] || { echo "gpu-check: one OUT directory, got '$OUT' and '$1'" >&2; exit 2; }
      OUT="$1" ;;
  esac
  shift
done
case "$JOBS" in ''|*[!0-9]*) echo "gpu-check: --jobs expects a number, got '$JOBS'" >&2; exit 2 ;; esac
case "$SCALE" in ''|*[!0-9]*) echo "gpu-check: --timeout-scale expects a whole number, got '$SCALE'" >&2; exit 2 ;; esac
case "$DEADLINE" in *[!0-9]*) echo "gpu-check: --deadline expects seconds, got '$DEADLINE'" >&2; exit 2 ;; esac

# The first python3 that has what `imports` names.
find_python() {
  local candidate
  for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" > /dev/null && "$candidate" -c "import $1" > /dev/null 2>&1; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}
export PYTHONNOUSERSITE=1 OMP_NUM_THREADS=4

if [ "$MODE" = prepare ]; then
  [ -z "$OUT" ] || { echo "gpu-check: --prepare DIR takes no OUT (got '$OUT')" >&2; exit 2; }
  [ "$EMULATE" = 0 ] || { echo "gpu-check: --emulate is for the device half (--device DIR OUT, or OUT)" >&2; exit 2; }
  BUILD="${BUILD:-$ROOT/build}"
  [ -x "$BUILD/bin/dsopt" ] ||
    { echo "gpu-check: --prepare: no dsopt at $BUILD/bin/dsopt (build dsopt, or pass --build)" >&2; exit 1; }
  PY="$(find_python 'torch, onnx, numpy')" ||
    { echo "gpu-check: --prepare: no python3 with torch, onnx and numpy (tried python3 and /usr/bin/python3)" >&2; exit 1; }
  args=(--dsopt "$BUILD/bin/dsopt" --out "$PREP")
  [ -z "$MODELS" ] || args+=(--only "$MODELS")
  [ -z "$STAGES" ] || args+=(--stages "$STAGES")
  [ "$NO_BENCH" = 0 ] || args+=(--no-bench)
  [ "$NO_CASES" = 0 ] || args+=(--no-kernel-cases)
  [ -z "$STEPS" ] || args+=(--steps "$STEPS")
  [ -z "$BENCH_SIZE" ] || args+=(--bench-size "$BENCH_SIZE")
  [ -z "$BENCH_BATCH" ] || args+=(--bench-batch "$BENCH_BATCH")
  [ -z "$VARIANTS" ] || args+=(--variants-model "$VARIANTS")
  exec "$PY" "$ROOT/scripts/gpu_prepare.py" "${args[@]}"
fi

[ -n "$OUT" ] || { echo "$usage" >&2; exit 2; }
if [ "$MODE" = device ] && { [ -n "$STEPS" ] || [ -n "$BENCH_SIZE" ] || [ -n "$BENCH_BATCH" ] || [ -n "$VARIANTS" ]; }; then
  echo "gpu-check: --steps, --bench-size, --bench-batch and --variants-model shape what --prepare writes, not --device" >&2; exit 2
fi
for name in ${ONLY//,/ }; do
  case "$name" in
    build|prepare|runtime|programs|nodevice|kernels|nccl|forward|train|bf16|zero3|offload|checkpoint|ranks2|trace|bench) ;;
    stalls) ;;
    *) echo "gpu-check: --only: no stage '$name'" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT" || { echo "gpu-check: cannot create '$OUT'" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"
if [ "$MODE" = all ]; then
  BUILD="${BUILD:-$ROOT/build-gpu}"
  case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
  PREP="$OUT/prep"
else
  [ -f "$PREP/manifest.json" ] ||
    { echo "gpu-check: --device: no $PREP/manifest.json (run scripts/gpu-check.sh --prepare $PREP where dsopt is built, and carry it)" >&2; exit 1; }
fi
mkdir -p "$PREP"
PREP="$(cd "$PREP" && pwd)"
PY="$(find_python numpy)" || PY=python3  # the runtime stage reports it
WORK="$OUT/work"
RT="$WORK/runtime"          # the standalone libdsrt build
PREFIX="$WORK/dsrt"         # ... installed: what the programs find_package
BUILDS="$WORK/programs"     # one CMake build per program
KERNEL_TEST="$RT/tests/dsrt_cuda_kernel_test"
NCCL_TEST="$RT/tests/dsrt_nccl_device_test"
if [ "$EMULATE" = 1 ]; then
  [ "$BUILD_ONLY" = 0 ] ||
    { echo "gpu-check: --emulate runs the stages on the CUDA emulation; --build-only is for a machine whose missing GPU must be refused" >&2; exit 2; }
  PREFIX="$RT/tests/cuda_emu_package"
  KERNEL_TEST="$RT/tests/dsrt_cuda_emu_kernel_test"
  NCCL_TEST="$RT/tests/dsrt_cuda_emu_nccl_test"
fi
[ -z "$RUNTIME_PREFIX" ] || PREFIX="$(cd "$RUNTIME_PREFIX" && pwd)" ||
  { echo "gpu-check: --runtime: no directory '$RUNTIME_PREFIX'" >&2; exit 2; }
REPORT="$OUT/report.md"
declare -a SUMMARY=()
FAILED=0
mkdir -p "$WORK"

# stage NAME TIMEOUT_S: runs the function NAME in a shell of its own under
# the timeout, its output in OUT/NAME.log; a stage that prints a line
# starting with "SKIP" and returns 0 counts as skipped.
stage() {
  local name="$1" limit="$(($2 * SCALE))"
  local log="$OUT/$name.log"
  if [ -n "$ONLY" ] && [ "${ONLY#*,"$name",}" = "$ONLY" ]; then
    return 0
  fi
  if [ "$DRY_RUN" = 1 ]; then
    printf '[%s] timeout %ss:\n' "$name" "$limit"
    declare -f "$name" | sed -e '1,2d' -e '$d'
    return 0
  fi
  if [ -n "$DEADLINE" ]; then
    # What is left of --deadline bounds the stage; under 20 s it is not run.
    local left="$((DEADLINE - SECONDS))"
    if [ "$left" -lt 20 ]; then
      printf '== %s: not run, %ss left of the %ss deadline\n' "$name" "$left" "$DEADLINE"
      SUMMARY+=("| $name | FAILED: not run, the --deadline of ${DEADLINE}s was reached | 0 s | |")
      FAILED=1
      return 0
    fi
    [ "$limit" -le "$((left - 10))" ] || limit="$((left - 10))"
  fi
  printf '== %s (timeout %ss)\n' "$name" "$limit"
  local start end status verdict
  start=$(date +%s)
  timeout --kill-after=10 "$limit" bash -c "set -u -o pipefail; $name" > "$log" 2>&1
  status=$?
  end=$(date +%s)
  if [ "$status" = 0 ]; then
    if grep -q '^SKIP' "$log"; then verdict="skipped: $(grep -m1 '^SKIP' "$log")"; else verdict="passed"; fi
  elif [ "$status" = 124 ] || [ "$status" = 137 ]; then
    verdict="FAILED: timed out after ${limit}s"; FAILED=1
  else
    # The log's first line naming the failure, else its last line.
    local why
    why="$(grep -m1 -iE 'error|fail|mismatch|missing' "$log")" || why="$(grep -v '^\s*$' "$log" | tail -1)"
    verdict="FAILED (exit $status): $(cut -c1-200 <<< "$why")"; FAILED=1
  fi
  [ "$EMULATE" = 0 ] || verdict="$verdict (emulated)"
  printf '   %s (%ss)\n' "$verdict" "$((end - start))"
  SUMMARY+=("| $name | $verdict | $((end - start)) s | [$name.log]($name.log) |")
}

# The one-machine form: dsopt with CUDA, then the prepared directory.
build() {
  if [ "$SKIP_BUILD" = 0 ]; then
    [ -d /usr/lib/llvm-22/lib/cmake/mlir ] || [ -n "${MLIR_DIR:-}" ] ||
      { echo "error: LLVM/MLIR 22 is not installed (no /usr/lib/llvm-22/lib/cmake/mlir, MLIR_DIR unset): dsopt cannot be built here; run --prepare where it is, and --device here"; return 1; }
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release || return 1
    ninja -C "$BUILD" -j "$JOBS" dsopt || return 1
  fi
  [ -x "$BUILD/bin/dsopt" ] || { echo "error: no dsopt at $BUILD/bin/dsopt"; return 1; }
}

prepare() {
  local args=()
  [ -z "$STEPS" ] || args+=(--steps "$STEPS")
  [ -z "$BENCH_SIZE" ] || args+=(--bench-size "$BENCH_SIZE")
  [ -z "$BENCH_BATCH" ] || args+=(--bench-batch "$BENCH_BATCH")
  [ -z "$VARIANTS" ] || args+=(--variants-model "$VARIANTS")
  "$ROOT/scripts/gpu-check.sh" --prepare "$PREP" --build "$BUILD" "${args[@]}"
}

# The toolkit's root: nvcc's, links followed.
cuda_home() {
  dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"
}

# NCCL's root where the toolkit has none: NCCL_ROOT, else python3's
# nvidia-nccl wheel (include/nccl.h, lib/libnccl.so.2).
nccl_root() {
  [ -n "${NCCL_ROOT:-}" ] && { echo "$NCCL_ROOT"; return 0; }
  [ -f "$(cuda_home)/include/nccl.h" ] && return 0
  [ -f /usr/include/nccl.h ] && return 0
  "$PY" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2> /dev/null
}

# What the device half needs, each missing piece named.
preflight() {
  local missing=0
  command -v nvcc > /dev/null ||
    { echo "error: nvcc is not on PATH nor in /usr/local/cuda/bin"; missing=1; }
  command -v cmake > /dev/null || { echo "error: cmake is not installed"; missing=1; }
  command -v ninja > /dev/null || { echo "error: ninja is not installed"; missing=1; }
  command -v "${CXX:-c++}" > /dev/null || { echo "error: no C++ compiler (${CXX:-c++})"; missing=1; }
  "$PY" -c 'import numpy' > /dev/null 2>&1 ||
    { echo "error: no python3 with numpy (tried python3 and /usr/bin/python3)"; missing=1; }
  [ "$missing" = 0 ] || return 1
  local root
  root="$(nccl_root)"
  if [ -n "$root" ]; then
    echo "NCCL from $root"
  elif ! find "$(cuda_home)/include" /usr/include -maxdepth 1 -name nccl.h 2> /dev/null | grep -q .; then
    echo "warning: no nccl.h under the toolkit, /usr/include, NCCL_ROOT or python3's nvidia-nccl: no NCCL transport (the nccl, zero3 and ranks2 stages fail)"
  fi
  nvcc --version | tail -1
  cmake --version | head -1
}

# libdsrt_cuda alone, from runtime/ (no LLVM, no OpenBLAS), installed for
# the programs' find_package(dsrt); the kernel and NCCL tests with it.
runtime() {
  preflight || return 1
  if [ -n "$RUNTIME_PREFIX" ]; then
    [ -f "$PREFIX/lib/cmake/dsrt/dsrtConfig.cmake" ] ||
      { echo "error: --runtime $PREFIX: no lib/cmake/dsrt/dsrtConfig.cmake there (cmake --install a runtime build)"; return 1; }
    if grep -q DSRT_CUDA_EMULATION "$PREFIX/lib/cmake/dsrt/dsrtConfig.cmake"; then
      [ "$EMULATE" = 1 ] ||
        { echo "error: --runtime $PREFIX is the CUDA emulation's package: pass --emulate, or install a runtime built with CUDA"; return 1; }
    elif [ "$EMULATE" = 1 ]; then
      echo "error: --emulate --runtime $PREFIX: not the CUDA emulation's package (<runtime build>/tests/cuda_emu_package)"; return 1
    fi
    echo "libdsrt from $PREFIX (--runtime): runtime/ not built"
    return 0
  fi
  if [ "$EMULATE" = 1 ]; then
    # The emulation's build needs its tests' setup, which needs the cpu
    # backend; its dsrt package is written into the build (PREFIX).
    build_runtime dsrt_cuda_emu "dsrt_cuda_emu_kernel_test dsrt_cuda_emu_nccl_test" || return 1
    [ -f "$PREFIX/lib/cmake/dsrt/dsrtConfig.cmake" ] || { echo "error: no emulation package under $PREFIX"; return 1; }
    echo "libdsrt_cuda_emu built, its package under $PREFIX"
    return 0
  fi
  build_runtime dsrt_cuda "dsrt_cuda_kernel_test dsrt_nccl_device_test" -DDSRT_WITH_CPU=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_INSTALL_PREFIX="$PREFIX" || return 1
  cmake --install "$RT" > /dev/null || return 1
  [ -f "$PREFIX/lib/cmake/dsrt/dsrtConfig.cmake" ] || { echo "error: libdsrt was not installed under $PREFIX"; return 1; }
  echo "libdsrt_cuda installed under $PREFIX"
}

# build_runtime LIB "TESTS" CMAKE_FLAGS...: runtime/ configured on its own
# in RT with the flags, then LIB and those of TESTS the configuration has
# (each missing one named) built.
build_runtime() {
  local lib="$1" tests="$2" root args=()
  shift 2
  root="$(nccl_root)"
  [ -z "$root" ] || args+=("-DNCCL_ROOT=$root")
  [ ! -f "$PREP/gtest/CMakeLists.txt" ] || args+=("-DDSRT_GTEST_SOURCE=$PREP/gtest")
  cmake -S "$ROOT/runtime" -B "$RT" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSRT_FUZZERS=OFF \
    "$@" "${args[@]}" || return 1
  local targets=("$lib") t all
  all="$(ninja -C "$RT" -t targets all 2> /dev/null)"
  grep -q "^$lib:" <<< "$all" ||
    { echo "error: the runtime was configured without $lib (see cmake's 'dsrt:' lines above)"; return 1; }
  for t in $tests; do
    if grep -q "^$t:" <<< "$all"; then targets+=("$t"); else echo "note: $t is not built (no GoogleTest, NCCL or MPI)"; fi
  done
  ninja -C "$RT" -j "$JOBS" "${targets[@]}" || return 1
  echo "built: ${targets[*]}"
}

# Every program's src/CMakeLists.txt against the installed libdsrt_cuda:
# configured all at once, then built all at once, each with the
# executables the manifest runs.
programs() {
  [ -f "$PREFIX/lib/cmake/dsrt/dsrtConfig.cmake" ] || { echo "error: the runtime stage left no libdsrt under $PREFIX"; return 1; }
  mkdir -p "$BUILDS"
  "$PY" "$ROOT/scripts/gpu_device.py" targets "$PREP" > "$WORK/targets.txt" || return 1
  # shellcheck disable=SC2016
  local configure='cmake -S "$1/programs/$3/src" -B "$2/$3" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$4" -DCMAKE_CUDA_ARCHITECTURES=90 > "$2/$3.configure.log" 2>&1 || { echo "$3: cmake failed:"; tail -20 "$2/$3.configure.log"; exit 1; }'
  # --emulate: each program through runtime/tests/cuda/emu/program/, which
  # reads its src/CMakeLists.txt and compiles its rewritten sources as C++.
  # shellcheck disable=SC2016
  [ "$EMULATE" = 0 ] || configure='cmake -S "$5" -B "$2/$3" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$4" -DDSRT_PROGRAM_SOURCE="$1/programs/$3/src" > "$2/$3.configure.log" 2>&1 || { echo "$3: cmake failed:"; tail -20 "$2/$3.configure.log"; exit 1; }'
  # shellcheck disable=SC2016
  local compile='b="$0" n="$1"; shift; ninja -C "$b/$n" -j 2 "$@" > "$b/$n.build.log" 2>&1 || { echo "$n: the build failed: $(grep -m1 -E "error|undefined" "$b/$n.build.log")"; grep -m5 -E "error|undefined" "$b/$n.build.log" | tail -n +2; exit 1; }'
  local status=0
  cut -d' ' -f1 "$WORK/targets.txt" |
    xargs -P "$JOBS" -I{} bash -c "$configure" _ "$PREP" "$BUILDS" {} "$PREFIX" \
      "$ROOT/runtime/tests/cuda/emu/program" || status=1
  [ "$status" = 0 ] || return 1
  sed "s|^|$BUILDS |" "$WORK/targets.txt" |
    xargs -P "$(( (JOBS + 1) / 2 ))" -L1 bash -c "$compile" || status=1
  # Built: every executable the manifest runs is there.
  local built=0 name exes exe ok
  while read -r name exes; do
    ok=1
    for exe in $exes; do [ -x "$BUILDS/$name/$exe" ] || ok=0; done
    built=$((built + ok))
  done < "$WORK/targets.txt"
  echo "$built of $(wc -l < "$WORK/targets.txt") programs built under $BUILDS"
  return "$status"
}

# The build-only proof: every executable built, each refusing to run
# without a GPU as it must.
nodevice() {
  "$PY" "$ROOT/scripts/gpu_device.py" no-device "$PREP" "$BUILDS" || return 1
  local t
  for t in "$KERNEL_TEST" "$NCCL_TEST"; do
    [ -x "$t" ] && echo "$(basename "$t"): built"
  done
  return 0
}

kernels() {
  local exe="$KERNEL_TEST"
  [ -x "$exe" ] || { echo "error: $(basename "$exe") was not built under $RT (GoogleTest missing?)"; return 1; }
  local how torch_py
  how="$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1])).get("kernel_cases"))' "$PREP/manifest.json")"
  rm -rf "$WORK/kernel-cases"
  case "$how" in
    packed)
      "$PY" -c 'import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    try:
        t.extractall(sys.argv[2], filter="data")
    except TypeError:  # before Python 3.11.4
        t.extractall(sys.argv[2])' "$PREP/kernel-cases.tar.xz" "$WORK" ||
        { echo "error: could not unpack $PREP/kernel-cases.tar.xz"; return 1; } ;;
    generate)
      # Too large to carry: written here (make_cases.py, PyTorch as the oracle).
      torch_py="$(find_python 'torch, numpy')" ||
        { echo "error: $PREP left its kernel cases to this machine, and no python3 here has torch and numpy (prepare with fewer, or install them)"; return 1; }
      echo "kernel cases: runtime/tests/make_cases.py with $torch_py ($("$torch_py" -c 'import torch; print(torch.__version__)'))"
      "$torch_py" "$ROOT/runtime/tests/make_cases.py" --out "$WORK/kernel-cases" > "$WORK/make_cases.log" 2>&1 ||
        { echo "error: make_cases.py failed:"; tail -5 "$WORK/make_cases.log"; return 1; } ;;
    *) echo "error: no kernel cases in $PREP (prepared without them)"; return 1 ;;
  esac
  "$exe" --cases "$WORK/kernel-cases"
}

# Runs `$1` processes of the rest under mpirun where it is installed, else
# one process without it (a world of one rank).
launch() {
  local ranks="$1"
  shift
  if command -v mpirun > /dev/null; then
    mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$@"
  elif [ "$ranks" = 1 ]; then
    "$@"
  else
    echo "error: mpirun is not installed: cannot start $ranks ranks"
    return 1
  fi
}

nccl() {
  local exe="$NCCL_TEST"
  [ -x "$exe" ] || { echo "error: $(basename "$exe") was not built under $RT (NCCL or GoogleTest not found?)"; return 1; }
  launch 1 "$exe"
}

forward() { "$PY" "$ROOT/scripts/gpu_device.py" run "$PREP" "$OUT" "$BUILDS" forward; }
train() { "$PY" "$ROOT/scripts/gpu_device.py" run "$PREP" "$OUT" "$BUILDS" train; }
bf16() { "$PY" "$ROOT/scripts/gpu_device.py" run "$PREP" "$OUT" "$BUILDS" bf16; }
zero3() { "$PY" "$ROOT/scripts/gpu_device.py" run "$PREP" "$OUT" "$BUILDS" zero3; }
offload() { "$PY" "$ROOT/scripts/gpu_device.py" run "$PREP" "$OUT" "$BUILDS" offload; }
checkpoint() { "$PY" "$ROOT/scripts/gpu_device.py" checkpoint "$PREP" "$OUT" "$BUILDS"; }
ranks2() { "$PY" "$ROOT/scripts/gpu_device.py" run "$PREP" "$OUT" "$BUILDS" ranks2; }

trace() {
  local name program data variant failed=0
  name="$(cut -d' ' -f1 "$WORK/targets.txt" | grep -m1 '^gpt2-adamw-gas1$')"
  [ -n "$name" ] || { echo "SKIP trace: no gpt2 training program in $PREP"; return 0; }
  program="$BUILDS/$name/train"
  data="$PREP/data/$name"
  [ -x "$program" ] || { echo "error: $program was not built"; return 1; }
  if command -v nsys > /dev/null; then
    nsys profile --force-overwrite true -o "$OUT/step" "$program" \
      --data "$data" --weights "$PREP/models" --steps 2 || return 1
    ls -l "$OUT"/step.nsys-rep
  else
    echo "nsys not found: the runtime's own trace (cudaEvent-timed) only"
  fi
  "$program" --data "$data" --weights "$PREP/models" --steps 1 --trace "$OUT/trace.json" ||
    { echo "error: the traced step failed (exit $?)"; return 1; }
  "$PY" "$ROOT/scripts/gpu_device.py" trace "$OUT/trace.json" || return 1
  # The programs with ops on the communication stream: their cudaEvent-timed
  # traces, with how long communication overlapped compute. Required of the
  # parameter offload (offload-param: ZeRO-3's shards in pinned host memory,
  # each fetched to the device on the communication stream ahead of its
  # reader, offload_param.buffer_count of them in flight); reported for the
  # others. ZeRO-3 on one rank has no collectives. The offload program issues its gradients' copies
  # before the optimizer step's only device work, the gradient norm, and a
  # copy waits for the compute issued before it, so the norm meets only the
  # tail of the copy queue: 2.1% of the copy time in one H200 run, none in
  # the next. Overlap by design (ZeRO's bucketed collectives during the
  # backward) needs dp >= 2, two GPUs.
  for variant in zero3 offload offload-param; do
    program="$BUILDS/$name-$variant/train"
    [ -x "$program" ] || { echo "SKIP trace of $name-$variant: not built"; continue; }
    "$program" --data "$data" --weights "$PREP/models" --steps 2 \
      --trace "$OUT/trace-$variant.json" > "$OUT/trace-$variant.log" 2>&1 || {
      echo "$name-$variant --trace: FAILED"; tail -3 "$OUT/trace-$variant.log"; failed=1; continue; }
    # The parameter offload's fetches are issued ahead of their readers by
    # design: there a trace with none overlapping compute fails.
    local require=()
    [ "$variant" != offload-param ] || [ "$EMULATE" = 1 ] || require=(--require-overlap)
    "$PY" "$ROOT/scripts/gpu_device.py" trace "$OUT/trace-$variant.json" "${require[@]}" || failed=1
  done
  return "$failed"
}

bench() {
  local name args=()
  rm -rf "$OUT/bench"
  name="$(cut -d' ' -f1 "$WORK/targets.txt" | grep -m1 '^bench-')"
  [ -n "$name" ] || { echo "SKIP bench: $PREP has no benchmark program (--no-bench)"; return 0; }
  [ "$EMULATE" = 0 ] || args+=(--emulate)
  "$PY" "$ROOT/bench/gpu_bench.py" --prepared "$PREP" --program-build "$BUILDS/$name" \
    --out "$OUT/bench" "${args[@]}"
}

# The warp stalls of the benchmark's step (bench/pc_sampling.cpp): the CUDA
# driver loads the sampler, named by CUDA_INJECTION64_PATH, into the bench
# stage's program, run for 2 steps on the data and weights that stage left
# in OUT/bench/work; every kernel's samples by stall reason in
# OUT/stalls.json, bench/pc_stalls.py's table of them in OUT/stalls.md.
# Skipped (not failed) where CUPTI says PC sampling is not available (the
# GPU, the driver, a profiling permission, a virtualized GPU), and under
# --emulate, where no driver loads the sampler (it is only built).
stalls() {
  local name program cuda lib
  cuda="$(cuda_home)"
  lib="$WORK/libdsrt_pc_sampling.so"
  rm -f "$OUT/stalls.json" "$OUT/stalls.md"
  build_sampler() {
    "${CXX:-c++}" -std=c++17 -O2 -shared -fPIC "$ROOT/bench/pc_sampling.cpp" -o "$lib" \
      -I"$cuda/include" -I"$cuda/extras/CUPTI/include" -L"$cuda/lib64" -L"$cuda/extras/CUPTI/lib64" \
      -Wl,-rpath,"$cuda/lib64" -Wl,-rpath,"$cuda/extras/CUPTI/lib64" -lcupti -ldl
  }
  if [ "$EMULATE" = 1 ]; then
    if build_sampler > "$WORK/pc_sampling.build.log" 2>&1; then
      echo "SKIP stalls: CUPTI's PC sampling needs a GPU and its driver, which the emulation has not (bench/pc_sampling.cpp built)"
    else
      echo "SKIP stalls: CUPTI's PC sampling needs a GPU and its driver, which the emulation has not (bench/pc_sampling.cpp did not build: $(grep -m1 -E 'error|cannot' "$WORK/pc_sampling.build.log"))"
    fi
    return 0
  fi
  name="$(cut -d' ' -f1 "$WORK/targets.txt" | grep -m1 '^bench-')"
  [ -n "$name" ] || { echo "SKIP stalls: $PREP has no benchmark program (--no-bench)"; return 0; }
  program="$BUILDS/$name/train"
  [ -x "$program" ] || { echo "error: $program was not built"; return 1; }
  [ -f "$OUT/bench/work/data/input_ids.npy" ] ||
    { echo "error: no $OUT/bench/work/data: the bench stage writes the benchmark's data and weights (run it first)"; return 1; }
  build_sampler || { echo "error: building bench/pc_sampling.cpp against $cuda failed"; return 1; }
  CUDA_INJECTION64_PATH="$lib" DSRT_PCSAMPLE_OUT="$OUT/stalls.json" \
    "$program" --data "$OUT/bench/work/data" --weights "$OUT/bench/work" --steps 2 --quiet ||
    { echo "error: the benchmark's program failed under PC sampling (exit $?)"; return 1; }
  "$PY" "$ROOT/bench/pc_stalls.py" "$OUT/stalls.json" --out "$OUT/stalls.md"
}

export ROOT BUILD SKIP_BUILD PY PREP OUT WORK RT PREFIX BUILDS JOBS RUNTIME_PREFIX EMULATE STEPS \
  BENCH_SIZE BENCH_BATCH VARIANTS KERNEL_TEST NCCL_TEST
export -f find_python build prepare cuda_home nccl_root preflight runtime build_runtime programs nodevice \
  kernels launch nccl forward train bf16 zero3 offload checkpoint ranks2 trace bench stalls
export PATH="$PATH:/usr/local/cuda/bin"
if [ "$MODE" = all ]; then
  stage build 330
  stage prepare 600
fi
stage runtime 240
stage programs 300
if [ "$BUILD_ONLY" = 1 ]; then
  stage nodevice 120
else
  # The benchmark right after the model checks, and the one-GPU NCCL
  # stages last: a --deadline cuts the run from the end.
  stage kernels 90
  stage forward 90
  stage train 120
  stage bf16 90
  stage bench 240
  stage stalls 90
  stage zero3 60
  stage offload 60
  stage checkpoint 60
  stage trace 90
  stage nccl 60
  stage ranks2 60
fi

[ "$DRY_RUN" = 1 ] && exit 0
{
  if [ "$EMULATE" = 1 ]; then
    echo "# dsopt GPU check: REHEARSAL under the CUDA emulation (no GPU)"
  else
    echo "# dsopt GPU check"
  fi
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), prepared at $("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("commit", "?"))' "$PREP/manifest.json" 2>/dev/null || echo '?')"
  echo
  if [ "$EMULATE" = 1 ]; then
    echo "GPU: none. Every stage ran on the CUDA emulation (runtime/tests/cuda/emu: kernels"
    echo "and cuBLASLt on the host CPU, NCCL over MPI), built with the host compiler, not nvcc."
    echo "What passed here is the stages' logic and the emulated arithmetic; the trace's"
    echo "timings, the benchmark's tokens/s, MFU and measured device peak are the"
    echo "emulation's, not a GPU's figures."
  else
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
  fi
  echo
  echo "| stage | result | time | log |"
  echo "|---|---|---|---|"
  printf '%s\n' "${SUMMARY[@]}"
  if [ -f "$OUT/bench/bench.md" ] && printf '%s\n' "${SUMMARY[@]}" | grep -q '^| bench |'; then
    echo
    cat "$OUT/bench/bench.md"
    # The step's op kinds by time (the first 20), so that the report alone
    # says where the step went; bench/ops.md has them all.
    if [ -f "$OUT/bench/ops.md" ]; then
      echo
      head -n 26 "$OUT/bench/ops.md"
    fi
  fi
  # Why the step's kernels wait (the stalls stage).
  if [ -f "$OUT/stalls.md" ] && printf '%s\n' "${SUMMARY[@]}" | grep -q '^| stalls |'; then
    echo
    cat "$OUT/stalls.md"
  fi
} > "$REPORT"
cat "$REPORT"
exit $FAILED
