#!/usr/bin/python3
"""Trains every zoo model with dsopt and with PyTorch, and compares step by step.

For each model of an exported zoo (export_zoo.py), each of its exports
(constant-folded and not) and each training configuration (CONFIGS x
ACCUMULATION below), this:
  * writes the DeepSpeed config and N_BATCHES global batches of training data
    (make_train_data.py) into a fresh work directory;
  * maps the export's initializers to the PyTorch parameters
    (initializer_map.py); float initializers that hold no parameter (BatchNorm
    running statistics, ...) are passed as --frozen, except, for a model
    trained in train mode (models.py's train_mode), the module's float buffers
    (BatchNorm's running statistics): dsopt keeps and updates those itself;
  * compiles `dsopt MODEL --config CFG [--frozen NAMES] -o OUT`; with
    --forward, runs the build's forward program OUT/run on the export's
    example inputs and compares loss and logits with PyTorch's forward (its
    train-mode forward for a train-mode model; check_zoo_forward.py's rule,
    rtol FORWARD_RTOL, widened by float32 noise, below); then runs
    `OUT/train --data DIR --steps STEPS --log-json LOG --save-onnx TRAINED`;
  * trains the same module from the same weights in PyTorch
    (train_reference.py) and compares: every step's loss (relative LOSS_RTOL),
    lr (LR_RTOL) and pre-clipping gradient norm (GRAD_NORM_RTOL), the loss
    and gradient norm widened by float32 noise (below); every final
    parameter, read from TRAINED and transposed back where the export
    pre-transposed it (absolute WEIGHT_ATOL, widened by float32 noise, below);
    frozen initializers must come back bit-identical; a train-mode model's
    running statistics must match PyTorch's final buffers (BUFFER_RTOL of
    the tensor's largest magnitude, widened by float32 noise as the weights
    are); and each memory
    space's (device, host, file) measured high-water mark equals its arena
    in plan.json (memory_spaces);
  * for a model named in --same-at-O3, compiles the program again at
    --host-opt-level=3 (--dsopt may build at another level, -O0 to compile
    fast) and trains it: every step's loss and gradient norm and the saved
    model must be the same bit for bit (docs/cli.md: the level changes no
    number).
Prints one line per case and a final count; exits 1 on any failure (FAIL: a
tool failed or wrote something unreadable; MISMATCH: the numbers differ).

Float32 noise. Some parameters have a gradient that is exactly zero in exact
arithmetic but rounding noise in float32: the key bias of attention (softmax
ignores a constant added to a row of scores), GPT-2's and BERT's k bias.
Adam divides the gradient by its own running magnitude, so it turns noise of
1e-9 into steps of a sizeable fraction of lr, in a direction no two
implementations agree on: PyTorch float32 itself ends up 4e-4 away from
PyTorch float64 there after 20 AdamW steps. So each parameter's weight
tolerance is WEIGHT_ATOL + NOISE_FACTOR * (largest |float32 - float64|
of the PyTorch runs over that parameter); for almost every parameter that
term is below 1e-6.

The same rule, base tolerance + NOISE_FACTOR * PyTorch's own float32 drift
measured in the same run, holds for every compared quantity: each forward
output (the largest |float32 - float64| of PyTorch's forward over it, added
to its absolute bound), the loss and the gradient norm (the largest relative
|float32 - float64| of the reference runs over the steps, added to
LOSS_RTOL and GRAD_NORM_RTOL) and the running statistics. Where BatchNorm
normalises with the statistics of a small batch, the float32 noise grows
through the network and, in training, through the steps: PyTorch's float32
run of a small ResNeXt in training mode ends 1% off its float64 run in loss
after 10 steps. Every result line also gives dsopt's distance from the
float64 run and the drift itself.

Lion steps by lr * sign(c): where c is near zero, the least rounding
difference flips a step from +lr to -lr, and the flip perturbs later
gradients enough to flip a few more. With Lion, up to SIGN_FLIP_FRACTION of a
parameter's elements (at least SIGN_FLIP_MIN) may therefore exceed the
tolerance, by at most 2 * (the sum of the lrs of all steps). (PyTorch itself,
started from weights one ulp away, shows up to 0.2% such elements.)
"""
import argparse
import json
import math
import multiprocessing
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

STEPS = 20
N_BATCHES = 4
LOSS_RTOL = 1e-4
# --forward: the forward program's outputs (docs/training.md).
FORWARD_RTOL = 1e-5
GRAD_NORM_RTOL = 1e-3
BUFFER_RTOL = 1e-5
LR_RTOL = 1e-6
WEIGHT_ATOL = 1e-4
NOISE_FACTOR = 4
# Loss and gradient norm are compared up to the step where PyTorch's own
# float32 run leaves its float64 run by more than this (relative).
DRIFT_LIMIT = 0.1
SIGN_FLIP_FRACTION = 0.01
SIGN_FLIP_MIN = 2
JOBS = 2
TIMEOUT_S = 600

# Optimizer, schedule and clipping of each configuration; the batch sizes
# are added per case (the micro batch is the model's, times ACCUMULATION).
CONFIGS = {
    "adamw": {
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 2e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
        "gradient_clipping": 1.0,
    },
    "sgd": {
        "optimizer": {"type": "SGD",
                      "params": {"lr": 0.05, "momentum": 0.9, "dampening": 0.0, "nesterov": False,
                                 "weight_decay": 0.0}},
        "gradient_clipping": 1.0,
    },
}
ACCUMULATION = (1, 3)

# Not run by default (--configs NAME-gasK selects them): the other optimizers
# and the lr schedules, whose per-step lr the log must reproduce.
EXTRA_CONFIGS = {
    "adam-warmupdecay": {
        # adam_w_mode false: torch.optim.Adam, weight decay added to the
        # gradient (DeepSpeed's "Adam" is AdamW otherwise).
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3, "betas": [0.8, 0.99], "eps": 1e-6,
                                                 "weight_decay": 0.01, "adam_w_mode": False}},
        "scheduler": {"type": "WarmupDecayLR",
                      "params": {"total_num_steps": STEPS, "warmup_min_lr": 1e-4, "warmup_max_lr": 3e-3,
                                 "warmup_num_steps": 5, "warmup_type": "linear"}},
        "gradient_clipping": 0.5,
    },
    "lion-cosine": {
        # Weight decay large enough that a wrong one shows in the weights.
        "optimizer": {"type": "Lion", "params": {"lr": 3e-4, "betas": [0.9, 0.99], "weight_decay": 1.0}},
        "scheduler": {"type": "WarmupCosineLR",
                      "params": {"total_num_steps": STEPS, "warmup_min_ratio": 0.1, "warmup_num_steps": 4,
                                 "cos_min_ratio": 0.01, "warmup_type": "log"}},
    },
    "sgd-nesterov-warmup": {
        "optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "dampening": 0.0, "nesterov": True,
                                                "weight_decay": 1e-3}},
        "scheduler": {"type": "WarmupLR",
                      "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.05, "warmup_num_steps": 8}},
        "gradient_clipping": 1.0,
    },
}

sys.path.insert(0, str(Path(__file__).resolve().parent))
LOG_KEYS = ("step", "loss", "lr", "grad_norm", "step_time_s", "arena_peak_bytes")


def case_names(selected: str) -> List[Tuple[str, int]]:
    """[(config name, accumulation)] for --configs (default: CONFIGS x ACCUMULATION)."""
    if not selected:
        return [(c, g) for c in CONFIGS for g in ACCUMULATION]
    cases = []
    for name in selected.split(","):
        config, _, gas = name.rpartition("-gas")
        if config not in CONFIGS and config not in EXTRA_CONFIGS or not gas.isdigit() or int(gas) < 1:
            known = ", ".join(f"{c}-gasK" for c in (*CONFIGS, *EXTRA_CONFIGS))
            raise SystemExit(f"check_zoo_train.py: unknown configuration {name!r}; known: {known}")
        cases.append((config, int(gas)))
    return cases


def ds_config(config_name: str, micro: int, gas: int) -> Dict:
    config = json.loads(json.dumps({**CONFIGS, **EXTRA_CONFIGS}[config_name]))
    config.update(train_micro_batch_size_per_gpu=micro, gradient_accumulation_steps=gas,
                  train_batch_size=micro * gas)
    return config


def one_line(text: str, limit: int = 600) -> str:
    """A tool's stderr on the case's one output line."""
    text = " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return text if len(text) <= limit else text[:limit] + " ..."


def rel_err(got: float, want: float) -> float:
    if not (isinstance(got, (int, float)) and math.isfinite(got)):
        return math.inf
    return abs(got - want) / max(abs(want), 1e-30)


def compare_spaces(planned: Dict, measured: Optional[Dict], who: str) -> Optional[str]:
    """Each memory space's measured high-water mark against the plan's
    arena for it (device, host, file)."""
    if not measured or set(measured) != set(planned):
        return f"{who}: measured memory spaces {sorted(measured or {})}, planned {sorted(planned)}"
    for space, want in planned.items():
        if measured[space]["peak_bytes"] != want["peak_bytes"]:
            return (f"{who}: {space} arena peak measured {measured[space]['peak_bytes']}, "
                    f"planned {want['peak_bytes']}")
    return None


def read_log(path: Path, steps: int) -> Tuple[Optional[List[Dict]], Optional[str]]:
    if not path.exists():
        return None, f"no log {path}"
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            return None, f"log line {number} is not JSON: {e}"
        missing = [k for k in LOG_KEYS if k not in entry]
        if missing:
            return None, f"log line {number} lacks {', '.join(missing)}"
        for key in LOG_KEYS:
            value = entry[key]
            integral = key in ("step", "arena_peak_bytes")
            if isinstance(value, bool) or not isinstance(value, int if integral else (int, float)) or (
                    key in ("step_time_s", "arena_peak_bytes") and value < 0):
                return None, f"log line {number}: {key} {value!r} is not a {'count' if integral else 'number'}"
        entries.append(entry)
    if [e["step"] for e in entries] != list(range(1, steps + 1)):
        return None, f"log has steps {[e['step'] for e in entries][:5]}..., expected 1..{steps}"
    return entries, None


def compare_log(log: List[Dict], reference: List[Dict],
                reference64: List[Dict]) -> Tuple[Dict[str, float], Optional[str]]:
    """Every step's loss, lr and gradient norm against PyTorch's float32 run.
    The loss and gradient norm tolerances widen, as the weights' do, by
    NOISE_FACTOR times PyTorch's own float32 drift on that quantity: the
    largest relative |float32 - float64| of the reference runs over the
    compared steps. Steps from the first one where that drift exceeds
    DRIFT_LIMIT on are not compared: there PyTorch's own float32 and float64
    runs disagree, so its trajectory does not tell right from wrong.
    Returns the worst errors (against float32 and float64, the drift, and
    the number of steps compared) and the first mismatch."""
    compared = 0
    for want, want64 in zip(reference, reference64):
        if max(rel_err(want[k], want64[k]) for k in ("loss", "grad_norm")) > DRIFT_LIMIT:
            break
        compared += 1
    tolerance = {"loss": LOSS_RTOL, "grad_norm": GRAD_NORM_RTOL, "lr": LR_RTOL}
    worst = {"lr": 0.0, "compared": compared}
    for key in ("loss", "grad_norm"):
        worst[key + "_drift"] = max((rel_err(a[key], b[key]) for a, b in zip(reference[:compared], reference64)),
                                    default=0.0)
        worst[key + "_f64"] = max((rel_err(g[key], b[key]) for g, b in zip(log[:compared], reference64)),
                                  default=0.0)
        worst[key] = 0.0
        tolerance[key] += NOISE_FACTOR * worst[key + "_drift"]
    first = None
    for step, (got, want, want64) in enumerate(zip(log, reference, reference64)):
        for key in ("loss", "lr", "grad_norm"):
            if key != "lr" and step >= compared:
                continue
            err = rel_err(got[key], want[key])
            worst[key] = max(worst[key], err)
            if first is None and not err <= tolerance[key]:
                first = (f"step {want['step']} {key} {got[key]!r}, PyTorch {want[key]!r} "
                         f"(rel err {err:.2e} > {tolerance[key]:.2g}"
                         + (f"; float64 {want64[key]!r}" if key != "lr" else "") + ")")
    if compared < len(reference):
        worst["undetermined"] = (
            f"loss and grad_norm compared over steps 1-{compared} of {len(reference)}: at step {compared + 1} "
            f"PyTorch's float32 run leaves its float64 run by more than {DRIFT_LIMIT:g}")
    return worst, first


def weight_bounds(run32, run64) -> Dict[str, float]:
    """Per parameter: WEIGHT_ATOL plus the float32 noise PyTorch's own run shows."""
    return {n: WEIGHT_ATOL + NOISE_FACTOR * float(np.abs(v.astype(np.float64) - run64.params[n]).max(initial=0))
            for n, v in run32.params.items()}


def sign_flip_allowance(config: Dict, log: List[Dict]) -> Optional[float]:
    """How far a flipped element may be off (None: the optimizer has no sign steps)."""
    if config["optimizer"]["type"] != "Lion":
        return None
    return 2.0 * sum(entry["lr"] for entry in log)


def compare_weights(trained_path: Path, initial, imap, params: Dict[str, np.ndarray],
                    bounds: Dict[str, float], flip: Optional[float] = None,
                    params64: Optional[Dict[str, np.ndarray]] = None) -> Tuple[float, Optional[str]]:
    import onnx
    from initializer_map import initializer_arrays

    if not trained_path.exists():
        return math.inf, f"no trained model {trained_path}"
    try:
        trained = initializer_arrays(onnx.load(str(trained_path)))
    except Exception as e:  # a broken file is a finding, not a crash of the check
        return math.inf, f"trained model {trained_path} does not load: {e}"
    missing = [n for n in initial if n not in trained]
    if missing:
        return math.inf, f"trained model lacks initializer(s) {', '.join(missing[:5])}"
    worst, first = 0.0, None
    for m in imap.mapped:
        got, want = imap.to_torch(trained[m.initializer], m), params[m.parameter]
        where = f"parameter {m.parameter}" + (f" (initializer {m.initializer}, {m.how})" if m.how != "name" else "")
        if got.shape != want.shape:
            return math.inf, f"{where} has shape {list(got.shape)}, PyTorch {list(want.shape)}"
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        diff[np.isnan(diff)] = np.inf
        err = float(diff.max()) if diff.size else 0.0
        worst = max(worst, err)
        if flip is not None and not err <= bounds[m.parameter]:
            outliers = diff > bounds[m.parameter]
            allowed = max(SIGN_FLIP_MIN, int(SIGN_FLIP_FRACTION * diff.size))
            if outliers.sum() <= allowed and err <= bounds[m.parameter] + flip:
                continue
        if first is None and not err <= bounds[m.parameter]:
            i = np.unravel_index(np.argmax(diff), diff.shape)
            first = (f"{where} at {list(map(int, i))}: dsopt {got[i]!r}, PyTorch {want[i]!r} "
                     + (f"(float64 {float(params64[m.parameter][i])!r}) " if params64 else "")
                     + f"(abs err {err:.2e} > {bounds[m.parameter]:.2g})")
    for name in imap.frozen:
        if first is None and not np.array_equal(trained[name], initial[name]):
            first = f"frozen initializer {name} changed"
    return worst, first


def compare_buffers(trained_path: Path, names: List[str], buffers: Dict[str, np.ndarray],
                    buffers64: Dict[str, np.ndarray]) -> Tuple[float, Optional[str]]:
    """The running statistics dsopt saved against PyTorch's final buffers:
    each within BUFFER_RTOL of the tensor's largest magnitude, widened like
    the weights' tolerance by NOISE_FACTOR times PyTorch's own
    float32 noise on it (|float32 - float64| of the reference runs): the
    statistics are those of activations computed from weights that carry
    that noise."""
    import onnx
    from initializer_map import initializer_arrays

    trained = initializer_arrays(onnx.load(str(trained_path)))
    worst = 0.0
    for name in names:
        got, want = trained[name].astype(np.float64), buffers[name].astype(np.float64)
        if got.shape != want.shape:
            return math.inf, f"buffer {name} has shape {list(got.shape)}, PyTorch {list(want.shape)}"
        scale = max(float(np.abs(want).max(initial=0)), 1e-30)
        diff = np.abs(got - want)
        diff[np.isnan(diff)] = np.inf
        noise = float(np.abs(want - buffers64[name].astype(np.float64)).max(initial=0)) / scale
        err = float(diff.max(initial=0)) / scale
        worst = max(worst, err)
        if not err <= BUFFER_RTOL + NOISE_FACTOR * noise:
            i = np.unravel_index(np.argmax(diff), diff.shape)
            return worst, (f"buffer {name} at {list(map(int, i))}: dsopt {got[i]!r}, PyTorch {want[i]!r} "
                           f"(rel err {err:.2e} > {BUFFER_RTOL + NOISE_FACTOR * noise:.2g})")
    return worst, None


def forward64(model, inputs: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """PyTorch's forward of the exported module (its train-mode forward for a
    train-mode model) in float64 on the example inputs: how far the export's
    float32 outputs are from it is PyTorch's own float32 drift."""
    import torch

    module = model.build().to(torch.float64)
    values = [torch.from_numpy(inputs[n]) for n in model.inputs()]
    with torch.no_grad():
        outputs = module(*[v.to(torch.float64) if v.is_floating_point() else v for v in values])
    return {n: t.numpy() for n, t in zip(model.output_names, outputs)}


def run_tool(command: List[str]) -> Tuple[Optional[subprocess.CompletedProcess], float, Optional[str]]:
    """(result, seconds, why it did not run to completion)."""
    start = time.perf_counter()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - start, f"timed out after {TIMEOUT_S}s"
    except OSError as e:
        return None, time.perf_counter() - start, f"does not start: {e}"
    return result, time.perf_counter() - start, None


def run_case(job) -> Tuple[str, bool, Dict[str, float]]:
    """One (export, configuration): returns (line, failed, seconds per phase)."""
    args, entry, file_key, config_name, gas = job
    try:
        return check_case(args, entry, file_key, config_name, gas)
    except Exception as e:  # one broken case must not hide the others' results
        return f"{entry['name']} {entry[file_key]} {config_name}-gas{gas}: FAIL {type(e).__name__}: {e}", True, {}


def check_case(args, entry, file_key, config_name, gas) -> Tuple[str, bool, Dict[str, float]]:
    import onnx
    import torch

    from check_zoo_dp import same_run
    from initializer_map import MappingError, initializer_arrays, map_initializers
    from make_train_data import make_train_data, write_train_data
    from models import ZOO
    from train_reference import train

    torch.set_num_threads(1)
    model = ZOO[entry["name"]]
    model_path = Path(args.zoo) / entry[file_key]
    case = f"{config_name}-gas{gas}"
    label = f"{model.name} {entry[file_key]} {case}"
    work = Path(args.work) / f"{model_path.stem}-{case}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    seconds = {}

    def fail(kind, message):
        return f"{label}: {kind} {message}", True, seconds

    config = ds_config(config_name, model.config.batch, gas)
    config["optimizer"]["params"].update(args.optimizer_params)
    # --perturb changes what dsopt is told only: PyTorch keeps the stated
    # configuration, so a check that can tell the two apart must fail.
    dsopt_config = json.loads(json.dumps(config))
    dsopt_config["optimizer"]["params"].update(args.perturb)
    (work / "ds_config.json").write_text(json.dumps(dsopt_config, indent=2) + "\n")
    data = make_train_data(model, N_BATCHES, model.config.batch * gas)
    write_train_data(data, work / "data")
    onnx_model = onnx.load(str(model_path))
    initial = initializer_arrays(onnx_model)
    try:
        imap = map_initializers(onnx_model, model.build())
    except MappingError as e:
        return fail("FAIL", f"initializers: {e}")

    build = [*shlex.split(args.dsopt), str(model_path), "--config", str(work / "ds_config.json")]
    # A train-mode model's running statistics are state dsopt updates.
    state = []
    if model.train_mode:
        buffer_names = {n for n, b in model.build().named_buffers() if b.is_floating_point()}
        state = [n for n in imap.frozen if n in buffer_names]
        if not state:
            return fail("FAIL", "a train-mode model whose export holds none of its buffers")
        imap.frozen[:] = [n for n in imap.frozen if n not in buffer_names]
    if imap.frozen:
        build += ["--frozen", ",".join(imap.frozen)]
    # The forward program is built only when --forward runs it.
    compiled, seconds["dsopt"], why = run_tool(
        [*build, *([] if args.forward else ["--no-forward"]), "-o", str(work / "program")])
    if why or compiled.returncode != 0:
        return fail("FAIL", f"dsopt failed: {why or one_line(compiled.stderr)}")
    if args.forward:
        # The same build's forward program on the export's example inputs:
        # loss and logits as PyTorch's eval-mode forward computed them.
        from check_zoo_forward import compare_outputs, run_forward

        zoo = Path(args.zoo)
        inputs = dict(np.load(zoo / entry["inputs_npz"]))
        outputs, why = run_forward(str(work / "program"), inputs,
                                   str(work / "forward"))
        if why:
            return fail("FAIL", f"forward: {why}")
        forward, errors = compare_outputs(outputs, dict(np.load(zoo / entry["outputs_npz"])), FORWARD_RTOL,
                                          expected64=forward64(model, inputs), noise_factor=NOISE_FACTOR)
        if errors:
            return fail("MISMATCH", f"forward: {errors[0]} ({forward})")
    log_path, trained_path = work / "log.jsonl", work / "trained.onnx"
    why = train_program(work / "program", work / "data", args.steps, log_path, trained_path, seconds)
    if why:
        return fail("FAIL", f"train failed: {why}")

    # A table the export folded into a gather of itself is frozen in both.
    for m in imap.derived:
        print(f"  warning ({label}): parameter {m.parameter} was folded into initializer "
              f"{m.initializer} (a gather of itself): both are frozen; export with "
              f"do_constant_folding=False to train it", file=sys.stderr)
    frozen = imap.frozen_parameters
    reference = train(model, config, data, args.steps, frozen)
    seconds["torch"] = reference.seconds
    reference64 = train(model, config, data, args.steps, frozen, dtype=torch.float64)
    bounds = weight_bounds(reference, reference64)
    log, error = read_log(log_path, args.steps)
    if error:
        return fail("FAIL", error)
    plan = json.loads((work / "program" / "plan.json").read_text())
    measured = {space: {"peak_bytes": v["peak_bytes"]} for space, v in log[-1].get("memory_spaces", {}).items()}
    space_error = compare_spaces(plan["ranks"][0]["memory_spaces"], measured, "the run")
    if space_error:
        return fail("MISMATCH", f"plan: {space_error}")
    worst, log_error = compare_log(log, reference.log, reference64.log)
    weight_err, weight_error = compare_weights(trained_path, initial, imap, reference.params, bounds,
                                               sign_flip_allowance(config, reference.log), reference64.params)
    stats = (f"max loss rel err {worst['loss']:.1e} (f64 {worst['loss_f64']:.1e}, f32 drift {worst['loss_drift']:.1e}), "
             f"max grad_norm rel err {worst['grad_norm']:.1e} (f64 {worst['grad_norm_f64']:.1e}, "
             f"f32 drift {worst['grad_norm_drift']:.1e}), "
             f"max weight abs err {weight_err:.1e}, widest weight tolerance {max(bounds.values()):.0e}")
    if state and trained_path.exists():
        buffer_err, buffer_error = compare_buffers(trained_path, state, reference.buffers, reference64.buffers)
        weight_error = weight_error or buffer_error
        stats += f", {len(state)} running statistics max rel err {buffer_err:.1e}"
    if "undetermined" in worst:
        stats += f"; {worst['undetermined']}"
    if args.forward:
        stats = f"forward {forward}; {stats}"
    if imap.derived:
        stats += f"; {len(imap.derived)} parameter(s) folded into a gather of themselves, frozen in both"
    timing = " ".join(f"{k} {v:.2f}s" for k, v in seconds.items())
    if log_error or weight_error:
        return fail("MISMATCH", f"{log_error or weight_error} ({stats}) [{timing}]")
    if model.name in args.same_at_o3:
        # The same program built at -O3 must train bit for bit as this one.
        o3_log, o3_trained = work / "o3_log.jsonl", work / "o3_trained.onnx"
        compiled, seconds["dsopt_O3"], why = run_tool(
            [*build, "--host-opt-level=3", "--no-forward", "-o", str(work / "o3_program")])
        if why or compiled.returncode != 0:
            return fail("FAIL", f"dsopt at -O3 failed: {why or one_line(compiled.stderr)}")
        why = train_program(work / "o3_program", work / "data", args.steps, o3_log, o3_trained, seconds, "_O3")
        if why:
            return fail("FAIL", f"train built at -O3 failed: {why}")
        entries, why = read_log(o3_log, args.steps)
        why = why or same_run(log, trained_path, entries, o3_trained, "the -O3 build")
        if why:
            return fail("MISMATCH", f"-O3: {why}")
        stats += "; bit-identical at -O3"
    timing = " ".join(f"{k} {v:.2f}s" for k, v in seconds.items())
    return f"{label}: matches PyTorch ({stats}) [{timing}]", False, seconds


def train_program(program: Path, data: Path, steps: int, log: Path, trained: Path, seconds: Dict[str, float],
                  suffix: str = "") -> Optional[str]:
    """Runs program/train for `steps` steps, logging to `log` and saving to
    `trained`; its seconds go to seconds["train" + suffix]. Why it failed,
    or None."""
    ran, seconds["train" + suffix], why = run_tool(
        [str(program / "train"), "--data", str(data), "--steps", str(steps), "--log-json", str(log),
         "--save-onnx", str(trained)])
    if why or ran.returncode != 0:
        return why or f"exit {ran.returncode}: {one_line(ran.stderr)}"
    return None


def optimizer_params(text: str) -> Dict:
    """--optimizer-params / --perturb: a JSON object of optimizer params."""
    try:
        params = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}")
    if not isinstance(params, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object of optimizer params")
    return params


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zoo", required=True, help="directory of an export_zoo.py export")
    parser.add_argument("--work", required=True, help="scratch directory (its case directories are replaced)")
    parser.add_argument("--dsopt", default="dsopt", help="dsopt command (split like a shell would)")
    parser.add_argument("--only", default="", help="comma-separated model names or export file names")
    parser.add_argument("--configs", default="",
                        help="comma-separated NAME-gasK (default: "
                        f"{','.join(f'{c}-gas{g}' for c, g in case_names(''))})")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--jobs", type=int, default=JOBS, help="cases run at once")
    parser.add_argument("--optimizer-params", type=optimizer_params, default={}, metavar="JSON",
                        help="optimizer params replacing the configuration's, in dsopt and PyTorch alike "
                        "(e.g. '{\"lr\": 5e-4}')")
    parser.add_argument("--perturb", type=optimizer_params, default={}, metavar="JSON",
                        help="optimizer params given to dsopt only, PyTorch keeping the configuration's "
                        "(e.g. '{\"betas\": [0.9, 0.99]}'): a check of the check, which must then fail")
    parser.add_argument("--same-at-O3", dest="same_at_o3", default="", metavar="NAMES",
                        help="comma-separated model names whose program is also built at --host-opt-level=3 "
                        "(with --no-forward) and must train bit-identically to the one --dsopt built")
    parser.add_argument("--forward", action="store_true",
                        help="also run the build's forward program on the export's example inputs: loss and "
                        f"logits within rel {FORWARD_RTOL:g} of PyTorch's (check_zoo_forward.py's rule), widened by "
                        f"{NOISE_FACTOR} x PyTorch's own float32-vs-float64 drift")
    args = parser.parse_args()

    with open(os.path.join(args.zoo, "zoo.json")) as f:
        zoo = json.load(f)
    only = set(filter(None, args.only.split(",")))
    exports = [(entry, key) for entry in zoo for key in ("file", "nofold_file") if entry.get(key)]
    unknown = only - {e["name"] for e, _ in exports} - {e[k] for e, k in exports}
    if unknown:
        parser.error(f"--only: {', '.join(sorted(unknown))} not in {args.zoo}/zoo.json")
    args.same_at_o3 = set(filter(None, args.same_at_o3.split(",")))
    unknown = args.same_at_o3 - {e["name"] for e, _ in exports}
    if unknown:
        parser.error(f"--same-at-O3: {', '.join(sorted(unknown))} not in {args.zoo}/zoo.json")
    jobs = [(args, entry, key, config, gas)
            for entry, key in exports if not only or only & {entry["name"], entry[key]}
            for config, gas in case_names(args.configs)]

    failures = 0
    # spawn: each worker imports torch afresh instead of inheriting a forked copy.
    with multiprocessing.get_context("spawn").Pool(max(1, min(args.jobs, len(jobs)))) as pool:
        for line, failed, _ in pool.imap(run_case, jobs):
            print(line, flush=True)
            failures += failed
    print(f"zoo train: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
