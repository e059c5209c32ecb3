#!/usr/bin/python3
"""Memory of the GPT-2-small training step in bf16 against fp32, from plan.json.

Writes GPT-2 small (test/oracles/gen_gpt.py --size 125M: 12 layers, d_model
768, vocabulary 50257) with one sequence of 1024 tokens (GPT-2's context; --batch, --seq), runs
`dsopt MODEL --emit=plan` with `--precision fp32` and `--precision bf16`
(AdamW, one rank) and reports, from rank 0 of each plan (plan.json `ranks[0]`), the model states
(param_bytes + grad_bytes + optimizer_bytes) and the activations
(activation_bytes), and the bf16 / fp32 ratio of each. Model states are 16
bytes per parameter in both (fp32: 4 + 4 + 8; bf16: 2 + 2 + 12 with the fp32
master weights). The last line is a verdict: the bf16 activations are within
--max-activation-ratio of fp32's (default 0.55) and the model states equal.

With --time it also compiles both programs (`dsopt MODEL -o DIR`) and times
--steps training steps of each on the CPU (the `train` program's log),
reporting the median step time after the first. The plan-only mode takes a second.

  bench/precision_bench.py --work DIR [--batch 1] [--seq 1024]
  bench/precision_bench.py --work DIR --time --steps 4
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFIG = {
    "train_micro_batch_size_per_gpu": 1,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
}


def run(cmd, what):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"precision_bench: {what} failed (exit {done.returncode}): "
                 f"{shlex.join(map(str, cmd))}\n{done.stderr.strip()}")
    return done


def plan(dsopt, model, config, precision, out):
    run([*shlex.split(dsopt), str(model), "--config", str(config), "--precision", precision,
         "--emit=plan", "-o", str(out)], f"dsopt --emit=plan --precision {precision}")
    with open(out) as f:
        doc = json.load(f)
    if "train" not in doc or not doc.get("ranks"):
        sys.exit(f"precision_bench: {out} is not a training plan (no train, no ranks)")
    rank = doc["ranks"][0]
    states = rank["param_bytes"] + rank["grad_bytes"] + rank["optimizer_bytes"]
    return {"states": states, "activations": rank["activation_bytes"],
            "workspace": rank["workspace_bytes"], "peak": rank["arena_peak_bytes"]}


def write_data(work, batch, seq, vocab=50257):
    import numpy as np
    data = work / "data"
    data.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    for name in ("input_ids", "labels"):
        np.save(data / f"{name}.npy", rng.integers(0, vocab, size=(1, batch, seq), dtype=np.int64))
    return data


def time_steps(dsopt, model, config, precision, out, data, steps):
    run([*shlex.split(dsopt), str(model), "--config", str(config), "--precision", precision,
         "-o", str(out)], f"dsopt --precision {precision} (compile)")
    log = out / "train.jsonl"
    run([str(out / "train"), "--data", str(data), "--steps", str(steps), "--log-json", str(log),
         "--quiet"], f"{out}/train")
    times = [json.loads(line)["step_time_s"] for line in open(log) if line.strip()]
    if len(times) < 2:
        sys.exit(f"precision_bench: found {len(times)} step times in {log}")
    return statistics.median(times[1:])


def mib(n):
    return f"{n / 2**20:10.1f} MiB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--dsopt", default=str(ROOT / "build" / "bin" / "dsopt"))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--max-activation-ratio", type=float, default=0.55)
    parser.add_argument("--time", action="store_true", help="also compile and time training steps")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    model = args.work / "gpt2_small.onnx"
    gen = [sys.executable, str(ROOT / "test" / "oracles" / "gen_gpt.py"), "--size", "125M",
           "--batch", str(args.batch), "--seq", str(args.seq), "--out", str(model)]
    if args.time:
        gen.append("--materialize")
    run(gen, "gen_gpt.py")
    config = args.work / "ds_config.json"
    config.write_text(json.dumps({**CONFIG, "train_micro_batch_size_per_gpu": args.batch}))

    plans = {p: plan(args.dsopt, model, config, p, args.work / f"plan_{p}.json")
             for p in ("fp32", "bf16")}
    f32, b16 = plans["fp32"], plans["bf16"]
    print(f"GPT-2 small (125M), batch {args.batch}, seq {args.seq}, AdamW, one rank")
    print(f"{'':12} {'fp32':>14} {'bf16':>14}  bf16/fp32")
    for key, name in (("states", "model states"), ("activations", "activations"),
                      ("peak", "arena peak")):
        print(f"{name:12} {mib(f32[key])}  {mib(b16[key])}  {b16[key] / f32[key]:.3f}")
    # The optimizer step's transient buffers (not a ratio: fp32's are near zero).
    print(f"{'opt. step':12} {mib(f32['workspace'])}  {mib(b16['workspace'])}")
    if args.time:
        data = write_data(args.work, args.batch, args.seq)
        t = {p: time_steps(args.dsopt, model, config, p, args.work / f"prog_{p}", data,
                           args.steps)
             for p in ("fp32", "bf16")}
        print(f"{'step time':12} {t['fp32']:12.3f} s  {t['bf16']:12.3f} s  "
              f"{t['bf16'] / t['fp32']:.3f}")
    states_equal = f32["states"] == b16["states"]
    ratio = b16["activations"] / f32["activations"]
    ok = states_equal and ratio <= args.max_activation_ratio
    print(f"verdict: {'PASS' if ok else 'FAIL'}: model states "
          f"{'equal' if states_equal else 'differ'}, activations bf16/fp32 {ratio:.3f} "
          f"({'<=' if ratio <= args.max_activation_ratio else '>'} {args.max_activation_ratio})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
