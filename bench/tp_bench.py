#!/usr/bin/python3
"""Tensor parallelism on the CPU: step time against one rank, tp bytes against the plan.

Writes a GPT-shaped training graph with real weights (test/oracles/gen_gpt.py
--materialize; LAYERS layers, width 256, 4 heads, vocabulary 4096, 64
tokens, micro-batch 2) and random token data, compiles it for one rank and
with `--tp T`, trains the same batches with `OUT/train --threads 1`
(`mpirun -np T` for tp) and reports, in one run:
  * the median step time (the first step excluded) of each and their ratio
    (below 1 is faster; T processes need T cores to mean anything);
  * rank 0's tp all-reduces per step, measured by the runtime, against
    plan.json's (`ranks[0].collective_bytes.all_reduce`,
    `tp_collective_bytes`) and Megatron's count: 4 per layer (2 forward,
    2 backward) of b*s*h elements, plus the gradient norm's one scalar.

  bench/tp_bench.py --work DIR [--dsopt PATH] [--tp 2] [--steps 12]
"""
import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench_common import MPIRUN, gen_gpt, read_log

ROOT = Path(__file__).resolve().parent.parent
LAYERS, WIDTH, HEADS, VOCAB, SEQ, MICRO = 4, 256, 4, 4096, 64, 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--dsopt", default=str(ROOT / "build" / "bin" / "dsopt"))
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--steps", type=int, default=12)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    model = args.work / "gpt.onnx"
    gen_gpt(model, LAYERS, WIDTH, HEADS, VOCAB, SEQ, MICRO)
    import numpy as np
    rng = np.random.default_rng(0)
    (args.work / "data").mkdir()
    for name in ("input_ids", "labels"):
        np.save(args.work / "data" / f"{name}.npy",
                rng.integers(0, VOCAB, size=(2, MICRO, SEQ), dtype=np.int64))

    def train(tp):
        out = args.work / f"tp{tp}"
        subprocess.run([args.dsopt, str(model), "--tp", str(tp), "--clip", "1", "-o", str(out)],
                       check=True, capture_output=True)
        log_path = out / "log.jsonl"
        command = [str(out / "train"), "--data", str(args.work / "data"), "--steps", str(args.steps),
                   "--threads", "1", "--log-json", str(log_path), "--quiet"]
        subprocess.run(MPIRUN + ["-np", str(tp)] + command if tp > 1 else command, check=True)
        log, summary = read_log(log_path)
        step = statistics.median(s["step_time_s"] for s in log if s["step"] > 1)
        return step, log, summary, json.loads((out / "plan.json").read_text())

    base, base_log, _, _ = train(1)
    step, log, summary, plan = train(args.tp)
    worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(log, base_log))
    print(f"GPT ({LAYERS} x {WIDTH}, {HEADS} heads, vocab {VOCAB}, {SEQ} tokens, micro-batch {MICRO}), "
          f"{args.steps} steps, --threads 1 per rank; losses of tp {args.tp} against one rank: "
          f"max rel err {worst:.1e}")
    print("| ranks | step time | ratio to 1 rank |")
    print("|---|---|---|")
    print(f"| 1 | {base * 1e3:.2f} ms | 1.00 |")
    print(f"| tp {args.tp} | {step * 1e3:.2f} ms | {step / base:.2f} |")
    measured = summary["ranks"][0]["collective_bytes"]["all_reduce"]
    planned = plan["ranks"][0]["collective_bytes"]["all_reduce"]
    tp_plan = plan["ranks"][0]["tp_collective_bytes"]["all_reduce"]
    elements = MICRO * SEQ * WIDTH
    ring = 2 * (args.tp - 1) / args.tp  # bytes a ring all-reduce sends, per byte reduced
    megatron_calls = 4 * LAYERS
    megatron_sent = int(megatron_calls * elements * 4 * ring)
    print()
    print("rank 0's tp all-reduces per step (f32):")
    print("| | calls | bytes sent |")
    print("|---|---|---|")
    print(f"| Megatron: 4 per layer of b*s*h = {elements} elements, + the norm's scalar | "
          f"{megatron_calls} + 1 | {megatron_sent} + {int(4 * ring)} |")
    print(f"| plan.json (ranks[0].tp_collective_bytes) | {tp_plan['calls']} | {tp_plan['sent']} |")
    print(f"| plan.json (ranks[0]) | {planned['calls']} | {planned['sent']} |")
    print(f"| measured (mean per step) | {measured['calls'] / args.steps:g} | "
          f"{measured['sent'] / args.steps:.0f} |")
    equal = (measured["calls"] == args.steps * planned["calls"] and
             measured["sent"] == args.steps * planned["sent"])
    print(f"measured {'equals' if equal else 'DIFFERS FROM'} the plan")
    return 0 if equal and worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
