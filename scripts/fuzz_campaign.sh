#!/bin/sh
# The long in-process fuzzing campaigns (docs/bad-input.md, "In-process
# fuzzing"): each libFuzzer target (the .npy and checkpoint readers, the
# DeepSpeed config parser, the ONNX importer) runs RUNS
# executions (default 1,000,000) from a seed corpus made here, under ASan
# and UBSan, with leak detection; a crash, sanitizer report, leak, timeout
# or out-of-memory stops it with a reproducer (crash-*, leak-*, ...) in
# WORK/<target>/ and this script exits non-zero.
#
#   scripts/fuzz_campaign.sh [BUILD_DIR [WORK [RUNS [TARGET...]]]]
#
# TARGETs are npy, checkpoint, config and import (default: all, in turn).
# FUZZ_MAX_TIME=SECONDS stops each target after that long (libFuzzer's
# -max_total_time) with its figures, for a campaign that cannot finish.
#
# Prints, per target, the executions, the time, the corpus and the
# coverage reached (libFuzzer's final stats).
set -eu
build=$(cd "${1:-build}" && pwd)
work=${2:-/tmp/dsrt-fuzz-campaign}
runs=${3:-1000000}
if [ $# -gt 3 ]; then shift 3; targets="$*"; else targets="npy checkpoint config import"; fi
src=$(cd "$(dirname "$0")/.." && pwd)
python=${DSOPT_PYTHON:-/usr/bin/python3}
status=0
for target in $targets; do
  case $target in
    npy|checkpoint) exe_name=dsrt_${target}_fuzz ;;
    config|import) exe_name=dsopt_${target}_fuzz ;;
    *) echo "fuzz_campaign: no target '$target' (npy, checkpoint, config, import)" >&2; exit 2 ;;
  esac
  exe="$build/bin/$exe_name"
  if [ ! -x "$exe" ]; then
    echo "fuzz_campaign: $exe not built (needs clang-22 and libclang-rt-22-dev)" >&2
    exit 2
  fi
  dir="$work/$target"
  rm -rf "$dir"
  mkdir -p "$dir/corpus"
  case $target in
    npy) "$python" "$src/test/oracles/make_train_data.py" --model mlp --gas 2 --n-batches 2 \
           --out "$dir/corpus" > /dev/null ;;
    checkpoint) DSRT_FUZZ_WRITE_SEED="$dir/corpus/seed" "$exe" ;;
    config) cp "$src"/test/Train/Inputs/*.json "$dir/corpus/" ;;
    import) "$python" "$src/test/oracles/export_zoo.py" --out "$dir/zoo" > /dev/null
            "$python" "$src/test/Fuzz/Inputs/fuzz_seeds.py" --out "$dir/corpus" "$dir"/zoo/*.onnx > /dev/null ;;
  esac
  start=$(date +%s)
  if (cd "$dir" && "$exe" -runs="$runs" ${FUZZ_MAX_TIME:+-max_total_time="$FUZZ_MAX_TIME"} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        corpus > log.txt 2>&1); then
    result=ok
  else
    result="FAILED (see $dir/log.txt and the reproducer there)"
    status=1
  fi
  took=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log.txt")
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$dir/log.txt" | tail -1)
  corpus=$(ls "$dir/corpus" | wc -l)
  echo "$exe_name: ${execs:-?} executions in ${took} s, ${cov:-no coverage line}, corpus $corpus: $result"
done
exit $status
