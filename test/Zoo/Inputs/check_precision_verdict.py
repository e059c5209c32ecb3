#!/usr/bin/python3
"""Checks bench/precision_bench.py's verdict against the plans it wrote.

Reads rank 0 of WORK/plan_fp32.json and WORK/plan_bf16.json, recomputes the
bf16 / fp32 activation ratio (activation_bytes) and whether the model
states (param + grad + optimizer bytes) are equal, and checks that the
bench's verdict line (VERDICT_FILE) reports that ratio and says PASS
exactly when the states are equal and the ratio is within TARGET. Prints
the recomputed ratio and what the target says of it.

    check_precision_verdict.py WORK VERDICT_FILE TARGET
"""
import json
import re
import sys
from pathlib import Path

work, verdict_file, target = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])


def rank0(name):
    return json.loads((work / name).read_text())["ranks"][0]


f32, b16 = rank0("plan_fp32.json"), rank0("plan_bf16.json")
states = [r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"] for r in (f32, b16)]
ratio = b16["activation_bytes"] / f32["activation_bytes"]
meets = states[0] == states[1] and ratio <= target
line = next((l for l in verdict_file.read_text().splitlines() if l.startswith("verdict:")), None)
if line is None:
    sys.exit(f"no verdict line in {verdict_file}")
m = re.search(r"activations bf16/fp32 ([0-9.]+)", line)
if not m or abs(float(m.group(1)) - ratio) > 5e-4:
    sys.exit(f"the verdict '{line}' does not report the plans' ratio {ratio:.3f}")
if line.startswith("verdict: PASS") != meets:
    sys.exit(f"the verdict '{line}' disagrees with the plans: ratio {ratio:.3f}, "
             f"states {'equal' if states[0] == states[1] else 'differ'}, target {target}")
print(f"plans: activations bf16/fp32 {ratio:.3f}, model states "
      f"{'equal' if states[0] == states[1] else 'differ'}; target {target}: "
      f"{'met' if meets else 'missed'}")
