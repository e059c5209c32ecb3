#!/usr/bin/python3
"""Finite-difference check of every derivative dsopt knows.

Each case is one ONNX op (with its attributes and broadcasting) applied to
float parameters; its loss is sum(op(params) * R) for a fixed random R, so
every element of the op's output matters. All cases go into one model whose
loss is the sum of the cases' losses, so that one compile covers them:

  1. `dsopt MODEL --loss loss --frozen 'R_*' --gradients -o G` builds
     G/gradients, which runs forward and backward once and writes every
     parameter's gradient (the derivatives under test);
  2. the same graph with the parameters turned into graph inputs is compiled
     to F/run, dsopt's own forward program;
  3. central differences (f(p + h e) - f(p - h e)) / 2h of each case's loss
     through F/run, for a few elements of every parameter. Cases are
     independent, so one run perturbs one element in every case at once.

A derivative passes when |analytic - numeric| <= ATOL + RTOL * |numeric|
for every sampled element. Inputs keep away from kinks (relu at 0, ties of
max) by construction. Prints one line per case and exits 1 on any failure.
"""
import argparse
import os
import shlex
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17        # what onnx 1.12 can check; Gelu (opset 20) gets its own model
H = 1e-2          # finite-difference step
ATOL = 2e-3
RTOL = 2e-2
SAMPLES = 4       # elements checked per parameter


@dataclass
class Case:
    name: str
    params: Dict[str, np.ndarray]               # differentiated (float32)
    nodes: Callable[["Builder"], str]            # builds the op, returns output
    opset: int = OPSET
    out_shape: Optional[List[int]] = None        # where onnx cannot infer it


class Builder:
    """Collects the nodes of one case with names prefixed by the case."""

    def __init__(self, case: str, nodes: List[onnx.NodeProto], inits: List[onnx.TensorProto]):
        self.case, self.nodes, self.inits, self.count = case, nodes, inits, 0

    def p(self, name):  # a parameter or constant of this case
        return f"{self.case}.{name}"

    def const(self, value, dtype=None):
        self.count += 1
        name = f"{self.case}.const{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type, inputs, n_out=1, **attrs):
        self.count += 1
        outs = [f"{self.case}.t{self.count}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=f"{self.case}.{op_type}{self.count}",
                                           **attrs))
        return outs[0] if n_out == 1 else outs


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def away_from(value, x, margin=0.1):
    """x with every element at least `margin` away from `value`."""
    return np.where(np.abs(x - value) < margin, value + np.sign(x - value + 1e-9) * margin, x)


def distinct(shape, seed):
    """Values far apart (no ties within H), shuffled."""
    n = int(np.prod(shape))
    values = np.arange(n, dtype=np.float32) * 0.25 - n * 0.125
    rng = np.random.default_rng(seed)
    rng.shuffle(values)
    return values.reshape(shape)


def cases() -> List[Case]:
    r = np.random.default_rng(0)
    f = lambda *s: r.standard_normal(s).astype(np.float32)  # noqa: E731
    pos = lambda *s: (0.5 + r.random(s)).astype(np.float32)  # noqa: E731
    c: List[Case] = []

    def unary(name, op, x, opset=OPSET, **attrs):
        c.append(Case(name, {"x": x}, lambda b: b.op(op, [b.p("x")], **attrs), opset=opset,
                      out_shape=list(x.shape) if opset != OPSET else None))

    unary("sqrt", "Sqrt", pos(3, 6))
    unary("reciprocal", "Reciprocal", away_from(0, f(3, 6), 0.5))
    unary("exp", "Exp", f(3, 6))
    unary("log", "Log", pos(3, 6))
    unary("tanh", "Tanh", f(3, 6))
    unary("erf", "Erf", f(3, 6))
    unary("sigmoid", "Sigmoid", f(3, 6))
    unary("neg", "Neg", f(3, 6))
    unary("relu", "Relu", away_from(0, f(3, 6)))
    unary("leaky_relu", "LeakyRelu", away_from(0, f(3, 6)), alpha=0.1)
    unary("gelu", "Gelu", f(3, 6), opset=20)
    unary("gelu_tanh", "Gelu", f(3, 6), opset=20, approximate="tanh")
    unary("softmax", "Softmax", f(3, 6), axis=-1)
    unary("softmax_axis0", "Softmax", f(3, 6), axis=0)
    unary("log_softmax", "LogSoftmax", f(3, 6), axis=-1)
    unary("transpose", "Transpose", f(2, 3, 4), perm=[2, 0, 1])
    unary("flatten", "Flatten", f(2, 3, 4), axis=2)
    unary("trilu", "Trilu", f(2, 4, 5), upper=1)
    unary("trilu_lower", "Trilu", f(4, 5), upper=0)

    unary("softplus", "Softplus", 3 * f(3, 6))
    unary("elu", "Elu", away_from(0, f(3, 6)), alpha=0.7)
    unary("celu", "Celu", away_from(0, f(3, 6)), alpha=1.5)
    unary("selu", "Selu", away_from(0, f(3, 6)))
    unary("mish", "Mish", 2 * f(3, 6), opset=18)
    unary("sin", "Sin", 3 * f(3, 6))
    unary("cos", "Cos", 3 * f(3, 6))
    # Piecewise constant: zero derivative away from the steps.
    unary("floor", "Floor", np.floor(3 * f(3, 6)) + 0.5)
    unary("round", "Round", np.floor(3 * f(3, 6)) + 0.25)
    # Kinks at +-2.5 (HardSigmoid) and +-3 (HardSwish).
    unary("hard_sigmoid", "HardSigmoid", away_from(2.5, away_from(-2.5, 3 * f(3, 6))), alpha=0.2, beta=0.5)
    unary("hard_swish", "HardSwish", away_from(3, away_from(-3, 3 * f(3, 6))), opset=14)
    c.append(Case("clip_constant_bounds", {"x": away_from(-0.5, away_from(0.8, f(3, 6)))},
                  lambda b: b.op("Clip", [b.p("x"), b.const(np.array(-0.5, np.float32)),
                                          b.const(np.array(0.8, np.float32))])))
    c.append(Case("clip_max_only", {"x": away_from(0.3, f(3, 6))},
                  lambda b: b.op("Clip", [b.p("x"), "", b.const(np.array(0.3, np.float32))])))
    # Computed bounds receive the gradient where they are the result (bounds
    # that are initializers are read as constants, as ReLU6's 0 and 6).
    c.append(Case("clip_computed_bounds", {"x": away_from(-0.3, away_from(0.4, f(3, 6))),
                                           "lo": np.array(0.3, np.float32),
                                           "hi": np.array(-0.4, np.float32)},
                  lambda b: b.op("Clip", [b.p("x"), b.op("Neg", [b.p("lo")]), b.op("Neg", [b.p("hi")])])))
    c.append(Case("prelu", {"x": away_from(0, f(2, 3, 4)), "slope": f(3, 1)},
                  lambda b: b.op("PRelu", [b.p("x"), b.p("slope")])))

    def binary(name, op, a, b_):
        c.append(Case(name, {"a": a, "b": b_}, lambda b: b.op(op, [b.p("a"), b.p("b")])))

    binary("add_bcast", "Add", f(3, 6), f(6))
    binary("sub_bcast", "Sub", f(3, 6), f(3, 1))
    binary("mul_bcast", "Mul", f(2, 3, 4), f(3, 1))
    binary("div_bcast", "Div", f(3, 6), away_from(0, f(6), 0.5))
    binary("pow", "Pow", pos(3, 6), f(6))
    binary("matmul", "MatMul", f(3, 4), f(4, 5))
    binary("matmul_batched_weight", "MatMul", f(2, 3, 4), f(4, 5))
    binary("matmul_batched", "MatMul", f(2, 3, 4), f(2, 4, 5))
    binary("matmul_bcast_batch", "MatMul", f(2, 1, 3, 4), f(3, 4, 5))
    binary("matmul_weight_left", "MatMul", f(5, 4), f(2, 4, 3))
    binary("matmul_vector_left", "MatMul", f(4), f(2, 4, 5))
    binary("matmul_vector_right", "MatMul", f(3, 4), f(4))

    def gemm(name, a, b_, cc=None, **attrs):
        params = {"a": a, "b": b_}
        if cc is not None:
            params["c"] = cc
        c.append(Case(name, params,
                      lambda b: b.op("Gemm", [b.p("a"), b.p("b")] + ([b.p("c")] if cc is not None else []),
                                     **attrs)))

    gemm("gemm", f(3, 4), f(4, 5), f(5))
    gemm("gemm_transposed", f(4, 3), f(5, 4), f(3, 5), transA=1, transB=1, alpha=0.5, beta=2.0)
    gemm("gemm_no_c", f(3, 4), f(5, 4), transB=1)

    condition = r.random((3, 6)) > 0.5
    c.append(Case("where", {"a": f(3, 6), "b": f(6)},
                  lambda b: b.op("Where", [b.const(condition), b.p("a"), b.p("b")])))
    c.append(Case("layer_norm", {"x": f(2, 3, 6), "scale": f(6), "bias": f(6)},
                  lambda b: b.op("LayerNormalization", [b.p("x"), b.p("scale"), b.p("bias")], axis=-1,
                                 epsilon=1e-5)))
    c.append(Case("layer_norm_two_axes", {"x": f(2, 3, 6), "scale": f(3, 6)},
                  lambda b: b.op("LayerNormalization", [b.p("x"), b.p("scale")], axis=1, epsilon=1e-5)))
    c.append(Case("batch_norm_eval", {"x": f(2, 3, 4, 4), "scale": f(3), "bias": f(3), "mean": f(3),
                                      "var": pos(3)},
                  lambda b: b.op("BatchNormalization",
                                 [b.p("x"), b.p("scale"), b.p("bias"), b.p("mean"), b.p("var")],
                                 epsilon=1e-5)))
    c.append(Case("batch_norm_train", {"x": f(4, 3, 3, 3), "scale": f(3), "bias": f(3)},
                  lambda b: b.op("BatchNormalization",
                                 [b.p("x"), b.p("scale"), b.p("bias"), b.const(np.zeros(3, np.float32)),
                                  b.const(np.ones(3, np.float32))],
                                 n_out=3, epsilon=1e-5, momentum=0.9, training_mode=1)[0]))

    def reduce(name, op, x, axes, keepdims):
        if op == "ReduceSum":  # axes as an input since opset 13, an attribute for the others until 18
            build = lambda b: b.op(op, [b.p("x"), b.const(np.array(axes, np.int64))], keepdims=keepdims)  # noqa
        else:
            build = lambda b: b.op(op, [b.p("x")], axes=axes, keepdims=keepdims)  # noqa
        c.append(Case(name, {"x": x}, build))

    reduce("reduce_sum", "ReduceSum", f(2, 3, 4), [1], 1)
    reduce("reduce_sum_nokeep", "ReduceSum", f(2, 3, 4), [0, 2], 0)
    reduce("reduce_mean", "ReduceMean", f(2, 3, 4), [-1], 0)
    reduce("reduce_max", "ReduceMax", distinct((2, 3, 4), 1), [2], 1)
    reduce("reduce_min", "ReduceMin", distinct((2, 3, 4), 2), [0, 2], 0)
    reduce("reduce_sum_square", "ReduceSumSquare", f(2, 3, 4), [1], 1)
    reduce("reduce_l1", "ReduceL1", away_from(0, f(2, 3, 4)), [2], 0)
    # At 0 the derivative is sign(0) = 0, which central differences give too.
    l1_x = away_from(0, f(2, 3, 4))
    l1_x[0, 1, :] = 0.0
    reduce("reduce_l1_zeros", "ReduceL1", l1_x, [2], 0)
    reduce("reduce_l2", "ReduceL2", f(2, 3, 4), [-1], 1)
    l2_x = f(2, 3, 4)
    l2_x[1, 2, :] = 0.0  # a zero norm: derivative 0, as PyTorch's
    reduce("reduce_l2_zero_norm", "ReduceL2", l2_x, [-1], 1)
    reduce("reduce_log_sum", "ReduceLogSum", pos(2, 3, 4), [1], 0)
    reduce("reduce_log_sum_exp", "ReduceLogSumExp", 3 * f(2, 3, 4), [0, 1], 1)
    reduce("reduce_log_sum_exp_nokeep", "ReduceLogSumExp", 3 * f(2, 3, 4), [2], 0)
    reduce("reduce_prod", "ReduceProd", (0.5 + r.random((2, 3, 4))).astype(np.float32) * np.sign(f(2, 3, 4)),
           [0, 2], 1)
    # Zeros: one in a reduced group (its element gets the product of the
    # others, the rest 0), two in another (all 0), none in the third.
    prod_x = (0.5 + r.random((3, 4))).astype(np.float32)
    prod_x[0, 1] = 0.0
    prod_x[1, 0] = prod_x[1, 3] = 0.0
    reduce("reduce_prod_zeros", "ReduceProd", prod_x, [1], 0)
    # Quotients a / b halfway between integers, away from the steps.
    mod_b = ((1.0 + r.random((3, 4))) * np.sign(f(3, 4))).astype(np.float32)
    mod_a = ((r.integers(-3, 3, (3, 4)) + 0.5) * mod_b).astype(np.float32)
    c.append(Case("mod_fmod", {"a": mod_a, "b": mod_b},
                  lambda b: b.op("Mod", [b.p("a"), b.p("b")], fmod=1)))
    c.append(Case("sum_variadic", {"a": f(2, 3), "b": f(3), "c": f(2, 1)},
                  lambda b: b.op("Sum", [b.p("a"), b.p("b"), b.p("c")])))
    c.append(Case("mean_variadic", {"a": f(2, 3), "b": f(3), "c": f(2, 1)},
                  lambda b: b.op("Mean", [b.p("a"), b.p("b"), b.p("c")])))
    c.append(Case("reshape", {"x": f(2, 3, 4)},
                  lambda b: b.op("Reshape", [b.p("x"), b.const(np.array([4, -1], np.int64))])))
    c.append(Case("expand", {"x": f(3, 1)},
                  lambda b: b.op("Expand", [b.p("x"), b.const(np.array([2, 3, 4], np.int64))])))
    c.append(Case("concat", {"a": f(2, 3), "b": f(2, 5)},
                  lambda b: b.op("Concat", [b.p("a"), b.p("b")], axis=1)))

    def split(b):
        parts = b.op("Split", [b.p("x"), b.const(np.array([1, 3, 2], np.int64))], n_out=3, axis=1)
        # Only two of the three parts reach the loss.
        return b.op("Concat", [parts[2], parts[0]], axis=1)

    c.append(Case("split", {"x": f(2, 6)}, split))
    c.append(Case("slice", {"x": f(4, 6)},
                  lambda b: b.op("Slice", [b.p("x"), b.const(np.array([1, 5], np.int64)),
                                           b.const(np.array([4, 0], np.int64)),
                                           b.const(np.array([0, 1], np.int64)),
                                           b.const(np.array([1, -2], np.int64))])))
    c.append(Case("gather_embedding", {"table": f(5, 4)},
                  lambda b: b.op("Gather", [b.p("table"), b.const(np.array([[0, 3, 3], [4, 0, 1]], np.int64))],
                                 axis=0)))
    c.append(Case("gather_axis1", {"x": f(3, 5)},
                  lambda b: b.op("Gather", [b.p("x"), b.const(np.array([4, -1, 2], np.int64))], axis=1)))
    c.append(Case("unsqueeze_squeeze", {"x": f(3, 4)},
                  lambda b: b.op("Squeeze", [b.op("Unsqueeze", [b.p("x"), b.const(np.array([0, 2], np.int64))]),
                                             b.const(np.array([0], np.int64))])))
    c.append(Case("dropout", {"x": f(4, 8)},
                  lambda b: b.op("Dropout", [b.p("x"), b.const(np.array(0.3, np.float32)),
                                             b.const(np.array(True))], seed=7)))

    labels = np.array([1, 0, 3, 2, -100, 3], np.int64)
    c.append(Case("sce_mean_ignore", {"scores": f(6, 4)},
                  lambda b: b.op("SoftmaxCrossEntropyLoss", [b.p("scores"), b.const(labels)],
                                 ignore_index=-100, reduction="mean")))
    c.append(Case("sce_sum_weights", {"scores": f(6, 4)},
                  lambda b: b.op("SoftmaxCrossEntropyLoss",
                                 [b.p("scores"), b.const(np.where(labels < 0, 0, labels)),
                                  b.const(np.array([0.5, 1.0, 2.0, 1.5], np.float32))],
                                 reduction="sum")))
    c.append(Case("sce_none_spatial", {"scores": f(2, 4, 3)},
                  lambda b: b.op("SoftmaxCrossEntropyLoss",
                                 [b.p("scores"), b.const(np.array([[0, 1, 3], [2, 2, 1]], np.int64))],
                                 reduction="none")))
    c.append(Case("sce_log_prob_output", {"scores": f(6, 4)},
                  lambda b: b.op("Add", b.op("SoftmaxCrossEntropyLoss", [b.p("scores"), b.const(np.where(labels < 0, 0, labels))],
                                             n_out=2, reduction="mean"))))
    c.append(Case("nll_mean_weights", {"x": f(6, 4)},
                  lambda b: b.op("NegativeLogLikelihoodLoss",
                                 [b.op("LogSoftmax", [b.p("x")], axis=1), b.const(labels),
                                  b.const(np.array([0.5, 1.0, 2.0, 1.5], np.float32))],
                                 ignore_index=-100, reduction="mean")))

    c.append(Case("conv", {"x": f(2, 4, 6, 6), "w": f(6, 2, 3, 3), "b": f(6)},
                  lambda b: b.op("Conv", [b.p("x"), b.p("w"), b.p("b")], strides=[2, 1], pads=[1, 0, 1, 2],
                                 dilations=[1, 2], group=2)))
    c.append(Case("conv1d", {"x": f(2, 3, 7), "w": f(4, 3, 3)},
                  lambda b: b.op("Conv", [b.p("x"), b.p("w")], pads=[1, 1])))
    c.append(Case("max_pool", {"x": distinct((2, 2, 5, 5), 3)},
                  lambda b: b.op("MaxPool", [b.p("x")], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])))
    c.append(Case("avg_pool", {"x": f(2, 2, 5, 5)},
                  lambda b: b.op("AveragePool", [b.p("x")], kernel_shape=[3, 3], strides=[2, 2],
                                 pads=[1, 1, 1, 1], count_include_pad=0)))
    c.append(Case("avg_pool_include_pad", {"x": f(2, 2, 5, 5)},
                  lambda b: b.op("AveragePool", [b.p("x")], kernel_shape=[2, 3], strides=[1, 2],
                                 pads=[0, 1, 1, 1], count_include_pad=1)))
    c.append(Case("global_avg_pool", {"x": f(2, 3, 4, 4)},
                  lambda b: b.op("GlobalAveragePool", [b.p("x")])))
    # Padding, resizing, normalization and layout ops (compositions).
    c.append(Case("pad_constant", {"x": f(2, 3, 4)},
                  lambda b: b.op("Pad", [b.p("x"), b.const(np.array([0, 1, -1, 1, 2, 1], np.int64)),
                                         b.const(np.array(0.5, np.float32))])))
    c.append(Case("pad_reflect", {"x": f(2, 3, 5)},
                  lambda b: b.op("Pad", [b.p("x"), b.const(np.array([0, 1, 2, 0, 2, 3], np.int64))],
                                 mode="reflect")))
    c.append(Case("pad_edge", {"x": f(2, 3, 4)},
                  lambda b: b.op("Pad", [b.p("x"), b.const(np.array([0, 2, 0, 0, 1, 3], np.int64))],
                                 mode="edge")))
    c.append(Case("pad_edge_axes", {"x": f(2, 3, 4)},
                  lambda b: b.op("Pad", [b.p("x"), b.const(np.array([1, 2], np.int64)), "",
                                         b.const(np.array([-2], np.int64))], mode="edge"),
                  opset=18, out_shape=[2, 6, 4]))
    c.append(Case("tile", {"x": f(2, 3)},
                  lambda b: b.op("Tile", [b.p("x"), b.const(np.array([2, 3], np.int64))])))
    c.append(Case("depth_to_space_dcr", {"x": f(1, 8, 2, 3)},
                  lambda b: b.op("DepthToSpace", [b.p("x")], blocksize=2)))
    c.append(Case("depth_to_space_crd", {"x": f(1, 8, 2, 3)},
                  lambda b: b.op("DepthToSpace", [b.p("x")], blocksize=2, mode="CRD")))
    c.append(Case("space_to_depth", {"x": f(1, 2, 4, 6)},
                  lambda b: b.op("SpaceToDepth", [b.p("x")], blocksize=2)))
    c.append(Case("global_max_pool", {"x": distinct((2, 3, 3, 3), 4)},
                  lambda b: b.op("GlobalMaxPool", [b.p("x")])))
    c.append(Case("instance_norm", {"x": f(2, 3, 4, 4), "scale": f(3), "bias": f(3)},
                  lambda b: b.op("InstanceNormalization", [b.p("x"), b.p("scale"), b.p("bias")],
                                 epsilon=1e-5)))
    c.append(Case("group_norm", {"x": f(2, 4, 3, 3), "scale": f(2), "bias": f(2)},
                  lambda b: b.op("GroupNormalization", [b.p("x"), b.p("scale"), b.p("bias")],
                                 num_groups=2, epsilon=1e-5),
                  opset=18, out_shape=[2, 4, 3, 3]))
    c.append(Case("resize_nearest", {"x": f(1, 2, 3, 4)},
                  lambda b: b.op("Resize", [b.p("x"), "", b.const(np.array([1, 1, 2, 1.5], np.float32))],
                                 mode="nearest", coordinate_transformation_mode="asymmetric",
                                 nearest_mode="floor")))
    c.append(Case("resize_linear_half_pixel", {"x": f(1, 2, 3, 4)},
                  lambda b: b.op("Resize", [b.p("x"), "", b.const(np.array([1, 1, 2, 2], np.float32))],
                                 mode="linear")))
    c.append(Case("resize_linear_align_corners", {"x": f(1, 2, 3, 4)},
                  lambda b: b.op("Resize", [b.p("x"), "", "", b.const(np.array([1, 2, 5, 3], np.int64))],
                                 mode="linear", coordinate_transformation_mode="align_corners")))
    c.append(Case("resize_cubic_exclude_outside", {"x": f(1, 2, 3, 4)},
                  lambda b: b.op("Resize", [b.p("x"), "", b.const(np.array([1, 1, 2, 1.5], np.float32))],
                                 mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1)))
    c.append(Case("resize_cubic_align_corners", {"x": f(1, 2, 3, 4)},
                  lambda b: b.op("Resize", [b.p("x"), "", "", b.const(np.array([1, 2, 5, 3], np.int64))],
                                 mode="cubic", coordinate_transformation_mode="align_corners")))
    c.append(Case("resize_tf_crop_and_resize", {"x": f(1, 2, 3, 4)},
                  lambda b: b.op("Resize", [b.p("x"), b.const(np.array([0, 0, 0.2, -0.3, 1, 1, 0.9, 1.2], np.float32)),
                                            "", b.const(np.array([1, 2, 4, 5], np.int64))],
                                 mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                                 extrapolation_value=0.5)))
    c.append(Case("conv_transpose", {"x": f(2, 4, 3, 3), "w": f(4, 2, 3, 2), "b": f(4)},
                  lambda b: b.op("ConvTranspose", [b.p("x"), b.p("w"), b.p("b")], strides=[2, 1],
                                 pads=[1, 0, 0, 1], output_padding=[1, 0], dilations=[1, 2], group=2)))
    c.append(Case("conv_transpose_1d", {"x": f(2, 3, 4), "w": f(3, 2, 3)},
                  lambda b: b.op("ConvTranspose", [b.p("x"), b.p("w")], strides=[2])))
    # Norms, contractions and element gathers (compositions).
    c.append(Case("lp_norm_l2", {"x": f(3, 4)}, lambda b: b.op("LpNormalization", [b.p("x")], axis=1, p=2)))
    c.append(Case("lp_norm_l1", {"x": away_from(0, f(3, 4))},
                  lambda b: b.op("LpNormalization", [b.p("x")], axis=0, p=1)))
    c.append(Case("einsum_attention", {"q": f(2, 3, 4, 5), "k": f(2, 3, 6, 5)},
                  lambda b: b.op("Einsum", [b.p("q"), b.p("k")], equation="bhqd,bhkd->bhqk"),
                  out_shape=[2, 3, 4, 6]))
    c.append(Case("einsum_implicit_sum", {"a": f(3, 4), "b": f(4, 5), "c": f(5, 2)},
                  lambda b: b.op("Einsum", [b.p("a"), b.p("b"), b.p("c")], equation="ij,jk,kl"),
                  out_shape=[3, 2]))
    c.append(Case("einsum_ellipsis_reduce", {"a": f(2, 3, 4), "b": f(4)},
                  lambda b: b.op("Einsum", [b.p("a"), b.p("b")], equation="...ij,j->..."),
                  out_shape=[2]))
    c.append(Case("gather_elements", {"x": f(3, 4)},
                  lambda b: b.op("GatherElements", [b.p("x"), b.const(np.array([[0, 2], [3, -1], [1, 1]], np.int64))],
                                 axis=1)))
    c.append(Case("gather_nd_batch", {"x": f(2, 3, 4)},
                  lambda b: b.op("GatherND", [b.p("x"), b.const(np.array([[[2], [0], [2]], [[1], [-1], [0]]], np.int64))],
                                 batch_dims=1)))
    # Scatter: data keeps its gradient where no update replaced it; updates
    # get the result's gradient at their positions.
    scatter_idx = np.array([[1, 0, 3], [0, 2, 1]], np.int64)
    for reduction, opset in (("none", OPSET), ("add", OPSET), ("max", 18), ("min", 18)):
        c.append(Case("scatter_elements_" + reduction, {"x": distinct((3, 4), 11), "u": distinct((2, 3), 12)},
                      lambda b, reduction=reduction: b.op(
                          "ScatterElements",
                          [b.p("x"), b.const(scatter_idx if reduction == "none" else
                                             np.array([[1, 1, 3], [1, -4, 3]], np.int64)), b.p("u")],
                          axis=1, reduction=reduction),
                      opset=opset, out_shape=[3, 4] if opset != OPSET else None))
    factors = pos(2, 2)  # drawn once: the case is built twice (gradient and forward models)
    c.append(Case("scatter_elements_mul", {"x": f(3, 4)},
                  lambda b: b.op("ScatterElements", [b.p("x"), b.const(np.array([[2, 2], [0, 1]], np.int64)),
                                                     b.const(factors)], reduction="mul")))
    c.append(Case("scatter_nd", {"x": f(3, 4, 2), "u": f(2, 2)},
                  lambda b: b.op("ScatterND", [b.p("x"), b.const(np.array([[0, 1], [2, -1]], np.int64)),
                                               b.p("u")])))
    c.append(Case("scatter_nd_add", {"x": f(3, 4), "u": f(3, 4)},
                  lambda b: b.op("ScatterND", [b.p("x"), b.const(np.array([[2], [0], [2]], np.int64)),
                                               b.p("u")], reduction="add")))
    c.append(Case("top_k_values", {"x": distinct((3, 5), 13)},
                  lambda b: b.op("TopK", [b.p("x"), b.const(np.array([2], np.int64))], n_out=2, axis=1)[0]))
    c.append(Case("top_k_smallest", {"x": distinct((4, 3), 14)},
                  lambda b: b.op("TopK", [b.p("x"), b.const(np.array([3], np.int64))], n_out=2, axis=0,
                                 largest=0)[0]))
    c.append(Case("cumsum_exclusive_reverse", {"x": f(3, 4)},
                  lambda b: b.op("CumSum", [b.p("x"), b.const(np.array(1, np.int64))], exclusive=1, reverse=1)))
    c.append(Case("cumsum_axis0", {"x": f(3, 4)},
                  lambda b: b.op("CumSum", [b.p("x"), b.const(np.array(0, np.int64))])))
    # A value used twice: gradients from both uses add up.
    c.append(Case("reuse", {"x": f(3, 4)},
                  lambda b: b.op("Mul", [b.op("Tanh", [b.p("x")]), b.p("x")])))
    return c


def build(case_list: List[Case], params_as_inputs: bool) -> onnx.ModelProto:
    opset = case_list[0].opset
    nodes, inits, inputs = [], [], []
    outs = []
    for case in case_list:
        for name, value in case.params.items():
            full = f"{case.name}.{name}"
            if params_as_inputs:
                inputs.append(helper.make_tensor_value_info(full, TensorProto.FLOAT, value.shape))
            else:
                inits.append(numpy_helper.from_array(value, full))
        builder = Builder(case.name, nodes, inits)
        outs.append((case, case.nodes(builder), builder))

    # The shape of each case's output, for its random weights R.
    probe_nodes = nodes + [helper.make_node("Identity", [out], [f"probe_{case.name}"]) for case, out, _ in outs]
    probe = helper.make_model(
        helper.make_graph(probe_nodes, "probe", inputs,
                          [helper.make_tensor_value_info(f"probe_{case.name}", TensorProto.FLOAT, None)
                           for case, _, _ in outs], inits),
        opset_imports=[helper.make_opsetid("", opset)])
    probe.ir_version = 8
    given = {out: case.out_shape for case, out, _ in outs if case.out_shape is not None}
    shapes = {}
    if opset == OPSET:
        inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=True)
        shapes.update({v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
                       for v in list(inferred.graph.value_info) + list(inferred.graph.output)})
    shapes.update(given)  # where onnx infers only the rank (Einsum)

    outputs, loss = [], None
    for case, out, b in outs:
        r_name = f"R_{case.name}"
        r = rng_for(r_name).standard_normal(shapes[out]).astype(np.float32)
        inits.append(numpy_helper.from_array(r, r_name))
        case_loss = f"loss_{case.name}"
        nodes.append(helper.make_node("ReduceSum", [b.op("Mul", [out, r_name])], [case_loss], keepdims=0,
                                      name=f"{case.name}.loss"))
        outputs.append(helper.make_tensor_value_info(case_loss, TensorProto.FLOAT, []))
        loss = case_loss if loss is None else b.op("Add", [loss, case_loss])
    nodes.append(helper.make_node("Identity", [loss], ["loss"], name="total_loss"))
    outputs.insert(0, helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    graph = helper.make_graph(nodes, "fd_check", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset == OPSET else 9
    if opset == OPSET:
        onnx.checker.check_model(model, full_check=True)
    return model


def frozen_names(model: onnx.ModelProto) -> str:
    """The random weights and every float constant of the cases: only the
    case parameters train."""
    params = {f"{c.name}.{p}" for c in cases() for p in c.params}
    names = [i.name for i in model.graph.initializer
             if i.data_type == TensorProto.FLOAT and i.name not in params]
    return ",".join(names)


def run(cmd, what):
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"{what} failed ({' '.join(cmd)}):\n{done.stderr}")
    return done


def check_group(args, group: List[Case], work: str, numeric: Dict[str, List]) -> None:
    """Gradients and finite differences of one model (cases of one opset)."""
    os.makedirs(work, exist_ok=True)
    grad_model = os.path.join(work, "fd.onnx")
    model = build(group, params_as_inputs=False)
    onnx.save(model, grad_model)
    fwd_model = os.path.join(work, "fd_inputs.onnx")
    onnx.save(build(group, params_as_inputs=True), fwd_model)

    gdir, fdir = os.path.join(work, "G"), os.path.join(work, "F")
    dsopt = shlex.split(args.dsopt)
    run([*dsopt, grad_model, "--loss", "loss", "--frozen", frozen_names(model), "--gradients", "--no-train", "--no-forward", "-o", gdir], "dsopt (gradients)")
    run([*dsopt, fwd_model, "-o", fdir], "dsopt (forward)")
    empty = os.path.join(work, "no_inputs")
    gout = os.path.join(work, "grads")
    os.makedirs(empty, exist_ok=True)
    os.makedirs(gout, exist_ok=True)
    run([os.path.join(gdir, "gradients"), "--inputs", empty, "--outputs", gout, "--quiet"], "gradients")

    # The sampled elements: (case, param, flat index) per perturbation slot.
    slots: Dict[str, List] = {}
    for case in group:
        entries = []
        for name, value in case.params.items():
            picks = rng_for(case.name + name).choice(value.size, size=min(SAMPLES, value.size), replace=False)
            entries += [(name, int(i)) for i in picks]
        slots[case.name] = entries
    rounds = max(len(v) for v in slots.values())

    def forward(perturb: Dict[str, tuple], sign: float, tag: str) -> Dict[str, float]:
        in_dir = os.path.join(work, f"in_{tag}")
        out_dir = os.path.join(work, f"out_{tag}")
        os.makedirs(in_dir, exist_ok=True)
        os.makedirs(out_dir, exist_ok=True)
        for case in group:
            for name, value in case.params.items():
                value = value.copy()
                hit = perturb.get(case.name)
                if hit and hit[0] == name:
                    value.reshape(-1)[hit[1]] += sign * H
                np.save(os.path.join(in_dir, f"{case.name}.{name}.npy"), value)
        run([os.path.join(fdir, "run"), "--inputs", in_dir, "--outputs", out_dir, "--quiet"], "forward")
        return {c.name: float(np.load(os.path.join(out_dir, f"loss_{c.name}.npy"))) for c in group}

    for k in range(rounds):
        perturb = {name: entries[k] for name, entries in slots.items() if k < len(entries)}
        plus = forward(perturb, +1.0, f"{k}p")
        minus = forward(perturb, -1.0, f"{k}m")
        for name, (param, index) in perturb.items():
            numeric[name].append((param, index, (plus[name] - minus[name]) / (2 * H)))



def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--dsopt", default="dsopt", help="dsopt command (split like a shell would)")
    parser.add_argument("--only", default="", help="comma-separated case names")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)

    all_cases = cases()
    if args.only:
        keep = set(args.only.split(","))
        all_cases = [c for c in all_cases if c.name in keep]

    numeric: Dict[str, List] = {c.name: [] for c in all_cases}
    gouts: Dict[str, str] = {}
    for opset in sorted({c.opset for c in all_cases}):
        group = [c for c in all_cases if c.opset == opset]
        work = os.path.join(args.work, f"opset{opset}")
        check_group(args, group, work, numeric)
        for c in group:
            gouts[c.name] = os.path.join(work, "grads")

    failures = 0
    for case in all_cases:
        worst, message = 0.0, ""
        for param, index, fd in numeric[case.name]:
            path = os.path.join(gouts[case.name], f"{case.name}.{param}.grad.npy")
            if not os.path.exists(path):
                message = f"no gradient for {param}"
                worst = np.inf
                break
            analytic = float(np.load(path).reshape(-1)[index])
            err = abs(analytic - fd) / (ATOL + RTOL * abs(fd))
            if err > worst:
                worst = err
                message = f"{param}[{index}]: analytic {analytic:.6g}, finite difference {fd:.6g}"
        if worst <= 1.0:
            print(f"{case.name}: ok (worst {worst:.2f} of tolerance)")
        else:
            failures += 1
            print(f"{case.name}: MISMATCH {message}")
    print(f"finite differences: {len(all_cases)} derivatives, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
