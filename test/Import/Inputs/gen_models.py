#!/usr/bin/python3
"""Writes importer test models that ONNX's textual syntax cannot express.

Usage: gen_models.py NAME OUT.onnx

onnx 1.12's parser names no nodes, has no float16/double literals, cannot
leave an attribute's type unset (as old exporters did) and has no sparse or
string constants; these models need onnx.helper.
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8, producer_name="gen_models")


def tensor(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def named_error():
    """A named node whose Reshape cannot work: the error names the node."""
    shape = numpy_helper.from_array(np.array([4, 2], dtype=np.int64), "shape")
    return model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="flatten_head")],
                 [tensor("x", TensorProto.FLOAT, [2, 3])],
                 [tensor("y", TensorProto.FLOAT, [4, 2])], [shape])


def half_constants():
    """float16 values in raw_data, bfloat16 in int32_data, a DOUBLE constant cast to
    FLOAT, and an INT32 shape: all decode and fold."""
    half = numpy_helper.from_array(np.array([0.5, -2.0, 65504.0], dtype=np.float16), "half")
    # make_tensor stores bfloat16 bit patterns in int32_data.
    bf16 = helper.make_tensor("bf16", TensorProto.BFLOAT16, [2], [1.0, -3.0])
    dbl = helper.make_node("Constant", [], ["dbl"], value=numpy_helper.from_array(
        np.array([0.1, 2.5], dtype=np.float64)))
    shape32 = numpy_helper.from_array(np.array([3, 1], dtype=np.int32), "shape32")
    nodes = [
        dbl,
        helper.make_node("Add", ["h", "half"], ["hs"]),
        helper.make_node("Mul", ["b", "bf16"], ["bs"]),
        helper.make_node("Cast", ["dbl"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "f"], ["xs"]),
        helper.make_node("Cast", ["shape32"], ["shape64"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["h", "shape64"], ["hr"]),
    ]
    return model(nodes,
                 [tensor("h", TensorProto.FLOAT16, [3]), tensor("b", TensorProto.BFLOAT16, [2]),
                  tensor("x", TensorProto.FLOAT, [2])],
                 [tensor("hs", TensorProto.FLOAT16, [3]), tensor("bs", TensorProto.BFLOAT16, [2]),
                  tensor("xs", TensorProto.FLOAT, [2]), tensor("hr", TensorProto.FLOAT16, [3, 1])],
                 [half, bf16, shape32])


def untyped_attributes():
    """Attributes with their type left UNDEFINED, as old exporters wrote
    them: the populated field tells the type."""
    softmax = helper.make_node("Softmax", ["x"], ["y"])
    softmax.attribute.append(onnx.AttributeProto(name="axis", i=0))
    leaky = helper.make_node("LeakyRelu", ["x"], ["z"])
    leaky.attribute.append(onnx.AttributeProto(name="alpha", f=0.25))
    transpose = helper.make_node("Transpose", ["x"], ["t"])
    transpose.attribute.append(onnx.AttributeProto(name="perm", ints=[1, 0]))
    return model([softmax, leaky, transpose], [tensor("x", TensorProto.FLOAT, [2, 3])],
                 [tensor("y", TensorProto.FLOAT, [2, 3]), tensor("z", TensorProto.FLOAT, [2, 3]),
                  tensor("t", TensorProto.FLOAT, [3, 2])])


def string_constant():
    """A STRING constant cannot be computed on."""
    value = helper.make_tensor("s", TensorProto.STRING, [1], [b"hello"])
    return model([helper.make_node("Constant", [], ["y"], name="words", value=value)],
                 [], [tensor("y", TensorProto.STRING, [1])])


def sparse_constant():
    """Constant's sparse_value is not supported."""
    values = numpy_helper.from_array(np.array([1.0], dtype=np.float32), "v")
    indices = numpy_helper.from_array(np.array([0], dtype=np.int64), "i")
    sparse = helper.make_sparse_tensor(values, indices, [4])
    node = helper.make_node("Constant", [], ["y"], name="sparse", sparse_value=sparse)
    return model([node], [], [tensor("y", TensorProto.FLOAT, [4])])


def double_reaches_compute():
    """A DOUBLE constant that reaches compute without a Cast."""
    node = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
        np.array([1.0, 2.0], dtype=np.float64)))
    add = helper.make_node("Add", ["x", "c"], ["y"], name="add_double")
    return model([node, add], [tensor("x", TensorProto.FLOAT, [2])],
                 [tensor("y", TensorProto.FLOAT, [2])])


def float8_input():
    """A graph input of FLOAT8E4M3FN (17, IR version 9), a type newer than
    onnx 1.12's TensorProto enum: the error names it."""
    x = tensor("x", TensorProto.FLOAT, [2])
    x.type.tensor_type.elem_type = 17
    return model([helper.make_node("Identity", ["x"], ["y"])], [x],
                 [tensor("y", TensorProto.FLOAT, [2])])


MODELS = {f.__name__: f for f in (named_error, half_constants, untyped_attributes,
                                  string_constant, sparse_constant,
                                  double_reaches_compute, float8_input)}


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in MODELS:
        sys.exit(f"usage: gen_models.py {{{'|'.join(MODELS)}}} OUT.onnx")
    onnx.save(MODELS[sys.argv[1]](), sys.argv[2])


if __name__ == "__main__":
    main()
