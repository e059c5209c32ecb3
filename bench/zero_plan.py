#!/usr/bin/python3
"""ZeRO plans of GPT-3-shaped graphs, made ahead of time without running anything.

Writes the GPT-3 1.3B, 13B and 175B training graphs with test/oracles/gen_gpt.py
(sparse weight files: no weight is written or read) and plans each with
`dsopt MODEL --emit=plan --dp N --zero S` for N in 8, 64 and 1024 and every
stage, with no parameter kept whole (stage3_param_persistence_threshold 0)
so that the plan can be read against the formulas. Prints a Markdown table
of rank 0's model states (parameters + gradients + Adam moments, fp32), the
ZeRO paper's fp32 formula for it, DeepSpeed's estimator for the same stage
(estimate_zero2/3_model_states_mem_needs without offload, which assume
fp16 parameters and gradients with fp32 master weights: 4 PSI + 16 PSI/N for
stage 2, 4 * largest layer + 18 PSI/N for stage 3), the per-step collective
volume, and dsopt's wall time and peak resident memory for each plan.

  bench/zero_plan.py --work DIR [--dsopt PATH] [--sizes 1.3B,13B,175B]
                     [--ranks 8,64,1024]
"""
import argparse
import json
import math
import os
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIB = 1024 ** 3


def run_plan(dsopt, model, n, stage, work):
    config = work / f"zero{stage}.json"
    config.write_text(json.dumps({"zero_optimization": {"stage": stage,
                                                         "stage3_param_persistence_threshold": 0}}))
    out = work / f"{model.stem}-dp{n}-zero{stage}.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # A fresh process per plan, so ru_maxrss of the children is this one's.
    done = subprocess.run([sys.executable, "-c",
                           "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]).returncode; "
                           "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
                           "sys.exit(r)",
                           *shlex.split(dsopt), str(model), "--dp", str(n), "--config", str(config),
                           "--emit=plan", "-o", str(out)], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"dsopt failed on {model} dp {n} stage {stage}: {done.stderr.strip()}")
    rss_kib = int(done.stderr.strip().splitlines()[-1])
    return json.loads(out.read_text()), seconds, rss_kib * 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--dsopt", default=str(ROOT / "build" / "bin" / "dsopt"))
    parser.add_argument("--sizes", default="1.3B,13B,175B")
    parser.add_argument("--ranks", default="8,64,1024")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    print("| model | PSI | N | stage | model states / rank (plan) | fp32 formula | DeepSpeed estimator "
          "(fp16 + fp32 master) | volume / step | plan time | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size in args.sizes.split(","):
        model = args.work / f"gpt3-{size}.onnx"
        if not model.exists():
            subprocess.run([sys.executable, str(ROOT / "test" / "oracles" / "gen_gpt.py"), "--size", size,
                            "--out", str(model)], check=True, capture_output=True)
        for n in map(int, args.ranks.split(",")):
            for stage in range(4):
                plan, seconds, rss = run_plan(args.dsopt, model, n, stage, args.work)
                params = plan["train"]["ranks"][0]["params"]
                sizes = [math.prod(p["shape"]) for p in params if p["trainable"]]
                if stage == 3:  # the params list shows shards; the whole sizes are in micro_step's plan
                    sizes = None
                rank = plan["ranks"][0]
                states = rank["param_bytes"] + rank["grad_bytes"] + rank["optimizer_bytes"]
                if sizes is not None:
                    psi = sum(sizes)
                    largest = max(sizes)
                    main.cache[size] = (psi, largest)
                psi, largest = main.cache[size]
                formula = {0: 16 * psi, 1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n,
                           3: 16 * psi / n}[stage]
                deepspeed = {0: 16 * psi, 1: 4 * psi + 12 * psi / n, 2: 4 * psi + 16 * psi / n,
                             3: 4 * largest + 18 * psi / n}[stage]
                sent = sum(r["collective_bytes"][k]["sent"] for r in plan["ranks"] for k in r["collective_bytes"])
                volume = sent / ((n - 1) * 4) / psi
                print(f"| GPT-3 {size} | {psi / 1e9:.2f}B | {n} | {stage} | {states / GIB:,.2f} GiB | "
                      f"{formula / GIB:,.2f} GiB | {deepspeed / GIB:,.2f} GiB | {volume:.2f} PSI | "
                      f"{seconds:.2f} s | {rss / 2**20:,.0f} MiB |", flush=True)
    return 0


main.cache = {}

if __name__ == "__main__":
    sys.exit(main())
