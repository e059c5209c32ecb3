#!/usr/bin/python3
"""Mutation fuzzer for dsopt's ONNX import.

Builds seed models at start (onnx.helper graphs that together use every
operator family dsopt imports, a model with external data, and the
mlp/cnn/gpt2 zoo exported by test/oracles/export_zoo.py), then derives mutants
from them with a fixed --seed and runs

    dsopt MUTANT --emit=mlir -o OUT.mlir [flags]

on each, under a timeout and an address-space limit. A mutant passes iff
dsopt exits normally with status 0 or 1 and

  * status 1: stderr starts with `dsopt: error:` (after any
    `dsopt: warning:` lines) and shows no assertion, LLVM fatal error or
    stack dump;
  * status 0: OUT.mlir parses back with dsopt-opt, every external-data
    location in it stays inside the mutant's directory, and it contains no
    value read from the sentinel file placed outside that directory.

Mutations are byte-level (bit flips, truncation, splices from other seeds,
duplicated ranges, overwritten bytes) and structured through the protobuf
API (dims, element types, attributes of wrong types, dropped or renamed
inputs and outputs, node order, op types, domains, opset and IR versions,
initializer payloads, hostile external-data entries and symlinks, hostile
command-line flags). Mutant N of a campaign depends only on --seed and N, so
`--only N` rebuilds it alone.

Failing mutants are copied to --out/NNNNNN-KIND/ with the model, its side
files, the mutations applied, dsopt's stderr and a repro.sh. The summary
lists outcomes and the most frequent error messages; the exit status is 1
if any mutant failed.

    fuzz_import.py --seed 1 --count 300                 a CI-sized campaign
    fuzz_import.py --seed 7 --count 5000 --out fails    a long one
    fuzz_import.py --seed 7 --only 1234 --out one       rebuild one mutant
    fuzz_import.py --self-test                          check the oracle
"""
import argparse
import collections
import concurrent.futures
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TRAINING = "ai.onnx.preview.training"

# A value no seed contains: if it ever shows up in dsopt's output, dsopt read
# the file planted outside the mutant's directory.
SENTINEL = 1234.5678
SENTINEL_TEXT = "1.234568e+03"

#===----------------------------------------------------------------------===#
# Seeds
#===----------------------------------------------------------------------===#


class Seed:
    def __init__(self, name, directory, model_file, args=()):
        self.name = name
        self.directory = directory  # everything in it travels with mutants
        self.model_file = model_file
        self.args = list(args)
        path = os.path.join(directory, model_file)
        with open(path, "rb") as f:
            self.data = f.read()
        self.model = onnx.load_from_string(self.data)


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def const_i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def weights(rng, name, shape, scale=0.1):
    return numpy_helper.from_array(
        (rng.standard_normal(shape) * scale).astype(np.float32), name)


def make(graph, opset=17, extra=()):
    model = helper.make_model(
        graph, producer_name="fuzz_import",
        opset_imports=[helper.make_opsetid("", opset), *extra])
    model.ir_version = 8
    return model


def seed_shape_arithmetic(rng):
    """Shape arithmetic that folds away, feeding real compute."""
    n = helper.make_node
    nodes = [
        n("Shape", ["x"], ["s"], name="shape"),
        n("Gather", ["s", "i0"], ["d0"], name="gather0", axis=0),
        n("Gather", ["s", "i1"], ["d1"], name="gather1", axis=0),
        n("Gather", ["s", "i2"], ["d2"], name="gather2", axis=0),
        n("Mul", ["d0", "d1"], ["rows"], name="rows"),
        n("Unsqueeze", ["rows", "axes0"], ["rows1"], name="unsq_rows"),
        n("Unsqueeze", ["d2", "axes0"], ["cols1"], name="unsq_cols"),
        n("Concat", ["rows1", "cols1"], ["shape2"], name="concat_shape", axis=0),
        n("Reshape", ["x", "shape2"], ["flat"], name="reshape"),
        n("Range", ["zero", "d2", "one"], ["r"], name="range"),
        n("Cast", ["r"], ["rf"], name="cast", to=TensorProto.FLOAT),
        n("Add", ["flat", "rf"], ["a"], name="add_range"),
        n("ConstantOfShape", ["shape2"], ["zeros"], name="zeros",
          value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])),
        n("Less", ["a", "zeros"], ["neg"], name="less"),
        n("Not", ["neg"], ["pos"], name="not"),
        n("Where", ["pos", "a", "zeros"], ["relu_a"], name="where"),
        n("Transpose", ["relu_a"], ["t"], name="transpose", perm=[1, 0]),
        n("Split", ["t", "split"], ["t0", "t1"], name="split", axis=0),
        n("Concat", ["t1", "t0"], ["tc"], name="concat", axis=0),
        n("Slice", ["tc", "starts", "ends", "axes1", "steps"], ["ts"],
          name="slice"),
        n("Unsqueeze", ["ts", "axes0"], ["tu"], name="unsqueeze"),
        n("Squeeze", ["tu", "axes0"], ["tq"], name="squeeze"),
        n("Expand", ["tq", "expand_shape"], ["te"], name="expand"),
        n("ReduceMax", ["te"], ["tm"], name="reduce_max_expanded", axes=[0],
          keepdims=0),
        n("Trilu", ["tm"], ["tri"], name="trilu", upper=0),
        n("Pow", ["tri", "two"], ["sq"], name="pow"),
        n("Sqrt", ["sq"], ["rt"], name="sqrt"),
        n("Exp", ["rt"], ["e"], name="exp"),
        n("Log", ["e"], ["l"], name="log"),
        n("Tanh", ["l"], ["th"], name="tanh"),
        n("Sigmoid", ["th"], ["sg"], name="sigmoid"),
        n("Neg", ["sg"], ["ng"], name="neg"),
        n("LeakyRelu", ["ng"], ["lr"], name="leaky", alpha=0.1),
        n("Erf", ["lr"], ["ef"], name="erf"),
        n("Reciprocal", ["ef"], ["rc"], name="reciprocal"),
        n("Div", ["rc", "two"], ["dv"], name="div"),
        n("Sub", ["dv", "zeros_t"], ["sb"], name="sub"),
        n("Softmax", ["sb"], ["sm"], name="softmax", axis=-1),
        n("LogSoftmax", ["sm"], ["lsm"], name="log_softmax", axis=-1),
        n("ReduceSum", ["lsm", "axes0"], ["rs"], name="reduce_sum",
          keepdims=1),
        n("ReduceMax", ["lsm"], ["rm"], name="reduce_max", axes=[1],
          keepdims=0),
        n("Size", ["rm"], ["size"], name="size"),
        n("Identity", ["rs"], ["rsi"], name="identity"),
        n("ReduceMean", ["rsi"], ["loss"], name="reduce_mean", keepdims=0),
    ]
    inits = [
        const_i64("i0", 0), const_i64("i1", 1), const_i64("i2", 2),
        const_i64("axes0", [0]), const_i64("axes1", [1]),
        const_i64("zero", 0), const_i64("one", 1),
        const_i64("split", [4, 4]), const_i64("starts", [1]),
        const_i64("ends", [5]), const_i64("steps", [2]),
        const_i64("expand_shape", [3, 1, 1]),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.zeros((8, 2), np.float32), "zeros_t"),
    ]
    graph = helper.make_graph(nodes, "shape_arithmetic", [vi("x", [2, 3, 8])],
                              [vi("loss", [])], inits)
    return make(graph, 17)


def seed_transformer(rng):
    """An attention block with Gemm, LayerNorm, Gelu (opset 20), a causal
    mask, NLL loss and training-mode dropout."""
    n = helper.make_node
    d, s, h = 16, 8, 2
    nodes = [
        n("Gather", ["emb", "ids"], ["x"], name="embed", axis=0),
        n("LayerNormalization", ["x", "ln_g", "ln_b"], ["xn"], name="ln",
          axis=-1, epsilon=1e-5),
        n("MatMul", ["xn", "wqkv"], ["qkv"], name="qkv"),
        n("Split", ["qkv"], ["q", "k", "v"], name="split_qkv", axis=-1,
          num_outputs=3),
        n("Reshape", ["q", "heads"], ["qh"], name="q_heads"),
        n("Reshape", ["k", "heads"], ["kh"], name="k_heads"),
        n("Reshape", ["v", "heads"], ["vh"], name="v_heads"),
        n("Transpose", ["qh"], ["qt"], name="q_t", perm=[0, 2, 1, 3]),
        n("Transpose", ["kh"], ["kt"], name="k_t", perm=[0, 2, 3, 1]),
        n("Transpose", ["vh"], ["vt"], name="v_t", perm=[0, 2, 1, 3]),
        n("MatMul", ["qt", "kt"], ["att"], name="scores"),
        n("Mul", ["att", "scale"], ["atts"], name="scale"),
        n("Where", ["mask", "atts", "neg_inf"], ["attm"], name="causal"),
        n("Softmax", ["attm"], ["p"], name="softmax", axis=-1),
        n("Dropout", ["p", "ratio", "train"], ["pd"], name="att_dropout",
          seed=7),
        n("MatMul", ["pd", "vt"], ["o"], name="context"),
        n("Transpose", ["o"], ["ot"], name="o_t", perm=[0, 2, 1, 3]),
        n("Reshape", ["ot", "merge"], ["om"], name="merge"),
        n("Gemm", ["om", "wo", "bo"], ["proj"], name="out_proj", transB=1),
        n("Gelu", ["proj"], ["g"], name="gelu", approximate="tanh"),
        n("MatMul", ["g", "head"], ["logits"], name="lm_head"),
        n("LogSoftmax", ["logits"], ["lp"], name="log_probs", axis=-1),
        n("NegativeLogLikelihoodLoss", ["lp", "labels"], ["loss"],
          name="nll", reduction="mean"),
    ]
    mask = np.tril(np.ones((s, s), dtype=bool))
    inits = [
        weights(rng, "emb", [32, d]),
        numpy_helper.from_array(np.ones(d, np.float32), "ln_g"),
        numpy_helper.from_array(np.zeros(d, np.float32), "ln_b"),
        weights(rng, "wqkv", [d, 3 * d]),
        const_i64("heads", [1, s, h, d // h]),
        const_i64("merge", [s, d]),
        numpy_helper.from_array(np.array(0.35, np.float32), "scale"),
        numpy_helper.from_array(mask, "mask"),
        numpy_helper.from_array(np.array(-1e9, np.float32), "neg_inf"),
        numpy_helper.from_array(np.array(0.1, np.float32), "ratio"),
        numpy_helper.from_array(np.array(True), "train"),
        weights(rng, "wo", [d, d]),
        numpy_helper.from_array(np.zeros(d, np.float32), "bo"),
        weights(rng, "head", [d, 32]),
    ]
    graph = helper.make_graph(
        nodes, "transformer",
        [vi("ids", [1, s], TensorProto.INT64), vi("labels", [s], TensorProto.INT64)],
        [vi("loss", [])], inits)
    return make(graph, 20)


def seed_vision(rng):
    """Conv, BatchNorm, pooling and softmax cross-entropy at opset 13."""
    n = helper.make_node
    nodes = [
        n("Conv", ["img", "cw", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1],
          strides=[1, 1], kernel_shape=[3, 3]),
        n("BatchNormalization", ["c", "bn_s", "bn_b", "bn_m", "bn_v"], ["b"],
          name="bn", epsilon=1e-5),
        n("Relu", ["b"], ["r"], name="relu"),
        n("MaxPool", ["r"], ["mp"], name="maxpool", kernel_shape=[2, 2],
          strides=[2, 2]),
        n("AveragePool", ["mp"], ["ap"], name="avgpool", kernel_shape=[2, 2],
          strides=[1, 1], pads=[0, 0, 1, 1]),
        n("GlobalAveragePool", ["ap"], ["gp"], name="gap"),
        n("Flatten", ["gp"], ["f"], name="flatten", axis=1),
        n("Gemm", ["f", "fw", "fb"], ["logits"], name="fc", transB=1),
        n("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"],
          name="ce", reduction="mean"),
    ]
    inits = [
        weights(rng, "cw", [4, 3, 3, 3]),
        numpy_helper.from_array(np.zeros(4, np.float32), "cb"),
        numpy_helper.from_array(np.ones(4, np.float32), "bn_s"),
        numpy_helper.from_array(np.zeros(4, np.float32), "bn_b"),
        numpy_helper.from_array(np.zeros(4, np.float32), "bn_m"),
        numpy_helper.from_array(np.ones(4, np.float32), "bn_v"),
        weights(rng, "fw", [5, 4]),
        numpy_helper.from_array(np.zeros(5, np.float32), "fb"),
    ]
    graph = helper.make_graph(
        nodes, "vision",
        [vi("img", [2, 3, 8, 8]), vi("labels", [2], TensorProto.INT64)],
        [vi("loss", [])], inits)
    return make(graph, 13)


def seed_optimizers(rng):
    """One step of each ai.onnx.preview.training optimizer."""
    n = helper.make_node
    nodes = [
        n("Adam", ["lr", "step", "w1", "g1", "v1", "h1"],
          ["w1_new", "v1_new", "h1_new"], name="adam", domain=TRAINING,
          alpha=0.9, beta=0.999, epsilon=1e-6),
        n("Momentum", ["lr", "step", "w2", "g2", "m2"], ["w2_new", "m2_new"],
          name="momentum", domain=TRAINING, alpha=0.9, beta=1.0,
          norm_coefficient=0.0, mode="standard"),
        n("Adagrad", ["lr", "step", "w3", "g3", "h3"], ["w3_new", "h3_new"],
          name="adagrad", domain=TRAINING, decay_factor=0.0, epsilon=1e-6),
    ]
    inputs = [vi("lr", []), vi("step", [], TensorProto.INT64)]
    for name in ["g1", "g2", "g3"]:
        inputs.append(vi(name, [4, 3]))
    inits = [weights(rng, name, [4, 3])
             for name in ["w1", "v1", "h1", "w2", "m2", "w3", "h3"]]
    outputs = [vi(name, [4, 3]) for name in
               ["w1_new", "v1_new", "h1_new", "w2_new", "m2_new", "w3_new",
                "h3_new"]]
    graph = helper.make_graph(nodes, "optimizers", inputs, outputs, inits)
    return make(graph, 17, [helper.make_opsetid(TRAINING, 1)])


def seed_symbolic(rng):
    """Symbolic batch and sequence dims, given on the command line."""
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "w"], ["h"], name="matmul"),
        n("Add", ["h", "b"], ["hb"], name="bias"),
        n("Relu", ["hb"], ["y"], name="relu"),
        n("ReduceMean", ["y"], ["loss"], name="mean", keepdims=0),
    ]
    inits = [weights(rng, "w", [16, 32]),
             numpy_helper.from_array(np.zeros(32, np.float32), "b")]
    graph = helper.make_graph(
        nodes, "symbolic", [vi("x", ["batch", "seq", 16])], [vi("loss", [])],
        inits, value_info=[vi("h", ["batch", "seq", 32])])
    return make(graph, 18)


def seed_external(rng, directory):
    """Parameters in an external-data file next to the model."""
    n = helper.make_node
    w = (rng.standard_normal((16, 32)) * 0.1).astype(np.float32)
    b = np.zeros(32, np.float32)
    with open(os.path.join(directory, "weights.bin"), "wb") as f:
        f.write(b"\0" * 64 + w.tobytes() + b.tobytes())
    inits = []
    for name, array, offset in [("w", w, 64), ("b", b, 64 + w.nbytes)]:
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT,
                             dims=array.shape,
                             data_location=TensorProto.EXTERNAL)
        for key, value in [("location", "weights.bin"),
                           ("offset", str(offset)),
                           ("length", str(array.nbytes))]:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        inits.append(tensor)
    nodes = [n("MatMul", ["x", "w"], ["h"], name="matmul"),
             n("Add", ["h", "b"], ["y"], name="bias"),
             n("ReduceSum", ["y"], ["loss"], name="sum", keepdims=0)]
    graph = helper.make_graph(nodes, "external", [vi("x", [4, 16])],
                              [vi("loss", [])], inits)
    return make(graph, 21)


def build_seeds(work, zoo, log):
    rng = np.random.default_rng(0)
    seeds = []
    builders = [("shape_arithmetic", seed_shape_arithmetic, []),
                ("transformer", seed_transformer, []),
                ("vision", seed_vision, []),
                ("optimizers", seed_optimizers, []),
                ("symbolic", seed_symbolic,
                 ["--batch", "2", "--dim", "seq=4"])]
    for name, build, args in builders:
        directory = os.path.join(work, "seeds", name)
        os.makedirs(directory, exist_ok=True)
        onnx.save(build(rng), os.path.join(directory, name + ".onnx"))
        seeds.append(Seed(name, directory, name + ".onnx", args))
    directory = os.path.join(work, "seeds", "external")
    os.makedirs(directory, exist_ok=True)
    onnx.save(seed_external(rng, directory),
              os.path.join(directory, "external.onnx"))
    seeds.append(Seed("external", directory, "external.onnx"))
    if zoo:
        directory = os.path.join(work, "seeds", "zoo")
        start = time.time()
        subprocess.run(
            [sys.executable, os.path.join(SRC_ROOT, "test", "oracles", "export_zoo.py"),
             "--out", directory, "--only", "mlp,cnn,gpt2"],
            check=True, stdout=subprocess.DEVNULL)
        log(f"exported the zoo in {time.time() - start:.1f} s")
        for model in ["mlp", "cnn", "gpt2"]:
            for variant in ["", "_nofold"]:
                # Each zoo seed gets its own directory: mutants copy the
                # seed's directory, and the zoo's npz files are not needed.
                own = os.path.join(work, "seeds", "zoo-" + model + variant)
                os.makedirs(own, exist_ok=True)
                shutil.copy(os.path.join(directory, model + variant + ".onnx"),
                            own)
                seeds.append(Seed(model + variant, own,
                                  model + variant + ".onnx"))
    return seeds


#===----------------------------------------------------------------------===#
# Mutations
#===----------------------------------------------------------------------===#

INTERESTING_INTS = [0, 1, -1, 2, 3, 7, 64, 255, 256, 1 << 16, (1 << 31) - 1,
                    1 << 31, 1 << 32, 1 << 62, (1 << 63) - 1, -(1 << 63),
                    -(1 << 31), -7]
INTERESTING_FLOATS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, 3.4e38,
                      float("inf"), float("-inf"), float("nan")]
KNOWN_OPS = ["Abs", "Add", "AveragePool", "BatchNormalization", "Cast",
             "Concat", "Constant", "ConstantOfShape", "Conv", "Div", "Dropout",
             "Equal", "Erf", "Exp", "Expand", "Flatten", "Gather", "Gelu",
             "Gemm", "GlobalAveragePool", "Greater", "GreaterOrEqual",
             "Identity", "LayerNormalization", "LeakyRelu", "Less",
             "LessOrEqual", "Log", "LogSoftmax", "MatMul", "Max", "MaxPool",
             "Min", "Mul", "Neg", "NegativeLogLikelihoodLoss", "Not", "Pow",
             "Range", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceSum",
             "Relu", "Reshape", "Shape", "Sigmoid", "Size", "Slice",
             "Softmax", "SoftmaxCrossEntropyLoss", "Split", "Sqrt", "Squeeze",
             "Sub", "Tanh", "Transpose", "Trilu", "Unsqueeze", "Where"]
TRAINING_OPS = ["Adam", "Momentum", "Adagrad"]
OTHER_OPS = ["LSTM", "Loop", "If", "Einsum", "Resize", "TopK", "ScatterND",
             "NonZero", "Sum", "Mean", "", "relu", "Add\0", "A" * 300]
DOMAINS = ["", "ai.onnx", TRAINING, "com.microsoft", "ai.onnx.ml",
           "com.example", "ai.onnx.preview.training.x", "\xff"]
ATTR_NAMES = ["axis", "axes", "perm", "keepdims", "to", "transA", "transB",
              "alpha", "beta", "epsilon", "kernel_shape", "pads", "strides",
              "dilations", "group", "seed", "training_mode", "reduction",
              "ignore_index", "value", "value_int", "value_ints",
              "value_float", "value_floats", "split", "num_outputs", "upper",
              "allowzero", "stash_type", "approximate", "mode", "auto_pad",
              "ceil_mode", "count_include_pad", "noop_with_empty_axes",
              "decay_factor", "norm_coefficient", "momentum", "batch_dims",
              "start", "end"]
STRINGS = [b"", b"mean", b"sum", b"none", b"tanh", b"SAME_UPPER", b"VALID",
           b"nesterov", b"\xff\xfe", b"x" * 1000]


def rand_int(rng):
    return rng.choice(INTERESTING_INTS) if rng.random() < 0.8 else \
        rng.randrange(-10, 100)


def rand_tensor(rng, name="t"):
    dtype = rng.choice([TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32,
                        TensorProto.BOOL, TensorProto.DOUBLE,
                        TensorProto.STRING, TensorProto.FLOAT16,
                        TensorProto.BFLOAT16, TensorProto.UINT8, 0, 99])
    rank = rng.randrange(0, 4)
    dims = [rng.choice([0, 1, 2, 3, 5]) for _ in range(rank)]
    if rng.random() < 0.15:
        dims = [rng.choice(INTERESTING_INTS) for _ in range(max(rank, 1))]
    tensor = TensorProto(name=name, data_type=dtype, dims=dims)
    count = 1
    for d in dims:
        count *= max(d, 0)
    count = min(count, 64)
    if rng.random() < 0.3:
        count += rng.choice([-1, 1, 5])
    count = max(count, 0)
    if rng.random() < 0.5:
        tensor.raw_data = bytes(rng.randrange(256)
                                for _ in range(count * rng.choice([1, 2, 4, 8])))
    elif dtype in (TensorProto.FLOAT,):
        tensor.float_data.extend(rng.choice(INTERESTING_FLOATS)
                                 for _ in range(count))
    elif dtype == TensorProto.STRING:
        tensor.string_data.extend(rng.choice(STRINGS) for _ in range(count))
    else:
        tensor.int64_data.extend(rand_int(rng) for _ in range(count))
    return tensor


def rand_attribute(rng, name):
    kind = rng.randrange(9)
    if kind == 0:
        return helper.make_attribute(name, rand_int(rng))
    if kind == 1:
        return helper.make_attribute(name, rng.choice(INTERESTING_FLOATS))
    if kind == 2:
        return helper.make_attribute(name, rng.choice(STRINGS))
    if kind == 3:
        return helper.make_attribute(
            name, [rand_int(rng) for _ in range(rng.randrange(0, 6))] or [0])
    if kind == 4:
        return helper.make_attribute(
            name, [rng.choice(INTERESTING_FLOATS)
                   for _ in range(rng.randrange(1, 4))])
    if kind == 5:
        return helper.make_attribute(name, rand_tensor(rng))
    if kind == 6:
        graph = helper.make_graph([], "sub", [], [])
        return helper.make_attribute(name, graph)
    attr = onnx.AttributeProto(name=name)
    if kind == 7:
        # No type and no value, or a type that names a field left empty.
        attr.type = rng.choice([0, onnx.AttributeProto.INT,
                                onnx.AttributeProto.TENSOR,
                                onnx.AttributeProto.INTS])
    else:
        # A value whose declared type says otherwise.
        attr.i = rand_int(rng)
        attr.type = rng.choice([onnx.AttributeProto.FLOAT,
                                onnx.AttributeProto.STRING,
                                onnx.AttributeProto.TENSOR,
                                onnx.AttributeProto.INTS])
    return attr


class Mutant:
    """A model being mutated, the directory it will live in, and the log of
    what was done to it."""

    def __init__(self, seed, directory, rng, outside):
        self.seed = seed
        self.model = onnx.ModelProto()
        self.model.CopyFrom(seed.model)
        self.directory = directory
        self.rng = rng
        self.outside = outside
        self.args = list(seed.args)
        self.log = []

    def value_names(self):
        graph = self.model.graph
        names = [i.name for i in graph.input] + [i.name for i in graph.initializer]
        for node in graph.node:
            names.extend(node.output)
        return [n for n in names if n] or ["x"]

    def value_infos(self):
        graph = self.model.graph
        return list(graph.input) + list(graph.output) + list(graph.value_info)


def pick(rng, seq):
    return rng.choice(list(seq)) if len(seq) else None


def mut_dims(m):
    rng = m.rng
    if rng.random() < 0.4 and len(m.model.graph.initializer):
        tensor = pick(rng, m.model.graph.initializer)
        dims = list(tensor.dims)
        action = rng.randrange(3)
        if action == 0 and dims:
            dims[rng.randrange(len(dims))] = rand_int(rng)
        elif action == 1:
            dims.insert(rng.randrange(len(dims) + 1), rand_int(rng))
        elif dims:
            dims.pop(rng.randrange(len(dims)))
        del tensor.dims[:]
        tensor.dims.extend(dims)
        return f"initializer {tensor.name!r} dims -> {dims}"
    info = pick(rng, m.value_infos())
    if info is None or not info.type.HasField("tensor_type"):
        return None
    shape = info.type.tensor_type.shape
    action = rng.randrange(5)
    if action == 0 and len(shape.dim):
        dim = shape.dim[rng.randrange(len(shape.dim))]
        dim.dim_value = rand_int(rng)
        return f"value {info.name!r} dim -> {dim.dim_value}"
    if action == 1 and len(shape.dim):
        dim = shape.dim[rng.randrange(len(shape.dim))]
        dim.dim_param = rng.choice(["batch", "seq", "N", "", "a b", "x" * 200])
        return f"value {info.name!r} dim -> {dim.dim_param!r}"
    if action == 2 and len(shape.dim):
        shape.dim[rng.randrange(len(shape.dim))].Clear()
        return f"value {info.name!r} dim cleared"
    if action == 3:
        shape.dim.add().dim_value = rng.choice([1, 2, 3, 1 << 40])
        return f"value {info.name!r} dim appended"
    info.type.tensor_type.ClearField("shape")
    return f"value {info.name!r} shape cleared"


def mut_elem_type(m):
    rng = m.rng
    new = rng.choice(list(range(0, 17)) + [17, 20, 99, -1, 1 << 20])
    if rng.random() < 0.4 and len(m.model.graph.initializer):
        tensor = pick(rng, m.model.graph.initializer)
        tensor.data_type = new
        return f"initializer {tensor.name!r} data_type -> {new}"
    info = pick(rng, m.value_infos())
    if info is None:
        return None
    if rng.random() < 0.2:
        if rng.random() < 0.5:
            info.type.CopyFrom(helper.make_sequence_type_proto(
                helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
        else:
            info.ClearField("type")
        return f"value {info.name!r} no longer a tensor type"
    info.type.tensor_type.elem_type = new
    return f"value {info.name!r} elem_type -> {new}"


def random_node(m):
    return pick(m.rng, m.model.graph.node)


def mut_attr_change(m):
    node = random_node(m)
    if node is None or not len(node.attribute):
        return None
    index = m.rng.randrange(len(node.attribute))
    name = node.attribute[index].name
    node.attribute[index].CopyFrom(rand_attribute(m.rng, name))
    return f"node {node.name!r} attribute {name!r} -> type {node.attribute[index].type}"


def mut_attr_delete(m):
    node = random_node(m)
    if node is None or not len(node.attribute):
        return None
    index = m.rng.randrange(len(node.attribute))
    name = node.attribute[index].name
    del node.attribute[index]
    return f"node {node.name!r} attribute {name!r} deleted"


def mut_attr_duplicate(m):
    node = random_node(m)
    if node is None or not len(node.attribute):
        return None
    attr = pick(m.rng, node.attribute)
    copy = node.attribute.add()
    copy.CopyFrom(rand_attribute(m.rng, attr.name) if m.rng.random() < 0.5
                  else attr)
    return f"node {node.name!r} attribute {attr.name!r} duplicated"


def mut_attr_add(m):
    node = random_node(m)
    if node is None:
        return None
    name = m.rng.choice(ATTR_NAMES)
    node.attribute.append(rand_attribute(m.rng, name))
    return f"node {node.name!r} attribute {name!r} added"


def mut_node_inputs(m):
    rng = m.rng
    node = random_node(m)
    if node is None:
        return None
    action = rng.randrange(5)
    if action == 0 and len(node.input):
        del node.input[rng.randrange(len(node.input))]
        return f"node {node.name!r} input dropped"
    if action == 1 and len(node.input):
        i = rng.randrange(len(node.input))
        node.input[i] = rng.choice(["", "nowhere", node.input[i] + "_"])
        return f"node {node.name!r} input {i} -> {node.input[i]!r}"
    if action == 2 and len(node.input):
        # A real value of the wrong shape or type.
        i = rng.randrange(len(node.input))
        node.input[i] = rng.choice(m.value_names())
        return f"node {node.name!r} input {i} -> {node.input[i]!r}"
    if action == 3:
        for _ in range(rng.choice([1, 1, 2, 1000])):
            node.input.append(rng.choice(m.value_names()))
        return f"node {node.name!r} inputs appended ({len(node.input)})"
    node.input.append("")
    return f"node {node.name!r} empty input appended"


def mut_node_outputs(m):
    rng = m.rng
    node = random_node(m)
    if node is None:
        return None
    action = rng.randrange(4)
    if action == 0 and len(node.output):
        del node.output[rng.randrange(len(node.output))]
        return f"node {node.name!r} output dropped"
    if action == 1 and len(node.output):
        i = rng.randrange(len(node.output))
        node.output[i] = rng.choice(["", node.output[i] + "_", "x"])
        return f"node {node.name!r} output {i} -> {node.output[i]!r}"
    if action == 2 and len(node.output):
        i = rng.randrange(len(node.output))
        node.output[i] = rng.choice(m.value_names())
        return f"node {node.name!r} output {i} -> {node.output[i]!r} (exists)"
    node.output.append(rng.choice(["extra", ""]))
    return f"node {node.name!r} output appended"


def mut_graph_io(m):
    rng = m.rng
    graph = m.model.graph
    action = rng.randrange(6)
    if action == 0 and len(graph.input):
        i = rng.randrange(len(graph.input))
        name = graph.input[i].name
        del graph.input[i]
        return f"graph input {name!r} dropped"
    if action == 1 and len(graph.output):
        i = rng.randrange(len(graph.output))
        name = graph.output[i].name
        del graph.output[i]
        return f"graph output {name!r} dropped"
    if action == 2 and len(graph.output):
        out = pick(rng, graph.output)
        out.name = rng.choice(["", "nowhere", rng.choice(m.value_names())])
        return f"graph output renamed to {out.name!r}"
    if action == 3:
        name = rng.choice(m.value_names())
        graph.output.append(vi(name, [rng.choice([1, 2, 3])] * rng.randrange(3),
                               rng.choice([1, 7, 11])))
        return f"graph output {name!r} added"
    if action == 4:
        graph.input.append(vi(rng.choice(["extra", rng.choice(m.value_names())]),
                              [2, rng.choice([3, "n"])]))
        return "graph input added"
    if len(graph.input):
        inp = pick(rng, graph.input)
        inp.name = rng.choice(["", inp.name + "_", rng.choice(m.value_names())])
        return f"graph input renamed to {inp.name!r}"
    return None


def mut_node_order(m):
    rng = m.rng
    nodes = list(m.model.graph.node)
    if len(nodes) < 2:
        return None
    action = rng.randrange(3)
    if action == 0:
        i, j = rng.sample(range(len(nodes)), 2)
        nodes[i], nodes[j] = nodes[j], nodes[i]
        what = f"nodes {i} and {j} swapped"
    elif action == 1:
        nodes.reverse()
        what = "node order reversed"
    else:
        i = rng.randrange(len(nodes))
        nodes.append(nodes.pop(i))
        what = f"node {i} moved last"
    copies = []
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copies.append(copy)
    del m.model.graph.node[:]
    m.model.graph.node.extend(copies)
    return what


def mut_nodes_add_remove(m):
    rng = m.rng
    graph = m.model.graph
    if not len(graph.node):
        return None
    i = rng.randrange(len(graph.node))
    if rng.random() < 0.5:
        del graph.node[i]
        return f"node {i} deleted"
    graph.node.add().CopyFrom(graph.node[i])
    return f"node {i} duplicated"


def mut_op_type(m):
    node = random_node(m)
    if node is None:
        return None
    node.op_type = m.rng.choice(KNOWN_OPS + TRAINING_OPS + OTHER_OPS)
    return f"node {node.name!r} op_type -> {node.op_type!r}"


def mut_domain(m):
    node = random_node(m)
    if node is None:
        return None
    node.domain = m.rng.choice(DOMAINS)
    return f"node {node.name!r} domain -> {node.domain!r}"


def mut_opset(m):
    rng = m.rng
    opsets = m.model.opset_import
    version = rng.choice([-1, 0, 1, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                          22, 1 << 40])
    action = rng.randrange(4)
    if action == 0 and len(opsets):
        entry = pick(rng, opsets)
        entry.version = version
        return f"opset {entry.domain!r} -> {version}"
    if action == 1:
        opsets.add(domain=rng.choice(DOMAINS), version=version)
        return f"opset entry added ({version})"
    if action == 2 and len(opsets):
        del opsets[rng.randrange(len(opsets))]
        return "opset entry removed"
    m.model.ir_version = rng.choice([0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 99,
                                     -1, 1 << 40])
    return f"ir_version -> {m.model.ir_version}"


def mut_initializer_payload(m):
    rng = m.rng
    graph = m.model.graph
    if not len(graph.initializer):
        return None
    tensor = pick(rng, graph.initializer)
    action = rng.randrange(6)
    if action == 0 and tensor.HasField("raw_data"):
        raw = tensor.raw_data
        cut = rng.randrange(len(raw) + 1) if raw else 0
        tensor.raw_data = raw[:cut] if rng.random() < 0.5 else raw + raw[:cut + 1]
        return f"initializer {tensor.name!r} raw_data length -> {len(tensor.raw_data)}"
    if action == 1:
        tensor.ClearField("raw_data")
        tensor.float_data.extend(rng.choice(INTERESTING_FLOATS)
                                 for _ in range(rng.randrange(0, 5)))
        return f"initializer {tensor.name!r} raw_data -> float_data"
    if action == 2:
        tensor.int64_data.extend(rand_int(rng) for _ in range(rng.randrange(1, 4)))
        return f"initializer {tensor.name!r} int64_data added"
    if action == 3:
        tensor.name = rng.choice(["", rng.choice(m.value_names())])
        return f"initializer renamed to {tensor.name!r}"
    if action == 4:
        graph.initializer.add().CopyFrom(tensor)
        return f"initializer {tensor.name!r} duplicated"
    tensor.CopyFrom(rand_tensor(rng, tensor.name))
    return f"initializer {tensor.name!r} replaced by a random tensor"


def hostile_location(m):
    """A location string, creating whatever it points at."""
    rng = m.rng
    d = m.directory
    data = os.path.join(d, "data.bin")
    if not os.path.exists(data):
        with open(data, "wb") as f:
            f.write(bytes(rng.randrange(256) for _ in range(4096)))
    kind = rng.randrange(14)
    if kind == 0:
        return m.outside  # absolute, exists
    if kind == 1:
        return os.path.relpath(m.outside, d)
    if kind == 2:
        return "sub/../data.bin"
    if kind == 3:
        link = os.path.join(d, "link_out.bin")
        if not os.path.lexists(link):
            os.symlink(m.outside, link)
        return "link_out.bin"
    if kind == 4:
        link = os.path.join(d, "dir_out")
        if not os.path.lexists(link):
            os.symlink(os.path.dirname(m.outside), link)
        return "dir_out/" + os.path.basename(m.outside)
    if kind == 5:
        link = os.path.join(d, "link_in.bin")
        if not os.path.lexists(link):
            os.symlink("data.bin", link)
        return "link_in.bin"
    if kind == 6:
        link = os.path.join(d, "loop.bin")
        if not os.path.lexists(link):
            os.symlink("loop.bin", link)
        return "loop.bin"
    if kind == 7:
        os.makedirs(os.path.join(d, "adir"), exist_ok=True)
        return rng.choice(["adir", ".", "", "adir/"])
    if kind == 8:
        return rng.choice(["data.bin\0", "data.bin\0../../x", "data\n.bin"])
    if kind == 9:
        return rng.choice(["C:\\data.bin", "\\\\server\\share\\w", "..\\x",
                           "~/data.bin", "data.bin/", "./data.bin",
                           "//data.bin"])
    if kind == 10:
        return "a" * rng.choice([255, 256, 5000]) + ".bin"
    if kind == 11:
        return "missing.bin"
    if kind == 12:
        return "/dev/zero"
    return "data.bin"


def mut_external(m):
    rng = m.rng
    graph = m.model.graph
    if not len(graph.initializer):
        return None
    tensor = pick(rng, graph.initializer)
    if tensor.data_location != TensorProto.EXTERNAL or rng.random() < 0.3:
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        del tensor.external_data[:]
    entries = {e.key: e.value for e in tensor.external_data}
    if rng.random() < 0.8 or "location" not in entries:
        entries["location"] = hostile_location(m)
    for key in ["offset", "length"]:
        if rng.random() < 0.4:
            entries[key] = rng.choice(
                ["0", "16", "abc", "-1", " 12", "0x10", "1e3", "",
                 "99999999999999999999", str((1 << 63) - 1), "4096", "4095",
                 str(rng.randrange(0, 5000))])
        elif rng.random() < 0.1:
            entries.pop(key, None)
    del tensor.external_data[:]
    items = list(entries.items())
    if rng.random() < 0.1:
        items.append(("location", hostile_location(m)))  # listed twice
    for key, value in items:
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return f"initializer {tensor.name!r} external data {dict(items)!r}"


def mut_constant_node(m):
    rng = m.rng
    nodes = [n for n in m.model.graph.node if n.op_type == "Constant"]
    if not nodes:
        node = random_node(m)
        if node is None or not len(node.output):
            return None
        node.op_type = "Constant"
        node.domain = ""
        del node.input[:]
        del node.attribute[:]
        node.attribute.append(helper.make_attribute("value", rand_tensor(rng)))
        return f"node {node.name!r} became a random Constant"
    node = rng.choice(nodes)
    del node.attribute[:]
    name = rng.choice(["value", "value", "value_int", "value_ints",
                       "value_float", "value_floats", "value_string",
                       "sparse_value", "bogus"])
    node.attribute.append(rand_attribute(rng, name) if name != "value"
                          else helper.make_attribute("value", rand_tensor(rng)))
    if rng.random() < 0.1:
        node.attribute.append(rand_attribute(rng, "value_int"))
    return f"Constant {node.name!r} attribute {name!r} randomized"


def mut_model_extras(m):
    rng = m.rng
    graph = m.model.graph
    action = rng.randrange(5)
    if action == 0:
        sparse = graph.sparse_initializer.add()
        sparse.values.CopyFrom(rand_tensor(rng, "sparse"))
        sparse.dims.extend([4])
        return "sparse initializer added"
    if action == 1:
        m.model.training_info.add()
        return "training_info added"
    if action == 2:
        name = rng.choice(m.value_names())
        graph.value_info.append(vi(name, [rng.choice([1, 2, 3, 0])
                                          for _ in range(rng.randrange(4))],
                                   rng.choice([1, 7, 9, 11, 16])))
        return f"value_info for {name!r} added"
    if action == 3:
        function = m.model.functions.add()
        function.name = "F"
        function.domain = "local"
        node = random_node(m)
        if node is not None:
            node.op_type, node.domain = "F", "local"
        return "local function called"
    node = random_node(m)
    if node is None:
        return None
    node.attribute.append(helper.make_attribute(
        "body", helper.make_graph([], "body", [], [])))
    return f"node {node.name!r} got a subgraph attribute"


def mut_attr_tweak(m):
    """Keeps an attribute's type and changes its value, to get past type
    checks into the converters' range checks (axes, perms, pads, ratios)."""
    rng = m.rng
    node = random_node(m)
    if node is None or not len(node.attribute):
        return None
    attr = pick(rng, node.attribute)
    if attr.type == onnx.AttributeProto.INT:
        attr.i = rand_int(rng)
    elif attr.type == onnx.AttributeProto.INTS and len(attr.ints):
        attr.ints[rng.randrange(len(attr.ints))] = rand_int(rng)
    elif attr.type == onnx.AttributeProto.INTS:
        attr.ints.append(rand_int(rng))
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = rng.choice(INTERESTING_FLOATS)
    elif attr.type == onnx.AttributeProto.FLOATS and len(attr.floats):
        attr.floats[rng.randrange(len(attr.floats))] = rng.choice(INTERESTING_FLOATS)
    elif attr.type == onnx.AttributeProto.STRING:
        attr.s = rng.choice(STRINGS)
    elif attr.type == onnx.AttributeProto.TENSOR:
        tweak_tensor_values(rng, attr.t)
    else:
        return None
    return f"node {node.name!r} attribute {attr.name!r} value tweaked"


def tweak_tensor_values(rng, tensor):
    """Replaces some elements of an integer or float tensor in place, keeping
    its type, shape and storage."""
    if tensor.data_type == TensorProto.INT64:
        values = (numpy_helper.to_array(tensor).astype(np.int64).ravel()
                  if tensor.HasField("raw_data") or len(tensor.int64_data)
                  else np.zeros(0, np.int64))
        for _ in range(rng.randrange(1, 3)):
            if values.size:
                values[rng.randrange(values.size)] = rand_int(rng)
        data = values.astype("<i8").tobytes()
    elif tensor.data_type == TensorProto.FLOAT:
        values = numpy_helper.to_array(tensor).astype(np.float32).ravel()
        for _ in range(rng.randrange(1, 3)):
            if values.size:
                values[rng.randrange(values.size)] = rng.choice(INTERESTING_FLOATS)
        data = values.astype("<f4").tobytes()
    else:
        return False
    tensor.ClearField("int64_data")
    tensor.ClearField("float_data")
    tensor.raw_data = data
    return True


def mut_int_values(m):
    """Changes the values of shape-like constants (Reshape shapes, Slice
    bounds, axes, split sizes, Gather indices) to extreme ones."""
    rng = m.rng
    candidates = [t for t in m.model.graph.initializer
                  if t.data_type in (TensorProto.INT64, TensorProto.FLOAT)
                  and t.data_location != TensorProto.EXTERNAL]
    for node in m.model.graph.node:
        if node.op_type == "Constant":
            candidates.extend(a.t for a in node.attribute
                              if a.type == onnx.AttributeProto.TENSOR)
    ints = [t for t in candidates if t.data_type == TensorProto.INT64]
    pool = ints if ints and rng.random() < 0.8 else candidates
    if not pool:
        return None
    tensor = rng.choice(pool)
    try:
        if not tweak_tensor_values(rng, tensor):
            return None
    except (ValueError, TypeError):
        return None  # a payload an earlier mutation already broke
    return f"values of {tensor.name or 'a Constant'!r} tweaked"


def mut_flags(m):
    rng = m.rng
    choices = [["--batch", rng.choice(["0", "-1", "abc", "1", "3", "4096",
                                       str(1 << 62), ""])],
               ["--dim", rng.choice(["seq=0", "seq=-3", "seq", "=2", "seq=1",
                                     "batch=7", "seq=2,seq=3",
                                     "seq=" + str(1 << 62), "a=b=c"])],
               ["--emit=summary"], ["--no-canonicalize"],
               ["--dim", "seq=4", "--dim", "seq=5"]]
    flags = rng.choice(choices)
    m.args = list(m.seed.args) + flags if rng.random() < 0.5 else flags
    return f"flags -> {m.args}"


STRUCTURED = [
    (mut_dims, 10), (mut_elem_type, 6), (mut_attr_change, 10),
    (mut_attr_delete, 5), (mut_attr_duplicate, 3), (mut_attr_add, 8),
    (mut_node_inputs, 8), (mut_node_outputs, 5), (mut_graph_io, 5),
    (mut_node_order, 4), (mut_nodes_add_remove, 3), (mut_op_type, 5),
    (mut_domain, 3), (mut_opset, 4), (mut_initializer_payload, 6),
    (mut_external, 6), (mut_constant_node, 5), (mut_model_extras, 3),
    (mut_flags, 3), (mut_attr_tweak, 8), (mut_int_values, 10),
]


def bytes_mutation(data, rng, seeds, log):
    data = bytearray(data)
    action = rng.randrange(6)
    if not data:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if action == 0:
        flips = rng.choice([1, 1, 2, 4, 16])
        for _ in range(flips):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        log.append(f"{flips} bit flips")
    elif action == 1:
        cut = rng.randrange(len(data))
        del data[cut:]
        log.append(f"truncated at {cut}")
    elif action == 2:
        other = rng.choice(seeds).data
        a = rng.randrange(len(other))
        b = min(len(other), a + rng.randrange(1, 4096))
        at = rng.randrange(len(data) + 1)
        if rng.random() < 0.5:
            data[at:at] = other[a:b]
            log.append(f"spliced {b - a} bytes in at {at}")
        else:
            data[at:at + (b - a)] = other[a:b]
            log.append(f"overwrote {b - a} bytes at {at} with another seed's")
    elif action == 3:
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randrange(1, 2048))
        at = rng.randrange(len(data) + 1)
        data[at:at] = data[a:b]
        log.append(f"duplicated [{a}, {b}) at {at}")
    elif action == 4:
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(len(data))] = rng.choice([0, 0xFF, 0x7F, 0x80, 0x01])
        log.append("overwrote bytes")
    else:
        at = rng.randrange(len(data) + 1)
        data[at:at] = bytes([0xFF] * rng.randrange(1, 11)) + b"\x01"
        log.append(f"inserted a long varint at {at}")
    return bytes(data)


def build_mutant(index, campaign_seed, seeds, work, outside):
    """Writes mutant `index` under work/m/INDEX; returns (dir, model path,
    args, log)."""
    rng = random.Random(f"{campaign_seed}:{index}")
    seed = rng.choice(seeds)
    directory = os.path.join(work, "m", f"{index:06d}")
    if os.path.exists(directory):
        shutil.rmtree(directory)
    shutil.copytree(seed.directory, directory, symlinks=True)
    os.remove(os.path.join(directory, seed.model_file))
    model_path = os.path.join(directory, "model.onnx")
    mutant = Mutant(seed, directory, rng, outside)
    mutant.log.append(f"seed {seed.name}")
    mode = rng.random()
    if mode < 0.2:
        data = seed.data
        for _ in range(rng.choice([1, 1, 2, 3])):
            data = bytes_mutation(data, rng, seeds, mutant.log)
    else:
        operators, weights_ = zip(*STRUCTURED)
        for _ in range(rng.choice([1, 1, 2, 2, 3, 4])):
            mutation = rng.choices(operators, weights_)[0]
            what = mutation(mutant)
            mutant.log.append(what if what else f"{mutation.__name__}: no-op")
        data = mutant.model.SerializeToString()
        if mode > 0.9:
            data = bytes_mutation(data, rng, seeds, mutant.log)
    with open(model_path, "wb") as f:
        f.write(data)
    return directory, model_path, mutant.args, mutant.log


#===----------------------------------------------------------------------===#
# Running and judging
#===----------------------------------------------------------------------===#

CRASH_MARKERS = ["LLVM ERROR", "Assertion", "Stack dump", "PLEASE submit",
                 "UNREACHABLE", "terminate called", "Segmentation fault"]


def limited(command, memory_mb):
    """The command under an address-space cap and without core dumps; a shell
    sets the limits so that no Python code runs between fork and exec."""
    return ["/bin/sh", "-c",
            f'ulimit -v {memory_mb * 1024} && ulimit -c 0 && exec "$@"',
            "sh", *command]


def run(command, timeout, memory_mb, cwd=None):
    start = time.time()
    try:
        result = subprocess.run(limited(command, memory_mb), cwd=cwd,
                                capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        stderr = (expired.stderr or b"").decode("utf-8", "replace")
        return None, stderr, time.time() - start
    return (result.returncode, result.stderr.decode("utf-8", "replace"),
            time.time() - start)


def first_error_line(stderr):
    for line in stderr.splitlines():
        if not line.startswith("dsopt: warning: "):
            return line
    return ""


def judge(status, stderr, output, directory, dsopt_opt, timeout, memory_mb,
          expect_mlir=True):
    """Returns (verdict, detail); verdict is 'ok0', 'ok1' or a failure kind."""
    if status is None:
        return "timeout", f"no exit within {timeout} s"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return "signal", name
    if status not in (0, 1):
        return "status", f"exit status {status}"
    for marker in CRASH_MARKERS:
        if marker in stderr:
            return "crash-text", marker
    if status == 1:
        line = first_error_line(stderr)
        if not line.startswith("dsopt: error: "):
            return "format", f"first stderr line: {line[:200]!r}"
        return "ok1", line
    if first_error_line(stderr):
        return "format", "status 0 with non-warning stderr"
    if not output or not os.path.exists(output):
        return "no-output", "status 0 but no output file"
    with open(output, "r", encoding="utf-8", errors="replace") as f:
        text = f.read()
    if SENTINEL_TEXT in text:
        return "escape", "output holds the value of the file outside the model directory"
    real_dir = os.path.realpath(directory)
    for location in re.findall(r'#ds\.extern<location = "((?:[^"\\]|\\.)*)"', text):
        resolved = os.path.realpath(os.path.join(directory, location))
        if os.path.isabs(location) or not resolved.startswith(real_dir + os.sep):
            return "escape", f"external data location {location!r} leaves the model directory"
    if not expect_mlir:
        return "ok0", ""
    opt_status, opt_stderr, _ = run([dsopt_opt, output, "-o", os.devnull],
                                    timeout, memory_mb)
    if opt_status != 0:
        return "reparse", f"dsopt-opt exit {opt_status}: {opt_stderr[:300]}"
    return "ok0", ""


FRAME = re.compile(r"^\s*#\d+ 0x[0-9a-f]+ (.*)$")
NOT_THE_SITE = ("llvm::sys::", "report_fatal_error", "__pthread_kill", "raise ",
                "abort ", "llvm::SmallVectorBase", "llvm_unreachable",
                "/libc.so", "/libLLVM.so", "__assert_fail", "__libc_start")


def crash_site(stderr):
    """The innermost dsopt/MLIR function of a stack dump (without its
    arguments), so that crashes are told apart by where they happen."""
    fatal = ""
    for line in stderr.splitlines():
        if line.startswith("LLVM ERROR:") and not fatal:
            fatal = line[:100] + " "
        match = FRAME.match(line)
        if not match:
            continue
        frame = match.group(1)
        if any(marker in frame for marker in NOT_THE_SITE):
            continue
        frame = frame.replace("(anonymous namespace)::", "")
        return fatal + "in " + re.sub(r"[(<].*", "", frame)
    return fatal.strip()


def normalize(line, directory):
    """An error message with file names and numbers blanked, to count
    distinct kinds of error."""
    line = line.replace(directory + os.sep, "").replace(directory, "")
    line = " ".join(line.split())
    line = re.sub(r"'[^']*'", "'_'", line)
    line = re.sub(r"-?\d+", "N", line)
    return line[:160]


def save_failure(out, index, verdict, detail, directory, command, stderr, log,
                 memory_mb):
    os.makedirs(out, exist_ok=True)
    target = os.path.join(out, f"{index:06d}-{verdict}")
    if os.path.exists(target):
        shutil.rmtree(target)
    shutil.copytree(directory, target, symlinks=True)
    rel = ["model.onnx" if c.endswith(os.sep + "model.onnx") else c
           for c in command]
    rel = ["out.mlir" if c.endswith(os.sep + "out.mlir") else c for c in rel]
    with open(os.path.join(target, "repro.sh"), "w") as f:
        f.write("#!/bin/sh\n# " + verdict + ": " + detail.replace("\n", " ") +
                f"\ncd \"$(dirname \"$0\")\"\nulimit -v {memory_mb * 1024}\n" +
                " ".join(shlex.quote(c) for c in rel) + "\n")
    os.chmod(os.path.join(target, "repro.sh"), 0o755)
    with open(os.path.join(target, "mutations.txt"), "w") as f:
        f.write("\n".join(log) + "\n")
    with open(os.path.join(target, "stderr.txt"), "w") as f:
        f.write(stderr)
    return target


def self_test(args):
    """The oracle must reject every way a run can go wrong."""
    py = sys.executable
    cases = [
        ("signal", [py, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]),
        ("signal", [py, "-c", "import os; os.abort()"]),
        ("status", [py, "-c", "import sys; sys.exit(2)"]),
        ("format", [py, "-c", "import sys; sys.stderr.write('error: x\\n'); sys.exit(1)"]),
        ("crash-text", [py, "-c", "import sys; sys.stderr.write('dsopt: error: x\\nLLVM ERROR: y\\n'); sys.exit(1)"]),
        ("timeout", [py, "-c", "import time; time.sleep(30)"]),
        ("signal", [py, "-c", "x = bytearray(1 << 34)"]),  # over the memory cap
        ("ok1", [py, "-c", "import sys; sys.stderr.write('dsopt: warning: w\\ndsopt: error: f: m\\n'); sys.exit(1)"]),
    ]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for expected, command in cases:
            status, stderr, _ = run(command, 3, 1024)
            verdict, detail = judge(status, stderr, None, tmp, args.dsopt_opt, 3, 1024)
            # An allocation over the cap may end in MemoryError (status 1,
            # Python's traceback) instead of a signal; either is a failure.
            ok = verdict == expected or (expected == "signal" and
                                         verdict not in ("ok0", "ok1"))
            print(f"self-test: expected {expected:10} got {verdict:10} "
                  f"{'ok' if ok else 'WRONG'}")
            failures += not ok
        # A status-0 run whose output escapes the directory or does not parse.
        out = os.path.join(tmp, "out.mlir")
        with open(out, "w") as f:
            f.write('module { "x.y"( }\n')
        verdict, _ = judge(0, "", out, tmp, args.dsopt_opt, 20, 4096)
        print(f"self-test: expected reparse    got {verdict:10} "
              f"{'ok' if verdict == 'reparse' else 'WRONG'}")
        failures += verdict != "reparse"
        with open(out, "w") as f:
            f.write('#ds.extern<location = "../etc/passwd", offset = 0, length = 4>\n')
        verdict, _ = judge(0, "", out, tmp, args.dsopt_opt, 20, 4096)
        print(f"self-test: expected escape     got {verdict:10} "
              f"{'ok' if verdict == 'escape' else 'WRONG'}")
        failures += verdict != "escape"
    print(f"self-test: {'FAILED' if failures else 'passed'}")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--seed", type=int, default=1,
                        help="campaign seed (default 1)")
    parser.add_argument("--count", type=int, default=300,
                        help="number of mutants (default 300)")
    parser.add_argument("--first", type=int, default=0,
                        help="index of the first mutant (default 0)")
    parser.add_argument("--only", type=int,
                        help="build and run only mutant ONLY")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=20,
                        help="seconds per dsopt run (default 20)")
    parser.add_argument("--memory-mb", type=int, default=4096,
                        help="address-space cap per run (default 4096)")
    parser.add_argument("--work", help="scratch directory (default: a "
                        "temporary one, removed at the end)")
    parser.add_argument("--out", default="fuzz-failures",
                        help="where failing mutants go (default "
                        "./fuzz-failures)")
    parser.add_argument("--max-saved", type=int, default=3,
                        help="failing mutants saved per distinct failure")
    parser.add_argument("--no-zoo", action="store_true",
                        help="skip the exported zoo seeds")
    parser.add_argument("--dsopt", default="dsopt")
    parser.add_argument("--dsopt-opt", default="dsopt-opt")
    parser.add_argument("--self-test", action="store_true",
                        help="check that the oracle rejects crashes, "
                        "timeouts and malformed errors, then exit")
    parser.add_argument("--top", type=int, default=15,
                        help="error kinds listed in the summary")
    args = parser.parse_args()

    for tool in ("dsopt", "dsopt_opt"):
        path = shutil.which(getattr(args, tool))
        if not path:
            parser.error(f"{getattr(args, tool)} not found")
        setattr(args, tool, os.path.abspath(path))
    if args.self_test:
        return self_test(args)

    work = args.work or tempfile.mkdtemp(prefix="fuzz_import.")
    os.makedirs(work, exist_ok=True)
    out = os.path.abspath(args.out)
    lock = threading.Lock()

    def log(message):
        with lock:
            print(f"fuzz_import: {message}", flush=True)

    started = time.time()
    seeds = build_seeds(work, not args.no_zoo, log)
    # The file every escape would reach: outside every mutant directory.
    outside_dir = os.path.join(work, "outside")
    os.makedirs(outside_dir, exist_ok=True)
    outside = os.path.join(outside_dir, "secret.bin")
    np.full(1 << 14, SENTINEL, dtype=np.float32).tofile(outside)

    # Seeds must import: a mutant's error must come from its mutation.
    for seed in seeds:
        output = os.path.join(work, "seed-" + seed.name + ".mlir")
        command = [args.dsopt, os.path.join(seed.directory, seed.model_file),
                   "--emit=mlir", "-o", output, *seed.args]
        status, stderr, _ = run(command, args.timeout, args.memory_mb)
        verdict, detail = judge(status, stderr, output, seed.directory,
                                args.dsopt_opt, args.timeout, args.memory_mb)
        if verdict != "ok0":
            log(f"seed {seed.name} does not import ({verdict}: "
                f"{detail or first_error_line(stderr)})")
            return 1
    log(f"{len(seeds)} seeds import: {', '.join(s.name for s in seeds)}")

    indices = ([args.only] if args.only is not None
               else range(args.first, args.first + args.count))
    outcomes = collections.Counter()
    messages = collections.Counter()
    failures = collections.defaultdict(list)
    slowest = []

    def one(index):
        directory, model, flags, mutations = build_mutant(
            index, args.seed, seeds, work, outside)
        output = os.path.join(directory, "out.mlir")
        command = [args.dsopt, model, "--emit=mlir", "-o", output, *flags]
        status, stderr, seconds = run(command, args.timeout, args.memory_mb)
        verdict, detail = judge(status, stderr, output, directory,
                                args.dsopt_opt, args.timeout, args.memory_mb,
                                expect_mlir="--emit=summary" not in flags)
        keep = False
        with lock:
            outcomes[verdict] += 1
            slowest.append((seconds, index))
            if verdict == "ok1":
                messages[normalize(detail, directory)] += 1
            elif verdict != "ok0":
                site = crash_site(stderr)
                key = (verdict, normalize(detail or first_error_line(stderr),
                                          directory) +
                       (" " + site if site else ""))
                failures[key].append(index)
                keep = len(failures[key]) <= args.max_saved or args.only is not None
        if verdict not in ("ok0", "ok1") and keep:
            saved = save_failure(out, index, verdict, detail, directory,
                                 command, stderr, mutations, args.memory_mb)
            log(f"FAIL mutant {index}: {verdict}: {detail[:200]} -> {saved}")
        if args.only is None:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            log(f"mutant {index}: {verdict} {detail}\n  " +
                "\n  ".join(mutations))
        return verdict

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for done, _ in enumerate(pool.map(one, indices), 1):
            if done % 500 == 0:
                log(f"{done} mutants, {time.time() - started:.0f} s")

    total = sum(outcomes.values())
    failed = total - outcomes["ok0"] - outcomes["ok1"]
    elapsed = time.time() - started
    print(f"fuzz_import: {total} mutants (seed {args.seed}) in {elapsed:.1f} s")
    print(f"  imported (status 0): {outcomes['ok0']}")
    print(f"  rejected (status 1): {outcomes['ok1']}")
    print(f"  distinct error kinds: {len(messages)}")
    for message, count in messages.most_common(args.top):
        print(f"    {count:6}  {message}")
    slowest.sort(reverse=True)
    print("  slowest: " + ", ".join(f"#{i} {s:.2f} s" for s, i in slowest[:3]))
    print(f"  failures: {failed}")
    for (verdict, message), indices_ in sorted(failures.items()):
        print(f"    {verdict}: {message} (mutants {indices_[:10]}"
              f"{' ...' if len(indices_) > 10 else ''})")
    if failed:
        print(f"  failing mutants saved under {out}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
