#!/usr/bin/python3
"""Tensor parallelism: tp ranks train exactly like one, and the plan is exact.

For each selected zoo model (default: gpt2 and llama) and each layout (CASES:
tp, dp, ZeRO stage, accumulation per rank, pp and schedule), this compiles
`dsopt MODEL --config CFG --tp T --dp D --zero S [--pp P --schedule X]` and
trains it with `mpirun -np P*D*T train` for check_zoo_dp.STEPS steps on the data of one
single-rank run with D*k micro-batches per step (every tp rank of a dp group
reads the same micro-batches), then, like check_zoo_dp.py:
  * every step's loss (relative 1e-5) and gradient norm equal the
    single-rank run's, and so does every weight of the saved model (the tp
    pieces gathered back under their original names), and the run matches
    PyTorch; with training-mode BatchNorm (layout "bn", dp 1) the saved
    running statistics equal the single rank's within STATE_RTOL;
  * every rank's measured arena and memory-space peaks and collective bytes
    (the tp all-reduces included) equal plan.json's, and with pipeline
    stages so do the bytes and calls each rank sends to and receives from
    its neighbouring stages' ranks of the same tp coordinate.
Prints one line per case and a final count; exits 1 on any failure.
"""
import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_zoo_dp as dp  # noqa: E402
from check_zoo_pp import compare_transfers  # noqa: E402

# check_zoo_dp.py's configuration with Adam's eps at 1e-6: a parameter
# whose gradient is zero but for rounding (attention's key bias) or tiny in
# an element would otherwise turn the last bits of the tp all-reduces' sums,
# which add in another order than one rank's matmul does, into Adam steps
# of up to lr (g / (|g| + eps) with |g| near eps). The single-rank run and
# PyTorch train with the same configuration.
dp.CONFIG = json.loads(json.dumps(dp.CONFIG))
dp.CONFIG["optimizer"]["params"]["eps"] = 1e-6

# (tp, dp, ZeRO stage, accumulation per rank, pp, schedule): every layout
# sees 2 micro-batches per step, so one single-rank run is the reference of
# all. With pp > 1 the accumulation is the pipeline's micro-batches.
CASES = {
    "tp": [(2, 1, 0, 2, 1, None), (2, 2, 1, 1, 1, None), (2, 2, 3, 1, 1, None),
           (4, 1, 0, 2, 1, None)],
    # 3D: the grid (pp, dp, tp) with tp fastest.
    "pp": [(2, 1, 0, 2, 2, "1f1b"), (2, 1, 0, 2, 2, "zb-h1"), (2, 2, 1, 1, 2, "1f1b"),
           (4, 1, 0, 2, 2, "1f1b")],
    # A padded vocabulary (gpt2_v101): tp sizes that do not divide it.
    "pad": [(2, 1, 0, 2, 1, None), (4, 1, 0, 2, 1, None)],
    # The layouts the lists above leave out, one case each, for the model
    # that lacks it: LLaMA under pp (pp-llama); ZeRO 3 under tp with pp and
    # tp 4 with dp (mix, GPT-2); the padded vocabulary with pp and with dp
    # under ZeRO 3 (pad-mix, gpt2_v101).
    "pp-llama": [(2, 1, 0, 2, 2, "1f1b"), (2, 1, 0, 2, 2, "zb-h1")],
    "mix": [(2, 2, 3, 1, 2, "1f1b"), (4, 2, 3, 1, 1, None)],
    "pad-mix": [(2, 1, 0, 2, 2, "1f1b"), (2, 2, 3, 1, 1, None)],
    # Megatron's sequence parallelism (--sequence-parallel), the seventh
    # entry: tp 2 alone, and with dp 2 under ZeRO 1.
    "sp": [(2, 1, 0, 2, 1, None, True)],
    "sp-dp": [(2, 2, 1, 1, 1, None, True)],
    "sp-pp": [(2, 1, 0, 2, 2, "1f1b", True), (2, 1, 0, 2, 2, "zb-h1", True)],
    # A model with training-mode BatchNorm (bn_mixer): tp 2 alone, so the
    # running statistics are the single rank's over both micro-batches.
    "bn": [(2, 1, 0, 2, 1, None)],
}
MICRO_BATCHES = 2
# The saved running statistics against the single rank's, relative to each
# tensor's largest magnitude.
STATE_RTOL = 1e-5


def label_of(name, case) -> str:
    tp, n, stage, k, pp, schedule = case[:6]
    grid = f" pp{pp} {schedule}" if pp > 1 else ""
    sp = " sp" if case[6:] and case[6] else ""
    return f"{name} tp{tp}{sp}{grid} dp{n} zero{stage} gas{k}"


def check_case(args, entry, case, reference):
    tp, n, stage, k, pp, schedule = case[:6]
    sequence_parallel = bool(case[6:] and case[6])
    label = label_of(entry["name"], case)
    world = n * tp * pp
    work = Path(args.work) / label.replace(" ", "-")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    micro = reference["micro"]
    config = dict(dp.CONFIG, train_micro_batch_size_per_gpu=micro, gradient_accumulation_steps=k,
                  train_batch_size=micro * k * n,
                  zero_optimization={"stage": stage, "stage3_param_persistence_threshold": 0})
    (work / "ds_config.json").write_text(json.dumps(config, indent=2) + "\n")
    why = dp.run([*shlex.split(args.dsopt), str(Path(args.zoo) / dp.model_file(entry)), "--config",
                  str(work / "ds_config.json"), "--tp", str(tp), "--dp", str(n),
                  *(["--pp", str(pp), "--schedule", schedule] if pp > 1 else []),
                  *(["--sequence-parallel"] if sequence_parallel else []),
                  *reference["frozen"], "--no-forward", "-o", str(work / "program")])
    if why:
        return f"{label}: FAIL dsopt: {why}", True
    log_path, trained = work / "log.jsonl", work / "trained.onnx"
    why = dp.run([*dp.MPIRUN, "-np", str(world), str(work / "program" / "train"), "--data",
                  str(reference["data"]), "--steps", str(dp.STEPS), "--threads", "1",
                  "--log-json", str(log_path), "--save-onnx", str(trained), "--quiet"])
    if why:
        return f"{label}: FAIL train: {why}", True
    log, summary = dp.read_log(log_path)
    if len(log) != dp.STEPS:
        return f"{label}: FAIL {len(log)} step lines in the log, expected {dp.STEPS}", True
    error, worst_loss, worst_weight = dp.compare_with_reference(log, trained, reference)
    if error:
        return f"{label}: MISMATCH {error}", True
    buffers = ""
    if reference["state"]:
        # Replicated BatchNorms: every tp rank normalises the same whole
        # activations, so the running statistics (rank 0's saved) are the
        # single rank's.
        if not reference["state_is_one_rank"] or n != 1:
            return f"{label}: FAIL running statistics are compared only with dp 1", True
        got = dp.weights(trained)
        worst_state = 0.0
        for name in reference["state"]:
            want = reference["weights"][name]
            scale = max(float(np.abs(want).max(initial=0)), 1e-30)
            err = float(np.abs(got[name].astype(np.float64) - want).max(initial=0)) / scale
            worst_state = max(worst_state, err)
            if not err <= STATE_RTOL:
                return (f"{label}: MISMATCH running statistic {name}: rel err {err:.1e} > {STATE_RTOL} "
                        f"against one rank"), True
        buffers = (f"; {len(reference['state'])} running statistics equal one rank's, max rel err "
                   f"{worst_state:.1e}")
    plan = json.loads((work / "program" / "plan.json").read_text())
    plan_error = dp.compare_plan(plan, summary, world)
    if not plan_error and pp > 1:
        plan_error = compare_transfers(plan, summary)
    if plan_error:
        return f"{label}: MISMATCH plan: {plan_error}", True
    sent = plan["ranks"][0]["collective_bytes"]
    traffic = ", ".join(f"{kind} {sent[kind]['sent']}" for kind in dp.KINDS if sent[kind]["calls"])
    return (f"{label}: matches one rank and PyTorch (loss rel {worst_loss:.1e}, weight abs "
            f"{worst_weight:.1e}{buffers}); plan equals measured (arena "
            f"{plan['ranks'][0]['arena_peak_bytes']}, sent/step {traffic})"), False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zoo", required=True, help="directory of an export_zoo.py export")
    parser.add_argument("--work", required=True, help="scratch directory")
    parser.add_argument("--dsopt", default="dsopt", help="dsopt command (split like a shell would)")
    parser.add_argument("--only", default="gpt2,llama", help="comma-separated model names")
    parser.add_argument("--layouts", default="tp",
                        help="tp: tp with dp and ZeRO; pp: tp with pipeline stages; "
                        "pad: tp 2 and 4 alone (a vocabulary they do not divide); "
                        "pp-llama: tp 2 x pp 2 with 1f1b and zb-h1; mix: dp 2 x tp 2 x "
                        "pp 2 under ZeRO 3 and dp 2 x tp 4 under ZeRO 3; pad-mix: "
                        "tp 2 x pp 2 and dp 2 x tp 2 under ZeRO 3; "
                        "sp, sp-dp, sp-pp: sequence parallelism alone, with dp 2 "
                        "and ZeRO 1, with pipeline stages; bn: tp 2 alone on a model with "
                        "training-mode BatchNorm; a comma-separated list "
                        "runs several on one single-rank reference per model")
    args = parser.parse_args()
    zoo = {e["name"]: e for e in json.loads((Path(args.zoo) / "zoo.json").read_text())}
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in zoo]
    if unknown:
        parser.error(f"--only: {', '.join(unknown)} not in {args.zoo}/zoo.json")
    layouts = [layout for layout in args.layouts.split(",") if layout]
    unknown = [layout for layout in layouts if layout not in CASES]
    if unknown or not layouts:
        parser.error(f"--layouts: {', '.join(unknown) or 'none given'}: expected a "
                     f"comma-separated list of {', '.join(sorted(CASES))}")
    cases = [(name, case) for name in names for layout in layouts for case in CASES[layout]]
    return dp.run_cases(
        "zoo tp", cases,
        label=lambda c: label_of(*c),
        reference_key=lambda c: c[0],
        # One single-rank run per model; "bn" (dp 1) takes its running
        # statistics over every micro-batch, the others emulate DDP's.
        make_reference=lambda c: dp.single_rank(
            args, zoo[c[0]], *((1, MICRO_BATCHES) if args.layouts == "bn" else (MICRO_BATCHES, 1))),
        check=lambda c, reference: check_case(args, zoo[c[0]], c[1], reference))


if __name__ == "__main__":
    sys.exit(main())
