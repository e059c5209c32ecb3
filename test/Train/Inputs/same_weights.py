#!/usr/bin/python3
"""same_weights.py A.onnx B.onnx ATOL: prints the largest difference of the
initializers of two models and exits 1 unless both have the same
initializers (names, shapes, element types) within ATOL."""
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def initializers(path):
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def main():
    a, b, atol = initializers(sys.argv[1]), initializers(sys.argv[2]), float(sys.argv[3])
    if set(a) != set(b):
        print(f"initializers differ: {sorted(set(a) ^ set(b))}")
        return 1
    worst, where = 0.0, None
    for name in a:
        if a[name].shape != b[name].shape or a[name].dtype != b[name].dtype:
            print(f"{name}: {a[name].dtype}{list(a[name].shape)} vs {b[name].dtype}{list(b[name].shape)}")
            return 1
        if a[name].size:
            diff = float(np.max(np.abs(a[name].astype(np.float64) - b[name].astype(np.float64))))
            if not diff <= worst:
                worst, where = diff, name
    print(f"largest difference {worst:.3g} ({where})")
    if not worst <= atol:
        print(f"above {atol}")
        return 1
    print("same weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
