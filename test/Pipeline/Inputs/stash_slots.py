#!/usr/bin/python3
"""Per plan.json: the stash slots of each virtual stage's program and the
simulated peak in-flight micro-batches of that stage, which must agree.

    stash_slots.py PLAN.json...
"""
import json
import sys

for path in sys.argv[1:]:
    plan = json.load(open(path))
    slots = {}
    for rank in plan["train"]["ranks"]:
        for pool in rank["pipeline"]["pools"]:
            if pool["kind"] == "stash":
                slots[pool["stage"]] = pool["slots"]
    stages = plan["pipeline"]["per_stage"]
    peak = [s["peak_in_flight"] for s in stages]
    counted = [slots.get(s["stage"], 0) for s in stages]
    if counted != peak:
        sys.exit(f"{path}: stash slots {counted}, simulated peak in flight {peak}")
    print(f"{plan['pipeline']['schedule']} stash slots {counted} = simulated peak in flight")
