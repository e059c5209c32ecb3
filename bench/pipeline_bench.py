#!/usr/bin/python3
"""The pipeline bubble on the CPU: simulated, textbook and measured, per schedule.

Writes a GPT-shaped training graph with real weights (test/oracles/gen_gpt.py
--materialize; LAYERS layers, width 256, vocabulary 2048, 64 tokens,
micro-batch 2) and random token data, compiles it with `--pp P` for each
schedule (gpipe, 1f1b, interleaved with 2 chunks, zb-h1) and M micro-batches,
trains it with `mpirun -np P OUT/train --threads 1` and reports, per
schedule, the bubble plan.json simulates from the partition's FLOPs, the
textbook value for uniform stages, and the bubble measured by the runtime
(1 - compute time / (P x step time), the mean over the steps after the
first), next to the median step time and its ratio to one rank training the
same batch (same invocation, --threads 1). P processes need P cores for the
measured numbers to mean anything.

  bench/pipeline_bench.py --work DIR [--dsopt PATH] [--pp 2] [--microbatches 8] [--steps 6]
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
LAYERS, VOCAB, SEQ, MICRO = 8, 2048, 64, 2
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--dsopt", default=str(ROOT / "build" / "bin" / "dsopt"))
    parser.add_argument("--pp", type=int, default=2)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    model = args.work / "gpt.onnx"
    gen_gpt(model, LAYERS, 256, 4, VOCAB, SEQ, MICRO)
    import numpy as np
    rng = np.random.default_rng(0)
    (args.work / "data").mkdir()
    m = args.microbatches
    for name in ("input_ids", "labels"):
        np.save(args.work / "data" / f"{name}.npy",
                rng.integers(0, VOCAB, size=(2, MICRO * m, SEQ), dtype=np.int64))
    config = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": m,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    (args.work / "ds_config.json").write_text(json.dumps(config))

    def train(name, flags, ranks):
        out = args.work / name
        subprocess.run([args.dsopt, str(model), "--config", str(args.work / "ds_config.json"), *flags,
                        "-o", str(out)], check=True, capture_output=True)
        launch = MPIRUN + ["-np", str(ranks)] if ranks > 1 else []
        subprocess.run([*launch, str(out / "train"), "--data", str(args.work / "data"), "--steps",
                        str(args.steps), "--threads", "1", "--quiet", "--log-json", str(out / "log.jsonl")],
                       check=True, capture_output=True)
        log, summary = read_log(out / "log.jsonl")
        step = statistics.median(r["step_time_s"] for r in log[1:])
        return step, summary, json.loads((out / "plan.json").read_text())

    single, _, _ = train("single", [], 1)
    print(f"GPT {LAYERS} layers x 256, {SEQ} tokens, micro-batch {MICRO}; pp = {args.pp}, "
          f"m = {m} micro-batches; one rank: {single * 1e3:.1f} ms per step")
    print(f"{'schedule':<12} {'simulated':>9} {'textbook':>9} {'measured':>9} {'step ms':>9} {'vs 1 rank':>9}")
    for schedule in SCHEDULES:
        step, summary, plan = train(schedule, ["--pp", str(args.pp), "--schedule", schedule], args.pp)
        pipeline = plan["pipeline"]
        textbook = pipeline.get("textbook_bubble_fraction")
        measured = summary["pipeline"]["bubble_measured"]
        print(f"{schedule:<12} {pipeline['bubble_fraction']:>9.3f} "
              f"{'-' if textbook is None else format(textbook, '.3f'):>9} {measured:>9.3f} "
              f"{step * 1e3:>9.1f} {step / single:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
