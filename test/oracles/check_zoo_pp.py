#!/usr/bin/python3
"""Pipeline parallelism: pp x dp ranks train exactly like one, and the plan is exact.

Each case is (model, pp, schedule, ZeRO stage, dp, micro-batches m). For
it, this
  * compiles `dsopt MODEL --config CFG --pp P --schedule S --dp D --zero Z`
    with m micro-batches per step and dp rank (the pipeline's micro-batches
    are the gradient accumulation), and trains it for STEPS steps with
    `mpirun -np P*D train`, writing the trained model and a measured trace;
  * compares every step's loss (relative LOSS_RTOL) and gradient norm and
    every final weight with the single-rank run of the same global batch
    (one rank, D*m micro-batches per step): absolute WEIGHT_ATOL, widened
    for the zoo models as check_zoo_dp.py does by PyTorch's own
    float32-vs-float64 difference on that parameter; the zoo models are
    also checked against PyTorch (train_reference.py);
  * checks the plan against the run: every rank's measured arena high-water
    mark equals plan.json's arena_peak_bytes for that rank, so does each
    memory space's (memory_spaces), and its
    collective bytes per kind, and the bytes and tensors it sends and
    receives between stages, equal the plan's per step times STEPS, and so
    do the latter as the pipeline section's transfers per micro-batch and
    tied parameters' sums per step make them (pipeline_traffic.py; not for
    the skip model, whose skip connection is relayed);
  * checks the measured trace: one track per rank, and every forward and
    backward of every micro-batch of every stage of the rank in it.
The skip model (--skip, test/Pipeline/Inputs/skip_model.py) has a value of
its first block read by its last, so with pp = 4 it goes from stage 0 to 3.
Prints one line per case and a final count; exits 1 on any failure.
"""
import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_zoo_dp as dp_check  # noqa: E402
import pipeline_traffic  # noqa: E402
from check_zoo_dp import CONFIG, MPIRUN, STEPS, N_BATCHES, read_log, run, weights  # noqa: E402

# (model, pp, schedule, ZeRO stage, dp, micro-batches per dp rank): the
# whole matrix, pp in {2, 3, 4} x every schedule x ZeRO 0, 1 and 3 x dp 1
# and 2, on each model, with m = pp micro-batches (interleaved needs a
# multiple of pp).
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")
CASES = [(model, pp, schedule, stage, dp, pp)
         for model in ("gpt2", "llama", "skip")
         for pp in (2, 3, 4)
         for schedule in SCHEDULES
         for stage in (0, 1, 3)
         for dp in (1, 2)]
# Training-mode BatchNorm (ResNet): the stage holding a BatchNorm holds its
# running statistics and updates them on every micro-batch in order: equal
# to one rank and PyTorch with dp 1; with dp 2, dp rank 0's (PyTorch DDP's
# buffers, check_zoo_dp.py).
CASES += [("tv_resnet", 2, "1f1b", 0, 1, 2), ("tv_resnet", 2, "gpipe", 1, 2, 2)]


def label_of(case) -> str:
    model, pp, schedule, stage, dp, m = case
    return f"{model} pp{pp} {schedule} zero{stage} dp{dp} m{m}"


def compare_trace(trace_path: Path, plan: Dict, world: int) -> Optional[str]:
    trace = json.loads(trace_path.read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    slices = [e for e in events if e.get("ph") == "X"]
    # Each rank's computations on track r, its transfers on track world + r.
    for e in slices:
        rank = e["args"]["rank"]
        want = rank + (world if e["cat"] == "communication" else 0)
        if e["tid"] != want:
            return f"trace: rank {rank}'s {e['name']} is on track {e['tid']}, expected {want}"
    ranks = {e["args"]["rank"] for e in slices}
    if ranks != set(range(world)):
        return f"trace ranks {sorted(ranks)}, expected 0..{world - 1}"
    pipeline = plan["pipeline"]
    p, v, m = pipeline["stages"], pipeline["chunks"], pipeline["microbatches"]
    split = pipeline["schedule"] == "zb-h1"
    for rank in range(world):
        names = [e["name"] for e in slices if e["args"]["rank"] == rank]
        pp = rank // (world // p)
        for chunk in range(v):
            for mb in range(m):
                suffix = f"{mb}.{chunk}" if v > 1 else f"{mb}"
                wanted = ["F", "Bi", "W"] if split else ["F", "B"]
                for kind in wanted:
                    count = names.count(kind + suffix)
                    if count != STEPS:
                        return (f"rank {rank} (pp {pp}): {kind}{suffix} appears {count} times "
                                f"in the trace, expected once per step ({STEPS})")
    return None


def compare_transfers(plan: Dict, summary: Dict, steps: int = STEPS) -> Optional[str]:
    """The pipeline's sends and receives: the plan's per step times `steps`,
    both the ranks' (ranks[].collective_bytes) and, where no transfer skips
    a stage, what the pipeline section's transfers and tied parameters
    make of them (pipeline_traffic.py)."""
    measured = {r["rank"]: r for r in summary["ranks"]}
    if "pipeline" in plan and pipeline_traffic.planned_sends(plan) is not None:
        error = pipeline_traffic.compare(
            plan, {r: m["collective_bytes"] for r, m in measured.items()}, steps)
        if error:
            return f"measured against the pipeline section: {error}"
    for planned in plan["ranks"]:
        r = planned["rank"]
        for kind, key in (("send", "sent"), ("recv", "received")):
            want = planned["collective_bytes"][kind]
            have = measured[r]["collective_bytes"].get(kind, {"sent": 0, "received": 0, "calls": 0})
            for field in (key, "calls"):
                if have[field] != steps * want[field]:
                    return (f"rank {r} {kind} {field}: measured {have[field]} over {steps} steps, "
                            f"planned {want[field]} per step")
    return None


def skip_reference(args, dp: int, m: int) -> Dict:
    """The single-rank run of the skip model with dp*m micro-batches per step."""
    work = Path(args.work) / f"skip-ref{dp * m}"
    shutil.rmtree(work, ignore_errors=True)
    (work / "data").mkdir(parents=True)
    import onnx
    model = onnx.load(args.skip)
    x = model.graph.input[0]
    dims = [d.dim_value for d in x.type.tensor_type.shape.dim]
    rng = np.random.default_rng(7)
    data = rng.standard_normal((N_BATCHES, dp * m * dims[0], *dims[1:])).astype(np.float32)
    np.save(work / "data" / f"{x.name}.npy", data)
    config = dict(CONFIG, train_micro_batch_size_per_gpu=dims[0],
                  gradient_accumulation_steps=dp * m, train_batch_size=dims[0] * dp * m)
    (work / "ds_config.json").write_text(json.dumps(config, indent=2) + "\n")
    log = dp_check.train_single_rank(args, Path(args.skip), work, [])
    return {"data": work / "data", "log": log, "micro": dims[0], "frozen": [],
            "weights": {name: value.astype(np.float64)
                        for name, value in weights(work / "trained.onnx").items()},
            "noise": {}, "path": args.skip}


def check_case(args, case, reference, zoo) -> Tuple[str, bool]:
    model, pp, schedule, stage, dp, m = case
    label = label_of(case)
    world = pp * dp
    work = Path(args.work) / label.replace(" ", "-")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    micro = reference["micro"]

    def fail(kind, message):
        return f"{label}: {kind} {message}", True

    model_path = reference.get("path") or str(Path(args.zoo) / dp_check.model_file(zoo[model]))
    config = dict(CONFIG, train_micro_batch_size_per_gpu=micro, gradient_accumulation_steps=m,
                  train_batch_size=micro * m * dp,
                  zero_optimization={"stage": stage, "stage3_param_persistence_threshold": 0})
    (work / "ds_config.json").write_text(json.dumps(config, indent=2) + "\n")
    why = run([*shlex.split(args.dsopt), model_path, "--config", str(work / "ds_config.json"),
               "--pp", str(pp), "--schedule", schedule, "--dp", str(dp), *reference["frozen"],
               "--no-forward", "-o", str(work / "program")])
    if why:
        return fail("FAIL", f"dsopt: {why}")
    log_path, trained, trace = work / "log.jsonl", work / "trained.onnx", work / "trace.json"
    why = run([*MPIRUN, "-np", str(world), str(work / "program" / "train"), "--data",
               str(reference["data"]), "--steps", str(STEPS), "--threads", "1", "--log-json",
               str(log_path), "--save-onnx", str(trained), "--trace", str(trace), "--quiet"])
    if why:
        return fail("FAIL", f"train: {why}")
    log, summary = read_log(log_path)
    if len(log) != STEPS:
        return fail("FAIL", f"{len(log)} step lines in the log, expected {STEPS}")

    details = {}
    error, worst_loss, worst_weight = dp_check.compare_with_reference(log, trained, reference, details)
    if error:
        return fail("MISMATCH", error)

    plan = json.loads((work / "program" / "plan.json").read_text())
    plan_error = dp_check.compare_plan(plan, summary, world) or compare_transfers(plan, summary)
    if plan_error:
        return fail("MISMATCH", f"plan: {plan_error}")
    trace_error = compare_trace(trace, plan, world)
    if trace_error:
        return fail("MISMATCH", f"trace: {trace_error}")
    peaks = ", ".join(str(r["arena_peak_bytes"]) for r in plan["ranks"][::dp])
    bubble = (summary or {}).get("pipeline", {}).get("bubble_measured")
    simulated = plan["pipeline"]["bubble_fraction"]
    state = reference.get("state", [])
    buffers = (f"; {len(state)} running statistics against PyTorch"
               f"{' DDP' if dp > 1 else ''}, max rel err {details['buffer_err']:.1e}" if state else "")
    return (f"{label}: matches one rank (loss rel {worst_loss:.1e}, weight abs {worst_weight:.1e}{buffers}); "
            f"plan equals measured (arena per stage {peaks}); bubble simulated {simulated:.3f}, "
            f"measured {bubble if bubble is None else format(bubble, '.3f')}"), False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zoo", help="directory of an export_zoo.py export (for gpt2, llama)")
    parser.add_argument("--skip", help="the skip model (skip_model.py)")
    parser.add_argument("--work", required=True, help="scratch directory")
    parser.add_argument("--dsopt", default="dsopt", help="dsopt command (split like a shell would)")
    parser.add_argument("--only", default="gpt2,llama,skip", help="comma-separated model names")
    parser.add_argument("--cases", default="", help="comma-separated case indices (default: all)")
    args = parser.parse_args()

    names = [n for n in args.only.split(",") if n]
    if any(n != "skip" for n in names) and not args.zoo:
        parser.error("--zoo is needed for " + ", ".join(n for n in names if n != "skip"))
    if "skip" in names and not args.skip:
        parser.error("--skip is needed for the skip model")
    zoo = {e["name"]: e for e in json.loads((Path(args.zoo) / "zoo.json").read_text())} if args.zoo else {}
    selected = {int(i) for i in args.cases.split(",") if i}
    cases = [case for index, case in enumerate(CASES)
             if case[0] in names and (not selected or index in selected)]
    return dp_check.run_cases(
        "zoo pp", cases, label=label_of,
        reference_key=lambda c: (c[0], c[4] * c[5]),
        make_reference=lambda c: (skip_reference(args, c[4], c[5]) if c[0] == "skip"
                                  else dp_check.single_rank(args, zoo[c[0]], c[4], c[5])),
        check=lambda c, reference: check_case(args, c, reference, zoo))

if __name__ == "__main__":
    sys.exit(main())
