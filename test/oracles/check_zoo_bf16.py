#!/usr/bin/python3
"""bf16 training: dsopt's programs against PyTorch running DeepSpeed's bf16 regime.

For each case (a zoo model on one rank, or the GPT model under data
parallelism with ZeRO 0-3, a pipeline schedule or tensor and sequence
parallelism, CASES below) this
  * writes N_BATCHES global batches of data and a DeepSpeed config with
    "bf16": {"enabled": true} (AdamW, gradient clipping), compiles
    `dsopt MODEL --config CFG [--dp/--zero/--pp ...]` and trains STEPS steps,
    writing the log and the trained model (--save-onnx);
  * trains the same module from the same weights in PyTorch, in DeepSpeed's
    bf16 regime (train_reference.train(bf16=True): the module in bfloat16,
    fp32 master weights updated by AdamW from the gradients converted to
    fp32, clipping on those) and in float32, with the same global batch;
  * checks every step's loss: within relative LOSS_RTOL of the bf16
    reference and within FP32_RTOL of the float32 run; for the models of
    DSOPT_FP32 on one rank, also within FP32_RTOL of dsopt's own fp32
    program (the same config without bf16), so the bf16 regime is checked
    against dsopt's fp32 path as well as PyTorch's; a tensor-parallel
    case's losses also within LOSS_RTOL of the one-rank bf16 run's;
  * checks the saved model: every initializer keeps its name and data type
    (the fp32 master weights are saved, not the bf16 working copies, so
    some trained weight holds bits a bfloat16 cannot), and the weights
    moved from their initial values as PyTorch's did: the mean absolute
    difference to PyTorch's masters is at most WEIGHT_AGREEMENT times the
    mean distance PyTorch's moved;
  * for a model with training-mode BatchNorm (BATCHNORM_CASES, one rank),
    checks the saved running statistics against PyTorch's bf16 run, whose
    BatchNorms keep float32 statistics and compute in float32
    (check_running_stats), and reports the distance to DeepSpeed's
    bfloat16 ones;
  * checks the plan against the run: every rank's measured arena
    high-water mark and memory spaces, its collective bytes (gradients
    reduced in bf16, parameters gathered in bf16) and pipeline transfers
    equal plan.json's per step times STEPS;
  * with --same-at-O3 MODELS, for those models' one-rank case, builds the
    program again at --host-opt-level=3 and checks that it trains
    bit-identically (every step's loss and gradient norm, the saved model
    byte for byte): the suite builds its programs at a lower -O level to
    compile faster, and this holds it to computing what -O3 computes.
Prints one line per case and a final count; exits 1 on any failure.
"""
import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import check_zoo_dp as dp_check  # noqa: E402
from check_zoo_dp import MPIRUN, read_log, rel, run, same_run, weights  # noqa: E402
from check_zoo_pp import compare_transfers  # noqa: E402

STEPS = 20
N_BATCHES = 4
LOSS_RTOL = 2e-2
FP32_RTOL = 5e-2
WEIGHT_AGREEMENT = 0.1
# Saved running statistics against PyTorch's bf16 run, relative to each
# tensor's largest magnitude.
STATE_RTOL = 1e-2
# One-rank cases whose bf16 losses are also compared with dsopt's own fp32
# program (one more compile each, so one model).
DSOPT_FP32 = ("gpt2",)

CONFIG = {
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 2e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
    "gradient_clipping": 1.0,
}

# (model, flags, ranks, micro-batches per rank). The global batch is
# ranks_dp * micro-batches micro-batches; PyTorch accumulates all of them.
# Every zoo model on one rank, over two data-parallel ranks under ZeRO 0-3
# and in a two-stage 1F1B pipeline: all with the same global batch of two
# micro-batches, so one PyTorch reference serves a model's six cases.
MODELS = ("gpt2", "llama", "bert", "mlp", "cnn", "mobilenet")
CASES = []
for _model in MODELS:
    CASES += [(_model, [], 1, 2)]
    CASES += [(_model, ["--dp", "2", "--zero", str(stage)], 2, 1) for stage in (0, 1, 2, 3)]
    CASES += [(_model, ["--pp", "2", "--schedule", "1f1b"], 2, 2)]
# Tensor parallelism with Megatron's sequence parallelism: also compared
# step by step with the one-rank bf16 run of the same model (above).
CASES += [("gpt2", ["--tp", "2", "--sequence-parallel"], 2, 2)]
# Training-mode BatchNorm (running statistics updated), on one rank: run
# only when named in --only (the model is not in the default export).
BATCHNORM_CASES = [("bn_mixer", [], 1, 2)]
# GPT-2 with its tanh GELU (the matmuls' GELU epilogues), on one rank: run
# only when named in --only.
BATCHNORM_CASES += [("gpt2_tanh", [], 1, 2)]


def label_of(case) -> str:
    model, flags, _, m = case
    layout = " ".join(f.lstrip("-") for f in flags) or "1 rank"
    return f"{model} bf16 {layout} m{m}"


def global_microbatches(case) -> int:
    _, flags, ranks, m = case
    return (ranks if "--dp" in flags else 1) * m


def reference(args, model_name: str, microbatches: int, cache: Dict) -> Dict:
    """Data and PyTorch's bf16 and fp32 runs for a global batch of
    `microbatches` micro-batches, made once per (model, microbatches)."""
    key = (model_name, microbatches)
    if key in cache:
        return cache[key]
    import onnx
    from initializer_map import initializer_arrays, map_initializers
    from make_train_data import make_train_data, write_train_data
    from models import ZOO
    from train_reference import train

    model = ZOO[model_name]
    micro = model.config.batch
    work = Path(args.work) / f"{model_name}-data{microbatches}"
    shutil.rmtree(work, ignore_errors=True)
    data = make_train_data(model, N_BATCHES, micro * microbatches)
    write_train_data(data, work / "data")
    config = dict(CONFIG, train_micro_batch_size_per_gpu=micro,
                  gradient_accumulation_steps=microbatches, train_batch_size=micro * microbatches)
    path = Path(args.zoo) / dp_check.model_file(args.entries[model_name])
    source = onnx.load(str(path))
    imap = map_initializers(source, model.build())
    state = dp_check.running_statistics(model, imap)
    frozen = imap.frozen
    bf16 = train(model, config, data, STEPS, frozen=[], bf16=True)
    fp32 = train(model, config, data, STEPS)
    # DeepSpeed's own module.bfloat16(): BatchNorm's running statistics and
    # arithmetic in bfloat16, which neither autocast nor dsopt does (the
    # distance to it is reported, not bounded).
    bf16_bn = train(model, config, data, STEPS, frozen=[], bf16=True, bf16_batch_norm=True) if state else None
    cache[key] = {"data": work / "data", "micro": micro, "path": path, "imap": imap,
                  "frozen": ["--frozen", ",".join(frozen)] if frozen else [],
                  "initial": initializer_arrays(source), "bf16": bf16, "fp32": fp32,
                  "state": state, "bf16_bn": bf16_bn}
    return cache[key]


def check_weights(trained: Path, ref: Dict) -> Tuple[Optional[str], float]:
    """(error or None, the ratio of mean |dsopt - PyTorch| to PyTorch's mean
    distance moved) of the saved model."""
    saved = weights(trained)
    initial = ref["initial"]
    if sorted(saved) != sorted(initial):
        return f"saved initializers {sorted(set(saved) ^ set(initial))} differ from the model's", 0
    for name, value in initial.items():
        if saved[name].dtype != value.dtype or saved[name].shape != value.shape:
            return (f"'{name}' saved as {saved[name].dtype}{list(saved[name].shape)}, the model has "
                    f"{value.dtype}{list(value.shape)}"), 0
    params = ref["bf16"].params
    diff = moved = 0.0
    beyond_bf16 = False
    for m in ref["imap"].mapped:
        got = ref["imap"].to_torch(saved[m.initializer], m).astype(np.float64)
        want = params[m.parameter].astype(np.float64)
        start = ref["imap"].to_torch(initial[m.initializer], m).astype(np.float64)
        diff += float(np.abs(got - want).sum())
        moved += float(np.abs(want - start).sum())
        bits = saved[m.initializer].astype(np.float32).view(np.uint32)
        beyond_bf16 |= bool((bits & 0xFFFF).any() and not np.array_equal(got, start))
    if not beyond_bf16:
        return "every trained weight is a bfloat16 value: the working copies were saved, not the masters", 0
    ratio = diff / max(moved, 1e-30)
    if ratio > WEIGHT_AGREEMENT:
        return (f"the weights moved unlike PyTorch's: mean |dsopt - PyTorch| is {ratio:.2f} of "
                f"PyTorch's mean distance moved (at most {WEIGHT_AGREEMENT})"), ratio
    return None, ratio


def check_running_stats(trained: Path, ref: Dict, log: List[Dict]) -> Tuple[Optional[str], str]:
    """(error or None, a summary) of the saved running statistics against
    PyTorch's bf16 run (float32 statistics): each within STATE_RTOL of the
    tensor's largest magnitude, and together they moved from their initial
    values as PyTorch's did (mean |dsopt - PyTorch| at most
    WEIGHT_AGREEMENT of PyTorch's mean distance moved). The summary also
    gives the distance to DeepSpeed's module.bfloat16() regime (bfloat16
    statistics), losses and statistics."""
    saved = weights(trained)
    worst = diff = moved = worst16 = 0.0
    for name in ref["state"]:
        got = saved[name].astype(np.float64)
        if saved[name].dtype != np.float32:
            return f"'{name}' saved as {saved[name].dtype}, the model has float32", ""
        want = ref["bf16"].buffers[name].astype(np.float64)
        start = ref["initial"][name].astype(np.float64)
        scale = max(float(np.abs(want).max(initial=0)), 1e-30)
        err = float(np.abs(got - want).max(initial=0)) / scale
        worst = max(worst, err)
        if not err <= STATE_RTOL:
            return f"'{name}': rel err {err:.1e} > {STATE_RTOL} against PyTorch bf16", ""
        diff += float(np.abs(got - want).sum())
        moved += float(np.abs(want - start).sum())
        other = ref["bf16_bn"].buffers[name].astype(np.float64)
        worst16 = max(worst16, float(np.abs(got - other).max(initial=0)) / scale)
    ratio = diff / max(moved, 1e-30)
    if ratio > WEIGHT_AGREEMENT:
        return (f"mean |dsopt - PyTorch| is {ratio:.2f} of PyTorch's mean distance moved "
                f"(at most {WEIGHT_AGREEMENT})"), ""
    loss16 = max(rel(entry["loss"], want["loss"]) for entry, want in zip(log, ref["bf16_bn"].log))
    return None, (f"; {len(ref['state'])} running statistics rel {worst:.1e}, {ratio:.1e} of distance "
                  f"moved; against bf16 statistics: loss rel {loss16:.1e}, statistics rel {worst16:.1e}")


def same_at_o3(args, flags: List[str], ref: Dict, work: Path, log: List[Dict],
               trained: Path) -> Optional[str]:
    """Why the program built at -O3 does not train bit-identically to the
    one args.dsopt built (None when it does)."""
    why = run([*shlex.split(args.dsopt), str(ref["path"]), "--config", str(work / "ds_config.json"),
               *flags, *ref["frozen"], "--host-opt-level=3", "--no-forward", "-o", str(work / "o3_program")])
    o3_log, o3_trained = work / "o3_log.jsonl", work / "o3_trained.onnx"
    why = why or run([str(work / "o3_program" / "train"), "--data", str(ref["data"]), "--steps",
                      str(STEPS), "--threads", "1", "--log-json", str(o3_log), "--save-onnx",
                      str(o3_trained), "--quiet"])
    if why:
        return f"-O3 build: {why}"
    return same_run(log, trained, read_log(o3_log)[0], o3_trained, "the -O3 build")


def check_case(args, case, cache: Dict) -> Tuple[str, bool]:
    model, flags, ranks, m = case
    label = label_of(case)

    def fail(kind, message):
        return f"{label}: {kind} {message}", True

    ref = reference(args, model, global_microbatches(case), cache)
    work = Path(args.work) / label.replace(" ", "-")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    dp = ranks if "--dp" in flags else 1
    micro = ref["micro"]
    config = dict(CONFIG, bf16={"enabled": True}, train_micro_batch_size_per_gpu=micro,
                  gradient_accumulation_steps=m, train_batch_size=micro * m * dp)
    if "--zero" in flags:
        config["zero_optimization"] = {"stage": int(flags[flags.index("--zero") + 1]),
                                       "stage3_param_persistence_threshold": 0}
    (work / "ds_config.json").write_text(json.dumps(config, indent=2) + "\n")
    why = run([*shlex.split(args.dsopt), str(ref["path"]), "--config", str(work / "ds_config.json"),
               *flags, *ref["frozen"], "--no-forward", "-o", str(work / "program")])
    if why:
        return fail("FAIL", f"dsopt: {why}")
    log_path, trained = work / "log.jsonl", work / "trained.onnx"
    train = [str(work / "program" / "train"), "--data", str(ref["data"]), "--steps", str(STEPS),
             "--threads", "1", "--log-json", str(log_path), "--save-onnx", str(trained), "--quiet"]
    why = run([*MPIRUN, "-np", str(ranks), *train] if ranks > 1 else train)
    if why:
        return fail("FAIL", f"train: {why}")
    log, summary = read_log(log_path)
    if len(log) != STEPS:
        return fail("FAIL", f"{len(log)} step lines in the log, expected {STEPS}")
    own32 = None
    if ranks == 1 and model in DSOPT_FP32:
        fp32_config = {k: v for k, v in config.items() if k != "bf16"}
        (work / "fp32_config.json").write_text(json.dumps(fp32_config, indent=2) + "\n")
        why = run([*shlex.split(args.dsopt), str(ref["path"]), "--config",
                   str(work / "fp32_config.json"), *flags, *ref["frozen"], "--no-forward", "-o",
                   str(work / "fp32_program")])
        fp32_log = work / "fp32_log.jsonl"
        why = why or run([str(work / "fp32_program" / "train"), "--data", str(ref["data"]),
                          "--steps", str(STEPS), "--threads", "1", "--log-json", str(fp32_log),
                          "--quiet"])
        if why:
            return fail("FAIL", f"dsopt fp32: {why}")
        own32 = read_log(fp32_log)[0]
        if len(own32) != STEPS:
            return fail("FAIL", f"{len(own32)} step lines in dsopt's fp32 log, expected {STEPS}")

    worst16 = worst32 = 0.0
    for entry, want16, want32 in zip(log, ref["bf16"].log, ref["fp32"].log):
        e16, e32 = rel(entry["loss"], want16["loss"]), rel(entry["loss"], want32["loss"])
        worst16, worst32 = max(worst16, e16), max(worst32, e32)
        if e16 > LOSS_RTOL:
            return fail("MISMATCH", f"step {entry['step']}: loss {entry['loss']:.6f}, PyTorch bf16 "
                                    f"{want16['loss']:.6f} (rel {e16:.1e} > {LOSS_RTOL})")
        if e32 > FP32_RTOL:
            return fail("MISMATCH", f"step {entry['step']}: loss {entry['loss']:.6f}, PyTorch fp32 "
                                    f"{want32['loss']:.6f} (rel {e32:.1e} > {FP32_RTOL})")
        if entry.get("skipped"):
            return fail("MISMATCH", f"step {entry['step']} was skipped")
    worst_own = None
    for entry, want in zip(log, own32 or []):
        e = rel(entry["loss"], want["loss"])
        worst_own = max(worst_own or 0.0, e)
        if e > FP32_RTOL:
            return fail("MISMATCH", f"step {entry['step']}: loss {entry['loss']:.6f}, dsopt fp32 "
                                    f"{want['loss']:.6f} (rel {e:.1e} > {FP32_RTOL})")
    worst_one = None
    if "--tp" in flags:
        one_log = Path(args.work) / label_of((model, [], 1, m)).replace(" ", "-") / "log.jsonl"
        if not one_log.exists():
            return fail("FAIL", f"no one-rank bf16 log {one_log} to compare with")
        for entry, want in zip(log, read_log(one_log)[0]):
            e = rel(entry["loss"], want["loss"])
            worst_one = max(worst_one or 0.0, e)
            if e > LOSS_RTOL:
                return fail("MISMATCH", f"step {entry['step']}: loss {entry['loss']:.6f}, one-rank "
                                        f"bf16 {want['loss']:.6f} (rel {e:.1e} > {LOSS_RTOL})")
    o3 = ranks == 1 and model in args.same_at_o3
    if o3:
        error = same_at_o3(args, flags, ref, work, log, trained)
        if error:
            return fail("MISMATCH", error)
    error, agreement = check_weights(trained, ref)
    if error:
        return fail("MISMATCH", f"saved model: {error}")
    stats = ""
    if ref["state"]:
        if ranks > 1:
            return fail("FAIL", "running statistics are compared on one rank only")
        error, stats = check_running_stats(trained, ref, log)
        if error:
            return fail("MISMATCH", f"running statistics: {error}")

    plan = json.loads((work / "program" / "plan.json").read_text())
    if plan.get("train", {}).get("precision", {}).get("dtype") != "bf16":
        return fail("MISMATCH", f"plan.json's train.precision is {plan.get('train', {}).get('precision')}")
    if ranks > 1:
        plan_error = dp_check.compare_plan(plan, summary, ranks, STEPS)
        if not plan_error and "--pp" in flags:
            plan_error = compare_transfers(plan, summary, STEPS)
    else:
        last = log[-1]
        plan_error = (None if last["arena_peak_bytes"] == last["arena_planned_bytes"] else
                      f"arena peak measured {last['arena_peak_bytes']}, planned {last['arena_planned_bytes']}")
    if plan_error:
        return fail("MISMATCH", f"plan: {plan_error}")
    own = f"; dsopt fp32 rel {worst_own:.1e}" if worst_own is not None else ""
    if worst_one is not None:
        own += f"; one-rank bf16 rel {worst_one:.1e}"
    own += "; bit-identical at -O3" if o3 else ""
    own += stats
    return (f"{label}: matches PyTorch bf16 (loss rel {worst16:.1e}; fp32 rel {worst32:.1e}{own}; "
            f"weights {agreement:.2f} of distance moved)"), False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zoo", required=True, help="directory of an export_zoo.py export")
    parser.add_argument("--work", required=True, help="scratch directory")
    parser.add_argument("--dsopt", default="dsopt", help="dsopt command (split like a shell would)")
    parser.add_argument("--only", default="", help="comma-separated case labels' models (default: all)")
    parser.add_argument("--same-at-O3", dest="same_at_o3", default="",
                        help="comma-separated models whose one-rank program is also built at "
                             "--host-opt-level=3 and must train bit-identically")
    parser.add_argument("--one-rank", action="store_true",
                        help="only the one-rank cases (no dp, pp or tp)")
    args = parser.parse_args()
    args.entries = {e["name"]: e for e in json.loads((Path(args.zoo) / "zoo.json").read_text())}
    names = set(filter(None, args.only.split(",")))
    args.same_at_o3 = set(filter(None, args.same_at_o3.split(",")))
    cases = [c for c in CASES + BATCHNORM_CASES if c[0] in names] if names else CASES
    if args.one_rank:
        cases = [c for c in cases if c[2] == 1]
    missing = sorted({c[0] for c in cases} - set(args.entries))
    if missing:
        parser.error(f"{', '.join(missing)} not in {args.zoo}/zoo.json")
    cache: Dict = {}
    return dp_check.run_cases("zoo bf16", cases, label_of,
                              reference_key=lambda c: None,
                              make_reference=lambda c: cache,
                              check=lambda c, shared: check_case(args, c, shared))


if __name__ == "__main__":
    sys.exit(main())
