#!/usr/bin/python3
"""Writes the kernel test cases of dsrt_kernel_tests.

For every dsrt kernel, several cases: random inputs from fixed seeds, the
kernel's attributes, and the expected outputs computed by PyTorch (the ONNX
reference functions for the ai.onnx.preview.training optimizers, which
PyTorch does not implement with ONNX's update rules). Backward kernels are
checked against torch autograd of the forward op, adamw and sgd against
consecutive torch.optim steps, lion against its paper's update rule in NumPy.
Every case is a directory holding manifest.json and one .npy file per tensor:

    {"kernel": "binary", "name": "add_f32_row", "attrs": {"op": "add"},
     "inputs": {"a": "a.npy", "b": "b.npy"},
     "outputs": {"y": {"file": "y.npy", "rtol": 1e-05, "atol": 1e-06}}}

An input may be null (an absent optional operand) or a list of files
(concat). A case with "error" expects the kernel to throw dsrt::Error with
that text in its message; its outputs give "dtype" and "shape" instead of a
file. An optional "shift": {name: k} places that input or output (each
tensor of a list) k elements past an aligned allocation, for the kernels'
paths for misaligned tensors. bf16 tensors are stored as '<u2' raw bits,
as dsrt's npy code does.

Expected values are computed in float64 from the (already rounded) inputs
and rounded once to the output type, so they are the correctly rounded
answer; tolerances allow for f32 evaluation inside the kernels.

usage: make_cases.py --out DIR
"""

import argparse
import json
import math
import os
import shutil
import sys
import warnings
import zlib

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
warnings.filterwarnings("ignore", message="scatter_reduce")

DT = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i64": torch.int64,
    "i32": torch.int32,
    "bool": torch.bool,
}
NAME = {v: k for k, v in DT.items()}
FLOATS = ("f32", "f16", "bf16")
EPS = {"f32": 2.0**-23, "f16": 2.0**-10, "bf16": 2.0**-7}
INF = float("inf")
NAN = float("nan")


def default_tol(dtype, scale=1.0):
    """(rtol, atol): f32 1e-5 / 1e-6; f16 and bf16 two units of their
    epsilon (f32 evaluation may land one rounding step away); exact for
    integers and bool. `scale` widens atol for sums of many terms."""
    if dtype == "f32":
        return 1e-5, 1e-6 * scale
    if dtype in ("f16", "bf16"):
        return 2 * EPS[dtype], 1e-6 * scale
    return 0.0, 0.0


def save_npy(path, t):
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        arr = t.view(torch.int16).numpy().view(np.uint16)
    else:
        arr = t.numpy()
    np.save(path, arr, allow_pickle=False)


class Case:
    def __init__(self, writer, kernel, name, attrs):
        self.writer = writer
        self.kernel = kernel
        self.name = name
        self.attrs = attrs
        self.inputs = {}
        self.outputs = {}
        self.tensors = {}
        self.error = None
        self.shift = {}  # name: elements past an aligned allocation

    def inp(self, name, value):
        if value is None:
            self.inputs[name] = None
        elif isinstance(value, (list, tuple)):
            files = []
            for i, t in enumerate(value):
                f = "%s%d.npy" % (name, i)
                self.tensors[f] = t
                files.append(f)
            self.inputs[name] = files
        else:
            f = name + ".npy"
            self.tensors[f] = value
            self.inputs[name] = f
        return self

    def out(self, name, t, rtol=None, atol=None, scale=1.0):
        if isinstance(t, (list, tuple)):
            files = []
            for i, x in enumerate(t):
                f = "%s%d.npy" % (name, i)
                self.tensors[f] = x
                files.append(self._out_entry(f, x, rtol, atol, scale))
            self.outputs[name] = files
            return self
        f = name + ".npy"
        self.tensors[f] = t
        self.outputs[name] = self._out_entry(f, t, rtol, atol, scale)
        return self

    def _out_entry(self, f, t, rtol, atol, scale):
        r, a = default_tol(NAME[t.dtype], scale)
        return {"file": f, "rtol": r if rtol is None else rtol, "atol": a if atol is None else atol}

    def fails(self, text, **outputs):
        """Expect dsrt::Error containing `text`; outputs: name=(dtype, shape)."""
        self.error = text
        for name, (dtype, shape) in outputs.items():
            self.outputs[name] = {"dtype": dtype, "shape": list(shape)}
        return self

    def save(self):
        self.writer.save(self)


class Writer:
    def __init__(self, root):
        self.root = root
        self.names = set()
        self.count = 0

    def case(self, kernel, name, **attrs):
        return Case(self, kernel, name, attrs)

    def save(self, case):
        dirname = "%s.%s" % (case.kernel, case.name)
        assert dirname not in self.names, dirname
        self.names.add(dirname)
        path = os.path.join(self.root, dirname)
        os.makedirs(path)
        for f, t in case.tensors.items():
            save_npy(os.path.join(path, f), t)
        manifest = {"kernel": case.kernel, "name": case.name, "attrs": case.attrs,
                    "inputs": case.inputs, "outputs": case.outputs}
        if case.error is not None:
            manifest["error"] = case.error
        if case.shift:
            manifest["shift"] = case.shift
        with open(os.path.join(path, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1, allow_nan=False)
        self.count += 1


class Rng:
    """A torch generator seeded from a case name, so cases do not depend on
    each other's order."""

    def __init__(self, name):
        self.g = torch.Generator().manual_seed(zlib.crc32(name.encode()))

    def float(self, shape, dtype="f32", lo=-1.0, hi=1.0):
        t = torch.rand(tuple(shape), generator=self.g, dtype=torch.float64) * (hi - lo) + lo
        return t.to(DT[dtype])

    def int(self, shape, dtype="i64", lo=-10, hi=10):
        return torch.randint(lo, hi, tuple(shape), generator=self.g, dtype=DT[dtype])

    def bool(self, shape):
        return torch.randint(0, 2, tuple(shape), generator=self.g).to(torch.bool)

    def tensor(self, shape, dtype, lo=-1.0, hi=1.0):
        if dtype in FLOATS:
            return self.float(shape, dtype, lo, hi)
        if dtype == "bool":
            return self.bool(shape)
        return self.int(shape, dtype, int(lo), int(hi))


def f64(t):
    return t.to(torch.float64) if t.is_floating_point() else t


def like(t64, dtype):
    return t64.to(DT[dtype])


# --------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------

UNARY = {
    # op: (torch function on float64, input range)
    "sqrt": (torch.sqrt, (0.0, 4.0)),
    "reciprocal": (torch.reciprocal, (-3.0, 3.0)),
    "exp": (torch.exp, (-10.0, 10.0)),
    "log": (torch.log, (0.01, 10.0)),
    "tanh": (torch.tanh, (-6.0, 6.0)),
    "erf": (torch.erf, (-4.0, 4.0)),
    "sigmoid": (torch.sigmoid, (-12.0, 12.0)),
    "neg": (torch.neg, (-5.0, 5.0)),
    "relu": (torch.relu, (-5.0, 5.0)),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), (-5.0, 5.0)),
    "gelu": (lambda x: F.gelu(x, approximate="none"), (-6.0, 6.0)),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), (-6.0, 6.0)),
    "softplus": (F.softplus, (-30.0, 30.0)),
    "elu": (lambda x: F.elu(x, 0.7), (-6.0, 6.0)),
    "celu": (lambda x: F.celu(x, 1.5), (-6.0, 6.0)),
    "sin": (torch.sin, (-10.0, 10.0)),
    "cos": (torch.cos, (-10.0, 10.0)),
    "floor": (torch.floor, (-10.0, 10.0)),
    "ceil": (torch.ceil, (-10.0, 10.0)),
    "round": (torch.round, (-10.0, 10.0)),  # halves to even
}
# The kernel's `alpha` argument of the ops that take one.
UNARY_ALPHA = {"leaky_relu": 0.1, "elu": 0.7, "celu": 1.5}

SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 0.5, -0.5, 0.625, -0.625, 1.0, -1.0, 3.0,
           -3.0, 20.0, -20.0, 88.5, -87.5, 89.0, -100.0, -104.5, 1e30, -1e30, INF, -INF, NAN]


def gen_unary(w):
    for op, (fn, (lo, hi)) in UNARY.items():
        attrs = {"op": op, "alpha": UNARY_ALPHA.get(op, 0.0)}
        for dtype in FLOATS:
            name = "%s_%s" % (op, dtype)
            x = Rng(name).float([5, 37], dtype, lo, hi)
            w.case("unary", name, **attrs).inp("x", x).out("y", like(fn(f64(x)), dtype)).save()
        x = torch.tensor(SPECIAL, dtype=torch.float32)
        w.case("unary", op + "_special_f32", **attrs).inp("x", x).out(
            "y", like(fn(f64(x)), "f32")).save()
    # Big enough for the parallel path.
    for op in ("exp", "gelu_tanh", "sigmoid"):
        fn, (lo, hi) = UNARY[op]
        name = op + "_large_f32"
        x = Rng(name).float([4, 40000], "f32", lo, hi)
        w.case("unary", name, op=op, alpha=0.0).inp("x", x).out("y", like(fn(f64(x)), "f32")).save()
    for dtype, lo, hi in (("i64", -2**63, 2**63 - 1), ("i32", -2**31, 2**31 - 1)):
        x = torch.cat([Rng("int" + dtype).int([20], dtype, -1000, 1000),
                       torch.tensor([lo, lo + 1, hi, 0], dtype=DT[dtype])])
        w.case("unary", "neg_" + dtype, op="neg", alpha=0.0).inp("x", x).out("y", torch.neg(x)).save()
        w.case("unary", "relu_" + dtype, op="relu", alpha=0.0).inp("x", x).out("y", torch.relu(x)).save()
    x = Rng("not").bool([3, 7])
    w.case("unary", "not_bool", op="not", alpha=0.0).inp("x", x).out("y", torch.logical_not(x)).save()


BINARY_PATTERNS = [
    ("same", [4, 5], [4, 5]),
    ("row", [3, 4, 5], [5]),
    ("scalar_rhs", [3, 4, 5], []),
    ("scalar_lhs", [], [2, 3]),
    ("col", [4, 6], [4, 1]),
    ("outer", [4, 1], [1, 5]),
    ("mixed", [2, 1, 4], [3, 1]),
    ("rank4", [2, 3, 1, 5], [3, 4, 1]),
    ("scalars", [], []),
]


def binary_ref(op, a, b, dtype):
    if dtype in FLOATS:
        x, y = f64(a), f64(b)
        r = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y, "pow": torch.pow(x, y)}[op]
        return like(r, dtype)
    x, y = a.to(torch.int64), b.to(torch.int64)
    r = {"add": x + y, "sub": x - y, "mul": x * y,
         "div": torch.div(x, y, rounding_mode="trunc")}[op]
    return r.to(DT[dtype])


def binary_inputs(rng, op, dtype, sa, sb):
    if op == "pow":
        return rng.float(sa, dtype, 0.5, 2.0), rng.float(sb, dtype, -2.0, 2.0)
    if dtype in FLOATS:
        a = rng.float(sa, dtype, -3.0, 3.0)
        b = rng.float(sb, dtype, 0.25, 3.0) if op == "div" else rng.float(sb, dtype, -3.0, 3.0)
        return a, b
    a = rng.int(sa, dtype, -1000, 1000)
    if op == "div":
        b = rng.int(sb, dtype, 1, 12) * (rng.int(sb, dtype, 0, 2) * 2 - 1)
    else:
        b = rng.int(sb, dtype, -1000, 1000)
    return a, b


def gen_binary(w):
    for op in ("add", "sub", "mul", "div", "pow"):
        for dtype in ("f32", "f16", "bf16", "i64", "i32"):
            if op == "pow" and dtype not in FLOATS:
                continue
            patterns = BINARY_PATTERNS if dtype == "f32" else BINARY_PATTERNS[1:3] + BINARY_PATTERNS[6:7]
            for pname, sa, sb in patterns:
                name = "%s_%s_%s" % (op, dtype, pname)
                a, b = binary_inputs(Rng(name), op, dtype, sa, sb)
                w.case("binary", name, op=op).inp("a", a).inp("b", b).out(
                    "y", binary_ref(op, a, b, dtype)).save()
    # Integer arithmetic wraps; division truncates toward zero.
    a = torch.tensor([2**62, -2**63, 7, -7, 7, -7, 2**63 - 1], dtype=torch.int64)
    b = torch.tensor([4, -1, 2, 2, -2, -2, 2], dtype=torch.int64)
    def wrap(v):
        return (v + 2**63) % 2**64 - 2**63

    def trunc_div(p, q):
        r = abs(p) // abs(q)
        return r if (p < 0) == (q < 0) else -r

    for op in ("mul", "div", "add"):
        # Python integers, wrapped to 64 bits (min / -1 wraps to min).
        fn = {"mul": lambda p, q: p * q, "add": lambda p, q: p + q, "div": trunc_div}[op]
        expect = torch.tensor([wrap(fn(p, q)) for p, q in zip(a.tolist(), b.tolist())], dtype=torch.int64)
        w.case("binary", op + "_i64_wrap", op=op).inp("a", a).inp("b", b).out("y", expect).save()
    # Negative bases with integer exponents, and a fractional one (NaN).
    a = torch.tensor([-2.0, -3.0, -0.5, -2.0, 0.0, 0.0, 4.0], dtype=torch.float32)
    b = torch.tensor([2.0, 3.0, -2.0, 0.5, 0.0, -1.0, 0.5], dtype=torch.float32)
    w.case("binary", "pow_special_f32", op="pow").inp("a", a).inp("b", b).out(
        "y", binary_ref("pow", a, b, "f32")).save()
    # Large enough for the parallel path: same shape, and a bias row.
    for op, sb in (("add", [300]), ("mul", [512, 300])):
        name = "%s_large_f32" % op
        rng = Rng(name)
        a, b = rng.float([512, 300]), rng.float(sb)
        w.case("binary", name, op=op).inp("a", a).inp("b", b).out(
            "y", binary_ref(op, a, b, "f32")).save()
    # The cuda fast path (an operand of y's shape, a scalar, or broadcast
    # along leading axes): 16-byte vectors where aligned, with elements
    # past the last whole vector; element by element for a row length not
    # a multiple of the vector or a tensor shifted off 16 bytes (the
    # manifest's "shift": elements past an aligned allocation).
    fast = [
        ("flat_odd", [7, 37], [7, 37], {}),
        ("lead", [6, 8, 24], [8, 24], {}),
        ("lead_lhs", [8, 24], [6, 8, 24], {}),
        ("lead_long", [40, 8, 24], [8, 24], {}),
        ("lead_rank4", [3, 2, 5, 16], [5, 16], {}),
        ("lead_odd_row", [5, 3, 7], [3, 7], {}),
        ("lead_scalar", [1, 16], [9, 4, 16], {}),
        ("flat_shift_a", [7, 37], [7, 37], {"a": 1}),
        ("lead_shift_b", [6, 8, 24], [8, 24], {"b": 3}),
        ("lead_shift_y", [6, 8, 24], [8, 24], {"y": 1}),
        ("scalar_shift_y", [], [5, 13], {"y": 1}),
    ]
    for pname, sa, sb, shift in fast:
        for op in ("add", "mul", "div"):
            for dtype in ("f32", "f16", "bf16", "i64", "i32"):
                name = "%s_%s_fast_%s" % (op, dtype, pname)
                a, b = binary_inputs(Rng(name), op, dtype, sa, sb)
                if dtype not in FLOATS:
                    b = torch.where(b == 0, torch.ones_like(b), b)  # binary_ref divides too
                c = w.case("binary", name, op=op).inp("a", a).inp("b", b).out(
                    "y", binary_ref(op, a, b, dtype))
                c.shift = shift
                c.save()
    # Data-dependent error: integer division by zero.
    a = torch.tensor([1, 2, 3], dtype=torch.int64)
    b = torch.tensor([1, 0, 3], dtype=torch.int64)
    w.case("binary", "div_i64_by_zero", op="div").inp("a", a).inp("b", b).fails(
        "division by zero", y=("i64", [3])).save()


def gen_compare(w):
    preds = {"eq": torch.eq, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge}
    for pred, fn in preds.items():
        for dtype in ("f32", "f16", "bf16", "i64", "i32", "bool"):
            for pname, sa, sb in (("row", [4, 5], [5]), ("outer", [3, 1], [1, 4])):
                name = "%s_%s_%s" % (pred, dtype, pname)
                rng = Rng(name)
                if dtype == "bool":
                    a, b = rng.bool(sa), rng.bool(sb)
                else:  # few distinct values so that ties occur
                    a = rng.int(sa, "i64", -2, 3).to(DT[dtype])
                    b = rng.int(sb, "i64", -2, 3).to(DT[dtype])
                w.case("compare", name, pred=pred).inp("a", a).inp("b", b).out("y", fn(a, b)).save()
        a = torch.tensor([NAN, 1.0, NAN, -INF, INF, 0.0], dtype=torch.float32)
        b = torch.tensor([NAN, NAN, 1.0, -INF, 1.0, -0.0], dtype=torch.float32)
        w.case("compare", pred + "_special_f32", pred=pred).inp("a", a).inp("b", b).out(
            "y", fn(a, b)).save()


def gen_where(w):
    for dtype in ("f32", "f16", "bf16", "i64", "i32", "bool"):
        name = "bcast_" + dtype
        rng = Rng(name)
        c, a, b = rng.bool([3, 1, 5]), rng.tensor([4, 1], dtype, -9, 9), rng.tensor([5], dtype, -9, 9)
        w.case("where", name).inp("cond", c).inp("a", a).inp("b", b).out(
            "y", torch.where(c, a, b)).save()
    rng = Rng("where_large")
    c, a, b = rng.bool([256, 300]), rng.float([256, 300]), rng.float([256, 300])
    w.case("where", "large_f32").inp("cond", c).inp("a", a).inp("b", b).out(
        "y", torch.where(c, a, b)).save()
    c, a, b = rng.bool([7]), rng.float([]), rng.float([7])
    w.case("where", "scalar_branch_f32").inp("cond", c).inp("a", a).inp("b", b).out(
        "y", torch.where(c, a, b)).save()


# Values that exercise rounding: halfway cases between f16 / bf16
# neighbours (ties go to even), the f16 overflow threshold 65520, f16
# subnormals and their halfway points.
ROUNDING = [1.0 + 2**-11, 1.0 + 3 * 2**-11, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20,
            65504.0, 65519.0, 65520.0, 70000.0, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-14,
            2.0**-14 - 2.0**-25, -2.0**-25 - 2.0**-30, 0.1, -0.1, 1e-3, 3.14159265,
            -2.7, 2.7, -0.0, 0.0, 0.5, -1.5, 2.5, 123456.789, -99999.5, 1e20]


def gen_cast(w):
    names = list(DT)
    for src in names:
        for dst in names:
            if src == dst:
                continue
            name = "%s_to_%s" % (src, dst)
            rng = Rng(name)
            if src in FLOATS:
                if dst in ("i64", "i32"):  # finite values inside the range
                    vals = [v for v in ROUNDING if abs(v) < 1e5]
                    x = torch.cat([torch.tensor(vals, dtype=torch.float64), rng.float([20], "f32", -1000, 1000).double()])
                else:
                    x = torch.cat([torch.tensor(ROUNDING + [INF, -INF, NAN], dtype=torch.float64),
                                   rng.float([20], "f32", -100, 100).double()])
                x = x.to(DT[src])
                if dst in ("i64", "i32"):  # inf to an integer is undefined behaviour
                    x = x[torch.isfinite(x)]
            elif src == "bool":
                x = rng.bool([17])
            else:
                vals = [0, 1, -1, 2**24 + 1, -(2**24) - 3, 65504, 65520, 70000, 2**31 - 1, -(2**31)]
                if src == "i64":
                    vals += [2**40 + 5, -(2**40) - 3, 2**62]
                x = torch.cat([torch.tensor(vals, dtype=torch.int64), rng.int([20], "i64", -1000, 1000)])
                x = x.to(DT[src])
            y = x.to(DT[dst])
            w.case("cast", name).inp("x", x).out("y", y, rtol=0.0, atol=0.0).save()


def gen_copy(w):
    for dtype, shape, new in (("f32", [2, 3, 4], [6, 4]), ("i64", [5], [5, 1]), ("bf16", [3, 2], [6]),
                              ("bool", [2, 2], [4])):
        x = Rng("copy" + dtype).tensor(shape, dtype, -5, 5)
        w.case("copy", "reshape_" + dtype).inp("x", x).out("y", x.reshape(new)).save()


# --------------------------------------------------------------------------
# Linear algebra
# --------------------------------------------------------------------------

def t_last(x):
    return x.transpose(-1, -2) if x.dim() >= 2 else x


def gen_matmul(w):
    cases = [
        ("2d", [5, 7], [7, 6], False, False),
        ("fold_batch", [4, 16, 24], [24, 20], False, False),
        ("batch_bcast", [2, 1, 3, 4], [5, 4, 6], False, False),
        ("batch_rhs", [3, 4], [2, 4, 5], False, False),
        ("vec_lhs", [4], [4, 5], False, False),
        ("vec_rhs", [3, 4], [4], False, False),
        ("vec_vec", [6], [6], False, False),
        ("batch_vec_rhs", [2, 3, 4], [4], False, False),
        ("vec_batch_rhs", [4], [2, 4, 5], False, False),
        ("trans_a", [7, 5], [7, 6], True, False),
        ("trans_b", [5, 7], [6, 7], False, True),
        ("trans_both", [2, 7, 5], [2, 6, 7], True, True),
        ("trans_b_fold", [3, 8, 16], [12, 16], False, True),
        ("attention", [2, 3, 32, 16], [2, 3, 32, 16], False, True),
        ("k_zero", [3, 0], [0, 4], False, False),
        ("large", [256, 96], [96, 128], False, False),
    ]
    for name, sa, sb, ta, tb in cases:
        dtypes = ["f32"]
        if name in ("2d", "batch_bcast", "trans_both", "vec_rhs"):
            dtypes += ["f16", "bf16", "i64", "i32"]
        for dtype in dtypes:
            cname = "%s_%s" % (name, dtype)
            rng = Rng(cname)
            a, b = rng.tensor(sa, dtype, -1, 1), rng.tensor(sb, dtype, -1, 1)
            if dtype in ("i64", "i32"):
                a, b = rng.int(sa, dtype, -20, 20), rng.int(sb, dtype, -20, 20)
                y = torch.matmul(t_last(a.to(torch.int64)) if ta else a.to(torch.int64),
                                 t_last(b.to(torch.int64)) if tb else b.to(torch.int64)).to(DT[dtype])
                scale = 1.0
            else:
                y = like(torch.matmul(t_last(f64(a)) if ta else f64(a), t_last(f64(b)) if tb else f64(b)), dtype)
                k = sa[-2] if ta and len(sa) >= 2 else sa[-1]
                scale = max(1.0, k / 4.0)
            w.case("matmul", cname, transpose_a=ta, transpose_b=tb).inp("a", a).inp("b", b).out(
                "y", y, scale=scale).save()


def gen_matmul_staged(w):
    """f16/bf16 products of 2^27 multiply-adds and more whose leading
    dimension is not a multiple of 8: the cuda backend stages them through
    aligned buffers (workspace_shapes.h, matmul_stage): y's rows (n 513, b
    transposed padded with zero rows), a's columns in chunks of the
    contraction summed in f32 (k 137, padded to 144), a transposed's
    columns (m 513); b's leading dimension stays aligned. The contraction is
    short (136-137), so that cuBLASLt has no reason to split it: its
    in-place split-k sums partial products in y's type, a rounding the f64
    reference does not make (PyTorch allows it too, by default). a_chunks
    (k 4100: 16 MiB of a's columns for its 2048 rows hold 4096) splits the
    contraction in two chunks, the second of 4 columns padded to 8; its
    sums are f32 (y32), whatever cuBLASLt does inside a chunk."""
    cases = [
        ("y_bf16", [2, 1000, 136], [513, 136], False, True, "bf16"),
        ("a_bf16", [2000, 137], [137, 512], False, False, "bf16"),
        ("a_chunks_bf16", [2048, 4100], [4100, 16], False, False, "bf16"),
        ("at_bf16", [136, 513], [136, 2000], True, False, "bf16"),
    ]
    for name, sa, sb, ta, tb, dtype in cases:
        cname = "staged_" + name
        rng = Rng(cname)
        a, b = rng.tensor(sa, dtype, -1, 1), rng.tensor(sb, dtype, -1, 1)
        y = like(torch.matmul(t_last(f64(a)) if ta else f64(a), t_last(f64(b)) if tb else f64(b)), dtype)
        k = sa[-2] if ta else sa[-1]
        w.case("matmul", cname, transpose_a=ta, transpose_b=tb).inp("a", a).inp("b", b).out(
            "y", y, scale=max(1.0, k / 4.0)).save()


def gen_gemm(w):
    m, n, k = 5, 7, 6
    c_shapes = [("none", None), ("row", [n]), ("row2d", [1, n]), ("col", [m, 1]), ("full", [m, n]),
                ("scalar", [])]
    for cname, cshape in c_shapes:
        for ta, tb in ((False, False), (True, False), (False, True), (True, True)):
            if cname not in ("full", "row") and (ta or tb):
                continue
            name = "c_%s_%s%s" % (cname, "t" if ta else "n", "t" if tb else "n")
            rng = Rng(name)
            a = rng.float([k, m] if ta else [m, k])
            b = rng.float([n, k] if tb else [k, n])
            c = rng.float(cshape) if cshape is not None else None
            alpha, beta = 0.5, 2.0
            y = alpha * (t_last(f64(a)) if ta else f64(a)) @ (t_last(f64(b)) if tb else f64(b))
            if c is not None:
                y = y + beta * f64(c)
            w.case("gemm", name, alpha=alpha, beta=beta, transpose_a=ta, transpose_b=tb).inp(
                "a", a).inp("b", b).inp("c", c).out("y", like(y, "f32"), scale=2.0).save()
    for dtype in ("f16", "bf16"):
        name = "c_row_" + dtype
        rng = Rng(name)
        a, b, c = rng.float([m, k], dtype), rng.float([k, n], dtype), rng.float([n], dtype)
        y = 1.5 * f64(a) @ f64(b) + 0.25 * f64(c)
        w.case("gemm", name, alpha=1.5, beta=0.25, transpose_a=False, transpose_b=False).inp(
            "a", a).inp("b", b).inp("c", c).out("y", like(y, dtype), scale=2.0).save()
    # beta = 0 ignores c.
    rng = Rng("beta0")
    a, b, c = rng.float([m, k]), rng.float([k, n]), rng.float([m, n])
    w.case("gemm", "beta_zero", alpha=1.0, beta=0.0, transpose_a=False, transpose_b=False).inp(
        "a", a).inp("b", b).inp("c", c).out("y", like(f64(a) @ f64(b), "f32"), scale=2.0).save()
    rng = Rng("gemm_large")
    a, b, c = rng.float([128, 200]), rng.float([200, 96]), rng.float([96])
    w.case("gemm", "large_bias", alpha=1.0, beta=1.0, transpose_a=False, transpose_b=False).inp(
        "a", a).inp("b", b).inp("c", c).out("y", like(f64(a) @ f64(b) + f64(c), "f32"), scale=8.0).save()


def gen_matmul_bias(w):
    # y = x w + bias (+ addend): the forward of a linear layer, its batch
    # folded into the rows, the weight as stored or transposed.
    cases = [("bias", [2, 3, 8], [8, 6], False, False), ("residual", [2, 3, 8], [8, 6], False, True),
             ("bias_t", [5, 8], [6, 8], True, False), ("residual_t", [5, 8], [6, 8], True, True)]
    for name, sx, sw, tb, with_addend in cases:
        for dtype in ("f32", "bf16"):
            cname = "%s_%s" % (name, dtype)
            rng = Rng(cname)
            x, wt, bias = rng.float(sx, dtype), rng.float(sw, dtype), rng.float([6], dtype)
            y = f64(x) @ (t_last(f64(wt)) if tb else f64(wt)) + f64(bias)
            addend = rng.float(list(y.shape), dtype) if with_addend else None
            if addend is not None:
                y = y + f64(addend)
            w.case("matmul_bias", cname, transpose_b=tb).inp("a", x).inp("b", wt).inp(
                "bias", bias).inp("addend", addend).out("y", like(y, dtype), scale=2.0).save()
    # A bias that is not one value per column of y is an error naming it.
    rng = Rng("bias_wrong")
    w.case("matmul_bias", "bias_wrong", transpose_b=False).inp("a", rng.float([5, 8])).inp(
        "b", rng.float([8, 6])).inp("bias", rng.float([5])).inp("addend", None).fails(
        "bias", y=("f32", [5, 6])).save()


def gen_matmul_bias_grad(w):
    # The weight gradient x^T dy (x stored [K, M] or [M, K]... transposed)
    # and the bias gradient, dy's column sums.
    for name, sx, ta in (("xt_dy", [12, 4], True), ("x_dy", [4, 12], False)):
        for dtype in ("f32", "bf16"):
            cname = "%s_%s" % (name, dtype)
            rng = Rng(cname)
            x, dy = rng.float(sx, dtype), rng.float([12, 6], dtype)
            y = (t_last(f64(x)) if ta else f64(x)) @ f64(dy)
            w.case("matmul_bias_grad", cname, transpose_a=ta).inp("a", x).inp("b", dy).out(
                "y", like(y, dtype), scale=2.0).out("bias_grad", like(f64(dy).sum(0), dtype),
                                                    scale=4.0).save()


def gelu_tanh64(x):
    """The tanh GELU and its derivative in f64 (PyTorch's approximate='tanh')."""
    beta, kappa = math.sqrt(2.0 / math.pi), 0.044715
    t = np.tanh(beta * (x + kappa * x ** 3))
    return 0.5 * x * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * beta * (1.0 + 3.0 * kappa * x * x)


def gen_matmul_gelu(w):
    # matmul_bias_gelu: pre = x w + bias, y = gelu_tanh(pre); matmul_dgelu:
    # y = (dy w^T) * gelu_tanh'(pre). n = 8 takes the cuBLASLt epilogue
    # (its aux ld must be a multiple of 8), n = 6 the fallback. The cpu
    # reference takes the GELU of the rounded pre-activation (cuBLASLt of
    # the f32 sum): y may be off by |gelu'| <= 1.13 times pre's rounding,
    # which in the negative tail is large next to y itself.
    def y_atol(pre, dtype):
        return default_tol(dtype, 1.0)[1] + (1.13 * 2.0 ** -9 * float(np.abs(pre).max())
                                             if dtype == "bf16" else 0.0)
    cases = [("n8", [2, 3, 8], [8, 8], False), ("n8_t", [5, 12], [8, 12], True),
             ("n6", [2, 3, 8], [8, 6], False)]
    for name, sx, sw, tb in cases:
        n = sw[0] if tb else sw[1]
        for dtype in ("f32", "bf16"):
            cname = "%s_%s" % (name, dtype)
            rng = Rng("gelu_" + cname)
            x, wt, bias = rng.float(sx, dtype), rng.float(sw, dtype), rng.float([n], dtype)
            product = f64(x) @ (t_last(f64(wt)) if tb else f64(wt))
            pre = product + f64(bias)
            w.case("matmul_bias_gelu", cname, transpose_b=tb).inp("a", x).inp("b", wt).inp(
                "bias", bias).out("y", like(gelu_tanh64(pre)[0], dtype), atol=y_atol(pre, dtype)).out(
                "pre", like(pre, dtype), scale=2.0).save()
            aux = rng.float(list(product.shape), dtype)
            w.case("matmul_dgelu", cname, transpose_b=tb).inp("a", x).inp("b", wt).inp(
                "pre", aux).out("y", like(product * gelu_tanh64(f64(aux))[1], dtype), scale=2.0).save()
    # A pre-activation not of the product's shape is an error naming it.
    rng = Rng("gelu_pre_wrong")
    w.case("matmul_dgelu", "pre_wrong", transpose_b=False).inp("a", rng.float([5, 8])).inp(
        "b", rng.float([8, 8])).inp("pre", rng.float([5, 6])).fails("pre", y=("f32", [5, 8])).save()


def gen_matmul_lhs_bias_grad(w):
    # The gradients of a weight stored [out, in]: dy^T x, and the bias
    # gradient, dy's column sums (dy [K, M] the lhs, x [K, N]).
    for name, sdy, sx in (("dy_x", [12, 6], [12, 4]), ("wide", [20, 33], [20, 17])):
        for dtype in ("f32", "bf16"):
            cname = "%s_%s" % (name, dtype)
            rng = Rng("lhs" + cname)
            dy, x = rng.float(sdy, dtype), rng.float(sx, dtype)
            y = t_last(f64(dy)) @ f64(x)
            w.case("matmul_lhs_bias_grad", cname).inp("a", dy).inp("b", x).out(
                "y", like(y, dtype), scale=2.0).out("bias_grad", like(f64(dy).sum(0), dtype),
                                                    scale=4.0).save()
    # A bias gradient that is not one value per column of dy is an error naming it.
    rng = Rng("lhs_bias_grad_wrong")
    w.case("matmul_lhs_bias_grad", "bias_grad_wrong").inp("a", rng.float([12, 6])).inp(
        "b", rng.float([12, 4])).fails("bias_grad", y=("f32", [6, 4]), bias_grad=("f32", [4])).save()


# --------------------------------------------------------------------------
# Normalization and softmax
# --------------------------------------------------------------------------

def gen_softmax(w):
    shapes = [
        ("last", [4, 33], 1),
        ("middle", [2, 5, 7], 1),
        ("first", [3, 4, 5], 0),
        ("wide_inner", [2, 3, 300], 1),
        ("long_row", [6, 1000], 1),
        ("attention", [2, 4, 64, 64], 3),
    ]
    for kernel, fn in (("softmax", torch.softmax), ("log_softmax", torch.log_softmax)):
        for sname, shape, axis in shapes:
            dtypes = ["f32"] + (["f16", "bf16"] if sname in ("last", "middle", "attention") else [])
            for dtype in dtypes:
                name = "%s_%s" % (sname, dtype)
                x = Rng(kernel + name).float(shape, dtype, -4, 4)
                w.case(kernel, name, axis=axis).inp("x", x).out("y", like(fn(f64(x), axis), dtype)).save()
        # Stability: large magnitudes, and a causal -inf mask.
        x = Rng(kernel + "big").float([3, 50], "f32", -300, 300)
        w.case(kernel, "large_values_f32", axis=1).inp("x", x).out(
            "y", like(fn(f64(x), 1), "f32"), atol=1e-5).save()
        x = Rng(kernel + "mask").float([2, 8, 8], "f32", -2, 2)
        x = x.masked_fill(torch.triu(torch.ones(8, 8, dtype=torch.bool), 1), -INF)
        w.case(kernel, "causal_mask_f32", axis=2).inp("x", x).out("y", like(fn(f64(x), 2), "f32")).save()


def gen_layer_norm(w):
    cases = [
        # name, x shape, axis, scale shape, bias shape (None: absent)
        ("last", [4, 16], 1, [16], [16]),
        ("rank3_last", [2, 3, 8], 2, [8], [8]),
        ("two_axes", [2, 3, 8], 1, [8], [3, 8]),
        ("scale_col", [2, 3, 8], 1, [3, 1], None),
        ("no_bias", [5, 12], 1, [12], None),
        ("gpt2_row", [64, 768], 1, [768], [768]),
        # Not a multiple of the 128-bit vector: the cuda kernel's element path.
        ("odd_row", [3, 37], 1, [37], [37]),
        # The same with a broadcast scale; and 100-wide rows, vectors in f32
        # (scale and bias read as vectors too) but not in 16 bits.
        ("odd_row_broadcast", [5, 3, 13], 1, [13], [3, 13]),
        ("row_100", [7, 100], 1, [100], [100]),
        # The cuda kernel's warp per row takes rows of up to 64 elements a
        # lane: 2048 in 16 bits (8 vectors a lane) is its widest, 2056 goes
        # to the block per row, as does f32 past 1024; rows of 776 leave
        # some lanes' last vector past the row; 300 rows of 40 fill several
        # blocks of 8 warps with most lanes idle.
        ("warp_bound", [3, 2048], 1, [2048], [2048]),
        ("past_warp_bound", [3, 2056], 1, [2056], [2056]),
        ("warp_partial", [9, 776], 1, [776], [776]),
        ("warp_rows_many", [300, 40], 1, [40], None),
    ]
    eps = 1e-5
    for name, shape, axis, sshape, bshape in cases:
        wide = ("last", "two_axes", "gpt2_row", "odd_row", "odd_row_broadcast", "row_100",
                "warp_bound", "past_warp_bound", "warp_partial", "warp_rows_many")
        dtypes = ["f32"] + (["f16", "bf16"] if name in wide else [])
        for dtype in dtypes:
            cname = "%s_%s" % (name, dtype)
            rng = Rng(cname)
            x = rng.float(shape, dtype, -2, 2)
            g = rng.float(sshape, dtype, 0.5, 1.5)
            b = rng.float(bshape, dtype, -0.5, 0.5) if bshape else None
            dims = tuple(range(axis, len(shape)))
            x64 = f64(x)
            mean = x64.mean(dim=dims, keepdim=True)
            var = x64.var(dim=dims, unbiased=False, keepdim=True)
            inv = 1.0 / torch.sqrt(var + eps)
            y = (x64 - mean) * inv * f64(g) + (f64(b) if b is not None else 0.0)
            w.case("layer_norm", cname, axis=axis, epsilon=eps).inp("x", x).inp("scale", g).inp(
                "bias", b).out("y", like(y, dtype)).out("mean", mean.float()).out(
                "inv_std_dev", inv.float()).save()
    # Two-pass statistics survive a large offset (E[x^2] - E[x]^2 would
    # lose everything), and so do the centred values (the mean is carried
    # with more than f32 precision).
    rng = Rng("offset")
    x = rng.float([6, 40], "f32", 999, 1001)
    g, b = rng.float([40], "f32", 0.5, 1.5), rng.float([40], "f32")
    x64 = f64(x)
    mean, var = x64.mean(1, keepdim=True), x64.var(1, unbiased=False, keepdim=True)
    inv = 1.0 / torch.sqrt(var + eps)
    y = (x64 - mean) * inv * f64(g) + f64(b)
    w.case("layer_norm", "offset_1000_f32", axis=1, epsilon=eps).inp("x", x).inp("scale", g).inp(
        "bias", b).out("y", y.float(), rtol=1e-5, atol=1e-5).out("mean", mean.float()).out(
        "inv_std_dev", inv.float()).save()


def gen_batch_norm(w):
    eps = 1e-5
    for shape in ([3, 4, 5, 6], [8, 3], [2, 4, 10]):
        for dtype in FLOATS:
            if dtype != "f32" and len(shape) != 4:
                continue
            name = "%s_%s" % ("x".join(map(str, shape)), dtype)
            rng = Rng("bn" + name)
            c = shape[1]
            x = rng.float(shape, dtype, -2, 2)
            g, b = rng.float([c], dtype, 0.5, 1.5), rng.float([c], dtype)
            m, v = rng.float([c], dtype), rng.float([c], dtype, 0.5, 2.0)
            y = F.batch_norm(f64(x), f64(m), f64(v), f64(g), f64(b), training=False, eps=eps)
            w.case("batch_norm", name, epsilon=eps).inp("x", x).inp("scale", g).inp("bias", b).inp(
                "mean", m).inp("var", v).out("y", like(y, dtype)).save()
            # Training mode: batch statistics with the biased variance; the
            # running variance takes the biased one (ONNX's reference) or the
            # unbiased one (PyTorch's train(), whose running statistics
            # F.batch_norm updates in place with its momentum 1 - ONNX's).
            momentum = 0.9
            dims = [0] + list(range(2, len(shape)))
            x64 = f64(x)
            bm = x64.mean(dim=dims)
            bv = x64.var(dim=dims, unbiased=False)
            inv = 1.0 / torch.sqrt(bv + eps)
            for unbiased in (False, True):
                rm, rv = f64(m), f64(v)
                y = F.batch_norm(x64, rm, rv, f64(g), f64(b), training=True, momentum=1 - momentum, eps=eps)
                if not unbiased:
                    rv = f64(v) * momentum + bv * (1 - momentum)
                w.case("batch_norm_train", name + ("_unbiased" if unbiased else ""), epsilon=eps,
                       momentum=momentum, unbiased_running_var=unbiased).inp("x", x).inp(
                    "scale", g).inp("bias", b).inp("running_mean", m).inp("running_var", v).out(
                    "y", like(y, dtype), atol=1e-5).out(
                    "running_mean_out", like(rm, dtype)).out(
                    "running_var_out", like(rv, dtype)).out(
                    "saved_mean", bm.float()).out("saved_inv_std", inv.float()).save()


# --------------------------------------------------------------------------
# Reductions
# --------------------------------------------------------------------------

def reduce_ref(op, x, axes, keepdims, dtype):
    if not axes:
        return x.clone()
    if dtype in FLOATS:
        x64 = f64(x)
        r = {"sum": lambda: torch.sum(x64, axes, keepdim=keepdims),
             "mean": lambda: torch.mean(x64, axes, keepdim=keepdims),
             "max": lambda: torch.amax(x64, axes, keepdim=keepdims)}[op]()
        return like(r, dtype)
    x64 = x.to(torch.int64)
    if op == "max":
        return torch.amax(x64, axes, keepdim=keepdims).to(DT[dtype])
    s = torch.sum(x64, axes, keepdim=keepdims)
    if op == "mean":
        count = 1
        for a in axes:
            count *= x.shape[a]
        s = torch.div(s, count, rounding_mode="trunc")
    return s.to(DT[dtype])


def gen_reduce(w):
    shape = [3, 4, 5, 6]
    axes_sets = [[3], [0], [1, 2], [0, 3], [0, 1, 2, 3], [1], [0, 2]]
    for op in ("sum", "mean", "max"):
        for axes in axes_sets:
            for keepdims in (True, False):
                dtypes = ["f32"]
                if axes in ([3], [0, 2]) and keepdims:
                    dtypes += ["f16", "bf16", "i64", "i32"]
                for dtype in dtypes:
                    name = "%s_%s_%s_%s" % (op, "-".join(map(str, axes)), "keep" if keepdims else "drop", dtype)
                    x = Rng(name).tensor(shape, dtype, -100 if dtype in ("i64", "i32") else -2,
                                         100 if dtype in ("i64", "i32") else 2)
                    y = reduce_ref(op, x, axes, keepdims, dtype)
                    w.case("reduce", name, op=op, axes=axes).inp("x", x).out("y", y, scale=4.0).save()
        # No axes: the identity; and a reduced axis of size 1.
        x = Rng("noaxes" + op).float([3, 4])
        w.case("reduce", op + "_no_axes_f32", op=op, axes=[]).inp("x", x).out("y", x.clone()).save()
        x = Rng("unit" + op).float([3, 1, 5])
        w.case("reduce", op + "_unit_axis_f32", op=op, axes=[1]).inp("x", x).out(
            "y", reduce_ref(op, x, [1], False, "f32")).save()
        for axes in ([0], [1]):
            name = "%s_large_%d_f32" % (op, axes[0])
            x = Rng(name).float([300, 700])
            w.case("reduce", name, op=op, axes=axes).inp("x", x).out(
                "y", reduce_ref(op, x, axes, True, "f32"), scale=20.0).save()
    # Mixed precision's bias gradients: a sum of 16-bit rows written in f32
    # (no f32 copy of x, no rounding of the sum to 16 bits); only a sum
    # may widen.
    for dtype in ("f16", "bf16"):
        for axes, shape in (([0, 1], [4, 16, 24]), ([0], [300, 70])):
            name = "sum_%s_%s_to_f32" % ("-".join(map(str, axes)), dtype)
            x = Rng(name).float(shape, dtype)
            y = torch.sum(f64(x), axes, keepdim=False).float()
            w.case("reduce", name, op="sum", axes=axes).inp("x", x).out(
                "y", y, scale=float(x.numel() // y.numel())).save()
    # The column case (leading axes reduced, the kept ones innermost: the
    # bias gradients), which the cuda backend reduces by tiles of columns:
    # more rows than the cuda kernel's 256 row slices, column counts that
    # are not a multiple of its tile (8 f32, 16 16-bit columns), odd ones
    # (16-bit x read one element at a time).
    # At most 256 rows: the cuda backend's sums in registers (1 to 8 lanes a
    # column), x shifted off 4 bytes read one element at a time.
    few = [("sum", "bf16", "f32", [64, 48, 16], [0], {}),
           ("sum", "bf16", "bf16", [64, 770], [0], {}),
           ("sum", "bf16", "f32", [64, 75], [0], {"x": 1}),
           ("sum", "f16", "f16", [256, 18], [0], {}),
           ("mean", "f16", "f16", [5, 3, 36], [0], {}),
           ("sum", "f32", "f32", [2, 100, 33], [0, 1], {}),
           ("sum", "f32", "f32", [7, 9], [0], {"x": 1}),
           ("sum", "i64", "i64", [40, 19], [0], {}),
           ("mean", "i32", "i32", [129, 21], [0], {})]
    for op, dtype, ydtype, shape, axes, shift in few:
        name = "%s_few_rows_%s_%s_%s%s" % (op, "x".join(map(str, shape)), dtype, ydtype,
                                           "_shifted" if shift else "")
        x = Rng(name).tensor(shape, dtype, -100 if dtype in ("i64", "i32") else -2,
                             100 if dtype in ("i64", "i32") else 2)
        if ydtype != dtype:
            y = torch.sum(f64(x), axes, keepdim=False).float()
        else:
            y = reduce_ref(op, x, axes, False, dtype)
        rows = x.numel() // y.numel()
        c = w.case("reduce", name, op=op, axes=axes).inp("x", x).out(
            "y", y, scale=float(rows) if op == "sum" and dtype in FLOATS else 4.0)
        c.shift = shift
        c.save()
    for op, dtype, ydtype, shape, axes in (
            ("sum", "f32", "f32", [2, 300, 170], [0, 1]),
            ("mean", "f32", "f32", [3, 200, 97], [0, 1]),
            ("max", "f32", "f32", [600, 100], [0]),
            ("sum", "bf16", "f32", [600, 150], [0]),
            ("sum", "bf16", "f32", [520, 75], [0]),
            ("sum", "f16", "f16", [700, 130], [0]),
            ("mean", "f16", "f16", [300, 2, 81], [0, 1]),
            ("sum", "i64", "i64", [600, 40], [0]),
            ("mean", "i32", "i32", [600, 33], [0])):
        name = "%s_columns_%s_%s_%s" % (op, "x".join(map(str, shape)), dtype, ydtype)
        x = Rng(name).tensor(shape, dtype, -100 if dtype in ("i64", "i32") else -2,
                             100 if dtype in ("i64", "i32") else 2)
        if op == "max":
            x[417, 33] = NAN
        if ydtype != dtype:
            y = torch.sum(f64(x), axes, keepdim=False).float()
        else:
            y = reduce_ref(op, x, axes, False, dtype)
        rows = x.numel() // y.numel()
        w.case("reduce", name, op=op, axes=axes).inp("x", x).out(
            "y", y, scale=float(rows) if op == "sum" and dtype in FLOATS else 4.0).save()
    x = Rng("mean_wide").float([4, 6], "bf16")
    w.case("reduce", "mean_bf16_to_f32", op="mean", axes=[1]).inp("x", x).fails(
        "x is bf16 but y is f32", y=("f32", [4, 1])).save()
    x = Rng("nanmax").float([4, 6])
    x[1, 2] = NAN
    w.case("reduce", "max_nan_f32", op="max", axes=[1]).inp("x", x).out(
        "y", reduce_ref("max", x, [1], True, "f32")).save()


# --------------------------------------------------------------------------
# Data movement
# --------------------------------------------------------------------------

def gen_transpose(w):
    cases = [
        ([2, 3, 4], [2, 0, 1]),
        ([2, 3, 4, 5], [0, 2, 1, 3]),
        ([64, 96], [1, 0]),
        ([3, 1, 4], [2, 1, 0]),
        ([2, 3, 4], [0, 1, 2]),
        ([4, 3, 2, 5], [3, 1, 2, 0]),
        ([2, 3, 40, 50], [0, 1, 3, 2]),
        ([2, 256, 4, 64], [0, 2, 1, 3]),
    ]
    for i, (shape, perm) in enumerate(cases):
        for dtype in (["f32", "f16", "bf16", "i64", "i32", "bool"] if i == 0 else ["f32"]):
            name = "%s_%s_%s" % ("x".join(map(str, shape)), "".join(map(str, perm)), dtype)
            x = Rng(name).tensor(shape, dtype, -9, 9)
            w.case("transpose", name, perm=perm).inp("x", x).out(
                "y", x.permute(*perm).contiguous(), rtol=0.0, atol=0.0).save()


def gen_broadcast_to(w):
    cases = [([3, 1], [2, 3, 4]), ([], [5]), ([1], [3, 2]), ([2, 1, 3], [2, 4, 3]), ([4], [4])]
    for i, (src, dst) in enumerate(cases):
        for dtype in (["f32", "i64", "bool", "f16"] if i == 0 else ["f32"]):
            name = "%s_to_%s_%s" % ("x".join(map(str, src)) or "scalar", "x".join(map(str, dst)), dtype)
            x = Rng(name).tensor(src, dtype, -9, 9)
            w.case("broadcast_to", name).inp("x", x).out("y", x.expand(*dst).contiguous()).save()


def gen_concat_split(w):
    cases = [
        (0, [[2, 3], [4, 3], [1, 3]]),
        (1, [[2, 3, 4], [2, 5, 4], [2, 1, 4]]),
        (2, [[2, 3, 4], [2, 3, 2]]),
        (1, [[2, 3, 4], [2, 0, 4], [2, 2, 4]]),
        (0, [[5]]),
    ]
    for i, (axis, shapes) in enumerate(cases):
        for dtype in (["f32", "f16", "i64", "bool"] if i == 1 else ["f32"]):
            name = "axis%d_%d_%s" % (axis, i, dtype)
            rng = Rng(name)
            parts = [rng.tensor(s, dtype, -9, 9) for s in shapes]
            whole = torch.cat(parts, axis)
            w.case("concat", name, axis=axis).inp("x", parts).out("y", whole).save()
            w.case("split", name, axis=axis).inp("x", whole).out("y", [p.clone() for p in parts]).save()


def slice_ref(x, offsets, strides, sizes):
    y = x
    for d, (o, s, n) in enumerate(zip(offsets, strides, sizes)):
        y = torch.index_select(y, d, torch.tensor([o + k * s for k in range(n)], dtype=torch.int64))
    return y


def gen_slice(w):
    cases = [
        ("step", [6, 7, 8], [1, 0, 2], [2, 1, 3], [3, 7, 2]),
        ("reverse", [6, 7, 8], [5, 6, 7], [-1, -1, -1], [6, 7, 8]),
        ("reverse_step", [6, 7, 8], [5, 6, 7], [-2, -3, -4], [3, 3, 2]),
        ("mixed", [6, 7, 8], [0, 6, 1], [1, -2, 2], [6, 4, 4]),
        ("inner_contiguous", [6, 7, 8], [2, 1, 0], [1, 2, 1], [3, 3, 8]),
        ("rank1", [10], [9], [-3], [4]),
        ("single", [4, 5], [3, 4], [1, 1], [1, 1]),
        # One contiguous range of x (cuda: a device copy): a padded
        # matrix's leading rows, rows from the middle, a size-1 leading
        # axis at an offset before a partial axis and a whole one.
        ("rows", [13, 6], [0, 0], [1, 1], [11, 6]),
        ("middle_rows", [10, 3, 4], [3, 0, 0], [1, 1, 1], [4, 3, 4]),
        ("leading_one", [5, 6, 4], [2, 1, 0], [1, 1, 1], [1, 3, 4]),
        # Not one range: a partial inner axis under a whole outer one.
        ("partial_inner", [5, 6, 4], [0, 0, 1], [1, 1, 1], [5, 6, 2]),
    ]
    for i, (name, shape, offsets, strides, sizes) in enumerate(cases):
        for dtype in (["f32", "i64", "bool", "f16"] if i == 3 else
                      ["f32", "bf16"] if name in ("rows", "middle_rows", "leading_one",
                                                  "partial_inner") else ["f32"]):
            cname = "%s_%s" % (name, dtype)
            x = Rng(cname).tensor(shape, dtype, -9, 9)
            w.case("slice", cname, offsets=offsets, strides=strides).inp("x", x).out(
                "y", slice_ref(x, offsets, strides, sizes)).save()


def gather_ref(data, idx, axis):
    n = data.shape[axis]
    norm = torch.where(idx < 0, idx.to(torch.int64) + n, idx.to(torch.int64))
    g = torch.index_select(data, axis, norm.flatten())
    return g.reshape(list(data.shape[:axis]) + list(idx.shape) + list(data.shape[axis + 1:]))


def gen_gather(w):
    cases = [
        ("embedding", [10, 6], [3, 4], 0, "i64", "f32"),
        ("negative", [10, 6], [5], 0, "i64", "f32"),
        ("axis1_i32", [3, 5, 4], [2], 1, "i32", "f32"),
        ("scalar_index", [3, 5, 4], [], 2, "i64", "f32"),
        ("vector", [7], [2, 3], 0, "i32", "f32"),
        ("f16", [6, 3], [4], 0, "i64", "f16"),
        ("bool", [6, 3], [4], 1, "i64", "bool"),
        ("i64_data", [6, 3], [2, 2], 0, "i64", "i64"),
    ]
    for name, dshape, ishape, axis, itype, dtype in cases:
        rng = Rng("gather" + name)
        data = rng.tensor(dshape, dtype, -9, 9)
        n = dshape[axis]
        idx = rng.int(ishape, itype, -n if name == "negative" else 0, n)
        w.case("gather", name, axis=axis).inp("data", data).inp("indices", idx).out(
            "y", gather_ref(data, idx, axis)).save()
    # Rows of at least 32 elements: the cuda backend's warp per row, in
    # 16-byte vectors where the rows' bytes and the tensors allow, else by
    # element (odd widths, data or y shifted off 16 bytes); more rows than
    # a one-block grid's warps.
    rows_cases = [
        ("rows_bf16", [50, 64], [3, 7], 0, "i64", "bf16", {}),
        ("rows_bf16_long", [40, 48], [300], 0, "i32", "bf16", {}),
        ("rows_bf16_wide", [6, 520], [9], 0, "i64", "bf16", {}),
        ("rows_f32_odd", [20, 33], [4, 5], 0, "i64", "f32", {}),
        ("rows_f16_axis1", [3, 10, 40], [6], 1, "i32", "f16", {}),
        ("rows_i64_negative", [9, 2, 32], [5], 0, "i64", "i64", {}),
        ("rows_bf16_shift_data", [50, 64], [3, 7], 0, "i64", "bf16", {"data": 1}),
        ("rows_f32_shift_y", [12, 36], [10], 0, "i64", "f32", {"y": 3}),
    ]
    for name, dshape, ishape, axis, itype, dtype, shift in rows_cases:
        rng = Rng("gather" + name)
        data = rng.tensor(dshape, dtype, -9, 9)
        n = dshape[axis]
        idx = rng.int(ishape, itype, -n if "negative" in name else 0, n)
        c = w.case("gather", name, axis=axis).inp("data", data).inp("indices", idx).out(
            "y", gather_ref(data, idx, axis))
        c.shift = shift
        c.save()
    data = Rng("gather_rows_oob").float([5, 40])
    idx = torch.tensor([0, 4, 7, 1], dtype=torch.int64)
    w.case("gather", "rows_out_of_range", axis=0).inp("data", data).inp("indices", idx).fails(
        "index 7", y=("f32", [4, 40])).save()
    data = Rng("gather_oob").float([5, 3])
    idx = torch.tensor([0, 4, 5, 1], dtype=torch.int64)
    w.case("gather", "out_of_range", axis=0).inp("data", data).inp("indices", idx).fails(
        "index 5", y=("f32", [4, 3])).save()
    idx = torch.tensor([-6], dtype=torch.int64)
    w.case("gather", "negative_out_of_range", axis=0).inp("data", data).inp("indices", idx).fails(
        "index -6", y=("f32", [1, 3])).save()


SCATTER_REDUCTIONS = ["none", "add", "mul", "max", "min"]
TORCH_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def scatter_positions(rng, dshape, ishape, axis, itype):
    """Flat positions of ScatterElements' addressing: indices (random along
    `axis`, repeats included) with the element's other coordinates."""
    idx = rng.int(ishape, "i64", 0, dshape[axis])
    coords = list(torch.meshgrid(*[torch.arange(n) for n in ishape], indexing="ij"))
    coords[axis] = idx
    strides = [int(np.prod(dshape[d + 1:])) for d in range(len(dshape))]
    pos = sum(c * st for c, st in zip(coords, strides))
    return pos.to(DT[itype])


def gen_scatter(w):
    """ds.scatter against torch's scatter_reduce (include_self) on the
    flattened data; `none` against numpy's assignment, the last of repeated
    positions winning."""
    cases = [
        # name, data shape, positions shape, axis, position dtype, dtype
        ("rows", [6, 5], [4, 5], 0, "i64", "f32"),
        ("columns", [3, 7], [3, 9], 1, "i64", "f32"),
        ("middle_i32", [4, 6, 3], [2, 8, 3], 1, "i32", "f32"),
        ("f16", [5, 4], [7, 4], 0, "i64", "f16"),
        ("bf16", [5, 4], [5, 3], 1, "i64", "bf16"),
        ("i64_data", [6, 3], [9, 2], 0, "i64", "i64"),
        ("i32_data", [6, 3], [4, 3], 0, "i64", "i32"),
    ]
    for name, dshape, pshape, axis, itype, dtype in cases:
        for reduction in SCATTER_REDUCTIONS:
            case = name + "_" + reduction
            rng = Rng("scatter" + case)
            lo, hi = (0.5, 1.5) if reduction == "mul" else (-4.0, 4.0)
            data = rng.tensor(dshape, dtype, lo, hi)
            updates = rng.tensor(pshape, dtype, lo, hi)
            pos = scatter_positions(rng, dshape, pshape, axis, itype)
            flat_pos = pos.to(torch.int64).flatten()
            if reduction == "none":
                y = data.flatten().numpy().copy() if dtype != "bf16" else None
                if y is None:  # numpy has no bf16: move the bits
                    y = data.flatten().view(torch.int16).numpy().copy()
                    y[flat_pos.numpy()] = updates.flatten().view(torch.int16).numpy()
                    y = torch.from_numpy(y).view(torch.bfloat16).reshape(dshape)
                else:
                    y[flat_pos.numpy()] = updates.flatten().numpy()
                    y = torch.from_numpy(y).reshape(dshape)
            else:
                y = f64(data).flatten().scatter_reduce(0, flat_pos, f64(updates).flatten(),
                                                       TORCH_REDUCE[reduction], include_self=True)
                y = y.reshape(dshape).to(DT[dtype])
            w.case("scatter", case, axis=axis, reduction=SCATTER_REDUCTIONS.index(reduction)).inp(
                "data", data).inp("positions", pos).inp("updates", updates).out(
                "y", y, scale=4.0).save()
    data = Rng("scatter_nan").float([2, 3])
    updates = torch.tensor([[NAN, 1.0, -1.0]])
    pos = torch.tensor([[3, 4, 5]])
    for reduction in ("max", "min"):
        y = data.flatten().scatter_reduce(0, pos.flatten(), updates.flatten(), TORCH_REDUCE[reduction],
                                          include_self=True).reshape(2, 3)
        w.case("scatter", "nan_" + reduction, axis=0,
               reduction=SCATTER_REDUCTIONS.index(reduction)).inp("data", data).inp(
            "positions", pos).inp("updates", updates).out("y", y).save()
    bools = Rng("scatter_bool").bool([2, 3])
    y = bools.clone().flatten()
    y[torch.tensor([1, 5])] = torch.tensor([True, False])
    w.case("scatter", "bool_none", axis=1, reduction=0).inp("data", bools).inp(
        "positions", torch.tensor([[1, 5]])).inp("updates", torch.tensor([[True, False]])).out(
        "y", y.reshape(2, 3)).save()
    w.case("scatter", "bool_add", axis=1, reduction=1).inp("data", bools).inp(
        "positions", torch.tensor([[1, 5]])).inp("updates", torch.tensor([[True, False]])).fails(
        "got bool", y=("bool", [2, 3])).save()
    for bad in (6, -1):
        w.case("scatter", "out_of_range_%d" % bad, axis=0, reduction=0).inp("data", data).inp(
            "positions", torch.tensor([0, bad])).inp("updates", torch.ones(2)).fails(
            "position %d" % bad, y=("f32", [2, 3])).save()
    w.case("scatter", "bad_reduction", axis=0, reduction=7).inp("data", data).inp(
        "positions", torch.tensor([0])).inp("updates", torch.ones(1)).fails(
        "reduction 7", y=("f32", [2, 3])).save()


def gen_top_k(w):
    """top_k's indices against torch's stable sort (ties keep the lower
    index first; NaN sorts as the largest)."""
    cases = [
        # name, shape, axis, k, dtype, values
        ("last", [4, 9], 1, 3, "f32", "random"),
        ("first", [7, 3, 2], 0, 7, "f32", "random"),
        ("middle", [2, 8, 3], 1, 5, "f32", "ties"),
        ("nan", [3, 6], 1, 4, "f32", "nan"),
        ("f16", [5, 6], 1, 2, "f16", "ties"),
        ("bf16", [6, 5], 0, 3, "bf16", "random"),
        ("i64", [3, 10], 1, 4, "i64", "ties"),
        ("i32", [10, 2], 0, 10, "i32", "ties"),
        ("zero_k", [3, 4], 1, 0, "f32", "random"),
    ]
    for name, shape, axis, k, dtype, values in cases:
        for largest in (True, False):
            case = name + ("_largest" if largest else "_smallest")
            rng = Rng("topk" + case)
            if values == "random":
                x = rng.tensor(shape, dtype, -9, 9)
            else:  # few distinct values: many ties
                x = rng.int(shape, "i64", -3, 3).to(DT[dtype])
                if values == "nan":
                    x = x.masked_fill(rng.bool(shape), NAN)
            order = torch.sort(f64(x), dim=axis, descending=largest, stable=True).indices
            w.case("top_k", case, axis=axis, largest=largest).inp("x", x).out(
                "indices", order.narrow(axis, 0, k).contiguous()).save()
    w.case("top_k", "k_too_large", axis=0, largest=True).inp("x", torch.ones(3)).fails(
        "k 4 exceeds", indices=("i64", [4])).save()


def gen_trilu(w):
    for upper in (True, False):
        for k in (0, 1, -2, 3, 10, -10):
            for shape in ([5, 7], [2, 3, 4, 4]):
                name = "%s_k%d_%s" % ("upper" if upper else "lower", k, "x".join(map(str, shape)))
                x = Rng(name).float(shape)
                y = torch.triu(x, k) if upper else torch.tril(x, k)
                w.case("trilu", name, upper=upper, k=k).inp("x", x).out("y", y).save()
    for dtype in ("i64", "bool", "f16", "bf16", "i32"):
        x = Rng("trilu" + dtype).tensor([4, 6], dtype, -9, 9)
        y = torch.triu(x.to(torch.int64) if dtype == "bool" else x, 1)
        if dtype == "bool":
            y = y.to(torch.bool)
        w.case("trilu", "upper_k1_" + dtype, upper=True, k=1).inp("x", x).out("y", y).save()


# --------------------------------------------------------------------------
# Dropout: Philox4x32-10, mapping documented in dsrt/philox.h
# --------------------------------------------------------------------------

MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    c = [np.asarray(v, dtype=np.uint64) for v in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(0x9E3779B9)) & MASK32
            k1 = (k1 + np.uint64(0xBB67AE85)) & MASK32
        p0 = np.uint64(0xD2511F53) * c[0]
        p1 = np.uint64(0xCD9E8D57) * c[2]
        c = [((p1 >> np.uint64(32)) ^ c[1] ^ k0) & MASK32, p1 & MASK32,
             ((p0 >> np.uint64(32)) ^ c[3] ^ k1) & MASK32, p0 & MASK32]
    return c


def check_philox():
    # Known-answer vectors of Random123 (kat_vectors, philox4x32 10).
    kat = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
           ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
           ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, expect in kat:
        got = tuple(int(v) for v in philox4x32_10(*ctr, *key))
        assert got == expect, (ctr, key, [hex(v) for v in got])


def philox_uniform(seed, counter, n):
    idx = np.arange(n, dtype=np.uint64)
    block = idx // np.uint64(4)
    lanes = philox4x32_10(block & MASK32, block >> np.uint64(32), np.full(n, counter & 0xFFFFFFFF, np.uint64),
                          np.full(n, counter >> 32, np.uint64), seed & 0xFFFFFFFF, seed >> 32)
    bits = np.choose((idx % np.uint64(4)).astype(np.int64), lanes)
    return (bits >> np.uint64(8)).astype(np.float32) * np.float32(2.0**-24)


def gen_dropout(w):
    check_philox()
    cases = [([7], 0.5, 1, 0), ([3, 50], 0.1, 42, 7), ([4, 1001], 0.5, 2**40 + 123, 2**33 + 5),
             ([9, 9], 0.0, 5, 5), ([300], 0.9, 12345, 0), ([40000, 3], 0.25, 99, 3)]
    for shape, ratio, seed, counter in cases:
        for dtype in (FLOATS if shape == [3, 50] else ["f32"]):
            name = "%s_r%g_%s" % ("x".join(map(str, shape)), ratio, dtype)
            x = Rng(name).float(shape, dtype, -3, 3)
            n = x.numel()
            u = philox_uniform(seed, counter, n)
            mask = torch.from_numpy(u >= np.float32(ratio)).reshape(shape)
            y = f64(x) * mask / (1.0 - float(np.float32(ratio)))
            w.case("dropout", name, ratio=ratio, seed=str(seed), counter=str(counter)).inp(
                "x", x).out("y", like(y, dtype)).out("mask", mask).save()


# --------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------

def loss_cases():
    # name, scores shape, reduction, weights, ignore_index (None: none),
    # label dtype, score dtype
    return [
        ("mean", [6, 5], "mean", False, None, "i64", "f32"),
        ("sum", [6, 5], "sum", False, None, "i64", "f32"),
        ("none", [6, 5], "none", False, None, "i64", "f32"),
        ("weights_mean", [6, 5], "mean", True, None, "i64", "f32"),
        ("weights_none", [6, 5], "none", True, None, "i64", "f32"),
        ("ignore_in_range", [8, 5], "mean", False, 2, "i64", "f32"),
        ("ignore_negative", [8, 5], "sum", True, -100, "i32", "f32"),
        ("spatial", [3, 4, 2, 5], "mean", True, 1, "i32", "f32"),
        ("spatial_none", [3, 4, 2, 5], "none", False, None, "i64", "f32"),
        ("f16", [6, 5], "mean", True, None, "i64", "f16"),
        ("bf16", [6, 5], "none", False, 3, "i64", "bf16"),
        ("all_ignored", [4, 3], "mean", False, 1, "i64", "f32"),
        ("vocab", [64, 1000], "mean", False, None, "i64", "f32"),
        # Classes not a multiple of the cuda kernels' 256 threads, several
        # rows, every third row ignored (-100 is outside [0, C)).
        ("rows_ragged_vocab_ignore", [40, 1500], "mean", False, -100, "i64", "f32"),
        ("bf16_ragged_vocab_ignore", [24, 1500], "sum", True, 7, "i32", "bf16"),
        # Rows spread over all 15 blocks of the cuda totals.
        ("many_rows_ignore", [300, 3], "mean", True, 1, "i32", "f32"),
    ]


def mixed_loss_cases():
    # As loss_cases, with bf16/fp16 scores and an f32 loss (and loss
    # gradient): the loss op of a mixed-precision program.
    return [
        ("bf16_f32_loss", [16, 1000], "mean", False, None, "i64", "bf16"),
        ("f16_f32_loss", [16, 1000], "mean", False, None, "i64", "f16"),
        ("bf16_f32_loss_none_ignore", [6, 5], "none", False, 3, "i64", "bf16"),
        ("f16_f32_loss_weights_sum", [3, 7, 4], "sum", True, -100, "i32", "f16"),
        # More rows than loss_blocks(rows) * C: the cuda loss recomputes
        # each row's log-sum-exp instead of keeping it in the workspace.
        ("bf16_f32_loss_many_rows", [200, 2], "mean", False, None, "i64", "bf16"),
        ("bf16_f32_loss_ragged_ignore", [24, 777], "mean", False, -100, "i64", "bf16"),
        ("bf16_f32_loss_spatial_none", [2, 300, 5], "none", False, 0, "i64", "bf16"),
    ]


def loss_kwargs(wts, red, ignore):
    """torch's cross_entropy / nll_loss keyword arguments of a case."""
    return dict(weight=f64(wts) if wts is not None else None, reduction=red,
                ignore_index=ignore if ignore is not None else -100)


def loss_inputs(name, shape, weights, ignore, ltype, dtype):
    rng = Rng("loss" + name)
    scores = rng.float(shape, dtype, -4, 4)
    lshape = [shape[0]] + shape[2:]
    labels = rng.int(lshape, ltype, 0, shape[1])
    if ignore is not None:
        flat = labels.view(-1)
        flat[::3] = ignore
        if name == "all_ignored":
            flat[:] = ignore
    wts = rng.float([shape[1]], dtype, 0.2, 2.0) if weights else None
    return scores, labels, wts


def gen_losses(w):
    for name, shape, red, weights, ignore, ltype, dtype in loss_cases():
        scores, labels, wts = loss_inputs(name, shape, weights, ignore, ltype, dtype)
        kw = loss_kwargs(wts, red, ignore)
        attrs = dict(reduction=red, ignore_index=ignore)
        s64 = f64(scores)
        loss = F.cross_entropy(s64, labels.to(torch.int64), **kw)
        logp = torch.log_softmax(s64, 1)
        w.case("softmax_cross_entropy", name, **attrs).inp("scores", scores).inp("labels", labels).inp(
            "weights", wts).out("loss", like(loss, dtype), scale=4.0).out("log_prob", like(logp, dtype)).save()
        lp = like(torch.log_softmax(s64, 1), dtype)
        loss = F.nll_loss(f64(lp), labels.to(torch.int64), **kw)
        w.case("nll_loss", name, **attrs).inp("log_prob", lp).inp("labels", labels).inp(
            "weights", wts).out("loss", like(loss, dtype), scale=4.0).save()
    # Mixed precision: 16-bit scores, an f32 loss computed row by row in f32
    # (ds-precision keeps a loss f32); the 16-bit log_prob is PyTorch's
    # log_softmax of the scores rounded once.
    for name, shape, red, weights, ignore, ltype, dtype in mixed_loss_cases():
        scores, labels, wts = loss_inputs(name, shape, weights, ignore, ltype, dtype)
        kw = loss_kwargs(wts, red, ignore)
        loss = F.cross_entropy(f64(scores), labels.to(torch.int64), **kw)
        w.case("softmax_cross_entropy", name, reduction=red, ignore_index=ignore).inp(
            "scores", scores).inp("labels", labels).inp("weights", wts).out(
            "loss", like(loss, "f32"), scale=4.0).out(
            "log_prob", like(torch.log_softmax(f64(scores), 1), dtype)).save()
    # Labels outside [0, C) that are not the ignored value are errors.
    scores = Rng("bad").float([4, 3])
    labels = torch.tensor([0, 2, 7, 1], dtype=torch.int64)
    w.case("softmax_cross_entropy", "label_out_of_range", reduction="mean", ignore_index=None).inp(
        "scores", scores).inp("labels", labels).inp("weights", None).fails(
        "label 7", loss=("f32", []), log_prob=("f32", [4, 3])).save()
    labels = torch.tensor([0, -1, 2, 1], dtype=torch.int64)
    w.case("nll_loss", "negative_label", reduction="sum", ignore_index=-100).inp(
        "log_prob", scores).inp("labels", labels).inp("weights", None).fails(
        "label -1", loss=("f32", [])).save()


# --------------------------------------------------------------------------
# Convolution and pooling
# --------------------------------------------------------------------------

def torch_pad(pads):
    """ONNX pads (begins, then ends) to F.pad's order (last axis first)."""
    n = len(pads) // 2
    out = []
    for a in reversed(range(n)):
        out += [pads[a], pads[a + n]]
    return out


CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
MAXPOOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
AVGPOOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


def gen_conv(w):
    cases = [
        # name, x, w, strides, pads, dilations, group, bias
        ("basic", [2, 3, 9, 8], [4, 3, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 1, True),
        ("stride_asym_pad", [2, 3, 9, 8], [4, 3, 3, 2], [2, 2], [0, 1, 2, 0], [1, 1], 1, False),
        ("dilated", [1, 3, 10, 9], [2, 3, 3, 3], [1, 1], [2, 1, 2, 1], [2, 1], 1, True),
        ("group2", [2, 4, 7, 7], [6, 2, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 2, True),
        ("depthwise", [1, 4, 6, 6], [4, 1, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 4, True),
        ("pointwise", [2, 8, 5, 5], [6, 8, 1, 1], [1, 1], [0, 0, 0, 0], [1, 1], 1, True),
        ("conv1d", [2, 3, 20], [5, 3, 4], [3], [2, 1], [2], 1, True),
        ("conv3d", [1, 2, 5, 6, 4], [3, 2, 2, 3, 2], [1, 2, 1], [1, 0, 1, 0, 1, 1], [1, 1, 1], 1, True),
        ("large_pad", [1, 1, 3, 3], [1, 1, 2, 2], [1, 1], [3, 3, 3, 3], [1, 1], 1, False),
    ]
    # 16-bit types convert to f32 in the workspace, with and without an
    # im2col matrix, with and without groups.
    for name, xs, ws, st, pads, dil, group, has_bias in cases:
        for dtype in (FLOATS if name in ("basic", "group2", "pointwise") else ["f32"]):
            cname = "%s_%s" % (name, dtype)
            rng = Rng("conv" + cname)
            x, wt = rng.float(xs, dtype), rng.float(ws, dtype)
            b = rng.float([ws[0]], dtype) if has_bias else None
            spatial = len(xs) - 2
            y = CONV[spatial](F.pad(f64(x), torch_pad(pads)), f64(wt), f64(b) if b is not None else None,
                              stride=st, dilation=dil, groups=group)
            k = ws[1]
            for d in ws[2:]:
                k *= d
            w.case("conv", cname, strides=st, pads=pads, dilations=dil, group=group).inp("x", x).inp(
                "w", wt).inp("bias", b).out("y", like(y, dtype), scale=max(1.0, k / 8.0)).save()


def gen_pool(w):
    max_cases = [
        # name, x, kernel, strides, pads, dilations, ceil_mode
        ("k3s2p1", [2, 3, 8, 8], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], False),
        ("k3s2p1_ceil", [2, 3, 8, 8], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], True),
        ("ceil_drop_last", [1, 2, 6, 6], [2, 2], [2, 2], [1, 1, 1, 1], [1, 1], True),
        ("dilated", [1, 2, 9, 9], [2, 3], [1, 2], [0, 1, 0, 1], [2, 2], False),
        ("dilated_ceil", [1, 2, 9, 9], [2, 2], [2, 2], [0, 0, 0, 0], [2, 1], True),
        ("pool1d_ceil", [2, 3, 11], [3], [2], [1, 1], [1], True),
        ("pool3d_ceil", [1, 2, 5, 5, 5], [2, 2, 2], [2, 2, 2], [0, 0, 0, 0, 0, 0], [1, 1, 1], True),
    ]
    for name, xs, k, st, pads, dil, ceil in max_cases:
        for dtype in (FLOATS if name == "k3s2p1" else ["f32"]):
            cname = "%s_%s" % (name, dtype)
            x = Rng("maxpool" + cname).float(xs, dtype, -3, 3)
            n = len(k)
            y = MAXPOOL[n](f64(x), k, st, padding=pads[:n], dilation=dil, ceil_mode=ceil)
            w.case("max_pool", cname, kernel_shape=k, strides=st, pads=pads, dilations=dil).inp("x", x).out(
                "y", like(y, dtype)).save()
    # Asymmetric pads (PyTorch pads symmetrically): pad with -inf first.
    x = Rng("maxpool_asym").float([1, 2, 7, 6])
    pads = [0, 2, 1, 0]
    y = F.max_pool2d(F.pad(f64(x), torch_pad(pads), value=-INF), [3, 3], [2, 2])
    w.case("max_pool", "asym_pads_f32", kernel_shape=[3, 3], strides=[2, 2], pads=pads, dilations=[1, 1]).inp(
        "x", x).out("y", like(y, "f32")).save()
    x = Rng("maxpool_nan").float([1, 1, 4, 4])
    x[0, 0, 1, 1] = NAN
    y = F.max_pool2d(f64(x), [2, 2], [2, 2])
    w.case("max_pool", "nan_f32", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0], dilations=[1, 1]).inp(
        "x", x).out("y", like(y, "f32")).save()

    avg_cases = [
        ("k3s2p1", [2, 3, 8, 8], [3, 3], [2, 2], [1, 1, 1, 1], False),
        ("k3s2p1_ceil", [2, 3, 8, 8], [3, 3], [2, 2], [1, 1, 1, 1], True),
        ("k2s2_ceil", [1, 2, 7, 5], [2, 2], [2, 2], [0, 0, 0, 0], True),
        ("pool1d_ceil", [2, 3, 10], [4], [3], [1, 1], True),
        ("pool3d", [1, 2, 5, 4, 6], [2, 2, 3], [1, 2, 2], [1, 0, 1, 1, 0, 1], False),
    ]
    for name, xs, k, st, pads, ceil in avg_cases:
        for include in (True, False):
            for dtype in (FLOATS if name == "k3s2p1" and include else ["f32"]):
                cname = "%s_%s_%s" % (name, "incl" if include else "excl", dtype)
                x = Rng("avgpool" + cname).float(xs, dtype, -3, 3)
                n = len(k)
                y = AVGPOOL[n](f64(x), k, st, padding=pads[:n], ceil_mode=ceil, count_include_pad=include)
                w.case("avg_pool", cname, kernel_shape=k, strides=st, pads=pads, count_include_pad=include).inp(
                    "x", x).out("y", like(y, dtype)).save()
    # Asymmetric pads: sums over the zero-padded input, divided by the
    # kernel volume (include) or by the number of real elements (exclude).
    x = Rng("avgpool_asym").float([1, 2, 7, 6])
    pads, k, st = [0, 2, 1, 0], [3, 3], [2, 2]
    padded = F.pad(f64(x), torch_pad(pads))
    ones = F.pad(torch.ones_like(f64(x)), torch_pad(pads))
    total = F.avg_pool2d(padded, k, st) * 9
    count = F.avg_pool2d(ones, k, st) * 9
    for include, y in ((True, total / 9), (False, total / count)):
        w.case("avg_pool", "asym_pads_%s_f32" % ("incl" if include else "excl"), kernel_shape=k, strides=st,
               pads=pads, count_include_pad=include).inp("x", x).out("y", like(y, "f32")).save()


# --------------------------------------------------------------------------
# Optimizers: the ONNX reference update functions
# --------------------------------------------------------------------------

def gen_optimizers(w):
    from onnx.backend.test.case.node.adagrad import apply_adagrad
    from onnx.backend.test.case.node.adam import apply_adam
    from onnx.backend.test.case.node.momentum import apply_momentum, apply_nesterov

    def np64(t):
        return t.to(torch.float64).numpy()

    for dtype in FLOATS:
        for step in (0, 3):
            name = "step%d_%s" % (step, dtype)
            rng = Rng("adam" + name)
            x, g = rng.float([4, 5], dtype), rng.float([4, 5], dtype)
            v, h = rng.float([4, 5], dtype, -0.1, 0.1), rng.float([4, 5], dtype, 0.0, 0.01)
            lr = torch.tensor(0.01, dtype=torch.float32)
            t = torch.tensor(step, dtype=torch.int64)
            attrs = dict(alpha=0.9, beta=0.999, epsilon=1e-6, norm_coefficient=0.01, norm_coefficient_post=0.001)
            xn, vn, hn = apply_adam(np.float64(np.float32(0.01)), step, np64(x), np64(g), np64(v), np64(h),
                                    np.float64(np.float32(0.01)), np.float64(np.float32(0.001)),
                                    np.float64(np.float32(0.9)), np.float64(np.float32(0.999)),
                                    np.float64(np.float32(1e-6)))
            w.case("adam", name, **attrs).inp("lr", lr).inp("step", t).inp("param", x).inp("grad", g).inp(
                "m", v).inp("v", h).out("param_out", like(torch.from_numpy(np.asarray(xn)), dtype)).out(
                "m_out", like(torch.from_numpy(np.asarray(vn)), dtype)).out(
                "v_out", like(torch.from_numpy(np.asarray(hn)), dtype)).save()
            for mode, fn in (("standard", apply_momentum), ("nesterov", apply_nesterov)):
                mname = "%s_%s" % (mode, name)
                rng = Rng("momentum" + mname)
                x, g, v = rng.float([3, 7], dtype), rng.float([3, 7], dtype), rng.float([3, 7], dtype, -0.1, 0.1)
                f = lambda a: np.float64(np.float32(a))
                xn, vn = fn(f(0.05), step, np64(x), np64(g), np64(v), f(0.01), f(0.9), f(0.1))
                w.case("momentum", mname, alpha=0.9, beta=0.1, mode=mode, norm_coefficient=0.01).inp(
                    "lr", torch.tensor(0.05, dtype=torch.float32)).inp("step", t).inp("param", x).inp(
                    "grad", g).inp("velocity", v).out("param_out", like(torch.from_numpy(np.asarray(xn)), dtype)).out(
                    "velocity_out", like(torch.from_numpy(np.asarray(vn)), dtype)).save()
            rng = Rng("adagrad" + name)
            x, g, h = rng.float([6], dtype), rng.float([6], dtype), rng.float([6], dtype, 0.0, 0.5)
            f = lambda a: np.float64(np.float32(a))
            xn, hn = apply_adagrad(f(0.1), step, np64(x), np64(g), np64(h), f(0.01), f(1e-6), f(0.1))
            w.case("adagrad", name, decay_factor=0.1, epsilon=1e-6, norm_coefficient=0.01).inp(
                "lr", torch.tensor(0.1, dtype=torch.float32)).inp("step", t).inp("param", x).inp(
                "grad", g).inp("accumulator", h).out("param_out", like(torch.from_numpy(np.asarray(xn)), dtype)).out(
                "accumulator_out", like(torch.from_numpy(np.asarray(hn)), dtype)).save()


# --------------------------------------------------------------------------
# Backward kernels: torch autograd in float64 of the forward op
# --------------------------------------------------------------------------

def vjp(fn, inputs, dy):
    """Gradients of fn at the float64 `inputs` against the output gradient
    `dy` (the vector-Jacobian product), by torch autograd."""
    xs = [f64(t).detach().clone().requires_grad_(True) for t in inputs]
    return torch.autograd.grad(fn(*xs), xs, f64(dy))


def row_tol(dtype, expected, scale=1.0):
    """(rtol, atol) for softmax's gradients, whose input y is the rounded
    forward output: in f16 / bf16 that rounding moves every element of a row
    by up to a unit of the type times the row's largest gradient (y enters
    through sum(dy * y)). f32 keeps the default tolerance."""
    r, a = default_tol(dtype, scale)
    if dtype in ("f16", "bf16"):
        a = max(a, 2 * EPS[dtype] * float(f64(expected).abs().max()))
    return r, a


def gen_softmax_grad(w):
    shapes = [
        ("last", [4, 33], 1),
        ("middle", [2, 5, 7], 1),
        ("first", [3, 4, 5], 0),
        ("wide_inner", [2, 3, 300], 1),
        ("wide_inner_large", [4, 16, 600], 1),
        ("long_row", [6, 1000], 1),
        ("attention", [2, 4, 64, 64], 3),
    ]
    for kernel, fn in (("softmax_grad", torch.softmax), ("log_softmax_grad", torch.log_softmax)):
        for sname, shape, axis in shapes:
            dtypes = ["f32"] + (["f16", "bf16"] if sname in ("last", "middle", "attention") else [])
            for dtype in dtypes:
                name = "%s_%s" % (sname, dtype)
                rng = Rng(kernel + name)
                x, dy = rng.float(shape, dtype, -4, 4), rng.float(shape, dtype)
                y = like(fn(f64(x), axis), dtype)
                (dx,) = vjp(lambda t: fn(t, axis), [x], dy)
                r, a = row_tol(dtype, dx)
                w.case(kernel, name, axis=axis).inp("y", y).inp("dy", dy).out(
                    "dx", like(dx, dtype), rtol=r, atol=a).save()
        # A causal -inf mask: softmax's zeros and log-softmax's -inf.
        rng = Rng(kernel + "mask")
        x, dy = rng.float([2, 8, 8], "f32", -2, 2), rng.float([2, 8, 8])
        x = x.masked_fill(torch.triu(torch.ones(8, 8, dtype=torch.bool), 1), -INF)
        (dx,) = vjp(lambda t: fn(t, 2), [x], dy)
        w.case(kernel, "causal_mask_f32", axis=2).inp("y", like(fn(f64(x), 2), "f32")).inp(
            "dy", dy).out("dx", like(dx, "f32")).save()


def attention_scores(q, k, scale, causal):
    """scale q kᵀ of heads-major [..., T, Dh] q and k, the keys after each
    query masked to -inf when causal."""
    scores = scale * q @ k.transpose(-1, -2)
    if causal:
        t = q.shape[-2]
        scores = scores.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), -INF)
    return scores


def gen_attention(w):
    """attention and attention_grad against the unfused product, softmax
    and product in float64 (torch autograd for the gradients); lse is the
    log-sum-exp of each row's scaled (masked) scores. The tokens_ cases
    lay q, k, v, o and the gradients out [B, T, H, Dh] (lse [B, T, H]),
    the reference permuting them to [B, H, T, Dh] and back."""
    cases = [
        ("causal", [2, 3, 20, 8], True, 0.35),
        ("full", [1, 2, 37, 16], False, 0.25),
        ("tiles", [1, 1, 130, 4], True, 0.5),  # several query and key tiles
        ("head64", [1, 2, 9, 64], True, 0.125),
        # f16 and bf16 with Dh a multiple of 16 run on the cuda backend's
        # tensor-core kernels (tiles of 64 queries and 64 keys): T not a
        # multiple of the tile, several query and key tiles, several heads.
        ("mma_causal", [1, 2, 130, 64], True, 0.125),
        ("mma_full", [2, 1, 70, 32], False, 0.18),
        ("mma_head128", [1, 2, 100, 128], True, 0.09),
        # Dh 128 (Llama's): two-stage K/V (Q/dO) tiles in dynamic shared
        # memory on the cuda backend; full attention over two key tiles.
        ("mma_head128_full", [1, 1, 70, 128], False, 0.09),
        # Dh 96 on the Dh-128 kernels: the products' column blocks stop at
        # Dh (with_width's partial case), and the one-pass backward's dq
        # (DSRT_ATTENTION_GRAD=atomic) takes its second 64 columns in part.
        ("mma_head96", [1, 2, 100, 96], True, 0.1),
        # Tokens-major [B, T, H, Dh]: Dh 8 on the cuda scalar kernels in
        # every type, Dh 32 and 64 on the tensor-core ones; T not a multiple
        # of either's tile.
        ("tokens_causal", [2, 37, 3, 8], True, 0.35),
        ("tokens_full", [1, 70, 2, 8], False, 0.3),
        ("mma_tokens_causal", [1, 130, 2, 64], True, 0.125),
        ("mma_tokens_full", [1, 70, 2, 32], False, 0.18),
        # The edges of the cuda backend's DSRT_ATTENTION_KERNEL=rows32
        # tiling (blocks of 128 query rows, a warp's 32 rows two blocks of
        # 16; dK·dV blocks of 128 keys): T a multiple of 64, not of 128 (the
        # last block's last two warps past T, its first two skipping the
        # diagonal key tile); T 149 (a warp whose second 16 rows are 5
        # real ones, dQ's second half of the last key tile past T) at Dh 48,
        # narrower than the kernels' 64.
        ("mma_rows32_causal", [1, 2, 192, 64], True, 0.125),
        ("mma_rows32_full", [1, 2, 149, 48], False, 0.15),
        ("mma_tokens_rows32_causal", [1, 149, 2, 64], True, 0.125),
    ]
    for sname, shape, causal, scale in cases:
        if sname.startswith("mma_tokens"):
            dtypes = ("bf16",)
        elif sname.startswith("mma_"):
            dtypes = ("bf16", "f16")
        elif sname in ("causal", "full"):
            dtypes = ("f32", "bf16", "f16")
        elif sname.startswith("tokens_"):
            dtypes = ("f32", "bf16")
        else:
            dtypes = ("f32",)
        tokens_major = "tokens_" in sname
        # [B, T, H, Dh] <-> [B, H, T, Dh] (the identity heads-major).
        heads = (lambda x: x.transpose(1, 2)) if tokens_major else (lambda x: x)
        for dtype in dtypes:
            name = "%s_%s" % (sname, dtype)
            rng = Rng("attention" + name)
            q, k, v = (rng.float(shape, dtype, -2, 2) for _ in range(3))
            do = rng.float(shape, dtype)

            def scores_of(a, b):
                return attention_scores(heads(a), heads(b), scale, causal)

            def sdpa(a, b, c):
                return heads(torch.softmax(scores_of(a, b), -1) @ heads(c))

            lse = torch.logsumexp(scores_of(f64(q), f64(k)), -1)
            if tokens_major:
                lse = lse.transpose(1, 2).contiguous()
            o = sdpa(f64(q), f64(k), f64(v)).contiguous()
            grads = [g.contiguous() for g in vjp(sdpa, [q, k, v], do)]
            attrs = dict(scale=scale, causal=causal, tokens_major=tokens_major)
            if dtype == "f32":
                r, a = 1e-5, 1e-5
            else:
                r, a = row_tol(dtype, o)
            w.case("attention", name, **attrs).inp("q", q).inp("k", k).inp("v", v).out(
                "o", like(o, dtype), rtol=r, atol=a).out("lse", like(lse, "f32"), rtol=1e-5, atol=1e-5).save()
            # The gradient from the rounded forward results, as training runs it.
            gc = w.case("attention_grad", name, **attrs).inp("q", q).inp("k", k).inp("v", v).inp(
                "o", like(o, dtype)).inp("lse", like(lse, "f32")).inp("do", do)
            for gname, g in zip(("dq", "dk", "dv"), grads):
                if dtype == "f32":
                    r, a = 1e-4, 1e-5 * float(g.abs().max())
                else:
                    r, a = row_tol(dtype, g)
                    a *= 4  # o rounded to 16 bits feeds delta = rowsum(do * o)
                gc.out(gname, like(g, dtype), rtol=r, atol=a)
            gc.save()
    # Packed: q, k, v (and dq, dk, dv) stacked on axis 2 of one
    # [B, T, 3, H, Dh] tensor, o and do [B, T, H, Dh], lse [B, T, H]; the
    # reference is the tokens-major one above. Dh 32 and 64, T not a
    # multiple of either kernel's tile; bf16 runs on the tensor cores.
    packed = [
        ("packed_causal", [2, 37, 2, 32], True, 0.18, ("f32", "bf16")),
        ("packed_causal64", [1, 130, 2, 64], True, 0.125, ("f32", "bf16")),
        ("packed_full", [1, 70, 3, 32], False, 0.18, ("bf16",)),
        # Several tiles of 64 on the tensor cores, T not a multiple of 64:
        # causal, the tiles below the diagonal unmasked, the diagonal and
        # the last (keys past T) masked, the double-buffered copies
        # pipelined over 6 key (query) tiles, the heaviest query tiles
        # launched first; full, every tile but the last unmasked.
        ("packed_causal_long", [1, 333, 2, 64], True, 0.125, ("bf16",)),
        ("packed_full_long", [1, 200, 1, 64], False, 0.125, ("bf16",)),
        # The rows32 tiling's edges (the cases above): T 149 and 192.
        ("packed_causal_rows32", [1, 149, 2, 64], True, 0.125, ("bf16", "f16")),
        ("packed_full_rows32", [1, 192, 1, 64], False, 0.125, ("bf16",)),
    ]
    for sname, shape, causal, scale, dtypes in packed:
        heads = lambda x: x.transpose(1, 2)
        for dtype in dtypes:
            name = "%s_%s" % (sname, dtype)
            rng = Rng("attention" + name)
            qkv = rng.float(shape[:2] + [3] + shape[2:], dtype, -2, 2)
            do = rng.float(shape, dtype)

            def scores_of(a, b):
                return attention_scores(heads(a), heads(b), scale, causal)

            def sdpa_packed(x):
                q, k, v = x.unbind(2)
                return heads(torch.softmax(scores_of(q, k), -1) @ heads(v))

            q64, k64 = f64(qkv).unbind(2)[:2]
            lse = torch.logsumexp(scores_of(q64, k64), -1).transpose(1, 2).contiguous()
            o = sdpa_packed(f64(qkv)).contiguous()
            (dqkv,) = vjp(sdpa_packed, [qkv], do)
            dqkv = dqkv.contiguous()
            attrs = dict(scale=scale, causal=causal)
            if dtype == "f32":
                r, a = 1e-5, 1e-5
            else:
                r, a = row_tol(dtype, o)
            w.case("attention_packed", name, **attrs).inp("qkv", qkv).out(
                "o", like(o, dtype), rtol=r, atol=a).out("lse", like(lse, "f32"), rtol=1e-5, atol=1e-5).save()
            if dtype == "f32":
                r, a = 1e-4, 1e-5 * float(dqkv.abs().max())
            else:
                r, a = row_tol(dtype, dqkv)
                a *= 4  # o rounded to 16 bits feeds delta = rowsum(do * o)
            w.case("attention_packed_grad", name, **attrs).inp("qkv", qkv).inp("o", like(o, dtype)).inp(
                "lse", like(lse, "f32")).inp("do", do).out("dqkv", like(dqkv, dtype), rtol=r, atol=a).save()
    # A qkv whose axis -3 is not 3.
    x = Rng("attention packed bad").float([1, 4, 2, 2, 8])
    w.case("attention_packed", "not_three", scale=1.0, causal=True).inp("qkv", x).fails(
        "qkv must be [..., T, 3, H, Dh]", o=("f32", [1, 4, 2, 8]), lse=("f32", [1, 4, 2])).save()
    # Bad input: a head wider than the kernels take, an lse that is not f32.
    rng = Rng("attention bad")
    wide = rng.float([1, 2, 130])
    w.case("attention", "head_too_wide", scale=1.0, causal=True, tokens_major=False).inp("q", wide).inp("k", wide).inp(
        "v", wide).fails("head dimension 130 exceeds the supported 128", o=("f32", [1, 2, 130]),
                         lse=("f32", [1, 2])).save()
    x = rng.float([1, 2, 4])
    w.case("attention", "lse_not_f32", scale=1.0, causal=False, tokens_major=False).inp("q", x).inp("k", x).inp(
        "v", x).fails("lse must be f32", o=("f32", [1, 2, 4]), lse=("f16", [1, 2])).save()
    w.case("attention", "tokens_major_rank2", scale=1.0, causal=False, tokens_major=True).inp(
        "q", x[0]).inp("k", x[0]).inp("v", x[0]).fails(
            "tokens-major q must have rank >= 3", o=("f32", [2, 4]), lse=("f32", [2])).save()


def layer_norm_ref(x, g, b, axis, eps):
    dims = tuple(range(axis, x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dims, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps) * g
    return y + b if b is not None else y


def gen_layer_norm_grad(w):
    cases = [
        # name, x shape, axis, scale shape, bias shape (None: absent), x range
        ("last", [4, 16], 1, [16], [16], 2),
        ("rank3_last", [2, 3, 8], 2, [8], [8], 2),
        ("two_axes", [2, 3, 8], 1, [8], [3, 8], 2),
        ("scale_col", [2, 3, 8], 1, [3, 1], None, 2),
        ("scale_one", [4, 6], 1, [1], [6], 2),
        ("no_bias", [5, 12], 1, [12], None, 2),
        ("gpt2_rows", [256, 768], 1, [768], [768], 2),
        ("many_rows", [3000, 8], 1, [8], [8], 2),
        ("offset_1000", [6, 40], 1, [40], [40], None),
        # Not a multiple of the 128-bit vector: the cuda kernel's element path.
        ("odd_row", [3, 37], 1, [37], [37], 2),
        ("odd_row_broadcast", [5, 3, 13], 1, [13], [3, 13], 2),
        ("row_100", [7, 100], 1, [100], [100], 2),
        # The cuda kernel's warp per row takes rows of up to 32 elements a
        # lane: 1024 (4 vectors of 16 bits, 8 of f32) is its widest, 1032
        # goes to the block per row (40 blocks of 1 row: 7 of each block's 8
        # warps have none); rows of 776 leave some lanes' last vector past
        # the row (35 blocks of 2 rows).
        ("warp_bound", [40, 1024], 1, [1024], [1024], 2),
        ("past_warp_bound", [40, 1032], 1, [1032], [1032], 2),
        ("warp_partial", [70, 776], 1, [776], [776], 2),
    ]
    eps = 1e-5
    # (dtype, the type of dscale and dbias): mixed precision writes the sums
    # over all rows of 16-bit rows in f32 for an f32 accumulator.
    variants = []
    for name, shape, axis, sshape, bshape, span in cases:
        dtypes = [("f32", "f32")]
        if name in ("last", "two_axes", "many_rows", "odd_row", "odd_row_broadcast", "row_100",
                    "warp_bound", "past_warp_bound", "warp_partial"):
            dtypes += [("f16", "f16"), ("bf16", "bf16")]
        if name in ("last", "scale_col"):
            dtypes += [("f16", "f32"), ("bf16", "f32")]
        if name == "many_rows":  # 91 blocks of 33 rows: past the old 64
            dtypes += [("bf16", "f32")]
        variants += [(name, shape, axis, sshape, bshape, span, dtype, sums, None)
                     for dtype, sums in dtypes]
    # With an addend (the residual stream's gradient) added to dx in f32 and
    # rounded once: a few blocks (4 of 1 row: the last block adds them), 64
    # blocks of 4 rows and 91 of 33 (the last 30: lanes of 3 and of 2 blocks
    # summed by each lane's last block, then the lanes), rows of 100
    # (element path), a broadcast scale and bias (the parameter kernels after
    # the rows), and dx written over the addend (in place).
    for name, shape, axis, sshape, bshape, span in cases:
        if name in ("last", "gpt2_rows", "many_rows", "row_100", "scale_col",
                    "odd_row_broadcast", "warp_partial"):
            for dtype, sums in ([("f32", "f32"), ("bf16", "bf16")] if name != "scale_col"
                                else [("f32", "f32"), ("bf16", "f32")]):
                variants.append((name, shape, axis, sshape, bshape, span, dtype, sums, "addend"))
        if name in ("gpt2_rows", "last"):
            variants.append((name, shape, axis, sshape, bshape, span, "bf16", "bf16", "in_place"))
    for name, shape, axis, sshape, bshape, span, dtype, sums, add in variants:
        if True:
            cname = "%s_%s" % (name, dtype) + ("" if sums == dtype else "_%s_sums" % sums)
            cname += "_" + add if add else ""
            rng = Rng("lngrad" + cname)
            # offset_1000: a large mean against the spread, where the saved
            # f32 mean alone would shift every normalized value.
            x = rng.float(shape, dtype, -span, span) if span else rng.float(shape, dtype, 999, 1001)
            g = rng.float(sshape, dtype, 0.5, 1.5)
            b = rng.float(bshape, dtype, -0.5, 0.5) if bshape else None
            dy = rng.float(shape, dtype)
            dims = tuple(range(axis, len(shape)))
            x64 = f64(x)
            mean = x64.mean(dim=dims, keepdim=True)
            inv = 1.0 / torch.sqrt(x64.var(dim=dims, unbiased=False, keepdim=True) + eps)
            if b is not None:
                dx, dg, db = vjp(lambda t, u, v: layer_norm_ref(t, u, v, axis, eps), [x, g, b], dy)
            else:
                dx, dg = vjp(lambda t, u: layer_norm_ref(t, u, None, axis, eps), [x, g], dy)
            rows = x.numel() // g.numel()
            attrs = dict(axis=axis, has_bias=b is not None)
            if add:
                attrs["in_place"] = add == "in_place"
            c = w.case("layer_norm_grad", cname, **attrs).inp(
                "dy", dy).inp("x", x).inp("scale", g).inp("mean", mean.float()).inp(
                "inv_std_dev", inv.float())
            if add:
                addend = rng.float(shape, dtype, -4, 4)
                c.inp("addend", addend)
                dx = f64(addend) + dx
            c.out("dx", like(dx, dtype), scale=4.0)
            c.out("dscale", like(dg, sums), scale=max(1.0, rows / 8.0))
            if b is not None:
                c.out("dbias", like(db, sums), scale=max(1.0, rows / 8.0))
            c.save()
    # An addend that is not x's shape is an error naming it.
    rng = Rng("lngrad_addend_wrong")
    x = rng.float([4, 16])
    w.case("layer_norm_grad", "addend_wrong", axis=1, has_bias=True, in_place=False).inp("dy", x).inp(
        "x", x).inp("scale", rng.float([16])).inp("mean", rng.float([4, 1])).inp(
        "inv_std_dev", rng.float([4, 1])).inp("addend", rng.float([4, 8])).fails(
        "addend", dx=("f32", [4, 16]), dscale=("f32", [16]), dbias=("f32", [16])).save()


def gen_batch_norm_grad(w):
    eps = 1e-5
    for shape in ([3, 4, 5, 6], [8, 3], [2, 4, 10], [4, 16, 32, 32]):
        for dtype in (FLOATS if shape == [3, 4, 5, 6] else ["f32"]):
            name = "%s_%s" % ("x".join(map(str, shape)), dtype)
            rng = Rng("bngrad" + name)
            c = shape[1]
            x, dy = rng.float(shape, dtype, -2, 2), rng.float(shape, dtype)
            g, b = rng.float([c], dtype, 0.5, 1.5), rng.float([c], dtype)
            dims = [0] + list(range(2, len(shape)))
            x64 = f64(x)
            mean = x64.mean(dim=dims)
            inv = 1.0 / torch.sqrt(x64.var(dim=dims, unbiased=False) + eps)
            dx, dg, db = vjp(lambda t, u, v: F.batch_norm(t, None, None, u, v, training=True, eps=eps),
                             [x, g, b], dy)
            count = x.numel() // c
            w.case("batch_norm_grad", name).inp("dy", dy).inp("x", x).inp("scale", g).inp(
                "saved_mean", mean.float()).inp("saved_inv_std", inv.float()).out(
                "dx", like(dx, dtype), scale=4.0).out(
                "dscale", like(dg, dtype), scale=max(1.0, count / 8.0)).out(
                "dbias", like(db, dtype), scale=max(1.0, count / 8.0)).save()


def gen_fused_loss_grads(w):
    """softmax_cross_entropy_with_grad: the loss and d(loss * dloss)/dscores
    from one pass over the scores, against PyTorch in f64 (the gradient of
    the scores themselves: no rounded log_prob in between)."""
    extra = [
        ("spatial_sum_weights_ignore", [2, 3, 4, 3], "sum", True, 0, "i64", "f32"),
        ("weights_ignore_mean", [8, 5], "mean", True, 4, "i64", "f32"),
        # Rows over several of the cuda kernel's blocks and all 15 of the
        # totals', classes not a multiple of its 256 threads.
        ("large_rows_ragged", [600, 333], "mean", True, -100, "i64", "f32"),
        # The cuda kernel's row in shared memory: 16-bit rows whose first
        # element is at every offset modulo 16 bytes (1001 classes), rows
        # shorter than a vector (9), and rows too wide for a block's shared
        # memory on an sm_90 (60000 f32: 240 KB), which take the two-read
        # kernel.
        ("rows_ragged_bf16", [300, 1001], "none", True, 3, "i32", "bf16"),
        ("rows_short_f16", [37, 9], "sum", False, None, "i64", "f16"),
        ("too_wide_for_shared", [2, 60000], "mean", True, -100, "i64", "f32"),
        # Rows of whole 16-byte vectors (4104 bf16, as a padded vocabulary's),
        # more rows than the shared-row kernel's 264 blocks on 132 SMs: each
        # block copies its next row into a thread's slots as it writes the
        # gradient from them.
        ("rows_overlap_bf16", [600, 4104], "none", True, -100, "i64", "bf16"),
    ]
    # (cases, loss and seed dtype: None for the scores')
    for cases, loss_dtype in ((loss_cases() + extra, None), (mixed_loss_cases(), "f32")):
        for name, shape, red, weights, ignore, ltype, dtype in cases:
            scores, labels, wts = loss_inputs(name, shape, weights, ignore, ltype, dtype)
            lshape = [shape[0]] + shape[2:]
            ld = loss_dtype or dtype
            dloss = Rng("fusedgrad" + name).float(lshape if red == "none" else [], ld, 0.5, 1.5)
            kw = loss_kwargs(wts, red, ignore)
            lab = labels.to(torch.int64)
            s64 = f64(scores)
            loss = F.cross_entropy(s64, lab, **kw)
            (ds,) = vjp(lambda t: F.cross_entropy(t, lab, **kw), [s64], dloss)
            w.case("softmax_cross_entropy_with_grad", name, reduction=red, ignore_index=ignore).inp(
                "scores", scores).inp("labels", labels).inp("dloss", dloss).inp("weights", wts).out(
                "loss", like(loss, ld), scale=4.0).out("dscores", like(ds, dtype)).save()
    scores = Rng("badfused").float([4, 3])
    labels = torch.tensor([0, 2, 7, 1], dtype=torch.int64)
    w.case("softmax_cross_entropy_with_grad", "label_out_of_range", reduction="mean",
           ignore_index=None).inp("scores", scores).inp("labels", labels).inp(
        "dloss", torch.tensor(1.0)).inp("weights", None).fails(
        "label 7", loss=("f32", []), dscores=("f32", [4, 3])).save()


def gen_loss_grads(w):
    extra = [
        ("spatial_sum_weights_ignore", [2, 3, 4, 3], "sum", True, 0, "i64", "f32"),
        ("spatial_none_weights_ignore", [2, 3, 4, 3], "none", True, 2, "i32", "f32"),
        ("weights_ignore_mean", [8, 5], "mean", True, 4, "i64", "f32"),
        ("large_rows", [600, 70], "mean", True, -100, "i64", "f32"),
    ]
    for name, shape, red, weights, ignore, ltype, dtype in loss_cases() + extra:
        scores, labels, wts = loss_inputs(name, shape, weights, ignore, ltype, dtype)
        rng = Rng("lossgrad" + name)
        lshape = [shape[0]] + shape[2:]
        dloss = rng.float(lshape if red == "none" else [], dtype, 0.5, 1.5)
        kw = loss_kwargs(wts, red, ignore)
        attrs = dict(reduction=red, ignore_index=ignore)
        lab = labels.to(torch.int64)
        # The kernel gets the rounded log-probabilities; softmax is shift
        # invariant, so cross-entropy of them is the loss they came from.
        lp = like(torch.log_softmax(f64(scores), 1), dtype)
        (ds,) = vjp(lambda t: F.cross_entropy(t, lab, **kw), [lp], dloss)
        w.case("softmax_cross_entropy_grad", name, **attrs).inp("dloss", dloss).inp(
            "log_prob", lp).inp("labels", labels).inp("weights", wts).out("dscores", like(ds, dtype)).save()
        (dlp,) = vjp(lambda t: F.nll_loss(t, lab, **kw), [lp], dloss)
        w.case("nll_loss_grad", name, **attrs).inp("dloss", dloss).inp("labels", labels).inp(
            "weights", wts).out("dlog_prob", like(dlp, dtype)).save()
    # Mixed precision: the 16-bit log_prob, an f32 loss gradient and a
    # 16-bit scores gradient.
    for name, shape, red, weights, ignore, ltype, dtype in mixed_loss_cases():
        scores, labels, wts = loss_inputs(name, shape, weights, ignore, ltype, dtype)
        lshape = [shape[0]] + shape[2:]
        dloss = Rng("lossgrad" + name).float(lshape if red == "none" else [], "f32", 0.5, 1.5)
        kw = loss_kwargs(wts, red, ignore)
        lab = labels.to(torch.int64)
        lp = like(torch.log_softmax(f64(scores), 1), dtype)
        (ds,) = vjp(lambda t: F.cross_entropy(t, lab, **kw), [lp], dloss)
        w.case("softmax_cross_entropy_grad", name, reduction=red, ignore_index=ignore).inp(
            "dloss", dloss).inp("log_prob", lp).inp("labels", labels).inp("weights", wts).out(
            "dscores", like(ds, dtype)).save()
    lp = torch.log_softmax(Rng("badgrad").float([4, 3]), 1)
    labels = torch.tensor([0, 2, 7, 1], dtype=torch.int64)
    w.case("softmax_cross_entropy_grad", "label_out_of_range", reduction="mean", ignore_index=None).inp(
        "dloss", torch.tensor(1.0)).inp("log_prob", lp).inp("labels", labels).inp("weights", None).fails(
        "label 7", dscores=("f32", [4, 3])).save()
    labels = torch.tensor([0, -1, 2, 1], dtype=torch.int64)
    w.case("nll_loss_grad", "negative_label", reduction="none", ignore_index=-100).inp(
        "dloss", torch.ones(4)).inp("labels", labels).inp("weights", None).fails(
        "label -1", dlog_prob=("f32", [4, 3])).save()


def gather_grad_data(rng, idx, dshape, axis, dtype):
    """A gather_grad case's dy (drawn from rng) and the expected ddata."""
    ishape = list(idx.shape)
    yshape = dshape[:axis] + ishape + dshape[axis + 1:]
    n = dshape[axis]
    norm = torch.where(idx < 0, idx.to(torch.int64) + n, idx.to(torch.int64)).flatten()
    if dtype in FLOATS:
        dy = rng.float(yshape, dtype)
        (dd,) = vjp(lambda t: gather_ref(t, idx, axis), [torch.zeros(dshape)], dy)
        return dy, like(dd, dtype)
    dy = rng.int(yshape, dtype, -1000, 1000)
    flat = dy.to(torch.int64).reshape(dshape[:axis] + [norm.numel()] + dshape[axis + 1:])
    return dy, torch.zeros(dshape, dtype=torch.int64).index_add_(axis, norm, flat).to(DT[dtype])


def gen_gather_grad(w):
    cases = [
        # name, data shape, indices shape, axis, index dtype, dtype, index range
        ("embedding", [10, 6], [3, 4], 0, "i64", "f32", (0, 4)),
        ("negative", [10, 6], [5, 3], 0, "i64", "f32", (-10, 10)),
        ("axis1_i32", [3, 5, 4], [7], 1, "i32", "f32", (-5, 5)),
        ("axis1_matrix", [3, 5, 4], [2, 6], 1, "i64", "f32", (0, 3)),
        ("last_axis", [4, 6], [9], 1, "i64", "f32", (-6, 6)),
        ("scalar_index", [3, 5, 4], [], 2, "i64", "f32", (-4, 4)),
        ("vector", [7], [2, 3], 0, "i32", "f32", (-7, 7)),
        ("unused_rows", [12, 5], [3], 0, "i64", "f32", (2, 4)),
        ("f16", [6, 3], [8], 0, "i64", "f16", (0, 3)),
        ("bf16_axis1", [6, 3], [8], 1, "i64", "bf16", (-3, 3)),
        ("i64_data", [6, 3], [2, 4], 0, "i64", "i64", (0, 3)),
        ("i32_data_axis1", [4, 5], [7], 1, "i32", "i32", (-5, 5)),
        ("many_repeats", [50, 64], [4, 300], 0, "i64", "f32", (-50, 50)),
    ]
    for name, dshape, ishape, axis, itype, dtype, (lo, hi) in cases:
        rng = Rng("gathergrad" + name)
        idx = rng.int(ishape, itype, lo, hi)
        dy, dd = gather_grad_data(rng, idx, dshape, axis, dtype)
        w.case("gather_grad", name, axis=axis).inp("dy", dy).inp("indices", idx).out(
            "ddata", dd, scale=4.0).save()
    idx = torch.tensor([0, 4, 5, 1], dtype=torch.int64)
    w.case("gather_grad", "out_of_range", axis=0).inp("dy", torch.ones(4, 3)).inp("indices", idx).fails(
        "index 5", ddata=("f32", [5, 3])).save()
    idx = torch.tensor([[1], [-6]], dtype=torch.int32)
    w.case("gather_grad", "negative_out_of_range", axis=0).inp("dy", torch.ones(2, 1, 3)).inp(
        "indices", idx).fails("index -6", ddata=("f32", [5, 3])).save()


def gen_gather_grad_sorted(w):
    """The cuda kernel sorts the positions by row (radix passes of 8 bits
    over tiles of 1024 positions) and sums rows of more than 256 positions
    in segments: many tiles, several radix passes, one row at most of the
    positions (padding tokens), negative indices, outer > 1, inner not a
    multiple of the 16-byte vector, integer data."""
    cases = [
        # name, data shape, indices shape, axis, index dtype, dtype, index range, skewed index
        ("skewed_f32", [300, 40], [4, 700], 0, "i64", "f32", (-300, 300), 7),
        ("skewed_negative_bf16", [70, 24], [1500], 0, "i32", "bf16", (-70, 70), -1),
        ("skewed_outer_f16_odd_inner", [2, 33, 5], [600], 1, "i64", "f16", (-33, 33), 3),
        ("skewed_outer_i32", [3, 20, 6], [500], 1, "i32", "i32", (0, 20), -20),
        ("skewed_i64", [40, 4], [900], 0, "i64", "i64", (-40, 40), 39),
        ("one_row", [1, 9], [300], 0, "i64", "f32", (-1, 1), None),
        ("three_passes", [70000, 2], [3000], 0, "i64", "f32", (-70000, 70000), None),
        ("uniform_many_tiles_bf16", [500, 64], [5000], 0, "i64", "bf16", (-500, 500), None),
        # Two long rows next to each other in the sorted order: a tile holds
        # a later segment of the first and the first segment of the second.
        ("two_long_rows", [30, 8], [1100], 0, "i64", "f32", (0, 30), (4, 5)),
    ]
    for name, dshape, ishape, axis, itype, dtype, (lo, hi), hot in cases:
        rng = Rng("gathergradsorted" + name)
        idx = rng.int(ishape, itype, lo, hi)
        if hot is not None:  # about 3 in 4 positions on one row (or on two)
            pick = rng.int(ishape, "i64", 0, 4) != 0
            hots = torch.tensor(hot if isinstance(hot, tuple) else (hot,), dtype=idx.dtype)
            which = hots[rng.int(ishape, "i64", 0, len(hots))]
            idx = torch.where(pick, which, idx)
        dy, dd = gather_grad_data(rng, idx, dshape, axis, dtype)
        # The hot rows sum about 2000 terms in f32 (the cpu in order: 5e-5 off).
        w.case("gather_grad", name, axis=axis).inp("dy", dy).inp("indices", idx).out(
            "ddata", dd, scale=256.0).save()
    # f32 rows of at most 256 positions are summed in ascending position
    # from 0, as the cpu does: the same bits. Terms of 2^24 and 1 make the
    # order show (1 + 2^24 - 2^24 is 0 in f32, 2^24 - 2^24 + 1 is 1).
    rng = Rng("gathergradsortedorder")
    idx = rng.int([3000], "i64", -40, 40)
    dy = rng.float([3000, 12], "f32")
    big = rng.int([3000, 12], "i64", 0, 3)
    dy = torch.where(big == 0, dy.sign() * 2.0**24, dy.round())
    acc = np.zeros((40, 12), dtype=np.float32)
    for j, v in enumerate(idx.tolist()):
        acc[v % 40] = acc[v % 40] + dy[j].numpy()
    w.case("gather_grad", "f32_ascending_order", axis=0).inp("dy", dy).inp("indices", idx).out(
        "ddata", torch.from_numpy(acc), rtol=0.0, atol=0.0).save()
    idx = torch.zeros(3000, dtype=torch.int64)
    idx[2500] = 40
    w.case("gather_grad", "out_of_range_late", axis=0).inp("dy", torch.ones(3000, 3)).inp(
        "indices", idx).fails("index 40", ddata=("f32", [40, 3])).save()


def gen_slice_grad(w):
    cases = [
        # name, dx shape, offsets, strides, dy shape
        ("step", [6, 7, 8], [1, 0, 2], [2, 1, 3], [3, 7, 2]),
        ("reverse", [6, 7, 8], [5, 6, 7], [-1, -1, -1], [6, 7, 8]),
        ("reverse_step", [6, 7, 8], [5, 6, 7], [-2, -3, -4], [3, 3, 2]),
        ("mixed", [6, 7, 8], [0, 6, 1], [1, -2, 2], [6, 4, 4]),
        ("inner_contiguous", [6, 7, 8], [2, 1, 0], [1, 2, 1], [3, 3, 8]),
        ("rank1", [10], [9], [-3], [4]),
        ("single", [4, 5], [3, 4], [1, 1], [1, 1]),
        ("large", [64, 300, 4], [63, 10, 0], [-1, 2, 1], [64, 140, 4]),
    ]
    for name, shape, offsets, strides, sizes in cases:
        for dtype in (["f32", "f16", "bf16", "i64", "i32", "bool"] if name == "mixed" else ["f32"]):
            cname = "%s_%s" % (name, dtype)
            rng = Rng("slicegrad" + cname)
            dy = rng.tensor(sizes, dtype, -9, 9)
            if dtype in FLOATS:
                (dx,) = vjp(lambda t: slice_ref(t, offsets, strides, sizes), [torch.zeros(shape)], dy)
                dx = like(dx, dtype)
            else:  # no autograd for integers and bool: place dy into zeros
                dx = torch.zeros(shape, dtype=DT[dtype])
                lists = [torch.tensor([o + k * st for k in range(n)]) for o, st, n in zip(offsets, strides, sizes)]
                dx[torch.meshgrid(*lists, indexing="ij")] = dy
            w.case("slice_grad", cname, offsets=offsets, strides=strides).inp("dy", dy).out(
                "dx", dx, rtol=0.0, atol=0.0).save()
    w.case("slice_grad", "out_of_bounds", offsets=[2, 0], strides=[1, 1]).inp(
        "dy", torch.ones(3, 2)).fails("axis 0 writes out of bounds", dx=("f32", [4, 2])).save()


def gen_conv_grad(w):
    cases = [
        # name, x, w, strides, pads, dilations, group
        ("basic", [2, 3, 9, 8], [4, 3, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 1),
        ("stride_asym_pad", [2, 3, 9, 8], [4, 3, 3, 2], [2, 2], [0, 1, 2, 0], [1, 1], 1),
        ("dilated", [1, 3, 10, 9], [2, 3, 3, 3], [1, 1], [2, 1, 2, 1], [2, 1], 1),
        ("group2", [2, 4, 7, 7], [6, 2, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 2),
        ("depthwise", [2, 4, 6, 6], [4, 1, 3, 3], [2, 1], [1, 1, 1, 1], [1, 1], 4),
        ("pointwise", [2, 8, 5, 5], [6, 8, 1, 1], [1, 1], [0, 0, 0, 0], [1, 1], 1),
        ("pointwise_group", [2, 6, 4, 3], [4, 3, 1, 1], [1, 1], [0, 0, 0, 0], [1, 1], 2),
        ("strided_1x1", [1, 4, 7, 7], [3, 4, 1, 1], [2, 2], [0, 0, 0, 0], [1, 1], 1),
        ("conv1d", [2, 3, 20], [5, 3, 4], [3], [2, 1], [2], 1),
        ("conv1d_group_dilated", [2, 6, 17], [9, 2, 3], [2], [3, 0], [3], 3),
        ("conv3d", [1, 2, 5, 6, 4], [3, 2, 2, 3, 2], [1, 2, 1], [1, 0, 1, 0, 1, 1], [1, 1, 1], 1),
        ("conv3d_strided_dilated", [2, 2, 6, 5, 7], [4, 1, 2, 2, 3], [2, 1, 2], [0, 1, 1, 1, 0, 2], [2, 2, 1], 2),
        ("large_pad", [1, 1, 3, 3], [1, 1, 2, 2], [1, 1], [3, 3, 3, 3], [1, 1], 1),
        ("parallel", [2, 16, 20, 20], [8, 16, 3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 1),
    ]
    for name, xs, ws, st, pads, dil, group in cases:
        for dtype in (FLOATS if name in ("basic", "group2", "pointwise_group") else ["f32"]):
            cname = "%s_%s" % (name, dtype)
            rng = Rng("convgrad" + cname)
            x, wt = rng.float(xs, dtype), rng.float(ws, dtype)
            conv = CONV[len(xs) - 2]

            def fwd(t, u):
                return conv(F.pad(t, torch_pad(pads)), u, None, stride=st, dilation=dil, groups=group)

            y = fwd(f64(x), f64(wt))
            dy = rng.float(list(y.shape), dtype)
            dx, dw = vjp(fwd, [x, wt], dy)
            attrs = dict(strides=st, pads=pads, dilations=dil, group=group)
            k = 1
            for d in ws[2:]:
                k *= d
            terms_x = ws[0] // group * k
            terms_w = y.shape[0] * y[0, 0].numel()
            w.case("conv_grad_input", cname, **attrs).inp("dy", dy).inp("w", wt).out(
                "dx", like(dx, dtype), scale=max(1.0, terms_x / 8.0)).save()
            w.case("conv_grad_weight", cname, **attrs).inp("dy", dy).inp("x", x).out(
                "dw", like(dw, dtype), scale=max(1.0, terms_w / 8.0)).save()


def gen_pool_grad(w):
    max_cases = [
        # name, x, kernel, strides, pads, dilations, ceil_mode, integer values (ties)
        ("k3s2p1", [2, 3, 8, 8], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], False, False),
        ("k3s2p1_ceil", [2, 3, 8, 8], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], True, False),
        ("ceil_drop_last", [1, 2, 6, 6], [2, 2], [2, 2], [1, 1, 1, 1], [1, 1], True, False),
        ("dilated", [1, 2, 9, 9], [2, 3], [1, 2], [0, 1, 0, 1], [2, 2], False, False),
        ("pool1d_ceil", [2, 3, 11], [3], [2], [1, 1], [1], True, False),
        ("pool3d_ceil", [1, 2, 5, 5, 5], [2, 2, 2], [2, 2, 2], [0, 0, 0, 0, 0, 0], [1, 1, 1], True, False),
        ("ties_overlap", [2, 3, 8, 8], [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], False, True),
        ("ties_dilated", [1, 2, 9, 9], [2, 3], [1, 2], [0, 1, 0, 1], [2, 2], True, True),
        ("ties_pool3d", [1, 2, 5, 4, 5], [2, 2, 3], [1, 2, 1], [1, 0, 1, 1, 0, 1], [1, 1, 1], False, True),
        ("ties_pool1d", [2, 2, 13], [4], [1], [2, 2], [1], False, True),
        ("parallel", [4, 8, 32, 32], [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], False, False),
    ]
    for name, xs, k, st, pads, dil, ceil, ties in max_cases:
        for dtype in (FLOATS if name in ("k3s2p1", "ties_overlap") else ["f32"]):
            cname = "%s_%s" % (name, dtype)
            rng = Rng("maxpoolgrad" + cname)
            x = rng.int(xs, "i64", -2, 3).to(DT[dtype]) if ties else rng.float(xs, dtype, -3, 3)
            n = len(k)
            fwd = lambda t: MAXPOOL[n](t, k, st, padding=pads[:n], dilation=dil, ceil_mode=ceil)
            dy = rng.float(list(fwd(f64(x)).shape), dtype)
            (dx,) = vjp(fwd, [x], dy)
            w.case("max_pool_grad", cname, kernel_shape=k, strides=st, pads=pads, dilations=dil).inp(
                "dy", dy).inp("x", x).out("dx", like(dx, dtype), scale=4.0).save()
    # Asymmetric pads (PyTorch pads symmetrically): pad with -inf first.
    rng = Rng("maxpoolgrad_asym")
    x = rng.float([1, 2, 7, 6])
    pads = [0, 2, 1, 0]
    fwd = lambda t: F.max_pool2d(F.pad(t, torch_pad(pads), value=-INF), [3, 3], [2, 2])
    dy = rng.float(list(fwd(f64(x)).shape))
    (dx,) = vjp(fwd, [x], dy)
    w.case("max_pool_grad", "asym_pads_f32", kernel_shape=[3, 3], strides=[2, 2], pads=pads,
           dilations=[1, 1]).inp("dy", dy).inp("x", x).out("dx", like(dx, "f32")).save()
    # NaN wins its window, and of two NaNs PyTorch takes the last; a window
    # of -inf routes to its first element.
    x = Rng("maxpoolgrad_nan").float([1, 1, 4, 6])
    x[0, 0, 1, 1] = NAN
    x[0, 0, 0, 2] = NAN
    x[0, 0, 1, 3] = NAN
    x[0, 0, 2:4, 4:6] = -INF
    fwd = lambda t: F.max_pool2d(t, [2, 2], [2, 2])
    dy = Rng("maxpoolgrad_nan_dy").float([1, 1, 2, 3])
    (dx,) = vjp(fwd, [x], dy)
    w.case("max_pool_grad", "nan_inf_f32", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0],
           dilations=[1, 1]).inp("dy", dy).inp("x", x).out("dx", like(dx, "f32")).save()

    avg_cases = [
        ("k3s2p1", [2, 3, 8, 8], [3, 3], [2, 2], [1, 1, 1, 1], False),
        ("k3s2p1_ceil", [2, 3, 8, 8], [3, 3], [2, 2], [1, 1, 1, 1], True),
        ("k2s2_ceil", [1, 2, 7, 5], [2, 2], [2, 2], [0, 0, 0, 0], True),
        ("overlap", [1, 2, 6, 7], [3, 2], [1, 1], [1, 1, 1, 1], False),
        ("pool1d_ceil", [2, 3, 10], [4], [3], [1, 1], True),
        ("pool3d", [1, 2, 5, 4, 6], [2, 2, 3], [1, 2, 2], [1, 0, 1, 1, 0, 1], False),
        ("parallel", [4, 8, 32, 32], [3, 3], [2, 2], [1, 1, 1, 1], False),
    ]
    for name, xs, k, st, pads, ceil in avg_cases:
        for include in (True, False):
            for dtype in (FLOATS if name == "k3s2p1" and include else ["f32"]):
                cname = "%s_%s_%s" % (name, "incl" if include else "excl", dtype)
                rng = Rng("avgpoolgrad" + cname)
                n = len(k)
                fwd = lambda t: AVGPOOL[n](t, k, st, padding=pads[:n], ceil_mode=ceil, count_include_pad=include)
                dy = rng.float(list(fwd(torch.zeros(xs, dtype=torch.float64)).shape), dtype, -3, 3)
                (dx,) = vjp(fwd, [torch.zeros(xs)], dy)
                w.case("avg_pool_grad", cname, kernel_shape=k, strides=st, pads=pads,
                       count_include_pad=include).inp("dy", dy).out("dx", like(dx, dtype), scale=4.0).save()
    # Asymmetric pads: the divisor is the kernel volume (include) or the
    # number of real elements (exclude), on the zero-padded input.
    pads, k, st = [0, 2, 1, 0], [3, 3], [2, 2]
    ones = F.pad(torch.ones(1, 2, 7, 6, dtype=torch.float64), torch_pad(pads))
    count = F.avg_pool2d(ones, k, st) * 9
    for include in (True, False):
        fwd = lambda t: F.avg_pool2d(F.pad(t, torch_pad(pads)), k, st) * 9 / (9 if include else count)
        dy = Rng("avgpoolgrad_asym%d" % include).float(list(count.shape))
        (dx,) = vjp(fwd, [torch.zeros(1, 2, 7, 6)], dy)
        w.case("avg_pool_grad", "asym_pads_%s_f32" % ("incl" if include else "excl"), kernel_shape=k,
               strides=st, pads=pads, count_include_pad=include).inp("dy", dy).out(
               "dx", like(dx, "f32")).save()


# --------------------------------------------------------------------------
# torch.optim steps, state carried from step to step
# --------------------------------------------------------------------------

def f32r(v):
    """A hyperparameter as the kernel sees it: rounded to f32."""
    return float(np.float32(v))


def torch_optim_step(make, param, grad, state):
    """One step of the optimizer `make([p])` in float64 from `param`, `grad`
    and `state` (None: the optimizer's own fresh state). Returns the new
    parameter and state."""
    p = torch.nn.Parameter(f64(param).clone())
    opt = make([p])
    if state is not None:
        opt.state[p] = {k: (f64(v).clone() if torch.is_tensor(v) and v.dim() > 0 else v)
                        for k, v in state.items()}
    p.grad = f64(grad).clone()
    opt.step()
    return p.detach(), opt.state[p]


def scaled_grad(g, scale):
    """The gradient an update with grad_scale `scale` ([] or [s]) reads:
    g * s in f32, one rounding, as torch's in-place scaling of an f32
    gradient."""
    return (g.float() * torch.tensor(f32r(scale[0]))).float() if scale else g


def with_grad_scale(case, scale):
    return case.inp("grad_scale", torch.tensor(f32r(scale[0]))) if scale else case


def gen_torch_optim(w):
    # Adam and AdamW: inputs of step t are the outputs of step t - 1, rounded
    # to the element type as the kernel would store them.
    configs = [
        # name, class, decoupled, lr, weight decay, dtypes, shape
        ("adamw", torch.optim.AdamW, True, 1e-3, 0.01, FLOATS, [4, 5]),
        ("adam_l2", torch.optim.Adam, False, 1e-3, 0.01, ["f32", "bf16"], [4, 5]),
        ("adam", torch.optim.Adam, False, 1e-3, 0.0, ["f32"], [3, 7]),
        # Decay and update large enough that their order shows.
        ("adamw_strong_decay", torch.optim.AdamW, True, 0.1, 0.5, ["f32"], [3, 7]),
        ("adamw_large", torch.optim.AdamW, True, 1e-3, 0.1, ["f32"], [256, 300]),
        # Mixed precision: f32 parameter and states, a bf16/f16 gradient
        # (PARAM/GRAD), converted an element at a time.
        ("adamw_mixed_grad", torch.optim.AdamW, True, 1e-3, 0.01, ["f32/bf16", "f32/f16"],
         [4, 5]),
        ("adam_l2_mixed_grad", torch.optim.Adam, False, 1e-3, 0.01, ["f32/bf16"], [4, 5]),
        # A grad_scale (clipping's coefficient times fp16's 1/loss-scale):
        # torch scales the gradient in place (clip_grad_norm_, then the
        # optimizer reads it), so the reference reads g * s rounded to f32.
        ("adamw_scaled", torch.optim.AdamW, True, 1e-3, 0.01, ["f32", "f32/bf16", "f32/f16"],
         [4, 5], 0.37),
        ("adam_l2_scaled", torch.optim.Adam, False, 1e-3, 0.01, ["f32/bf16"], [4, 5], 1 / 1024),
    ]
    b1, b2, eps = f32r(0.9), f32r(0.999), f32r(1e-8)
    for name, cls, decoupled, lr, wd, dtypes, shape, *scale in configs:
        lr, wd = f32r(lr), f32r(wd)
        make = lambda ps: cls(ps, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
        for dtypes_of in dtypes:
            dtype, gtype = (dtypes_of.split("/") + [dtypes_of])[:2]
            rng = Rng("optim" + name + dtypes_of)
            p = rng.float(shape, dtype)
            m, v = torch.zeros(shape, dtype=DT[dtype]), torch.zeros(shape, dtype=DT[dtype])
            state = None
            for t in (1, 2, 3):
                g = rng.float(shape, gtype)
                p1, st = torch_optim_step(make, p, scaled_grad(g, scale), state)
                p1, m1, v1 = like(p1, dtype), like(st["exp_avg"], dtype), like(st["exp_avg_sq"], dtype)
                c = w.case("adamw", "%s_step%d_%s" % (name, t, dtypes_of.replace("/", "_")), beta1=b1, beta2=b2, epsilon=eps,
                           weight_decay=wd, decoupled=decoupled).inp("lr", torch.tensor(lr)).inp(
                           "step", torch.tensor(t)).inp("param", p).inp("grad", g).inp("m", m).inp(
                           "v", v).out("param_out", p1).out("m_out", m1).out("v_out", v1)
                with_grad_scale(c, scale).save()
                p, m, v = p1, m1, v1
                state = {"step": torch.tensor(float(t)), "exp_avg": m, "exp_avg_sq": v}
    # adamw_multi: a list of tensors updated in one call, each exactly as
    # torch.optim.AdamW updates it; 50 tensors pass one launch's 48 on the
    # cuda backend.
    lr, wd = f32r(1e-3), f32r(0.01)
    make = lambda ps: torch.optim.AdamW(ps, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for name, shapes, dtypes, *scale in (
            ("mixed", [[4, 5], [2, 700], [1], [300]], ["f32", "bf16"]),
            ("fifty", [[k] for k in range(1, 51)], ["f32"]),
            ("scaled", [[4, 5], [2, 700], [1], [300]], ["f32"], 0.61)):
        for dtype in dtypes:
            rng = Rng("adamw_multi" + name + dtype)
            ps = [rng.float(shape, dtype) for shape in shapes]
            ms = [torch.zeros(shape, dtype=DT[dtype]) for shape in shapes]
            vs = [torch.zeros(shape, dtype=DT[dtype]) for shape in shapes]
            states = [None] * len(shapes)
            for t in (1, 2):
                gs = [rng.float(shape, dtype) for shape in shapes]
                outs = [torch_optim_step(make, p, scaled_grad(g, scale), st)
                        for p, g, st in zip(ps, gs, states)]
                p1 = [like(p, dtype) for p, _ in outs]
                m1 = [like(st["exp_avg"], dtype) for _, st in outs]
                v1 = [like(st["exp_avg_sq"], dtype) for _, st in outs]
                c = w.case("adamw_multi", "%s_step%d_%s" % (name, t, dtype), beta1=b1, beta2=b2,
                           epsilon=eps, weight_decay=wd, decoupled=True).inp("lr", torch.tensor(lr)).inp(
                           "step", torch.tensor(t)).inp("params", ps).inp("grads", gs).inp("ms", ms).inp(
                           "vs", vs).out("params_out", p1).out("ms_out", m1).out("vs_out", v1)
                with_grad_scale(c, scale).save()
                ps, ms, vs = p1, m1, v1
                states = [{"step": torch.tensor(float(t)), "exp_avg": m, "exp_avg_sq": v}
                          for m, v in zip(m1, v1)]
    # The cuda backend's blocks of 4096 elements of a chunk, in 16-byte
    # vectors with the elements around them one by one: tensors that cross
    # chunks and blocks at odd offsets; mixed precision (f32 parameters,
    # bf16 gradients and the parameters' bf16 copy); parameters shifted off
    # 16 bytes (element by element).
    for name, shapes, dtype, gtype, copy, shift, *scale in (
            ("blocks_mixed", [[70001], [5, 3], [4099], [1], [8200]], "f32", "bf16", True, {}),
            ("blocks_mixed_scaled", [[9000], [33]], "f32", "bf16", True, {}, 0.61),
            ("blocks_bf16", [[9001], [3], [4100]], "bf16", "bf16", False, {}),
            ("blocks_f32_scaled", [[5000], [17]], "f32", "f32", False, {}, 0.61),
            ("blocks_f32_shifted", [[5000], [17]], "f32", "f32", False, {"params": 1})):
        rng = Rng("adamw_multi" + name)
        ps = [rng.float(shape, dtype) for shape in shapes]
        ms = [rng.float(shape, dtype, -0.1, 0.1) for shape in shapes]
        vs = [rng.float(shape, dtype, 0.0, 0.01) for shape in shapes]
        gs = [rng.float(shape, gtype) for shape in shapes]
        states = [{"step": torch.tensor(2.0), "exp_avg": m, "exp_avg_sq": v} for m, v in zip(ms, vs)]
        outs = [torch_optim_step(make, p, scaled_grad(g, scale), st)
                for p, g, st in zip(ps, gs, states)]
        p1 = [like(p, dtype) for p, _ in outs]
        c = w.case("adamw_multi", name, beta1=b1, beta2=b2, epsilon=eps, weight_decay=wd,
                   decoupled=True).inp("lr", torch.tensor(lr)).inp("step", torch.tensor(3)).inp(
                   "params", ps).inp("grads", gs).inp("ms", ms).inp("vs", vs).out(
                   "params_out", p1).out("ms_out", [like(st["exp_avg"], dtype) for _, st in outs]).out(
                   "vs_out", [like(st["exp_avg_sq"], dtype) for _, st in outs])
        if copy:
            c.out("params_copy", [p.to(torch.bfloat16) for p in p1])
        c.shift = shift
        with_grad_scale(c, scale).save()

    lr = f32r(1e-3)
    w.case("adamw", "step_zero", beta1=b1, beta2=b2, epsilon=eps, weight_decay=0.0, decoupled=True).inp(
        "lr", torch.tensor(lr)).inp("step", torch.tensor(0)).inp("param", torch.ones(3)).inp(
        "grad", torch.ones(3)).inp("m", torch.zeros(3)).inp("v", torch.zeros(3)).fails(
        "step 0", param_out=("f32", [3]), m_out=("f32", [3]), v_out=("f32", [3])).save()

    # SGD. At step 1 torch.optim.SGD starts its buffer from the gradient, so
    # the velocity input there is random (it must be ignored); without
    # momentum the velocity passes through.
    configs = [
        # name, momentum, dampening, weight decay, nesterov, dtypes
        ("momentum", 0.9, 0.1, 0.01, False, FLOATS),
        ("nesterov", 0.9, 0.0, 0.01, True, ["f32", "f16"]),
        ("plain", 0.0, 0.0, 0.01, False, ["f32"]),
        ("momentum_scaled", 0.9, 0.1, 0.01, False, ["f32", "bf16"], 0.29),
    ]
    lr = f32r(0.05)
    for name, mom, damp, wd, nesterov, dtypes, *scale in configs:
        mom, damp, wd = f32r(mom), f32r(damp), f32r(wd)
        make = lambda ps: torch.optim.SGD(ps, lr=lr, momentum=mom, dampening=damp, weight_decay=wd,
                                          nesterov=nesterov)
        for dtype in dtypes:
            rng = Rng("sgd" + name + dtype)
            p, vel = rng.float([3, 7], dtype), rng.float([3, 7], dtype, -0.1, 0.1)
            state = None
            for t in (1, 2, 3):
                g = rng.float([3, 7], dtype)
                p1, st = torch_optim_step(make, p, scaled_grad(g, scale), state)
                p1 = like(p1, dtype)
                vel1 = like(st["momentum_buffer"], dtype) if mom != 0 else vel
                c = w.case("sgd", "%s_step%d_%s" % (name, t, dtype), momentum=mom, dampening=damp,
                           weight_decay=wd, nesterov=nesterov).inp("lr", torch.tensor(lr)).inp(
                           "step", torch.tensor(t)).inp("param", p).inp("grad", g).inp("velocity", vel).out(
                           "param_out", p1).out("velocity_out", vel1)
                with_grad_scale(c, scale).save()
                p, vel = p1, vel1
                state = {"momentum_buffer": vel} if mom != 0 else None

    # Lion: PyTorch 1.13 has none, so the reference is the update rule of
    # Chen et al., "Symbolic Discovery of Optimization Algorithms" (2023,
    # arXiv:2302.06675), Algorithm 2, in float64 NumPy:
    #   c = b1 m + (1 - b1) g;  p = p - lr (sign(c) + wd p);  m = b2 m + (1 - b2) g.
    def lion_ref(p, g, m, lr, b1, b2, wd):
        c = b1 * m + (1 - b1) * g
        return p - lr * (np.sign(c) + wd * p), b2 * m + (1 - b2) * g

    lr, b1, b2, wd = f32r(3e-4), f32r(0.9), f32r(0.99), f32r(0.1)
    for dtype, *scale in [(d,) for d in FLOATS] + [("f32", 0.43)]:
        rng = Rng("lion" + dtype)
        p, m = rng.float([5, 6], dtype), torch.zeros(5, 6, dtype=DT[dtype])
        for t in (1, 2, 3):
            g = rng.float([5, 6], dtype)
            if t == 1:
                g[0, :3] = 0.0  # c = 0 with m = 0: sign 0, only the decay applies
            gs = scaled_grad(g, scale)
            pn, mn = lion_ref(f64(p).numpy(), f64(gs).numpy(), f64(m).numpy(), lr, b1, b2, wd)
            p1, m1 = like(torch.from_numpy(pn), dtype), like(torch.from_numpy(mn), dtype)
            c = w.case("lion", "step%d_%s%s" % (t, dtype, "_scaled" if scale else ""), beta1=b1,
                       beta2=b2, weight_decay=wd).inp("lr", torch.tensor(lr)).inp(
                       "param", p).inp("grad", g).inp("m", m).out("param_out", p1).out("m_out", m1)
            with_grad_scale(c, scale).save()
            p, m = p1, m1


def gen_sum_of_squares(w):
    cases = [
        ("mixed", [("f32", [3, 4]), ("f16", [7]), ("bf16", [5, 5]), ("f32", [2, 0]), ("f32", [])]),
        ("large", [("f32", [300, 700]), ("bf16", [70001]), ("f32", [65536])]),
        ("single_f16", [("f16", [40, 3])]),
        ("empty_list", []),
    ]
    # More tensors than one launch takes (32) and than blocks, most smaller
    # than a chunk (65536 elements), of odd sizes, so that chunks start at
    # odd offsets inside tensors; and tensors of several chunks.
    sizes = Rng("sumsqmany").int([150], "i64", 0, 3000).tolist()
    sizes[10], sizes[77], sizes[140] = 70001, 65537, 200003
    cases.append(("many_tensors", [(("f32", "bf16", "f16")[i % 3], [n]) for i, n in enumerate(sizes)]))
    cases.append(("tiny_tensors", [("bf16", [1 + i % 5]) for i in range(70)]))
    for name, specs in cases:
        rng = Rng("sumsq" + name)
        ts = [rng.float(shape, dtype, -3, 3) for dtype, shape in specs]
        total = sum(float(np.sum(f64(t).numpy() ** 2)) for t in ts)
        w.case("sum_of_squares", name).inp("tensors", ts).out(
            "out", torch.tensor(total, dtype=torch.float32), rtol=2.0**-23, atol=0.0).save()
    ts = [torch.tensor([1.0, INF, 2.0]), torch.tensor([3.0])]
    w.case("sum_of_squares", "inf").inp("tensors", ts).out("out", torch.tensor(INF), rtol=0.0, atol=0.0).save()
    ts = [torch.tensor([1.0, 2.0]), torch.tensor([NAN], dtype=torch.float16)]
    w.case("sum_of_squares", "nan").inp("tensors", ts).out("out", torch.tensor(NAN), rtol=0.0, atol=0.0).save()


def gen_first_nonfinite(w):
    """The backend's non-finite check of a list of gradients: the index of
    the first tensor holding a NaN or an infinity (torch.isfinite), -1 when
    all are finite. Tensors of several chunks (65536 elements) and more
    tensors than one cuda launch takes (256)."""
    def shapes():
        return [("f32", [5, 7]), ("bf16", [300]), ("f16", [70000]), ("f32", [0]),
                ("f32", [2, 65536 + 3])]
    # name, {tensor: (row or None, column, value)}
    cases = [("all_finite", {}),
             ("inf_last", {4: (1, 65538, INF)}),
             ("nan_last", {4: (0, 0, NAN)}),
             ("nan_second_chunk_and_inf_last", {2: (None, 65600, NAN), 4: (1, 5, -INF)}),
             ("inf_bf16_nan_last", {1: (None, 299, INF), 4: (1, 65538, NAN)})]
    for name, bad in cases:
        rng = Rng("nonfinite" + name)
        ts = [rng.float(shape, dtype, -3, 3) for dtype, shape in shapes()]
        for k, (row, col, value) in bad.items():
            if row is None:
                ts[k][col] = value
            else:
                ts[k][row, col] = value
        first = next((k for k, t in enumerate(ts) if not bool(torch.isfinite(f64(t)).all())), -1)
        w.case("first_nonfinite", name).inp("tensors", ts).out("first", torch.tensor(first)).save()
    # 260 tensors: two launches on cuda; the only infinity in the second.
    rng = Rng("nonfinite_many")
    ts = [rng.float([3], "f32") for _ in range(260)]
    ts[258][1] = -INF
    w.case("first_nonfinite", "many_tensors_inf_in_second_launch").inp("tensors", ts).out(
        "first", torch.tensor(258)).save()
    ts[258][1] = 0.5
    w.case("first_nonfinite", "many_tensors_finite").inp("tensors", ts).out(
        "first", torch.tensor(-1)).save()


def mod_ref(op, a, b, dtype):
    """Remainder with the sign of b (mod) or of a (fmod), from the exact
    truncated remainder."""
    if dtype in FLOATS:
        x, y = f64(a), f64(b)
    else:
        x, y = a.to(torch.int64), b.to(torch.int64)
    r = torch.fmod(x, y)
    if op == "mod":
        r = torch.where((r != 0) & ((r < 0) != (y < 0)), r + y, r)
    return like(r, dtype) if dtype in FLOATS else r.to(DT[dtype])


def gen_mod(w):
    for op in ("mod", "fmod"):
        for dtype in ("f32", "f16", "bf16", "i64", "i32"):
            for pname, sa, sb in BINARY_PATTERNS[:2] + BINARY_PATTERNS[4:5]:
                name = "%s_%s_%s" % (op, dtype, pname)
                rng = Rng(name)
                if dtype in FLOATS:
                    a = rng.float(sa, dtype, -10.0, 10.0)
                    b = rng.float(sb, dtype, 0.25, 3.0) * (rng.int(sb, "i64", 0, 2) * 2 - 1).to(DT[dtype])
                else:
                    a = rng.int(sa, dtype, -1000, 1000)
                    b = rng.int(sb, dtype, 1, 12) * (rng.int(sb, dtype, 0, 2) * 2 - 1)
                w.case("binary", name, op=op).inp("a", a).inp("b", b).out("y", mod_ref(op, a, b, dtype)).save()
    # Signs, exact multiples, and the most negative integer by -1.
    a = torch.tensor([7, -7, 7, -7, 6, -6, -2**63, 2**63 - 1], dtype=torch.int64)
    b = torch.tensor([3, 3, -3, -3, 3, -3, -1, -2], dtype=torch.int64)
    def trunc_rem(p, q):
        r = abs(p) % abs(q)
        return r if p >= 0 else -r

    for op in ("mod", "fmod"):
        fn = (lambda p, q: p % q) if op == "mod" else trunc_rem
        expect = torch.tensor([fn(p, q) for p, q in zip(a.tolist(), b.tolist())], dtype=torch.int64)
        w.case("binary", op + "_i64_signs", op=op).inp("a", a).inp("b", b).out("y", expect).save()
    a = torch.tensor([5.5, -5.5, 5.5, -5.5, 3.0, -0.0, INF, 1.0], dtype=torch.float32)
    b = torch.tensor([2.0, 2.0, -2.0, -2.0, 1.5, 2.0, 2.0, INF], dtype=torch.float32)
    for op in ("mod", "fmod"):
        w.case("binary", op + "_special_f32", op=op).inp("a", a).inp("b", b).out(
            "y", mod_ref(op, a, b, "f32")).save()
    a = torch.tensor([1, 2, 3], dtype=torch.int64)
    b = torch.tensor([1, 0, 3], dtype=torch.int64)
    w.case("binary", "mod_i64_by_zero", op="mod").inp("a", a).inp("b", b).fails(
        "division by zero", y=("i64", [3])).save()


def prod_ref(x, axes, keepdims, dtype):
    r = f64(x) if dtype in FLOATS else x.to(torch.int64)
    for a in sorted(axes, reverse=True):
        r = torch.prod(r, a, keepdim=True)
    if not keepdims:
        for a in sorted(axes, reverse=True):
            r = r.squeeze(a)
    return like(r, dtype) if dtype in FLOATS else r.to(DT[dtype])


def gen_reduce_prod(w):
    shape = [3, 4, 5, 6]
    for axes in ([3], [0], [1, 2], [0, 3], [0, 1, 2, 3]):
        for keepdims in (True, False):
            dtypes = ["f32"] + (["f16", "bf16", "i64", "i32"] if axes == [3] and keepdims else [])
            for dtype in dtypes:
                name = "prod_%s_%s_%s" % ("-".join(map(str, axes)), "keep" if keepdims else "drop", dtype)
                rng = Rng(name)
                if dtype in FLOATS:  # magnitudes near 1 so that products stay finite
                    x = rng.float(shape, dtype, 0.8, 1.25) * (rng.int(shape, "i64", 0, 2) * 2 - 1).to(DT[dtype])
                else:  # integer products wrap, as PyTorch's
                    x = rng.int(shape, dtype, -100, 100)
                w.case("reduce", name, op="prod", axes=axes).inp("x", x).out(
                    "y", prod_ref(x, axes, keepdims, dtype), scale=4.0).save()


GENERATORS = [gen_unary, gen_binary, gen_compare, gen_where, gen_cast, gen_copy, gen_matmul, gen_matmul_staged, gen_gemm,
              gen_matmul_bias, gen_matmul_bias_grad, gen_matmul_gelu, gen_matmul_lhs_bias_grad,
              gen_softmax, gen_layer_norm, gen_batch_norm, gen_reduce, gen_transpose, gen_broadcast_to,
              gen_concat_split, gen_slice, gen_gather, gen_trilu, gen_dropout, gen_losses, gen_conv,
              gen_pool, gen_optimizers, gen_softmax_grad, gen_attention, gen_layer_norm_grad, gen_batch_norm_grad,
              gen_loss_grads, gen_fused_loss_grads, gen_gather_grad, gen_gather_grad_sorted, gen_slice_grad, gen_conv_grad, gen_pool_grad,
              gen_torch_optim, gen_sum_of_squares, gen_first_nonfinite, gen_mod, gen_reduce_prod, gen_scatter, gen_top_k]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory to (re)create")
    args = parser.parse_args()
    if os.path.exists(args.out):
        shutil.rmtree(args.out)
    os.makedirs(args.out)
    w = Writer(args.out)
    for gen in GENERATORS:
        gen(w)
    with open(os.path.join(args.out, "count.txt"), "w") as f:
        f.write("%d\n" % w.count)
    print("make_cases.py: wrote %d cases to %s" % (w.count, args.out))


if __name__ == "__main__":
    main()
