#!/usr/bin/env python3
"""A stand-in for a benchmark program's `train` (gpu-bench-settings.test):
writes --steps lines of --log-json whose step time is 100 ms times a factor
per runtime setting in the environment, and whose loss moves with one."""
import json
import os
import sys

FACTORS = {  # (variable, value): (step factor, loss added)
    ("DSRT_BIAS_GRAD", "separate"): (0.95, 0.0),
    ("DSRT_CUBLASLT_TUNE", "8"): (1.10, 0.0),
    ("DSRT_ATTENTION_KERNEL", "rows32"): (0.995, 0.0),
    ("DSRT_ATTENTION_GRAD", "atomic"): (0.90, 1.0),
    ("DSRT_ATTENTION_FORWARD_BLOCKS", "3"): (0.97, 0.0),
}
args = sys.argv[1:]
steps = int(args[args.index("--steps") + 1])
log = args[args.index("--log-json") + 1]
step, loss = 0.1, 5.0
for (name, value), (factor, added) in FACTORS.items():
    if os.environ.get(name) == value:
        step *= factor
        loss += added
with open(log, "w") as f:
    for i in range(steps):
        f.write(json.dumps({"step": i + 1, "step_time_s": step * (3 if i == 0 else 1),
                            "loss": loss}) + "\n")
