#!/usr/bin/python3
"""Checks an fp16 run with gradient accumulation against DeepSpeed's order.

DeepSpeed's engine divides each micro-batch's loss by the accumulation
steps k before the loss scaler multiplies it by the scale s, so the fp16
gradients summed over the k micro-batches are s times the average's, and
overflow is judged on that sum. The model (mean-linear.onnxtxt, x all ones)
has the average gradient [1, 1, 1, 1] at every step, so the accumulated
fp16 gradient is s: finite up to 2^15, infinite from 2^16 (fp16's largest
finite value is 65504). DeepSpeed's scaler (deepspeed_loss_scaler.py) run
on that rule gives each step's scale and overflow; the run's log must show
the same, and an applied step's gradient norm must be 2 (unscaled, the
average's). Summing s-scaled gradients and dividing by k afterwards would
judge overflow on k s instead, and overflow one scale step earlier: the
script prints where that order's first step would differ.

    check_fp16_accumulation.py LOG.jsonl CONFIG.json STEPS
"""
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "test" / "oracles"))
from deepspeed_loss_scaler import DeepSpeedLossScaler  # noqa: E402

FP16_MAX = 65504.0


def expected(fp16, k, steps, divide_first):
    options = {key: v for key, v in fp16.items() if key != "enabled"}
    scaler = DeepSpeedLossScaler(**options)
    out = []
    for _ in range(steps):
        scale = scaler.cur_scale
        accumulated = scale if divide_first else k * scale
        overflow = accumulated > FP16_MAX
        out.append((scale, overflow))
        scaler.update_scale(overflow)
    return out


log_path, config_path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
config = json.loads(Path(config_path).read_text())
k = config["gradient_accumulation_steps"]
log = [json.loads(line) for line in open(log_path) if line.strip()]
log = [e for e in log if not e.get("summary")]
got = [(e["loss_scale"], bool(e["skipped"])) for e in log]
want = expected(config["fp16"], k, steps, divide_first=True)
if got != want:
    sys.exit(f"logged (scale, skipped) {got}\nDeepSpeed's order gives {want}")
for e in log:
    if not e["skipped"] and not math.isclose(e["grad_norm"], 2.0, rel_tol=1e-6):
        sys.exit(f"step {e['step']}: grad_norm {e['grad_norm']}, expected 2 (the average's)")
other = expected(config["fp16"], k, steps, divide_first=False)
first = next((i for i, (a, b) in enumerate(zip(want, other)) if a != b), None)
if first is None:
    sys.exit("the two orders agree on this run: it cannot tell them apart")
print(f"scales and overflows follow DeepSpeed's order over {steps} steps: "
      f"{sum(s for _, s in want)} overflows")
print(f"summing before dividing would differ from step {first + 1}: "
      f"scale {other[first][0]:g}, overflow {other[first][1]}")
