#!/usr/bin/python3
"""Checks that a 16-bit training step makes no f32 copy of a gradient.

    check_no_grad_copy.py PLAN

PLAN is plan.json of a 16-bit program (--precision bf16/fp16). It counts
the parameter tensors updated (a ds.adamw_multi updates several). In its
@optimizer_step every op but the updates themselves must yield only 16-bit
tensors or f32 scalars: the updates read each 16-bit gradient as it is and
scale it (clipping, 1/k, fp16's 1/loss-scale) element by element through
their grad_scale operand. Any other op with an f32 result of more than one
element (a cast of an accumulator to f32, a scaled copy) is reported and
the check fails, as it does when the step has no update at all.
"""
import json
import sys

UPDATES = {"ds.adamw", "ds.sgd", "ds.lion", "ds.adamw_multi"}
# Results per updated tensor: a list update (ds.adamw_multi) counts each of
# its tensors; with the 16-bit copies of its f32 parameters (the last
# results, ds-fuse-param-copy) it has one more per tensor.
LIST_UPDATES = {"ds.adamw_multi": 3}


def tensors_updated(op):
    per_tensor = LIST_UPDATES[op["op"]]
    results = op["results"]
    if results and results[0]["dtype"] != results[-1]["dtype"]:
        per_tensor += 1
    return len(op["results"]) // per_tensor


def load(path):
    with open(path) as f:
        doc = json.load(f)
    ranks = doc.get("train", {}).get("ranks")
    if not ranks:
        sys.exit(f"check_no_grad_copy: {path} is not a training plan")
    return doc


def optimizer_ops(doc):
    for fn in doc["train"]["ranks"][0]["functions"]:
        if fn["name"] == "optimizer_step":
            return fn["ops"]
    sys.exit("check_no_grad_copy: no optimizer_step in the plan")


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


doc = load(sys.argv[1])
ops = optimizer_ops(doc)
updates = sum(tensors_updated(op) if op["op"] in LIST_UPDATES else 1
              for op in ops if op["op"] in UPDATES)
copies = [(op["op"], op.get("node", ""), r["shape"]) for op in ops if op["op"] not in UPDATES
          for r in op["results"] if r["dtype"] == "f32" and numel(r["shape"]) > 1]
for op, node, shape in copies:
    print(f"check_no_grad_copy: {op} ({node}) makes an f32 tensor of shape {shape}")
print(f"optimizer_step: {updates} updates, {len(copies)} f32 gradient copies")
sys.exit(1 if copies or updates == 0 else 0)
