#!/usr/bin/python3
"""Writes a small training graph whose skip connection spans pipeline stages.

    skip_model.py OUT.onnx

x -> four blocks (MatMul + Relu, same width, so each costs the same) whose
first output is also added to the last block's output (the skip), then a
MatMul to one output, the mean square as the loss. Cut into 4 stages, the
skip is a value of stage 0 read on stage 3: one transfer from 0 to 3.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BATCH, WIDTH, BLOCKS = 8, 32, 4


def main():
    rng = np.random.default_rng(0)
    inits, nodes = [], []
    for i in range(BLOCKS):
        w = rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) * 0.1
        inits.append(numpy_helper.from_array(w, f"w{i}"))
    head = rng.standard_normal((WIDTH, 1)).astype(np.float32) * 0.1
    inits.append(numpy_helper.from_array(head, "head"))
    prev = "x"
    for i in range(BLOCKS):
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"],
                                      name=f"block{i}/matmul"))
        nodes.append(helper.make_node("Relu", [f"mm{i}"], [f"h{i}"],
                                      name=f"block{i}/relu"))
        prev = f"h{i}"
    nodes.append(helper.make_node("Add", [prev, "h0"], ["skip"], name="skip/add"))
    nodes.append(helper.make_node("MatMul", ["skip", "head"], ["y"], name="head/matmul"))
    nodes.append(helper.make_node("Mul", ["y", "y"], ["sq"], name="loss/square"))
    nodes.append(helper.make_node("ReduceMean", ["sq"], ["loss"], name="loss/mean",
                                  keepdims=0))
    graph = helper.make_graph(
        nodes, "skip",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, WIDTH])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, sys.argv[1])


if __name__ == "__main__":
    main()
