#!/usr/bin/python3
"""fp16 training: dsopt's dynamic loss scaler against DeepSpeed's rule.

One zoo model (MODEL), one batch of data repeated every step (so a step's
loss depends only on the updates applied before it, and a skipped step
changes nothing), AdamW with gradient clipping, fp16 with DeepSpeed's
dynamic loss scaler.

  * scaler run: a program with initial_scale_power 32 and
    loss_scale_window WINDOW trains STEPS steps. Its first steps overflow
    (the scale is far above what fp16 gradients hold) and are skipped; the
    scale halves its way down, then doubles after every WINDOW clean steps
    and halves again when it overflows. Checks:
      - deepspeed_loss_scaler.py, fed each step's overflow flag (the log's
        "skipped"), reproduces the logged loss_scale sequence exactly;
      - the run overflowed at the start, and later both doubled and halved
        its scale;
      - every applied step's loss is within FP32_RTOL of PyTorch's fp32
        run after as many updates (train_reference.py);
      - train's summary counts the skipped steps; a skipped step has no
        gradient norm and the text log says "overflow, skipping step;
        loss scale A \u2192 B" at the first halving.
  * resumed: the scaler program run to step RESUME_AT with a checkpoint,
    then resumed to STEPS, logs the whole run's scales from there on.
  * dp 2 zero 2, pp 2 1f1b: the same scaler on two data-parallel ranks
    under ZeRO stage 2 and on a two-stage pipeline, with twice the batch:
    the logged scales follow DeepSpeed's rule fed the run's overflow flags,
    and the losses PyTorch's fp32 run.
  * minimum run: a program whose min_loss_scale is its initial scale
    (2^32) overflows at step 2 (step 1 uses up the hysteresis) and stops
    with DeepSpeed's error, naming the step, before the weights change.
Prints one line per check and a final count; exits 1 on any failure.
"""
import argparse
import json
import math
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from check_zoo_dp import MPIRUN, read_log, rel, run  # noqa: E402
from deepspeed_loss_scaler import scale_sequence  # noqa: E402

MODEL = "mlp"
STEPS = 36
WINDOW = 4
FP32_RTOL = 5e-2
RESUME_AT = 20  # the resumed run's checkpoint
MIN_APPLIED = 12  # applied steps the loss check needs after the scale settled

CONFIG = {
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 2e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
    "gradient_clipping": 1.0,
}
SCALER = {"enabled": True, "loss_scale": 0, "initial_scale_power": 32,
          "loss_scale_window": WINDOW, "hysteresis": 2, "min_loss_scale": 1}
AT_MINIMUM = dict(SCALER, min_loss_scale=2.0 ** 32)


def compile_program(args, work: Path, name: str, config: Dict, model_path: Path,
                    flags: List[str] = ()) -> Path:
    (work / f"{name}.json").write_text(json.dumps(config, indent=2) + "\n")
    out = work / name
    why = run([*shlex.split(args.dsopt), str(model_path), "--config", str(work / f"{name}.json"),
               *flags, *args.frozen, "--no-forward", "-o", str(out)])
    if why:
        raise RuntimeError(f"dsopt ({name}): {why}")
    return out


def loss_error(log: List[Dict], fp32) -> Tuple[float, int]:
    """(worst relative loss error, applied steps): each applied step's loss
    against the fp32 run's after as many updates."""
    worst, applied = 0.0, 0
    for entry in log:
        if entry["skipped"]:
            continue
        worst = max(worst, rel(entry["loss"], fp32.log[applied]["loss"]))
        applied += 1
    return worst, applied


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--zoo", required=True, help="directory of an export_zoo.py export")
    parser.add_argument("--work", required=True, help="scratch directory")
    parser.add_argument("--dsopt", default="dsopt", help="dsopt command (split like a shell would)")
    args = parser.parse_args()

    import onnx
    from initializer_map import map_initializers
    from make_train_data import make_train_data, write_train_data
    from models import ZOO
    from train_reference import train

    entries = {e["name"]: e for e in json.loads((Path(args.zoo) / "zoo.json").read_text())}
    model = ZOO[MODEL]
    model_path = Path(args.zoo) / entries[MODEL]["file"]
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    micro = model.config.batch
    data = make_train_data(model, 1, micro)
    write_train_data(data, work / "data")
    frozen = map_initializers(onnx.load(str(model_path)), model.build()).frozen
    args.frozen = ["--frozen", ",".join(frozen)] if frozen else []
    base = dict(CONFIG, train_micro_batch_size_per_gpu=micro, gradient_accumulation_steps=1,
                train_batch_size=micro)
    fp32 = train(model, base, data, STEPS)

    failures: List[str] = []

    def check(ok: bool, label: str, detail: str) -> None:
        print(f"fp16 {label}: {'ok' if ok else 'FAIL'} ({detail})")
        if not ok:
            failures.append(label)

    # The scaler run.
    program = compile_program(args, work, "scaler", dict(base, fp16=SCALER), model_path)
    log_path = work / "scaler.jsonl"
    command = [str(program / "train"), "--data", str(work / "data"), "--steps", str(STEPS),
               "--threads", "1", "--log-json", str(log_path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        print(f"fp16 scaler run: FAIL (exit {done.returncode}: {done.stderr.strip()[-600:]})")
        print("fp16 scaler: 1 failures")
        return 1
    log, _ = read_log(log_path)
    flags = [bool(e["skipped"]) for e in log]
    logged = [e.get("loss_scale") for e in log]
    want, stopped = scale_sequence(flags, **{k: v for k, v in SCALER.items() if k != "enabled"})
    check(len(log) == STEPS and stopped is None and logged == want, "scale sequence",
          f"dsopt {logged}; DeepSpeed's rule {want}")
    changes = [(a, b) for a, b in zip(logged, logged[1:]) if a != b]
    settled = next((i for i, f in enumerate(flags) if not f), len(flags))
    doubled = sum(b > a for a, b in changes)
    halved_later = sum(b < a for a, b in zip(logged[settled:], logged[settled + 1:]))
    check(settled > 0 and doubled > 0 and halved_later > 0, "overflow, halve, double",
          f"{settled} skipped steps from 2^32 down to {logged[min(settled, len(logged) - 1)]:g}, "
          f"then {doubled} doublings and {halved_later} halvings; {sum(flags)} skipped in all")
    worst, applied = loss_error(log, fp32)
    norms = [e["grad_norm"] for e in log if e["skipped"]
             and e["grad_norm"] is not None and not math.isnan(e["grad_norm"])]
    check(worst <= FP32_RTOL and applied >= MIN_APPLIED and not norms, "losses",
          f"worst rel {worst:.1e} over {applied} applied steps (<= {FP32_RTOL}); "
          f"skipped steps' grad_norm: {norms or 'NaN'}")
    counted = f"skipped {sum(flags)} of {STEPS} steps"
    check(counted in done.stderr, "summary", f"'{counted}' in: {done.stderr.strip()[:300]}")
    first_halving = next((i for i, (a, b) in enumerate(zip(logged, logged[1:])) if b < a), None)
    text = (f"step {first_halving + 1}: overflow, skipping step; loss scale "
            f"{logged[first_halving]:.0f} \u2192 {logged[first_halving + 1]:.0f}"
            if first_halving is not None else "(no halving)")
    check(text in done.stdout, "log wording", text)

    # Resumed: a checkpoint at step RESUME_AT keeps the scaler's state, so
    # the run resumed from it logs the same scales as the whole run.
    resumed_log = work / "resumed.jsonl"
    why = run([str(program / "train"), "--data", str(work / "data"), "--steps", str(RESUME_AT),
               "--threads", "1", "--save-dir", str(work / "ckpt"), "--quiet"])
    why = why or run([str(program / "train"), "--data", str(work / "data"), "--steps", str(STEPS),
                      "--threads", "1", "--resume", str(work / "ckpt"), "--log-json",
                      str(resumed_log), "--quiet"])
    resumed = [e.get("loss_scale") for e in read_log(resumed_log)[0]] if not why else []
    check(not why and resumed == logged[RESUME_AT:], "resumed",
          why or f"scales after step {RESUME_AT}: {resumed}, the whole run's {logged[RESUME_AT:]}")

    # Two ranks on twice the batch: data-parallel under ZeRO 2 (an overflow
    # on either rank skips the step on both), and a two-stage 1F1B pipeline
    # of two micro-batches (the last stage's backward binds the scale). The
    # scales follow DeepSpeed's rule fed the run's overflow flags, and the
    # losses PyTorch's fp32 run on the global batch.
    data2 = make_train_data(model, 1, 2 * micro)
    write_train_data(data2, work / "data2")
    fp32_2 = train(model, dict(base, train_batch_size=2 * micro, gradient_accumulation_steps=2),
                   data2, STEPS)
    layouts = [("dp 2 zero 2", ["--dp", "2"], {"zero_optimization": {"stage": 2}}),
               ("pp 2 1f1b", ["--pp", "2"], {"gradient_accumulation_steps": 2})]
    for label, flags, extra in layouts:
        config2 = dict(base, train_batch_size=2 * micro, fp16=SCALER, **extra)
        program2 = compile_program(args, work, label.replace(" ", "-"), config2, model_path, flags)
        log2_path = work / f"{label.replace(' ', '-')}.jsonl"
        why = run([*MPIRUN, "-np", "2", str(program2 / "train"), "--data", str(work / "data2"),
                   "--steps", str(STEPS), "--threads", "1", "--log-json", str(log2_path),
                   "--quiet"])
        if why:
            check(False, label, why)
            continue
        log2, _ = read_log(log2_path)
        logged2 = [e.get("loss_scale") for e in log2]
        want2, stopped2 = scale_sequence([bool(e["skipped"]) for e in log2],
                                         **{k: v for k, v in SCALER.items() if k != "enabled"})
        worst2, applied2 = loss_error(log2, fp32_2)
        check(len(log2) == STEPS and stopped2 is None and logged2 == want2 and
              any(e["skipped"] for e in log2) and worst2 <= FP32_RTOL and
              applied2 >= MIN_APPLIED, label,
              f"scales {logged2}, DeepSpeed's rule {want2}; loss worst rel {worst2:.1e} over "
              f"{applied2} applied steps")

    # The minimum run: stops at step 2 with the error.
    program = compile_program(args, work, "minimum", dict(base, fp16=AT_MINIMUM), model_path)
    done = subprocess.run([str(program / "train"), "--data", str(work / "data"), "--steps", "4",
                           "--threads", "1"], capture_output=True, text=True, timeout=600)
    wanted = "overflow at step 2 with the loss scale already at its minimum"
    check(done.returncode != 0 and wanted in done.stderr and "step 3/" not in done.stdout,
          "at the minimum", f"exit {done.returncode}: {done.stderr.strip()[-300:]}")

    print(f"fp16 scaler: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
