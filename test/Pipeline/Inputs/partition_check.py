#!/usr/bin/python3
"""Checks the pipeline section of a plan.json against its own per-op facts.

    partition_check.py PLAN.json [--mlir TRAIN.mlir] [--skip-transfer]
                       [--tied NAME] [--no-tied]

Independently of dsopt it recomputes, from the forward ops the plan lists
(their FLOPs, stages and where a stage may start):
  * every forward op is in exactly one stage, the stages are contiguous runs
    0, 1, ..., p*v-1 in op order, each non-empty, and a stage starts only
    where a cut is allowed;
  * each stage's forward FLOPs and op count are the sums of its ops;
  * the largest stage's FLOPs equals the optimum of the linear partition
    (a dynamic program over the allowed cuts, written here from scratch);
  * the bubble with uniform stages equals the textbook value;
  * peak micro-batches in flight: gpipe m on every stage, 1f1b min(p - r, m)
    on rank r (so at most p, and min(p, m) on the first), and each stage's
    in-flight activation bytes are that count times its activation bytes;
  * with --skip-transfer, some activation goes from a stage i to a stage
    j > i + 1 in one transfer; with --tied NAME, NAME is listed as used in at
    least two stages (--no-tied: nothing is);
  * each rank's planned sends and receives between stages
    (ranks[].collective_bytes) are the transfers of its stages times the
    micro-batches plus the tied parameters' accumulators, summed across
    their stages once per step (test/oracles/pipeline_traffic.py), unless
    a transfer skips a stage ("sends relayed");
  * with --mlir, every op of @micro_step carries a ds.stage within range.
Prints one summary line; exits 1 with the reason otherwise.
"""
import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "oracles"))
import pipeline_traffic  # noqa: E402


def fail(message):
    print(f"partition_check: FAIL: {message}")
    sys.exit(1)


def optimum(flops, cut_before, parts):
    """The smallest possible largest-segment sum over allowed cuts."""
    n = len(flops)
    starts = [k for k in range(n) if k == 0 or cut_before[k]]
    pieces = []
    for i, s in enumerate(starts):
        e = starts[i + 1] if i + 1 < len(starts) else n
        pieces.append(sum(flops[s:e]))
    g = len(pieces)
    prefix = [0]
    for c in pieces:
        prefix.append(prefix[-1] + c)
    inf = float("inf")
    best = [[inf] * (g + 1) for _ in range(parts + 1)]
    best[0][0] = 0
    for k in range(1, parts + 1):
        for i in range(k, g + 1):
            best[k][i] = min(max(best[k - 1][j], prefix[i] - prefix[j])
                             for j in range(k - 1, i))
    return best[parts][g]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("plan")
    parser.add_argument("--mlir")
    parser.add_argument("--skip-transfer", action="store_true")
    parser.add_argument("--tied")
    parser.add_argument("--no-tied", action="store_true")
    args = parser.parse_args()
    plan = json.load(open(args.plan))
    pipe = plan["pipeline"]
    p, m, v = pipe["stages"], pipe["microbatches"], pipe["chunks"]
    vs = p * v
    if pipe["virtual_stages"] != vs or len(pipe["per_stage"]) != vs:
        fail(f"{len(pipe['per_stage'])} stages listed for p*v = {vs}")
    if plan["grid"]["pp"] != p or plan["world"] != p * plan["grid"]["dp"]:
        fail(f"grid {plan['grid']} and world {plan['world']} for pp = {p}")

    ops = pipe["forward_ops"]
    stages = [o["stage"] for o in ops]
    if [o["index"] for o in ops] != list(range(len(ops))):
        fail("forward ops are not listed once each, in order")
    if not stages or stages[0] != 0 or stages[-1] != vs - 1:
        fail(f"stages run from {stages[:1]} to {stages[-1:]}, not 0 to {vs - 1}")
    for k in range(1, len(ops)):
        step = stages[k] - stages[k - 1]
        if step not in (0, 1):
            fail(f"op {k} goes from stage {stages[k - 1]} to {stages[k]}")
        if step == 1 and not ops[k]["cut_before"]:
            fail(f"stage {stages[k]} starts at op {k}, where no cut is allowed")
    flops = [o["flops"] for o in ops]
    for s, stage in enumerate(pipe["per_stage"]):
        mine = [o for o in ops if o["stage"] == s]
        if not mine:
            fail(f"stage {s} is empty")
        if stage["stage"] != s or stage["rank"] != s % p:
            fail(f"stage {s} is listed as {stage['stage']} on rank {stage['rank']}")
        if stage["forward_ops"] != len(mine):
            fail(f"stage {s} claims {stage['forward_ops']} ops, has {len(mine)}")
        if stage["flops_forward"] != sum(o["flops"] for o in mine):
            fail(f"stage {s} forward FLOPs {stage['flops_forward']} are not "
                 f"the sum of its ops, {sum(o['flops'] for o in mine)}")
    worst = max(s["flops_forward"] for s in pipe["per_stage"])
    best = optimum(flops, [o["cut_before"] for o in ops], vs)
    if worst != best:
        fail(f"the largest stage has {worst} FLOPs; the optimum is {best}")

    textbook = pipe["textbook_bubble_fraction"]
    if textbook is not None and abs(pipe["uniform_bubble_fraction"] - textbook) > 1e-9:
        fail(f"uniform-stage bubble {pipe['uniform_bubble_fraction']} != "
             f"textbook {textbook}")
    if pipe["schedule"] in ("gpipe", "1f1b") and textbook is not None:
        expected = (p - 1) / (m + p - 1)
        if abs(textbook - expected) > 1e-12:
            fail(f"textbook bubble {textbook} != (p-1)/(m+p-1) = {expected}")
    for s, stage in enumerate(pipe["per_stage"]):
        peak = stage["peak_in_flight"]
        if pipe["schedule"] == "gpipe" and peak != m:
            fail(f"gpipe stage {s} holds {peak} micro-batches, not m = {m}")
        if pipe["schedule"] == "1f1b" and peak != min(p - s, m):
            fail(f"1f1b stage {s} holds {peak} micro-batches, not "
                 f"min(p - r, m) = {min(p - s, m)}")
        if stage["in_flight_activation_bytes"] != peak * stage["activation_bytes"]:
            fail(f"stage {s} in-flight bytes are not peak x activation bytes")
    if pipe["schedule"] == "1f1b" and pipe["per_stage"][0]["peak_in_flight"] > p:
        fail("1f1b's first stage holds more than p micro-batches")

    for t in pipe["transfers"]:
        if t["from"] == t["to"] or not (0 <= t["from"] < vs and 0 <= t["to"] < vs):
            fail(f"bad transfer {t}")
    sent = [sum(t["bytes"] for t in pipe["transfers"] if t["from"] == s)
            for s in range(vs)]
    if sent != [s["send_bytes"] for s in pipe["per_stage"]]:
        fail(f"send_bytes {[s['send_bytes'] for s in pipe['per_stage']]} are "
             f"not the transfers' sums {sent}")
    skips = [t for t in pipe["transfers"]
             if t["kind"] == "activation" and t["to"] > t["from"] + 1]
    if args.skip_transfer and not skips:
        fail(f"no activation skips a stage: {pipe['transfers']}")
    tied = {t["name"]: t["stages"] for t in pipe["tied_parameters"]}
    if args.tied and len(tied.get(args.tied, [])) < 2:
        fail(f"{args.tied} is not reported in several stages: {tied}")
    if args.no_tied and tied:
        fail(f"unexpected tied parameters {tied}")
    # What the ranks send and receive between stages (ranks[].collective_bytes,
    # which check_zoo_pp.py shows equal to what the runtime moves): the
    # transfers of every micro-batch and the tied accumulators' sums.
    if pipeline_traffic.planned_sends(plan) is None:
        sends = "relayed"
    else:
        error = pipeline_traffic.compare(
            plan, {r["rank"]: r["collective_bytes"] for r in plan["ranks"]})
        if error:
            fail(f"pipeline sends: {error}")
        sends = "= transfers + tied sums"

    checked = 0
    if args.mlir:
        text = open(args.mlir).read()
        body = text[text.index("func.func @micro_step"):]
        body = body[:body.index("\n  }\n")]
        for line in body.splitlines()[1:]:
            line = line.strip()
            if not line or line.startswith("return") or line.startswith("}"):
                continue
            found = re.search(r"ds\.stage = (\d+)", line)
            if not found:
                fail(f"an op of @micro_step has no ds.stage: {line[:120]}")
            if not 0 <= int(found.group(1)) < vs:
                fail(f"ds.stage out of range: {line[:120]}")
            checked += 1
    print(f"partition ok: {len(ops)} forward ops in {vs} stages, largest "
          f"{worst} FLOPs (optimum {best}), bubble {pipe['bubble_fraction']:.4f} "
          f"(uniform {pipe['uniform_bubble_fraction']:.4f}, textbook {textbook}), "
          f"skips {[(t['from'], t['to']) for t in skips]}, tied {tied}, sends {sends}, "
          f"{checked} ops with ds.stage")


if __name__ == "__main__":
    main()
