#!/usr/bin/python3
"""Checks a train run: its JSON log against plan.json, the loss going down,
and the saved model against the source model."""
import json
import sys

import numpy as np
import onnx
from onnx import numpy_helper

plan_path, log_path, source_path, trained_path = sys.argv[1:5]
plan = json.load(open(plan_path))
log = [json.loads(line) for line in open(log_path)]
keys = {"step", "loss", "lr", "grad_norm", "step_time_s", "arena_peak_bytes"}
for i, entry in enumerate(log):
    missing = keys - set(entry)
    if missing:
        sys.exit(f"log line {i + 1} lacks {sorted(missing)}")
    if entry["step"] != i + 1:
        sys.exit(f"log line {i + 1} is step {entry['step']}")
planned = plan["train"]["ranks"][0]["arena_bytes"]
if any(entry["arena_peak_bytes"] != planned for entry in log):
    sys.exit(f"measured arena differs from the plan's {planned}")
first = log[0]["loss"]
last = np.mean([entry["loss"] for entry in log[-3:]])
if not last < first:
    sys.exit(f"the loss did not go down: {first} -> {last}")

source = {t.name: numpy_helper.to_array(t) for t in onnx.load(source_path).graph.initializer}
trained_model = onnx.load(trained_path)
onnx.checker.check_model(trained_model)
trained = {t.name: numpy_helper.to_array(t) for t in trained_model.graph.initializer}
if set(source) != set(trained):
    sys.exit(f"initializer names differ: {sorted(set(source) ^ set(trained))}")
changed = 0
for name, value in source.items():
    if trained[name].shape != value.shape or trained[name].dtype != value.dtype:
        sys.exit(f"{name}: {value.dtype}{value.shape} became {trained[name].dtype}{trained[name].shape}")
    changed += not np.array_equal(trained[name], value)
print(f"{len(log)} steps; arena = plan; loss {first:.4f} -> {last:.4f} (down); "
      f"{changed} trained initializers changed, names and shapes kept")
