#!/usr/bin/python3
"""same_constant.py A.onnx B.onnx NAME: checks that the Constant node whose
output is NAME holds the same tensor (element type, shape, bytes) in both
models; prints what it found and exits 1 if not."""
import sys

import onnx
from onnx import numpy_helper


def constant(path, name):
    for node in onnx.load(path).graph.node:
        if node.op_type == "Constant" and list(node.output) == [name]:
            (attr,) = node.attribute
            return numpy_helper.to_array(attr.t)
    sys.exit(f"{path}: no Constant node computes '{name}'")


def main():
    path_a, path_b, name = sys.argv[1:]
    a, b = constant(path_a, name), constant(path_b, name)
    if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
        print(f"Constant '{name}' differs: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}")
        return 1
    print(f"Constant '{name}' unchanged: {a.dtype} {list(a.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
