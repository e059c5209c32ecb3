#!/usr/bin/python3
"""Inputs for the mlp test model, and a NumPy check of a run's outputs.

  check_run.py inputs DIR                  writes x.npy and labels.npy
  check_run.py check MODEL INDIR OUTDIR    compares y.npy and loss.npy with
                                           NumPy on the model's own weights
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def main():
    if sys.argv[1] == "inputs":
        rng = np.random.default_rng(7)
        np.save(f"{sys.argv[2]}/x.npy", rng.standard_normal((4, 8)).astype(np.float32))
        np.save(f"{sys.argv[2]}/labels.npy", np.array([1, 5, 0, 15], dtype=np.int64))
        return 0
    model, indir, outdir = sys.argv[2:5]
    weights = {t.name: numpy_helper.to_array(t).astype(np.float64)
               for t in onnx.load(model).graph.initializer}
    x = np.load(f"{indir}/x.npy").astype(np.float64)
    labels = np.load(f"{indir}/labels.npy")
    y = np.maximum(x @ weights["w"] + weights["b"], 0)
    logp = y - y.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    loss = -logp[np.arange(len(labels)), labels].mean()
    got_y = np.load(f"{outdir}/y.npy")
    got_loss = np.load(f"{outdir}/loss.npy")
    assert got_loss.shape == (), f"loss has shape {got_loss.shape}, expected ()"
    assert got_y.shape == (4, 16), f"y has shape {got_y.shape}"
    np.testing.assert_allclose(got_y, y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_loss, loss, rtol=1e-5)
    print(f"outputs match NumPy: loss {float(got_loss):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
