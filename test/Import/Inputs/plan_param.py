#!/usr/bin/python3
"""plan_param.py PLAN.json NAME MODEL.onnx: describes parameter NAME in each
program of the plan (forward, train), and checks its file offset against the
byte offset of the Constant node's raw_data in MODEL.onnx (found by search
for the tensor's bytes). Exits 1 if the parameter is missing."""
import json
import sys

import onnx
from onnx import numpy_helper


def main():
    plan_path, name, model_path = sys.argv[1:]
    plan = json.load(open(plan_path))
    model = onnx.load(model_path, load_external_data=False)
    raw = None
    for node in model.graph.node:
        if node.op_type == "Constant" and list(node.output) == [name]:
            raw = node.attribute[0].t.raw_data
    data = open(model_path, "rb").read()
    status = 0
    for program in ("forward", "train"):
        params = [p for r in plan[program]["ranks"] for p in r["params"] if p["name"] == name]
        if not params:
            print(f"{program}: no parameter '{name}'")
            status = 1
            continue
        p = params[0]
        persistent = p["offset"] + p["bytes"] <= plan[program]["ranks"][0]["persistent_bytes"]
        where = p.get("file_offset")
        at_raw = raw is not None and where is not None and data[where:where + len(raw)] == raw
        print(f"{program}: {name} {p['dtype']} {p['shape']} {p['bytes']} bytes, "
              f"{'persistent' if persistent else 'NOT PERSISTENT'}, "
              f"{'trainable' if p['trainable'] else 'not trainable'}, file {p.get('file')} "
              f"{'at the tensor' + chr(39) + 's raw_data' if at_raw else 'NOT at the raw_data'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
