#!/usr/bin/python3
"""bicubic.py export DIR | check DIR: PyTorch's bicubic upsampling
(F.interpolate, half_pixel and align_corners), exported to DIR/model.onnx
with its input DIR/in/x.npy and PyTorch's outputs; `check` compares the
outputs a dsopt program wrote to DIR/out with them (max abs error 1e-5)."""
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F


class Bicubic(torch.nn.Module):
    def forward(self, x):
        return (F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False),
                F.interpolate(x, size=(5, 7), mode="bicubic", align_corners=True))


def main():
    what, out = sys.argv[1], Path(sys.argv[2])
    if what == "export":
        x = torch.randn(1, 2, 3, 4, generator=torch.Generator().manual_seed(0))
        (out / "in").mkdir(parents=True, exist_ok=True)
        torch.onnx.export(Bicubic(), (x,), str(out / "model.onnx"), input_names=["x"],
                          output_names=["a", "b"], opset_version=17)
        np.save(out / "in" / "x.npy", x.numpy())
        for name, value in zip("ab", Bicubic()(x)):
            np.save(out / f"{name}.ref.npy", value.numpy())
        return 0
    status = 0
    for name in "ab":
        got, want = np.load(out / "out" / f"{name}.npy"), np.load(out / f"{name}.ref.npy")
        err = float(np.abs(got - want).max()) if got.shape == want.shape else float("inf")
        ok = err <= 1e-5
        status |= not ok
        print(f"{name} {list(got.shape)}: {'matches' if ok else 'DIFFERS FROM'} PyTorch (max abs err {err:.1e})")
    return status


if __name__ == "__main__":
    sys.exit(main())
