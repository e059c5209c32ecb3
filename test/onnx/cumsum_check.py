#!/usr/bin/python3
"""CumSum's values against numpy.cumsum: ONNX's own CumSum tests are in
float64, which dsopt does not compute on, so the conformance suite cannot
check them. One model holds every combination of exclusive, reverse, axis
and element type (f32, i64); prints one line per output and exits 1 on a
mismatch."""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def reference(v, axis, exclusive, reverse):
    w = np.flip(v, axis) if reverse else v
    c = np.cumsum(w, axis, dtype=np.float64 if v.dtype == np.float32 else np.int64)
    if exclusive:
        c = c - w
    return np.flip(c, axis) if reverse else c


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsopt", default="dsopt")
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    values = {"x": rng.standard_normal((3, 5)).astype(np.float32),
              "m": rng.integers(-5, 5, (2, 6)).astype(np.int64)}
    kinds = {"x": TensorProto.FLOAT, "m": TensorProto.INT64}
    inputs = [helper.make_tensor_value_info(n, kinds[n], v.shape) for n, v in values.items()]
    inits = [numpy_helper.from_array(np.array(a, np.int64), f"axis{a}") for a in (-1, 0, 1)]
    nodes, outputs, cases = [], [], []
    for exclusive in (0, 1):
        for reverse in (0, 1):
            for name, axis in (("x", 1), ("x", 0), ("m", -1)):
                out = f"{name}_axis{axis}_ex{exclusive}_rev{reverse}"
                nodes.append(helper.make_node("CumSum", [name, f"axis{axis}"], [out],
                                              exclusive=exclusive, reverse=reverse))
                outputs.append(helper.make_tensor_value_info(out, kinds[name], values[name].shape))
                cases.append((out, name, axis, exclusive, reverse))
    model = helper.make_model(helper.make_graph(nodes, "cumsum", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path = os.path.join(args.work, "cumsum.onnx")
    onnx.save(model, path)
    build, in_dir, out_dir = (os.path.join(args.work, d) for d in ("build", "in", "out"))
    for d in (in_dir, out_dir):
        os.makedirs(d, exist_ok=True)
    subprocess.run([args.dsopt, path, "-o", build], check=True)
    for name, value in values.items():
        np.save(os.path.join(in_dir, f"{name}.npy"), value)
    subprocess.run([os.path.join(build, "run"), "--inputs", in_dir, "--outputs", out_dir, "--quiet"],
                   check=True)
    failures = 0
    for out, name, axis, exclusive, reverse in cases:
        got = np.load(os.path.join(out_dir, f"{out}.npy"))
        want = reference(values[name], axis, exclusive, reverse)
        if values[name].dtype == np.int64:
            ok = got.dtype == np.int64 and np.array_equal(got, want)
        else:
            ok = np.allclose(got, want, rtol=1e-6, atol=1e-6)
        failures += not ok
        print(f"{out}: {'ok' if ok else 'MISMATCH'} (max |diff| {np.abs(got - want).max():.3g})")
    print(f"cumsum: {len(cases)} outputs, {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
