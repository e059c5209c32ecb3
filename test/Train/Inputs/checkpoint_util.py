#!/usr/bin/python3
"""Helpers of checkpoint.test (docs/checkpoints.md).

  dropout IN OUT             IN with a training-mode Dropout (ratio 0.25)
                             after its first Relu: a model that draws masks
  rename IN OUT OLD NEW      IN with initializer OLD called NEW: another model
  same-losses FULL PART [--rel R]
                             every step PART's log has holds FULL's loss for
                             that step, bit for bit (or within relative R)
  differ A B                 the two logs' losses differ at some step
  flip FILE OFFSET           inverts the bits of one byte of FILE
  safetensors FILE ONNX      FILE (read here, by the format's definition)
                             holds exactly ONNX's initializers of the same names
  same-initializers A B      two ONNX models' initializers are bit-identical
  loss-scales LOG            each logged step's loss_scale ("none" for a
                             step without one: a run that does not scale)
"""
import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            entry = json.loads(line)
            if "step" in entry:
                out[entry["step"]] = entry["loss"]
    return out


def same_losses(full, part, rel):
    a, b = losses(full), losses(part)
    if not b:
        sys.exit(f"{part} logs no step")
    worst = 0.0
    for step, loss in sorted(b.items()):
        if step not in a:
            sys.exit(f"{full} has no step {step}")
        err = abs(loss - a[step]) / max(abs(a[step]), 1e-30)
        worst = max(worst, err)
        if (rel == 0 and loss != a[step]) or err > rel:
            sys.exit(f"step {step}: loss {loss!r}, the uninterrupted run's {a[step]!r}")
    kind = "bit-identical" if worst == 0 else f"max rel err {worst:.1e} <= {rel}"
    print(f"steps {min(b)}..{max(b)}: losses {kind}")


def initializers(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def read_safetensors(path):
    data = open(path, "rb").read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
              "BOOL": np.bool_}
    out = {}
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, stop = entry["data_offsets"]
        out[name] = np.frombuffer(body[begin:stop], dtype=dtypes[entry["dtype"]]).reshape(
            entry["shape"])
        end = max(end, stop)
    if end != len(body):
        sys.exit(f"{path}: data is {len(body)} bytes, the header covers {end}")
    return header.get("__metadata__", {}), out


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "dropout":
        m = onnx.load(args[0])
        g = m.graph
        at = next(i for i, n in enumerate(g.node) if n.op_type == "Relu")
        relu = g.node[at]
        old = relu.output[0]
        relu.output[0] = old + "_pre_dropout"
        g.initializer.append(numpy_helper.from_array(np.array(0.25, np.float32), "drop_ratio"))
        g.initializer.append(numpy_helper.from_array(np.array(True), "drop_training"))
        g.node.insert(at + 1, helper.make_node(
            "Dropout", [relu.output[0], "drop_ratio", "drop_training"], [old], name="/Dropout"))
        onnx.checker.check_model(m)
        onnx.save(m, args[1])
    elif cmd == "rename":
        m = onnx.load(args[0])
        src, dst = args[2], args[3]
        for t in m.graph.initializer:
            if t.name == src:
                t.name = dst
        for n in m.graph.node:
            for i, name in enumerate(n.input):
                if name == src:
                    n.input[i] = dst
        onnx.save(m, args[1])
    elif cmd == "same-losses":
        rel = float(args[3]) if len(args) > 3 and args[2] == "--rel" else 0.0
        same_losses(args[0], args[1], rel)
    elif cmd == "staging":
        # The log's checkpoint_staging against the checkpoint the run wrote:
        # each rank's planned snapshot bytes, its measured high-water mark
        # and the data its shard file holds (size less magic, header length,
        # header and CRC trailer) must all be equal, and equal to the
        # compiler's plan (plan.json: ranks[].memory_spaces.host's
        # checkpoint_staging_bytes).
        log, ckpt, mode, plan_path = args[0], args[1], args[2], args[3]
        with open(log) as f:
            summary = [json.loads(l) for l in f if '"summary"' in l][-1]
        with open(plan_path) as f:
            plan = {rank["rank"]: rank for rank in json.load(f)["ranks"]}
        staging = summary["checkpoint_staging"]
        if staging["background"] != (mode == "background"):
            sys.exit(f"{log}: background writes {staging['background']}, expected {mode}")
        if sorted(plan) != list(range(len(staging["ranks"]))):
            sys.exit(f"{plan_path} plans ranks {sorted(plan)}, the run had {len(staging['ranks'])}")
        for r, entry in enumerate(staging["ranks"]):
            with open(os.path.join(ckpt, f"rank_{r}.bin"), "rb") as f:
                data = f.read()
            header = int.from_bytes(data[8:16], "little")
            held = len(data) - 16 - header - 4
            planned = plan[r]["memory_spaces"]["host"]["checkpoint_staging_bytes"]
            if not (planned == entry["planned_bytes"] == entry["peak_bytes"] == held) or held <= 0:
                sys.exit(f"rank {r}: plan.json {planned}, runtime's plan {entry['planned_bytes']}, "
                         f"peak {entry['peak_bytes']}, file data {held}")
        print(f"staging: {len(staging['ranks'])} ranks, {mode}: plan.json = planned = peak = file data")
    elif cmd == "differ":
        a, b = losses(args[0]), losses(args[1])
        if not a or all(a[s] == b.get(s) for s in a):
            sys.exit(f"{args[0]} and {args[1]} log the same losses")
        print("losses differ")
    elif cmd == "flip":
        with open(args[0], "r+b") as f:
            f.seek(int(args[1]))
            byte = f.read(1)
            f.seek(int(args[1]))
            f.write(bytes([byte[0] ^ 0xFF]))
    elif cmd == "safetensors":
        meta, tensors = read_safetensors(args[0])
        ref = initializers(args[1])
        for name, value in tensors.items():
            if name not in ref:
                sys.exit(f"{name}: not an initializer of {args[1]}")
            if value.dtype != ref[name].dtype or value.shape != ref[name].shape or \
                    value.tobytes() != ref[name].tobytes():
                sys.exit(f"{name}: differs from {args[1]}")
        print(f"{len(tensors)} tensors equal, step {meta.get('dsopt_step')}")
    elif cmd == "same-initializers":
        a, b = initializers(args[0]), initializers(args[1])
        if a.keys() != b.keys():
            sys.exit("different initializer names")
        for name in a:
            if a[name].tobytes() != b[name].tobytes():
                sys.exit(f"{name} differs")
        print(f"{len(a)} initializers equal")
    elif cmd == "loss-scales":
        with open(args[0]) as f:
            steps = [json.loads(line) for line in f]
        steps = [e for e in steps if "step" in e]
        if not steps:
            sys.exit(f"{args[0]} logs no step")
        for e in steps:
            print(f"step {e['step']}: loss_scale {e.get('loss_scale', 'none')}")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
