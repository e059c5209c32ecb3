#!/usr/bin/python3
"""Adds a TrainingInfoProto whose update bindings name the given initializers."""
import sys

import onnx
from onnx import helper

model = onnx.load(sys.argv[1])
info = model.training_info.add()
info.algorithm.CopyFrom(helper.make_graph([], "algorithm", [], []))
for name in sys.argv[3:]:
    binding = info.update_binding.add()
    binding.key = name
    binding.value = name + "_new"
onnx.save(model, sys.argv[2])
