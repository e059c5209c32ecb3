#!/usr/bin/python3
"""Inputs for the conv and half test models, and PyTorch checks of a run's
outputs.

  check_conv.py inputs DIR                  writes x.npy (conv.onnx)
  check_conv.py check MODEL INDIR OUTDIR    compares y.npy with torch's conv2d
  check_conv.py half-inputs DIR             writes x, w, a, b (f16, half.onnx)
  check_conv.py half-check INDIR OUTDIR     compares y.npy and z.npy with
                                            torch in f64, within f16 rounding
  check_conv.py repeated-inputs DIR         writes x, w1..w4 (repeated-conv.onnx)
"""
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper


def main():
    if sys.argv[1] == "inputs":
        rng = np.random.default_rng(11)
        np.save(f"{sys.argv[2]}/x.npy", rng.standard_normal((1, 4, 5, 5)).astype(np.float32))
        return 0
    if sys.argv[1] == "half-inputs":
        rng = np.random.default_rng(12)
        for name, shape in (("x", (1, 4, 5, 5)), ("w", (6, 2, 3, 3)), ("a", (4, 8)), ("b", (8, 16))):
            np.save(f"{sys.argv[2]}/{name}.npy", rng.standard_normal(shape).astype(np.float16))
        return 0
    if sys.argv[1] == "repeated-inputs":
        rng = np.random.default_rng(13)
        np.save(f"{sys.argv[2]}/x.npy", rng.standard_normal((1, 4, 6, 6)).astype(np.float32))
        for k in range(1, 5):
            np.save(f"{sys.argv[2]}/w{k}.npy", (0.3 * rng.standard_normal((4, 4, 3, 3))).astype(np.float32))
        return 0
    if sys.argv[1] == "half-check":
        indir, outdir = sys.argv[2:4]
        t = {n: torch.from_numpy(np.load(f"{indir}/{n}.npy").astype(np.float64)) for n in "xwab"}
        expected = {"y": torch.nn.functional.conv2d(t["x"], t["w"], groups=2).numpy(),
                    "z": (t["a"] @ t["b"]).numpy()}
        for name, want in expected.items():
            got = np.load(f"{outdir}/{name}.npy")
            assert got.dtype == np.float16, f"{name} is {got.dtype}, expected float16"
            # f32 accumulation, one rounding to f16.
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)
        print("f16 outputs match PyTorch")
        return 0
    model, indir, outdir = sys.argv[2:5]
    w = {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}["w"]
    x = np.load(f"{indir}/x.npy")
    y = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                                   groups=2).numpy()
    got = np.load(f"{outdir}/y.npy")
    assert got.shape == y.shape, f"y has shape {got.shape}, expected {y.shape}"
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-5)
    print("outputs match PyTorch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
