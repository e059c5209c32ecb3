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
#   zero3     a ZeRO-3 training program on one GPU under mpirun -np 1 (NCCL),
#             whose losses equal the plain program's
#   trace     one step's timeline (nsys when installed, else the runtime's
#             cudaEvent-timed Chrome trace)
#   bench     bench/gpu_bench.py: GPT-2 124M bf16 tokens/s and MFU
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
    -h|--help) sed -n '4,34p' "$0"; exit 0 ;;
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
    build|kernels|nccl|forward|train|bf16|zero3|trace|bench) ;;
    *) echo "gpu-check: --only: no stage '$name'" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT" || { echo "gpu-check: cannot create '$OUT'" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
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

# The stages, each a function so that a stage's commands stay together.
build() {
  if [ "$SKIP_BUILD" = 0 ]; then
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CUDA_ARCHITECTURES=90 || return 1
    ninja -C "$BUILD" -j "$JOBS" || return 1
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
  mpirun --allow-run-as-root -np 1 "$exe"
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
  mpirun --allow-run-as-root -np 1 -x DSRT_TRANSPORT=nccl "$WORK/zero3/gpt2/program/train" \
    --data "$case_dir/data" --steps 20 --log-json "$WORK/zero3/gpt2/log.jsonl" || return 1
  mkdir -p "$WORK/zero3-ref/gpt2"
  cp "$case_dir/log.jsonl" "$WORK/zero3-ref/gpt2/log.jsonl"
  "$PY" "$ROOT/scripts/gpu_compare.py" train "$WORK/zero3-ref" "$WORK/zero3" --rtol 1e-4 || status=1
  return "$status"
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
export -f build kernels nccl zoo forward train bf16 zero3 trace bench
stage build 330
stage kernels 90
stage nccl 60
stage forward 150
stage train 240
stage bf16 90
stage zero3 90
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
