#!/usr/bin/python3
"""Step time of data-parallel training on the CPU for a fixed global batch.

Writes a GPT-shaped training graph with real weights (test/oracles/gen_gpt.py
--materialize; 4 layers, width 256, vocabulary 4096, 64 tokens, micro-batch
2), random token data, and trains the same global batch (the model's micro-batch times RANKS_MAX) on 1,
2 and 4 ranks (`mpirun -np N OUT/train --threads T`), with accumulation
RANKS_MAX / N on each rank, for every ZeRO stage. Reports rank 0's median
step time (the first step excluded) and its ratio to the single-rank run
measured in the same invocation: below 1 is faster. Every rank gets --threads
T; a machine with fewer than N*T cores oversubscribes, and the ratio shows
it.

  bench/dp_bench.py --work DIR [--dsopt PATH] [--steps 12] [--threads 1]
"""
import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench_common import MPIRUN, gen_gpt

ROOT = Path(__file__).resolve().parent.parent
RANKS = (1, 2, 4)
RANKS_MAX = max(RANKS)
VOCAB, SEQ, MICRO = 4096, 64, 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--dsopt", default=str(ROOT / "build" / "bin" / "dsopt"))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    model = args.work / "gpt.onnx"
    gen_gpt(model, 4, 256, 4, VOCAB, SEQ, MICRO)
    import numpy as np
    rng = np.random.default_rng(0)
    (args.work / "data").mkdir()
    for name in ("input_ids", "labels"):
        np.save(args.work / "data" / f"{name}.npy",
                rng.integers(0, VOCAB, size=(2, MICRO * RANKS_MAX, SEQ), dtype=np.int64))

    def step_time(n, stage):
        out = args.work / f"dp{n}-zero{stage}"
        subprocess.run([args.dsopt, str(model), "--dp", str(n), "--zero", str(stage),
                        "--grad-accum", str(RANKS_MAX // n), "-o", str(out)], check=True, capture_output=True)
        log = out / "log.jsonl"
        command = [str(out / "train"), "--data", str(args.work / "data"), "--steps", str(args.steps),
                   "--threads", str(args.threads), "--log-json", str(log), "--quiet"]
        subprocess.run(MPIRUN + ["-np", str(n)] + command if n > 1 else command, check=True)
        steps = [json.loads(line) for line in log.read_text().splitlines()]
        return statistics.median(s["step_time_s"] for s in steps if not s.get("summary") and s["step"] > 1)

    base = step_time(1, 0)
    print(f"GPT (4 x 256, vocab {VOCAB}, {SEQ} tokens), global batch {MICRO * RANKS_MAX}, "
          f"{args.steps} steps, --threads {args.threads}")
    print("| ranks | ZeRO stage | accumulation per rank | step time | ratio to 1 rank |")
    print("|---|---|---|---|---|")
    print(f"| 1 | - | {RANKS_MAX} | {base * 1e3:.2f} ms | 1.00 |")
    for n in RANKS[1:]:
        for stage in range(4):
            t = step_time(n, stage)
            print(f"| {n} | {stage} | {RANKS_MAX // n} | {t * 1e3:.2f} ms | {t / base:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
