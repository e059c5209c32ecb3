#!/usr/bin/python3
"""The plan's ZeRO memory and traffic against the ZeRO paper's formulas.

For fp32 training with Adam of a model of PSI parameters on N ranks, each
rank's model states (parameters, gradients, the two moments) take
  stage 0: 16 PSI          stage 1: 8 PSI + 8 PSI/N
  stage 2: 4 PSI + 12 PSI/N   stage 3: 16 PSI/N
bytes, where a sharded term is exact with PSI/N read as the padded shard:
sum over tensors of ceil(n / N) elements (ZeRO pads each tensor to a
multiple of N). The collective volume of one step (one micro-batch), counted
like the paper in elements per rank of a ring (an all-reduce of n elements
is 2n, a reduce-scatter or all-gather n), is 2 PSI for stages 0-2 (stage 1
and 2 add 2 for the all-reduced squared norm, a scalar) and at most 3 PSI for
stage 3, whose backward re-gathers only the parameters it reads. From the
plan, the volume is the bytes all ranks send divided by (N - 1) * 4: exact
for ring collectives whatever the chunking.

Writes a GPT-shaped graph with gen_gpt.py (its vocabulary is odd so that
padding happens), plans it with `dsopt --emit=plan --dp N --zero S` (no
parameter kept whole), prints one line per (N, stage) and exits 1 when a
plan differs from the formula.
"""
import argparse
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path

RANKS = (2, 3, 8)


def plan(args, model: Path, n: int, stage: int, work: Path) -> dict:
    config = work / f"zero{stage}.json"
    config.write_text(json.dumps({"zero_optimization": {
        "stage": stage, "stage3_param_persistence_threshold": 0}}))
    out = work / f"plan-dp{n}-zero{stage}.json"
    done = subprocess.run([*shlex.split(args.dsopt), str(model), "--dp", str(n), "--config", str(config),
                           "--emit=plan", "-o", str(out)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"dsopt --dp {n} --zero {stage} failed: {done.stderr.strip()}")
    return json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--dsopt", default="dsopt")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    model = args.work / "gpt.onnx"
    gen = Path(__file__).resolve().parent / "gen_gpt.py"
    subprocess.run([sys.executable, str(gen), "--layers", "2", "--d-model", "64", "--heads", "4",
                    "--vocab", "101", "--seq", "16", "--out", str(model)], check=True,
                   capture_output=True)

    failures = 0
    sizes = None
    for n in RANKS:
        for stage in range(4):
            p = plan(args, model, n, stage, args.work)
            if sizes is None:
                # Every float initializer of the generated graph trains.
                sizes = [math.prod(t["shape"]) for t in p["train"]["ranks"][0]["params"] if t["trainable"]]
            psi = sum(sizes)
            shard = sum(math.ceil(s / n) for s in sizes)  # PSI/N, padded
            want_states = {0: 16 * psi, 1: 8 * psi + 8 * shard, 2: 4 * psi + 12 * shard,
                           3: 16 * shard}[stage]
            ranks = p["ranks"]
            problems = []
            if p["world"] != n or len(ranks) != n:
                problems.append(f"world {p['world']} with {len(ranks)} ranks")
            for r in ranks:
                states = r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"]
                if states != want_states:
                    problems.append(f"rank {r['rank']} holds {states} bytes of model states, "
                                    f"the formula {want_states}")
            sent = sum(r["collective_bytes"][k]["sent"] for r in ranks for k in r["collective_bytes"])
            received = sum(r["collective_bytes"][k]["received"] for r in ranks for k in r["collective_bytes"])
            if sent != received:
                problems.append(f"ranks send {sent} bytes but receive {received}")
            volume = sent / ((n - 1) * 4)
            padded = shard * n
            if stage == 0:
                ok, want_text = volume == 2 * psi, f"2 PSI = {2 * psi}"
            elif stage in (1, 2):
                ok, want_text = volume == 2 * padded + 2, f"2 PSI + 2 = {2 * padded + 2}"
            else:
                ok, want_text = 2 * padded + 2 < volume <= 3 * padded + 2, f"(2 PSI + 2, 3 PSI + 2] = ({2 * padded + 2}, {3 * padded + 2}]"
            if not ok:
                problems.append(f"collective volume {volume:g} elements, expected {want_text}")
            formula = {0: "16 PSI", 1: "8 PSI + 8 PSI/N", 2: "4 PSI + 12 PSI/N", 3: "16 PSI/N"}[stage]
            line = (f"N={n} stage {stage}: model states {ranks[0]['param_bytes'] + ranks[0]['grad_bytes'] + ranks[0]['optimizer_bytes']} "
                    f"bytes per rank = {formula} (PSI {psi}, padded PSI/N {shard}); volume {volume:g} elements per step "
                    f"({volume / psi:.3f} PSI)")
            if problems:
                failures += 1
                print(f"{line}: MISMATCH {'; '.join(problems)}")
            else:
                print(f"{line}: matches")
    print(f"zero formulas: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
