#!/usr/bin/python3
"""Writes the malformed models of the BadInput tests.

    gen_bad.py CASE OUTDIR     writes OUTDIR/CASE.onnx (plus any external
                               data files, directories or symlinks it needs)
    gen_bad.py --list          lists the cases

Every model is built here, at test time, from onnx.helper graphs or raw
bytes, so no binary lives in the repository. Each case breaks exactly one
thing in an otherwise valid model, so the error a test expects can only come
from that one defect.
"""
import argparse
import os
import random
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8
OPSET = 17

CASES = {}


def case(function):
    CASES[function.__name__] = function
    return function


def model_of(graph, opset=OPSET, ir_version=IR_VERSION, opsets=None):
    model = helper.make_model(
        graph, opset_imports=opsets or [helper.make_opsetid("", opset)],
        producer_name="gen_bad")
    model.ir_version = ir_version
    return model


def linear_graph(name="linear"):
    """x[2,4] @ w[4,3] + b[3] -> y[2,3]: small, valid, has parameters."""
    w = numpy_helper.from_array(
        np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    b = numpy_helper.from_array(np.ones(3, dtype=np.float32), "b")
    return helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"], name="matmul"),
         helper.make_node("Add", ["xw", "b"], ["y"], name="add_bias")],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [w, b])


def valid_model():
    return model_of(linear_graph())


def save(model, out, name):
    path = os.path.join(out, name + ".onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def write_bytes(out, name, data):
    with open(os.path.join(out, name + ".onnx"), "wb") as f:
        f.write(data)


def unary_graph(nodes, inputs, outputs, initializers=(), value_info=()):
    return helper.make_graph(nodes, "g", inputs, outputs, list(initializers),
                             value_info=list(value_info))


def fvi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


#===----------------------------------------------------------------------===#
# Files that are not ONNX models
#===----------------------------------------------------------------------===#

@case
def valid(out, name):
    save(valid_model(), out, name)


@case
def not_protobuf_text(out, name):
    # 0x7f ends every field header with wire type 7, which protobuf rejects;
    # plain prose could otherwise pass as unknown fields.
    write_bytes(out, name, b"this is not an ONNX model\x7f\x7f\n")


@case
def not_protobuf_random(out, name):
    rng = random.Random(20260314)
    write_bytes(out, name, bytes(rng.randrange(256) for _ in range(4096)))


@case
def not_protobuf_prose(out, name):
    write_bytes(out, name, b"ir_version: 8\ngraph { node { op_type: 'Relu' } }\n")


@case
def empty_file(out, name):
    write_bytes(out, name, b"")


def serialized_valid():
    return valid_model().SerializeToString()


def graph_field_end(data):
    """Offset just past the ModelProto.graph field (number 7)."""
    pos = 0
    while pos < len(data):
        key, pos = read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = read_varint(data, pos)
        elif wire == 2:
            length, pos = read_varint(data, pos)
            pos += length
            if field == 7:
                return pos
        else:
            raise ValueError("unexpected wire type %d" % wire)
    raise ValueError("no graph field")


def read_varint(data, pos):
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


@case
def truncated_1byte(out, name):
    write_bytes(out, name, serialized_valid()[:1])


@case
def truncated_half(out, name):
    data = serialized_valid()
    write_bytes(out, name, data[:len(data) // 2])


@case
def truncated_last_byte(out, name):
    data = serialized_valid()
    write_bytes(out, name, data[:-1])


@case
def truncated_after_graph(out, name):
    # The opset_import fields follow the graph; the prefix is itself a valid
    # protobuf, so only the missing opset_import gives the cut away.
    data = serialized_valid()
    end = graph_field_end(data)
    assert end < len(data), "opset_import must follow the graph"
    write_bytes(out, name, data[:end])


@case
def truncated_in_graph_header(out, name):
    # Cut between the graph's tag/length and its payload.
    data = serialized_valid()
    end = graph_field_end(data)
    graph_len = len(valid_model().graph.SerializeToString())
    write_bytes(out, name, data[:end - graph_len])


@case
def directory(out, name):
    os.makedirs(os.path.join(out, name + ".onnx"), exist_ok=True)


#===----------------------------------------------------------------------===#
# Model header: IR version, opsets, domains
#===----------------------------------------------------------------------===#

@case
def ir_version_too_new(out, name):
    save(model_of(linear_graph(), ir_version=99), out, name)


@case
def ir_version_too_old(out, name):
    save(model_of(linear_graph(), ir_version=2), out, name)


@case
def ir_version_missing(out, name):
    save(model_of(linear_graph(), ir_version=0), out, name)


@case
def no_default_opset(out, name):
    save(model_of(linear_graph(),
                  opsets=[helper.make_opsetid("com.example", 1)]), out, name)


@case
def opset_too_old(out, name):
    save(model_of(linear_graph(), opset=12), out, name)


@case
def opset_too_new(out, name):
    save(model_of(linear_graph(), opset=22), out, name)


@case
def unknown_domain(out, name):
    graph = unary_graph(
        [helper.make_node("FancyRelu", ["x"], ["y"], name="fancy",
                          domain="com.example")],
        [fvi("x", [2, 4])], [fvi("y", [2, 4])])
    save(model_of(graph, opsets=[helper.make_opsetid("", OPSET),
                                 helper.make_opsetid("com.example", 1)]),
         out, name)


@case
def control_characters(out, name):
    # Terminal escape sequences in names a model chooses.
    evil = "bad\x1b]0;title\x07"
    graph = unary_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="red\x1b[31m", domain=evil)],
        [fvi("x", [2, 4])], [fvi("y", [2, 4])])
    save(model_of(graph, opsets=[helper.make_opsetid("", OPSET),
                                 helper.make_opsetid(evil, 1)]), out, name)


@case
def unsupported_op(out, name):
    graph = unary_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Acosh", ["r"], ["y"], name="acosh_3")],
        [fvi("x", [2, 4])], [fvi("y", [2, 4])])
    save(model_of(graph, opset=14), out, name)


@case
def opset_conflict(out, name):
    save(model_of(linear_graph(),
                  opsets=[helper.make_opsetid("", 17),
                          helper.make_opsetid("ai.onnx", 13)]), out, name)


@case
def no_op_type(out, name):
    graph = linear_graph()
    graph.node[1].op_type = ""
    save(model_of(graph), out, name)


@case
def unnamed_node(out, name):
    # onnx.helper and many converters leave nodes unnamed.
    graph = linear_graph()
    for node in graph.node:
        node.name = ""
    graph.node[1].input[1] = "x"  # [2,3] + [2,4] does not broadcast
    save(model_of(graph), out, name)


#===----------------------------------------------------------------------===#
# Inconsistent shapes
#===----------------------------------------------------------------------===#

@case
def matmul_mismatch(out, name):
    w = numpy_helper.from_array(np.zeros((5, 3), np.float32), "w")
    graph = unary_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="proj")],
        [fvi("x", [2, 4])], [fvi("y", [2, 3])], [w])
    save(model_of(graph), out, name)


@case
def add_no_broadcast(out, name):
    graph = unary_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], name="residual")],
        [fvi("a", [2, 4]), fvi("b", [3, 4])], [fvi("y", [2, 4])])
    save(model_of(graph), out, name)


@case
def value_info_contradicts(out, name):
    graph = linear_graph()
    graph.value_info.append(fvi("xw", [2, 5]))
    save(model_of(graph), out, name)


@case
def value_info_wrong_type(out, name):
    graph = linear_graph()
    graph.value_info.append(fvi("xw", [2, 3], TensorProto.INT64))
    save(model_of(graph), out, name)


@case
def output_shape_contradicts(out, name):
    graph = linear_graph()
    graph.output[0].CopyFrom(fvi("y", [2, 7]))
    save(model_of(graph), out, name)


@case
def output_rank_contradicts(out, name):
    graph = linear_graph()
    graph.output[0].CopyFrom(fvi("y", [6]))
    save(model_of(graph), out, name)


#===----------------------------------------------------------------------===#
# Graph structure
#===----------------------------------------------------------------------===#

@case
def use_before_definition(out, name):
    graph = linear_graph()
    first, second = graph.node[0], graph.node[1]
    nodes = [onnx.NodeProto(), onnx.NodeProto()]
    nodes[0].CopyFrom(second)
    nodes[1].CopyFrom(first)
    del graph.node[:]
    graph.node.extend(nodes)
    save(model_of(graph), out, name)


@case
def undefined_input(out, name):
    graph = linear_graph()
    graph.node[1].input[1] = "bias_nowhere"
    save(model_of(graph), out, name)


@case
def node_no_inputs(out, name):
    # Every input dropped, as a bad exporter or a truncated edit leaves it.
    graph = symbolic_graph([2, 4])
    graph.node[0].name = "transpose"
    graph.node[0].op_type = "Transpose"
    del graph.node[0].input[:]
    save(model_of(graph), out, name)


@case
def node_inputs_empty(out, name):
    graph = symbolic_graph([2, 4])
    graph.node[0].input[0] = ""
    save(model_of(graph), out, name)


@case
def node_first_input_empty(out, name):
    # The second input is a compile-time constant, which once made the node
    # look foldable with its first input absent.
    shape = numpy_helper.from_array(np.array([4, 2], np.int64), "shape")
    graph = unary_graph(
        [helper.make_node("Reshape", ["", "shape"], ["y"], name="reshape")],
        [fvi("x", [2, 4])], [fvi("y", [4, 2])], [shape])
    save(model_of(graph), out, name)


@case
def value_defined_twice(out, name):
    graph = unary_graph(
        [helper.make_node("Relu", ["x"], ["h"], name="relu_a"),
         helper.make_node("Sigmoid", ["x"], ["h"], name="sigmoid_b"),
         helper.make_node("Neg", ["h"], ["y"], name="neg")],
        [fvi("x", [2, 4])], [fvi("y", [2, 4])])
    save(model_of(graph), out, name)


@case
def output_shadows_input(out, name):
    graph = unary_graph(
        [helper.make_node("Relu", ["x"], ["x"], name="relu_inplace")],
        [fvi("x", [2, 4])], [fvi("x", [2, 4])])
    save(model_of(graph), out, name)


@case
def output_not_computed(out, name):
    graph = linear_graph()
    graph.output.append(fvi("logits", [2, 3]))
    save(model_of(graph), out, name)


@case
def output_name_empty(out, name):
    graph = linear_graph()
    graph.output[0].name = ""
    save(model_of(graph), out, name)


@case
def output_listed_twice(out, name):
    graph = linear_graph()
    graph.output.append(fvi("y", [2, 3]))
    save(model_of(graph), out, name)


@case
def output_declared_sequence(out, name):
    graph = linear_graph()
    graph.output[0].CopyFrom(
        helper.make_tensor_sequence_value_info("y", TensorProto.FLOAT, [2, 3]))
    save(model_of(graph), out, name)


@case
def no_outputs(out, name):
    graph = linear_graph()
    del graph.output[:]
    save(model_of(graph), out, name)


@case
def initializer_no_name(out, name):
    graph = linear_graph()
    graph.initializer.append(
        numpy_helper.from_array(np.zeros(2, np.float32), ""))
    save(model_of(graph), out, name)


@case
def initializer_defined_twice(out, name):
    graph = linear_graph()
    graph.initializer.append(
        numpy_helper.from_array(np.zeros(3, np.float32), "b"))
    save(model_of(graph), out, name)


@case
def input_no_name(out, name):
    graph = linear_graph()
    graph.input.append(fvi("", [2]))
    save(model_of(graph), out, name)


@case
def input_listed_twice(out, name):
    graph = linear_graph()
    graph.input.append(fvi("x", [2, 4]))
    save(model_of(graph), out, name)


#===----------------------------------------------------------------------===#
# Graph inputs: symbolic dims, element types, non-tensors, sizes
#===----------------------------------------------------------------------===#

def symbolic_graph(dims):
    graph = unary_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [fvi("x", dims)], [fvi("y", dims)])
    return graph


@case
def symbolic_batch(out, name):
    save(model_of(symbolic_graph(["batch", 4])), out, name)


@case
def symbolic_seq(out, name):
    save(model_of(symbolic_graph([2, "seq"])), out, name)


@case
def unknown_dim(out, name):
    graph = symbolic_graph([2, 4])
    graph.input[0].type.tensor_type.shape.dim[1].Clear()
    save(model_of(graph), out, name)


@case
def fixed_batch(out, name):
    save(model_of(symbolic_graph([2, 4])), out, name)


@case
def input_double(out, name):
    graph = unary_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [fvi("x", [2], TensorProto.DOUBLE)], [fvi("y", [2], TensorProto.DOUBLE)])
    save(model_of(graph), out, name)


@case
def input_string(out, name):
    graph = unary_graph(
        [helper.make_node("Identity", ["x"], ["y"], name="ident")],
        [fvi("x", [2], TensorProto.STRING)], [fvi("y", [2], TensorProto.STRING)])
    save(model_of(graph), out, name)


@case
def input_sequence(out, name):
    seq = helper.make_tensor_sequence_value_info("xs", TensorProto.FLOAT, [2, 4])
    graph = unary_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [fvi("x", [2, 4]), seq], [fvi("y", [2, 4])])
    save(model_of(graph), out, name)


@case
def input_no_shape(out, name):
    graph = unary_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [fvi("y", [2, 4])])
    save(model_of(graph), out, name)


@case
def input_negative_dim(out, name):
    save(model_of(symbolic_graph([2, -4])), out, name)


@case
def input_bytes_overflow(out, name):
    # 2^31 * 2^31 elements fit in int64, their 4-byte size does not.
    save(model_of(symbolic_graph([2 ** 31, 2 ** 31])), out, name)


@case
def input_elements_overflow(out, name):
    save(model_of(symbolic_graph([2 ** 40, 2 ** 40])), out, name)


@case
def node_output_overflow(out, name):
    # Every input and parameter is small; the node builds the huge value.
    shape = numpy_helper.from_array(np.array([2 ** 31, 2 ** 31], np.int64),
                                    "shape")
    graph = unary_graph(
        [helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")],
        [fvi("x", [1])], [fvi("y", None)], [shape])
    save(model_of(graph), out, name)


@case
def constant_output_overflow(out, name):
    shape = numpy_helper.from_array(np.array([2 ** 31, 2 ** 31], np.int64),
                                    "shape")
    graph = unary_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["zeros"], name="zeros"),
         helper.make_node("Add", ["x", "zeros"], ["y"], name="add")],
        [fvi("x", [1])], [fvi("y", None)], [shape])
    save(model_of(graph), out, name)


#===----------------------------------------------------------------------===#
# Initializers
#===----------------------------------------------------------------------===#

def bias_graph(bias):
    return unary_graph(
        [helper.make_node("Add", ["x", bias.name], ["y"], name="add_bias")],
        [fvi("x", [2, 3])], [fvi("y", [2, 3])], [bias])


@case
def init_dims_overflow(out, name):
    bias = TensorProto(name="b", data_type=TensorProto.FLOAT,
                       dims=[2 ** 32, 2 ** 32], raw_data=b"\0" * 12)
    save(model_of(bias_graph(bias)), out, name)


@case
def init_bytes_overflow(out, name):
    bias = TensorProto(name="b", data_type=TensorProto.FLOAT,
                       dims=[2 ** 31, 2 ** 31], raw_data=b"\0" * 12)
    save(model_of(bias_graph(bias)), out, name)


@case
def init_negative_dim(out, name):
    bias = TensorProto(name="b", data_type=TensorProto.FLOAT, dims=[-3],
                       raw_data=b"\0" * 12)
    save(model_of(bias_graph(bias)), out, name)


@case
def init_raw_short(out, name):
    bias = TensorProto(name="b", data_type=TensorProto.FLOAT, dims=[3],
                       raw_data=b"\0" * 10)
    save(model_of(bias_graph(bias)), out, name)


@case
def init_raw_long_large(out, name):
    # Large enough to be referenced in place rather than copied into the IR.
    bias = TensorProto(name="b", data_type=TensorProto.FLOAT, dims=[2, 3],
                       raw_data=b"\0" * 4 * 6 + b"\0" * 4)
    graph = bias_graph(bias)
    save(model_of(graph), out, name)


@case
def init_raw_and_typed(out, name):
    bias = TensorProto(name="b", data_type=TensorProto.FLOAT, dims=[3],
                       raw_data=np.ones(3, np.float32).tobytes(),
                       float_data=[1.0, 1.0, 1.0])
    save(model_of(bias_graph(bias)), out, name)


@case
def init_wrong_typed_field(out, name):
    bias = TensorProto(name="b", data_type=TensorProto.FLOAT, dims=[3],
                       int64_data=[1, 2, 3])
    save(model_of(bias_graph(bias)), out, name)


@case
def init_typed_count(out, name):
    bias = TensorProto(name="b", data_type=TensorProto.FLOAT, dims=[3],
                       float_data=[1.0, 2.0])
    save(model_of(bias_graph(bias)), out, name)


@case
def init_typed_count_int(out, name):
    shape = TensorProto(name="shape", data_type=TensorProto.INT64, dims=[2],
                        int64_data=[3, 2, 1])
    graph = unary_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
        [fvi("x", [2, 3])], [fvi("y", [3, 2])], [shape])
    save(model_of(graph), out, name)


@case
def init_typed_count_large(out, name):
    # 64 floats = 256 bytes, above the inline threshold.
    bias = TensorProto(name="b", data_type=TensorProto.FLOAT, dims=[8, 8],
                       float_data=[1.0] * 63)
    graph = unary_graph(
        [helper.make_node("Add", ["x", "b"], ["y"], name="add_bias")],
        [fvi("x", [8, 8])], [fvi("y", [8, 8])], [bias])
    save(model_of(graph), out, name)


@case
def init_string(out, name):
    bias = TensorProto(name="b", data_type=TensorProto.STRING, dims=[3],
                       string_data=[b"a", b"b", b"c"])
    save(model_of(bias_graph(bias)), out, name)


#===----------------------------------------------------------------------===#
# External data
#===----------------------------------------------------------------------===#

WEIGHT = np.arange(2 * 64, dtype=np.float32).reshape(2, 64)


def external_model(location, offset=None, length=None, extra=()):
    """x[2,64] + w[2,64] where w lives in external data at `location`."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 64],
                    data_location=TensorProto.EXTERNAL)
    entries = [("location", location)]
    if offset is not None:
        entries.append(("offset", str(offset)))
    if length is not None:
        entries.append(("length", str(length)))
    entries.extend(extra)
    for key, value in entries:
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = unary_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
        [fvi("x", [2, 64])], [fvi("y", [2, 64])], [w])
    return model_of(graph)


def write_weights(path, prefix=b""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(prefix + WEIGHT.tobytes())


@case
def ext_valid(out, name):
    write_weights(os.path.join(out, name + ".bin"), b"\0" * 16)
    save(external_model(name + ".bin", offset=16, length=WEIGHT.nbytes), out,
         name)


@case
def ext_missing_file(out, name):
    save(external_model(name + ".bin"), out, name)


@case
def ext_too_short(out, name):
    with open(os.path.join(out, name + ".bin"), "wb") as f:
        f.write(WEIGHT.tobytes()[:100])
    save(external_model(name + ".bin"), out, name)


@case
def ext_offset_past_end(out, name):
    write_weights(os.path.join(out, name + ".bin"))
    save(external_model(name + ".bin", offset=64), out, name)


@case
def ext_length_mismatch(out, name):
    write_weights(os.path.join(out, name + ".bin"))
    save(external_model(name + ".bin", length=WEIGHT.nbytes - 4), out, name)


@case
def ext_absolute(out, name):
    path = os.path.abspath(os.path.join(out, name + ".bin"))
    write_weights(path)
    save(external_model(path), out, name)


@case
def ext_dotdot(out, name):
    # The file exists where '..' points, so only the '..' rule can refuse it.
    model_dir = os.path.join(out, name)
    write_weights(os.path.join(out, "outside.bin"))
    os.makedirs(model_dir, exist_ok=True)
    save(external_model("../outside.bin"), model_dir, name)


@case
def ext_dotdot_inner(out, name):
    model_dir = os.path.join(out, name)
    write_weights(os.path.join(model_dir, "w.bin"))
    os.makedirs(os.path.join(model_dir, "sub"), exist_ok=True)
    save(external_model("sub/../w.bin"), model_dir, name)


def fresh_symlink(target, link):
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(target, link)


@case
def ext_symlink_outside(out, name):
    model_dir = os.path.join(out, name)
    os.makedirs(model_dir, exist_ok=True)
    write_weights(os.path.join(out, "secret.bin"))
    fresh_symlink(os.path.join(os.path.abspath(out), "secret.bin"),
                  os.path.join(model_dir, "w.bin"))
    save(external_model("w.bin"), model_dir, name)


@case
def ext_symlink_dir_outside(out, name):
    # The file name is innocent; a directory symlink on the way escapes.
    model_dir = os.path.join(out, name)
    os.makedirs(model_dir, exist_ok=True)
    write_weights(os.path.join(out, "elsewhere", "w.bin"))
    fresh_symlink(os.path.join(os.path.abspath(out), "elsewhere"),
                  os.path.join(model_dir, "data"))
    save(external_model("data/w.bin"), model_dir, name)


@case
def ext_symlink_inside(out, name):
    model_dir = os.path.join(out, name)
    write_weights(os.path.join(model_dir, "store", "w.bin"))
    fresh_symlink(os.path.join("store", "w.bin"),
                  os.path.join(model_dir, "w.bin"))
    save(external_model("w.bin"), model_dir, name)


@case
def ext_prefix_sibling(out, name):
    # A sibling directory whose name extends the model directory's name
    # ("m" vs "m-evil") must not pass a string-prefix check.
    model_dir = os.path.join(out, name)
    os.makedirs(model_dir, exist_ok=True)
    write_weights(os.path.join(out, name + "-evil", "w.bin"))
    fresh_symlink(os.path.join(os.path.abspath(out), name + "-evil", "w.bin"),
                  os.path.join(model_dir, "w.bin"))
    save(external_model("w.bin"), model_dir, name)


@case
def ext_offset_not_integer(out, name):
    write_weights(os.path.join(out, name + ".bin"))
    save(external_model(name + ".bin", offset="12abc"), out, name)


@case
def ext_offset_negative(out, name):
    write_weights(os.path.join(out, name + ".bin"))
    save(external_model(name + ".bin", offset=-8), out, name)


@case
def ext_offset_huge(out, name):
    write_weights(os.path.join(out, name + ".bin"))
    save(external_model(name + ".bin", offset=2 ** 63 - 1), out, name)


@case
def ext_no_location(out, name):
    model = external_model("x.bin")
    del model.graph.initializer[0].external_data[0]
    save(model, out, name)


@case
def ext_directory(out, name):
    os.makedirs(os.path.join(out, name + ".bin"), exist_ok=True)
    save(external_model(name + ".bin"), out, name)


@case
def ext_nul_in_location(out, name):
    write_weights(os.path.join(out, name + ".bin"))
    save(external_model(name + ".bin\0.txt"), out, name)


@case
def ext_small_inline(out, name):
    """An external tensor small enough that its value goes into the IR."""
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[3],
                    data_location=TensorProto.EXTERNAL)
    for key, value in [("location", "../small.bin")]:
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    with open(os.path.join(out, "small.bin"), "wb") as f:
        f.write(np.ones(3, np.float32).tobytes())
    model_dir = os.path.join(out, name)
    os.makedirs(model_dir, exist_ok=True)
    save(model_of(bias_graph(w)), model_dir, name)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="?", choices=sorted(CASES))
    parser.add_argument("out", nargs="?")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.list:
        print("\n".join(sorted(CASES)))
        return 0
    if not args.case or not args.out:
        parser.error("CASE and OUTDIR are required")
    os.makedirs(args.out, exist_ok=True)
    CASES[args.case](args.out, args.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
