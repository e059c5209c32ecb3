#!/bin/bash
# Builds libdsrt_cuda standalone (runtime/, sm_90, no cpu backend) and
# bench/cuda_rows against it, then times the row kernels (cuda_rows_bench).
# Run from the source tree's root on a machine with a GPU; logs and the
# table go to $OUT (a new temporary folder when unset).
OUT=${OUT:-$(mktemp -d)}
set -o pipefail
t0=$(date +%s)
NR=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
A=(); [ -n "$NR" ] && A+=("-DNCCL_ROOT=$NR")
cmake -S runtime -B /tmp/rt -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSRT_FUZZERS=OFF -DDSRT_WITH_CPU=OFF -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_INSTALL_PREFIX=/tmp/dsrt "${A[@]}" > $OUT/cfg.log 2>&1 || { tail -30 $OUT/cfg.log; exit 2; }
echo "configured $(( $(date +%s) - t0 )) s"
ninja -C /tmp/rt -j16 dsrt_cuda > $OUT/build.log 2>&1 || { grep -B2 -A10 error $OUT/build.log | head -60; exit 3; }
echo "built $(( $(date +%s) - t0 )) s"
cmake --install /tmp/rt > /dev/null || exit 4
cmake -S bench/cuda_rows -B /tmp/bb -G Ninja -DCMAKE_PREFIX_PATH=/tmp/dsrt -DCMAKE_BUILD_TYPE=Release > $OUT/bcfg.log 2>&1 || { tail -30 $OUT/bcfg.log; exit 5; }
ninja -C /tmp/bb > $OUT/bbuild.log 2>&1 || { tail -40 $OUT/bbuild.log; exit 6; }
echo "bench built $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
/tmp/bb/cuda_rows_bench | tee $OUT/bench.md
echo "done $(( $(date +%s) - t0 )) s"
