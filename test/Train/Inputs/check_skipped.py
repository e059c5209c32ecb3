#!/usr/bin/python3
"""Checks a run with `train --on-nonfinite skip`: from its first skipped step
on (the run diverges there and stays diverged), every step is skipped with a
NaN gradient norm, the learning rate stops where the schedule stood (it
advances only with applied updates), and a summary line, if any, counts the
skipped steps.

    check_skipped.py LOG.jsonl FIRST_SKIPPED STEPS
"""
import json
import math
import sys

log_path, first, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = [json.loads(line) for line in open(log_path)]
summary = [line for line in lines if line.get("summary")]
log = [line for line in lines if not line.get("summary")]
if [e["step"] for e in log] != list(range(1, steps + 1)):
    sys.exit(f"steps {[e['step'] for e in log]}, expected 1..{steps}")
for e in log:
    want = e["step"] >= first
    if e["skipped"] is not want:
        sys.exit(f"step {e['step']}: skipped is {e['skipped']}, expected {want}")
    if want and not math.isnan(e["grad_norm"]):
        sys.exit(f"step {e['step']}: a skipped step reports grad_norm {e['grad_norm']}")
    if not want and not math.isfinite(e["grad_norm"]):
        sys.exit(f"step {e['step']}: an applied step reports grad_norm {e['grad_norm']}")
rates = {e["lr"] for e in log if e["skipped"]}
if len(rates) != 1:
    sys.exit(f"the skipped steps' learning rates differ: {sorted(rates)}")
if summary and summary[-1].get("skipped_steps") != steps - first + 1:
    sys.exit(f"the summary counts {summary[-1].get('skipped_steps')} skipped steps, "
             f"expected {steps - first + 1}")
print(f"steps {first}..{steps} skipped at lr {rates.pop():g}; "
      f"{'summary counts them' if summary else 'no summary line'}")
