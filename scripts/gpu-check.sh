#!/usr/bin/env bash
# The stage functions run through `stage`, which shellcheck cannot follow.
# shellcheck disable=SC2317
# The GPU check of dsopt's cuda target, on one NVIDIA GPU (sized for an H200,
# about 8 minutes): builds dsopt and libdsrt_cuda with CUDA, then runs
#
#   kernels   the cuda kernel tests (dsrt_cuda_kernel_test)
#   nccl      the NCCL transport on one GPU (dsrt_nccl_device_test, mpirun -np 1)
#   forward   every zoo model's forward on cuda against PyTorch, the measured
#             device arena against the plan, and cuda against cpu (rel 1e-4)
#   train     20 training steps of every zoo model on cuda against PyTorch
#             (loss rel 1e-4, memory spaces equal to the plan), and cuda
#             against cpu (loss rel 1e-4)
#   bf16      the same in bf16 (loss rel 2e-2), or a SKIP line while dsopt
#             refuses --precision bf16
#   zero3     a ZeRO-3 training program on one GPU, its collectives on a
#             one-rank NCCL world (as every cuda program's; under mpirun -np 1
#             where mpirun is installed), whose losses equal the plain
#             program's
#   offload   GPT-2 with its optimizer offloaded (--offload-optimizer cpu:
#             states in pinned host memory, copies on the communication
#             stream, the update's kernels over the pinned arena), whose
#             losses equal the plain program's
#   ranks2    mlp's dp-2 ZeRO-3 program under mpirun -np 2 on the one GPU:
#             NCCL cannot put two ranks of a communicator on one device, so
#             the check is that rank 1 is refused at once with dsrt's message
#             (its local rank has no GPU of its own) and the job exits 1
#             instead of hanging; a SKIP line without mpirun
#   trace     one step's timeline (nsys when installed, else the runtime's
#             cudaEvent-timed Chrome trace)
#   bench     bench/gpu_bench.py: GPT-2 124M bf16 tokens/s and MFU
#
# Needs: the CUDA toolkit with NCCL (nccl.h and libnccl where CMake's
# CUDAToolkit or the NCCL_ROOT/CPATH paths find them), LLVM/MLIR 22 (dsopt
# links libMLIR and libLLVM), CMake, ninja, and a python3 with torch, onnx and
# numpy (the first of python3 on PATH and /usr/bin/python3 that has them).
# The build stage checks these first and names what is missing. mpirun is
# optional (a program started without it is a world of one rank).
#
# Usage: scripts/gpu-check.sh [--dry-run] [--build DIR] [--skip-build]
#                              [--only STAGE,...] OUT
#   OUT          where report.md and one log per stage go (created)
#   --build DIR  the CUDA build directory (default: build-gpu)
#   --skip-build use DIR as it is
#   --only       run only these stages (a rerun; later stages use what
#                earlier ones left in OUT/work)
#   --dry-run    print the stages and their commands, run nothing
#
# Every stage has a timeout; a failing stage does not stop the next ones.
# Exits 0 when every stage passed (or was skipped with a reason), else 1.
set -u
set -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-gpu"
DRY_RUN=0
SKIP_BUILD=0
ONLY=""
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY_RUN=1 ;;
    --skip-build) SKIP_BUILD=1 ;;
    --build)
      [ $# -ge 2 ] || { echo "gpu-check: --build needs a directory" >&2; exit 2; }
      BUILD="$2"; shift ;;
    --only)
      [ $# -ge 2 ] || { echo "gpu-check: --only needs stage names" >&2; exit 2; }
      ONLY=",$2,"; shift ;;
    -h|--help) sed -n '4,48p' "$0"; exit 0 ;;
    -*) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *)
      [ -z "$OUT" ] || { echo "gpu-check: one OUT directory, got '$OUT' and '$1'" >&2; exit 2; }
      OUT="$1" ;;
  esac
  shift
done
[ -n "$OUT" ] || { echo "usage: scripts/gpu-check.sh [--dry-run] [--build DIR] [--skip-build] [--only STAGE,...] OUT" >&2; exit 2; }
for name in ${ONLY//,/ }; do
  case "$name" in
    build|kernels|nccl|forward|train|bf16|zero3|offload|ranks2|trace|bench) ;;
    *) echo "gpu-check: --only: no stage '$name'" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT" || { echo "gpu-check: cannot create '$OUT'" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac

# The first python3 that has what the oracles import.
PY=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" > /dev/null &&
     "$candidate" -c 'import torch, onnx, numpy' > /dev/null 2>&1; then
    PY="$(command -v "$candidate")"
    break
  fi
done
[ -n "$PY" ] || PY=python3  # the build stage reports it
DSOPT="$BUILD/bin/dsopt"
WORK="$OUT/work"
JOBS="$(nproc 2>/dev/null || echo 4)"
export PYTHONNOUSERSITE=1 OMP_NUM_THREADS=4
REPORT="$OUT/report.md"
declare -a SUMMARY=()
FAILED=0

# dsopt for the cuda target, as one command the zoo oracles can run.
mkdir -p "$OUT/bin" "$WORK"
cat > "$OUT/bin/dsopt-cuda" <<EOF
#!/bin/sh
exec "$DSOPT" --target cuda "\$@"
EOF
chmod +x "$OUT/bin/dsopt-cuda"
DSOPT_CUDA="$OUT/bin/dsopt-cuda"

# stage NAME TIMEOUT_S: runs the function NAME in a shell of its own under
# the timeout, its output in OUT/NAME.log; a stage that prints a line
# starting with "SKIP" and returns 0 counts as skipped.
stage() {
  local name="$1" limit="$2"
  local log="$OUT/$name.log"
  if [ -n "$ONLY" ] && [ "${ONLY#*,"$name",}" = "$ONLY" ]; then
    return 0
  fi
  if [ "$DRY_RUN" = 1 ]; then
    printf '[%s] timeout %ss:\n' "$name" "$limit"
    declare -f "$name" | sed -e '1,2d' -e '$d'
    return 0
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
    verdict="FAILED (exit $status): $(grep -m1 -iE 'error|fail|mismatch' "$log" | cut -c1-200)"; FAILED=1
  fi
  printf '   %s (%ss)\n' "$verdict" "$((end - start))"
  SUMMARY+=("| $name | $verdict | $((end - start)) s | [$name.log]($name.log) |")
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

# What the build needs, each missing piece named.
preflight() {
  local missing=0
  command -v cmake > /dev/null || { echo "error: cmake is not installed"; missing=1; }
  command -v ninja > /dev/null || { echo "error: ninja is not installed"; missing=1; }
  command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
    { echo "error: nvcc is not on PATH nor in /usr/local/cuda/bin"; missing=1; }
  [ -d /usr/lib/llvm-22/lib/cmake/mlir ] || [ -n "${MLIR_DIR:-}" ] ||
    { echo "error: LLVM/MLIR 22 is not installed (no /usr/lib/llvm-22/lib/cmake/mlir, MLIR_DIR unset): dsopt cannot be built"; missing=1; }
  find /usr/local/cuda/include /usr/include "${NCCL_ROOT:-/nonexistent}" -maxdepth 2 \
    -name nccl.h 2> /dev/null | grep -q . ||
    echo "warning: no nccl.h under /usr/local/cuda/include, /usr/include or NCCL_ROOT: no NCCL transport (the nccl, zero3 and ranks2 stages fail)"
  "$PY" -c 'import torch, onnx, numpy' > /dev/null 2>&1 ||
    { echo "error: no python3 with torch, onnx and numpy (tried python3 and /usr/bin/python3)"; missing=1; }
  return "$missing"
}

# The stages, each a function so that a stage's commands stay together.
build() {
  if [ "$SKIP_BUILD" = 0 ]; then
    preflight || return 1
    export PATH="$PATH:/usr/local/cuda/bin"
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=90 || return 1
    # What the stages run, not the whole tree (no fuzzers, no cpu-only tests).
    local targets=(dsopt dsrt dsrt_cuda dsrt_cuda_kernel_test)
    ninja -C "$BUILD" -t targets all 2> /dev/null | grep -q '^dsrt_nccl_device_test:' &&
      targets+=(dsrt_nccl_device_test)
    ninja -C "$BUILD" -j "$JOBS" "${targets[@]}" || return 1
  fi
  [ -x "$DSOPT" ] || { echo "error: no dsopt at $DSOPT"; return 1; }
  find "$BUILD" -name libdsrt_cuda.a | grep -q . ||
    { echo "error: libdsrt_cuda.a was not built (is the CUDA toolkit found? see the cmake output above)"; return 1; }
  "$DSOPT" --print-build-flags --target cuda
}

kernels() {
  local exe
  exe="$(find "$BUILD" -name dsrt_cuda_kernel_test -type f -perm -u+x | head -1)"
  [ -n "$exe" ] || { echo "error: dsrt_cuda_kernel_test was not built under $BUILD"; return 1; }
  "$exe"
}

nccl() {
  local exe
  exe="$(find "$BUILD" -name dsrt_nccl_device_test -type f -perm -u+x | head -1)"
  [ -n "$exe" ] || { echo "error: dsrt_nccl_device_test was not built under $BUILD (NCCL not found?)"; return 1; }
  launch 1 "$exe"
}

zoo() {
  [ -f "$WORK/zoo/zoo.json" ] || "$PY" "$ROOT/test/oracles/export_zoo.py" --out "$WORK/zoo"
}

forward() {
  zoo || return 1
  local status=0
  # Against PyTorch and the plan (the cuda arena's measured peak).
  "$PY" "$ROOT/test/oracles/check_zoo_forward.py" --zoo "$WORK/zoo" --work "$WORK/forward-cuda" \
    --dsopt "$DSOPT_CUDA" --rtol 1e-4 --atol 1e-6 || status=1
  "$PY" "$ROOT/test/oracles/check_zoo_forward.py" --zoo "$WORK/zoo" --work "$WORK/forward-cpu" \
    --dsopt "$DSOPT" --rtol 1e-4 --atol 1e-6 || status=1
  "$PY" "$ROOT/scripts/gpu_compare.py" forward "$WORK/forward-cpu" "$WORK/forward-cuda" --rtol 1e-4 || status=1
  return "$status"
}

train() {
  zoo || return 1
  local status=0
  "$PY" "$ROOT/test/oracles/check_zoo_train.py" --zoo "$WORK/zoo" --work "$WORK/train-cuda" \
    --dsopt "$DSOPT_CUDA" --configs adamw-gas1 --steps 20 --jobs 4 || status=1
  "$PY" "$ROOT/test/oracles/check_zoo_train.py" --zoo "$WORK/zoo" --work "$WORK/train-cpu" \
    --dsopt "$DSOPT" --configs adamw-gas1 --steps 20 --jobs 8 || status=1
  "$PY" "$ROOT/scripts/gpu_compare.py" train "$WORK/train-cpu" "$WORK/train-cuda" --rtol 1e-4 || status=1
  return "$status"
}

bf16() {
  zoo || return 1
  local why
  if ! why="$("$DSOPT" "$WORK/zoo/gpt2.onnx" --precision bf16 --emit=plan -o /dev/null 2>&1)"; then
    echo "SKIP bf16: dsopt refuses --precision bf16: $(echo "$why" | grep -m1 error)"
    return 0
  fi
  local case_dir data status=0
  case_dir="$WORK/train-cuda/gpt2-adamw-gas1"
  [ -d "$case_dir/data" ] || { echo "error: the train stage left no gpt2 case to take data from"; return 1; }
  data="$case_dir/data"
  for target in cpu cuda; do
    "$DSOPT" "$WORK/zoo/gpt2.onnx" --config "$case_dir/ds_config.json" --precision bf16 \
      --target "$target" -o "$WORK/bf16-$target/gpt2/program" || return 1
    "$WORK/bf16-$target/gpt2/program/train" --data "$data" --steps 20 \
      --log-json "$WORK/bf16-$target/gpt2/log.jsonl" || status=1
  done
  "$PY" "$ROOT/scripts/gpu_compare.py" train "$WORK/bf16-cpu" "$WORK/bf16-cuda" --rtol 2e-2 || status=1
  return "$status"
}

zero3() {
  local case_dir status=0
  case_dir="$WORK/train-cuda/gpt2-adamw-gas1"
  [ -f "$case_dir/log.jsonl" ] || { echo "error: the train stage left no gpt2 run to compare with"; return 1; }
  "$DSOPT" "$WORK/zoo/gpt2.onnx" --config "$case_dir/ds_config.json" --zero=3 --target cuda \
    -o "$WORK/zero3/gpt2/program" || return 1
  grep -q '"stage": *3' "$WORK/zero3/gpt2/program/plan.json" ||
    echo "note: plan.json does not spell the ZeRO stage as \"stage\": 3"
  # NCCL_DEBUG=VERSION: NCCL prints its version when the program's world
  # transport initializes it, which shows the run went through NCCL.
  NCCL_DEBUG=VERSION launch 1 "$WORK/zero3/gpt2/program/train" \
    --data "$case_dir/data" --steps 20 --log-json "$WORK/zero3/gpt2/log.jsonl" \
    2>&1 | tee "$WORK/zero3/run.log" || return 1
  grep -q "NCCL version" "$WORK/zero3/run.log" ||
    { echo "error: the ZeRO-3 run did not initialize NCCL"; return 1; }
  mkdir -p "$WORK/zero3-ref/gpt2"
  cp "$case_dir/log.jsonl" "$WORK/zero3-ref/gpt2/log.jsonl"
  "$PY" "$ROOT/scripts/gpu_compare.py" train "$WORK/zero3-ref" "$WORK/zero3" --rtol 1e-4 || status=1
  return "$status"
}

offload() {
  local case_dir="$WORK/train-cuda/gpt2-adamw-gas1"
  [ -f "$case_dir/log.jsonl" ] || { echo "error: the train stage left no gpt2 run to compare with"; return 1; }
  "$DSOPT" "$WORK/zoo/gpt2.onnx" --config "$case_dir/ds_config.json" --offload-optimizer=cpu \
    --target cuda -o "$WORK/offload/gpt2/program" || return 1
  "$WORK/offload/gpt2/program/train" --data "$case_dir/data" --steps 20 \
    --log-json "$WORK/offload/gpt2/log.jsonl" || return 1
  mkdir -p "$WORK/offload-ref/gpt2"
  cp "$case_dir/log.jsonl" "$WORK/offload-ref/gpt2/log.jsonl"
  "$PY" "$ROOT/scripts/gpu_compare.py" train "$WORK/offload-ref" "$WORK/offload" --rtol 1e-4
}

ranks2() {
  command -v mpirun > /dev/null || { echo "SKIP ranks2: mpirun is not installed"; return 0; }
  local case_dir="$WORK/train-cuda/mlp-adamw-gas1" status
  [ -d "$case_dir/data" ] || { echo "error: the train stage left no mlp case to take data from"; return 1; }
  "$DSOPT" "$WORK/zoo/mlp.onnx" --config "$case_dir/ds_config.json" --dp=2 --zero=3 \
    --target cuda -o "$WORK/ranks2/mlp/program" || return 1
  # The launcher's local ranks are 0 and 1; with one GPU visible rank 1 has
  # none of its own, and must say so rather than wait for NCCL.
  timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$WORK/ranks2/mlp/program/train" \
    --data "$case_dir/data" --steps 2 > "$WORK/ranks2/run.log" 2>&1
  status=$?
  cat "$WORK/ranks2/run.log"
  [ "$status" != 124 ] || { echo "error: the 2-rank job on one GPU hung"; return 1; }
  [ "$status" != 0 ] || { echo "note: 2 ranks ran on one GPU (NCCL allowed it)"; return 0; }
  grep -q "has no CUDA device of its own" "$WORK/ranks2/run.log" ||
    { echo "error: the 2-rank job failed without dsrt's message for a rank without a GPU"; return 1; }
  echo "2 ranks on one GPU: refused as expected (exit $status)"
}

trace() {
  local case_dir="$WORK/train-cuda/gpt2-adamw-gas1"
  [ -x "$case_dir/program/train" ] || { echo "error: the train stage left no gpt2 program"; return 1; }
  if command -v nsys > /dev/null; then
    nsys profile --force-overwrite true -o "$OUT/step" "$case_dir/program/train" \
      --data "$case_dir/data" --steps 2 || return 1
    ls -l "$OUT"/step.nsys-rep
  else
    echo "nsys not found: the runtime's own trace (cudaEvent timestamps)"
  fi
  "$case_dir/program/train" --data "$case_dir/data" --steps 1 --trace "$OUT/trace.json" || return 1
  "$PY" -c 'import json,sys; t=json.load(open(sys.argv[1])); e=t["traceEvents"] if isinstance(t,dict) else t; assert e, "empty trace"; print(len(e), "trace events")' "$OUT/trace.json"
}

bench() {
  "$PY" "$ROOT/bench/gpu_bench.py" --build "$BUILD" --out "$OUT/bench"
}

export ROOT BUILD SKIP_BUILD PY DSOPT DSOPT_CUDA WORK OUT JOBS
export -f launch preflight build kernels nccl zoo forward train bf16 zero3 offload ranks2 trace bench
stage build 330
stage kernels 90
stage nccl 60
stage forward 150
stage train 240
stage bf16 90
stage zero3 90
stage offload 60
stage ranks2 60
stage trace 60
stage bench 180

[ "$DRY_RUN" = 1 ] && exit 0
{
  echo "# dsopt GPU check"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/GPU: /'
  echo
  echo "| stage | result | time | log |"
  echo "|---|---|---|---|"
  printf '%s\n' "${SUMMARY[@]}"
  if [ -f "$OUT/bench/bench.md" ]; then
    echo
    cat "$OUT/bench/bench.md"
  fi
} > "$REPORT"
cat "$REPORT"
exit $FAILED
