#!/usr/bin/python3
"""Data parallelism and ZeRO: N ranks train exactly like one, and the plan is exact.

For each selected zoo model (default: gpt2 and llama, constant-folded
exports) and each case (DP ranks x ZeRO stage, CASES below), this:
  * writes N_BATCHES global batches of training data and compiles the
    single-rank reference `dsopt MODEL --config CFG` with N*k micro-batches
    per step (k: the case's gradient accumulation);
  * compiles `dsopt MODEL --config CFG --dp N --zero S` with k micro-batches
    per rank (the same global batch: rank r takes micro-batches r*k..r*k+k-1
    of every global batch), and trains both for STEPS steps, the first with
    `train`, the second with `mpirun -np N train`, writing the trained model;
  * compares every step's loss (relative LOSS_RTOL) and gradient norm
    (GRAD_NORM_RTOL) and every final weight (absolute WEIGHT_ATOL, widened
    like check_zoo_train.py by WEIGHT_NOISE_FACTOR times PyTorch's own
    float32-vs-float64 difference on that parameter: zero-gradient
    parameters such as attention's key bias turn rounding noise into Adam
    steps), and checks the DP run against PyTorch (train_reference.py with
    N*k accumulation) with check_zoo_train.py's tolerances;
  * checks the plan against the run: every rank's measured arena high-water
    mark equals plan.json's arena_peak_bytes for that rank, so does each
    memory space's (device, host, file: memory_spaces), and the bytes
    each rank sent and received per collective kind over the run equal
    the plan's per-step collective_bytes times STEPS.
A train-mode model (training-mode BatchNorm, e.g. tv_resnet) trains from
its unfolded export, its running statistics state rather than frozen: with
N > 1 they are rank 0's (PyTorch DDP without SyncBatchNorm, whose
broadcast_buffers hands every forward rank 0's buffers), so they are not
compared with the single rank's but with PyTorch's buffers from rank 0's
micro-batches (train_reference.py's buffer_micro_batches), within
check_zoo_train.py's BUFFER_RTOL rule.
Prints one line per case and a final count; exits 1 on any failure.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

STEPS = 4
N_BATCHES = 2
LOSS_RTOL = 1e-5
GRAD_NORM_RTOL = 1e-4
WEIGHT_ATOL = 1e-5
WEIGHT_NOISE_FACTOR = 4
TIMEOUT_S = 600
KINDS = ("all_reduce", "all_gather", "reduce_scatter")

# (ranks, ZeRO stage, accumulation per rank, stage3_param_persistence_threshold)
CASES = [(n, stage, k, threshold)
         for n, k, threshold in ((2, 2, 0), (3, 1, 512))
         for stage in (0, 1, 2, 3)]

CONFIG = {
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 2e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
    "gradient_clipping": 1.0,
}

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def one_line(text: str, limit: int = 600) -> str:
    text = " | ".join(line for line in text.strip().splitlines() if line.strip())
    return text if len(text) <= limit else text[:limit] + "..."


def run(command: List[str]) -> Optional[str]:
    """None on success, else why it failed."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"{command[0]} timed out after {TIMEOUT_S} s"
    if done.returncode != 0:
        return f"{' '.join(command[:2])}... exit {done.returncode}: {one_line(done.stderr + done.stdout)}"
    return None


def read_log(path: Path) -> Tuple[List[Dict], Optional[Dict]]:
    steps, summary = [], None
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("summary"):
            summary = record
        else:
            steps.append(record)
    return steps, summary


def same_run(log: List[Dict], trained: Path, other_log: List[Dict], other_trained: Path,
             other: str) -> Optional[str]:
    """Why `other` (a build of the same program at another -O level) did
    not train bit-identically: every step's loss and gradient norm equal,
    and the saved models equal byte for byte (None when it did)."""
    if len(other_log) != len(log):
        return f"{other} logged {len(other_log)} steps, not {len(log)}"
    for entry, want in zip(log, other_log):
        for key in ("loss", "grad_norm"):
            if entry[key] != want[key]:
                return (f"step {entry['step']}: {key} {entry[key]!r}, {other} {want[key]!r}: "
                        f"the -O level changed the numbers")
    if trained.read_bytes() != other_trained.read_bytes():
        return f"the saved model differs from the one {other} saved"
    return None


def rel(got: float, want: float) -> float:
    return abs(got - want) / max(abs(want), 1e-12)


def weights(path: Path) -> Dict[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def model_file(entry: Dict) -> str:
    """The export a case trains: the constant-folded one, or for a
    train-mode model (training-mode BatchNorm) the unfolded one, whose
    running statistics are initializers of their own (docs/models.md)."""
    from models import ZOO
    return entry["nofold_file"] if ZOO[entry["name"]].train_mode else entry["file"]


def running_statistics(model, imap) -> List[str]:
    """A train-mode model's running statistics, taken out of imap.frozen:
    they are state dsopt updates, not frozen initializers."""
    if not model.train_mode:
        return []
    buffer_names = {name for name, b in model.build().named_buffers() if b.is_floating_point()}
    state = [name for name in imap.frozen if name in buffer_names]
    imap.frozen[:] = [name for name in imap.frozen if name not in buffer_names]
    return state


def compare_plan(plan: Dict, summary: Optional[Dict], n: int, steps: int = STEPS) -> Optional[str]:
    if summary is None:
        return "the log has no summary line"
    if plan["world"] != n or len(plan["ranks"]) != n or summary.get("world") != n:
        return f"plan world {plan['world']} / {len(plan['ranks'])} ranks, run world {summary.get('world')}; expected {n}"
    measured = {r["rank"]: r for r in summary["ranks"]}
    for planned in plan["ranks"]:
        r = planned["rank"]
        got = measured.get(r)
        if got is None:
            return f"rank {r} is missing from the run's summary"
        if got["arena_peak_bytes"] != planned["arena_peak_bytes"]:
            return f"rank {r}: arena peak measured {got['arena_peak_bytes']}, planned {planned['arena_peak_bytes']}"
        from check_zoo_train import compare_spaces
        space_error = compare_spaces(planned["memory_spaces"], got.get("memory_spaces"), f"rank {r}")
        if space_error:
            return space_error
        for kind in KINDS:
            want = planned["collective_bytes"][kind]
            have = got["collective_bytes"][kind]
            for key in ("sent", "received", "calls"):
                if have[key] != steps * want[key]:
                    return (f"rank {r} {kind} {key}: measured {have[key]} over {steps} steps, "
                            f"planned {want[key]} per step")
    return None


def compare_with_reference(log: List[Dict], trained: Path, reference: Dict, details: Dict = None):
    """(error or None, worst loss rel err, worst weight abs err) of a run
    against the single-rank run (and PyTorch, when the reference has it).
    A train-mode model's running statistics are compared with PyTorch's
    buffers (DDP's with several dp ranks); `details` gets their worst
    relative error as "buffer_err"."""
    worst_loss = max(rel(a["loss"], b["loss"]) for a, b in zip(log, reference["log"]))
    worst_norm = max(rel(a["grad_norm"], b["grad_norm"]) for a, b in zip(log, reference["log"]))
    if worst_loss > LOSS_RTOL:
        return f"loss rel err {worst_loss:.1e} > {LOSS_RTOL} against one rank", worst_loss, 0.0
    if worst_norm > GRAD_NORM_RTOL:
        return f"grad_norm rel err {worst_norm:.1e} > {GRAD_NORM_RTOL} against one rank", worst_loss, 0.0
    if "torch_log" in reference:
        torch_loss = max(rel(a["loss"], b["loss"]) for a, b in zip(log, reference["torch_log"]))
        if torch_loss > 1e-4:
            return f"loss rel err {torch_loss:.1e} > 1e-4 against PyTorch", worst_loss, 0.0

    got, want = weights(trained), reference["weights"]
    if set(got) != set(want):
        return f"initializers differ: {sorted(set(got) ^ set(want))[:5]}", worst_loss, 0.0
    worst_weight = 0.0
    state = reference.get("state", [])
    for name, value in want.items():
        # Over dp ranks the running statistics are rank 0's micro-batches'
        # alone, not the single rank's of all of them: checked against
        # PyTorch DDP's below.
        if name in state and not reference["state_is_one_rank"]:
            continue
        if got[name].shape != value.shape:
            return f"{name}: shape {got[name].shape}, expected {value.shape}", worst_loss, 0.0
        if value.dtype.kind != "f":
            if not np.array_equal(got[name], value):
                return f"{name}: integer initializer changed", worst_loss, 0.0
            continue
        err = float(np.max(np.abs(got[name].astype(np.float64) - value))) if value.size else 0.0
        bound = WEIGHT_ATOL + WEIGHT_NOISE_FACTOR * reference["noise"].get(name, 0.0)
        if err > bound:
            return f"{name}: max abs err {err:.1e} > {bound:.1e} against one rank", worst_loss, err
        worst_weight = max(worst_weight, err)

    if "torch_params" in reference:
        from check_zoo_train import compare_weights
        _, torch_error = compare_weights(trained, reference["initial"], reference["imap"],
                                         reference["torch_params"], reference["torch_bounds"])
        if torch_error:
            return f"against PyTorch: {torch_error}", worst_loss, worst_weight
    if state:
        from check_zoo_train import compare_buffers
        buffer_err, buffer_error = compare_buffers(trained, state, reference["torch_buffers"],
                                                   reference["torch_buffers64"])
        if details is not None:
            details["buffer_err"] = buffer_err
        if buffer_error:
            against = "PyTorch" if reference["state_is_one_rank"] else "PyTorch DDP"
            return f"running statistics against {against}: {buffer_error}", worst_loss, worst_weight
    return None, worst_loss, worst_weight


def check_case(args, entry, n: int, stage: int, k: int, threshold: int, reference) -> Tuple[str, bool]:
    model_path = Path(args.zoo) / model_file(entry)
    label = f"{entry['name']} dp{n} zero{stage} gas{k}" + (f" threshold{threshold}" if stage == 3 else "")
    work = Path(args.work) / f"{entry['name']}-dp{n}-zero{stage}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    micro = reference["micro"]

    def fail(kind, message):
        return f"{label}: {kind} {message}", True

    config = dict(CONFIG, train_micro_batch_size_per_gpu=micro, gradient_accumulation_steps=k,
                  train_batch_size=micro * k * n,
                  zero_optimization={"stage": stage, "stage3_param_persistence_threshold": threshold})
    (work / "ds_config.json").write_text(json.dumps(config, indent=2) + "\n")
    why = run([*shlex.split(args.dsopt), str(model_path), "--config", str(work / "ds_config.json"),
               "--dp", str(n), *reference["frozen"], "--no-forward", "-o", str(work / "program")])
    if why:
        return fail("FAIL", f"dsopt: {why}")
    log_path, trained = work / "log.jsonl", work / "trained.onnx"
    why = run([*MPIRUN, "-np", str(n), str(work / "program" / "train"), "--data", str(reference["data"]),
               "--steps", str(STEPS), "--threads", "1", "--log-json", str(log_path),
               "--save-onnx", str(trained)])
    if why:
        return fail("FAIL", f"train: {why}")
    log, summary = read_log(log_path)
    if len(log) != STEPS:
        return fail("FAIL", f"{len(log)} step lines in the log, expected {STEPS}")

    details = {}
    error, worst_loss, worst_weight = compare_with_reference(log, trained, reference, details)
    if error:
        return fail("MISMATCH", error)
    state = reference.get("state", [])
    buffers = (f"; {len(state)} running statistics against PyTorch DDP's rank 0, max rel err "
               f"{details['buffer_err']:.1e}" if state else "")

    plan = json.loads((work / "program" / "plan.json").read_text())
    plan_error = compare_plan(plan, summary, n)
    if plan_error:
        return fail("MISMATCH", f"plan: {plan_error}")
    sent = plan["ranks"][0]["collective_bytes"]
    traffic = ", ".join(f"{kind} {sent[kind]['sent']}" for kind in KINDS if sent[kind]["calls"])
    return (f"{label}: matches one rank and PyTorch (loss rel {worst_loss:.1e}, weight abs "
            f"{worst_weight:.1e}{buffers}); plan equals measured (arena {plan['ranks'][0]['arena_peak_bytes']}, "
            f"sent/step {traffic})"), False


def train_single_rank(args, model_path: Path, work: Path, flags: List[str]) -> List[Dict]:
    """Compiles MODEL with WORK/ds_config.json on one rank, trains it STEPS
    steps on WORK/data writing WORK/log.jsonl and WORK/trained.onnx, and
    returns the step log."""
    why = run([*shlex.split(args.dsopt), str(model_path), "--config", str(work / "ds_config.json"),
               *flags, "--no-forward", "-o", str(work / "program")])
    if why:
        raise RuntimeError(f"dsopt (single rank): {why}")
    why = run([str(work / "program" / "train"), "--data", str(work / "data"), "--steps", str(STEPS),
               "--threads", "1", "--log-json", str(work / "log.jsonl"), "--save-onnx",
               str(work / "trained.onnx")])
    if why:
        raise RuntimeError(f"train (single rank): {why}")
    return read_log(work / "log.jsonl")[0]


def single_rank(args, entry, n: int, k: int) -> Dict:
    """The single-rank run with N*k micro-batches per step, and PyTorch's."""
    import onnx
    import torch

    from check_zoo_train import weight_bounds
    from initializer_map import initializer_arrays, map_initializers
    from make_train_data import make_train_data, write_train_data
    from models import ZOO
    from train_reference import train

    torch.set_num_threads(1)
    model = ZOO[entry["name"]]
    micro = model.config.batch
    work = Path(args.work) / f"{entry['name']}-ref{n * k}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    config = dict(CONFIG, train_micro_batch_size_per_gpu=micro, gradient_accumulation_steps=n * k,
                  train_batch_size=micro * n * k)
    (work / "ds_config.json").write_text(json.dumps(config, indent=2) + "\n")
    data = make_train_data(model, N_BATCHES, micro * n * k)
    write_train_data(data, work / "data")
    path = Path(args.zoo) / model_file(entry)
    imap = map_initializers(onnx.load(str(path)), model.build())
    state = running_statistics(model, imap)
    frozen = ["--frozen", ",".join(imap.frozen)] if imap.frozen else []
    log = train_single_rank(args, path, work, frozen)
    # PyTorch DDP keeps rank 0's buffers: those of its k micro-batches of
    # each step (train_reference.train's buffer_micro_batches).
    kept = range(k) if state and n > 1 else None
    run32 = train(model, config, data, STEPS, buffer_micro_batches=kept)
    run64 = train(model, config, data, STEPS, dtype=torch.float64, buffer_micro_batches=kept)
    # Per initializer: PyTorch's float32-vs-float64 difference on its parameter.
    noise = {}
    for m in imap.mapped:
        a, b = run32.params[m.parameter], run64.params[m.parameter]
        noise[m.initializer] = float(np.abs(a.astype(np.float64) - b).max(initial=0))
    return {"data": work / "data", "log": log, "torch_log": run32.log, "micro": micro,
            "frozen": frozen, "imap": imap, "torch_params": run32.params,
            "torch_bounds": weight_bounds(run32, run64),
            "initial": initializer_arrays(onnx.load(str(path))),
            "state": state, "state_is_one_rank": n == 1,
            "torch_buffers": run32.buffers, "torch_buffers64": run64.buffers,
            "weights": {name: value.astype(np.float64) if value.dtype.kind == "f" else value
                        for name, value in weights(work / "trained.onnx").items()},
            "noise": noise}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zoo", required=True, help="directory of an export_zoo.py export")
    parser.add_argument("--work", required=True, help="scratch directory")
    parser.add_argument("--dsopt", default="dsopt", help="dsopt command (split like a shell would)")
    parser.add_argument("--only", default="gpt2,llama", help="comma-separated model names")
    parser.add_argument("--cases", default="", help="comma-separated dpN-zeroS (default: all)")
    args = parser.parse_args()

    zoo = {e["name"]: e for e in json.loads((Path(args.zoo) / "zoo.json").read_text())}
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in zoo]
    if unknown:
        parser.error(f"--only: {', '.join(unknown)} not in {args.zoo}/zoo.json")
    selected = set(filter(None, args.cases.split(",")))
    cases = [(name, case) for name in names for case in CASES
             if not selected or f"dp{case[0]}-zero{case[1]}" in selected]
    return run_cases(
        "zoo dp", cases,
        label=lambda c: f"{c[0]} dp{c[1][0]} zero{c[1][1]}",
        reference_key=lambda c: (c[0], c[1][0], c[1][2]),
        make_reference=lambda c: single_rank(args, zoo[c[0]], c[1][0], c[1][2]),
        check=lambda c, reference: check_case(args, zoo[c[0]], *c[1], reference))


def run_cases(title, cases, label, reference_key, make_reference, check) -> int:
    """Checks every case against its single-rank reference (made once per
    reference_key), printing one line per case and `TITLE: N failures`; a
    case that raises fails alone. Returns the exit status."""
    failures = 0
    references = {}
    for case in cases:
        try:
            key = reference_key(case)
            if key not in references:
                references[key] = make_reference(case)
            line, failed = check(case, references[key])
        except Exception as e:  # one broken case must not hide the others
            line, failed = f"{label(case)}: FAIL {type(e).__name__}: {e}", True
        print(line, flush=True)
        if failed:
            # Also on stderr: lit shows a failing checker's stderr whole, while
            # FileCheck shows only part of the stdout it read.
            print(line, file=sys.stderr, flush=True)
        failures += failed
    print(f"{title}: {failures} failures")
    return 1 if failures else 0

if __name__ == "__main__":
    sys.exit(main())
