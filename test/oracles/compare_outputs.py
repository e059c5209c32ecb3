#!/usr/bin/env python3
"""Compares the training outputs of two runs of a zoo harness bit for bit.

    compare_outputs.py WORK_A WORK_B

WORK_A and WORK_B are the --work directories of two runs of the same
harness (check_zoo_train.py, check_zoo_dp.py, check_zoo_tp.py,
check_zoo_pp.py, ...), for instance one with `--dsopt 'dsopt
--host-opt-level=3'` and one with `--host-opt-level=0`. Every step log
(*.jsonl: loss, lr, grad_norm, skipped, loss_scale of every step; the
timings and memory figures are left out), every ONNX file (its
initializers' bytes) and every .npy file (its bytes) under one must be
under the other and equal. Prints one line per compared file kind and a
summary; exits 1 on the first difference or a file only one side has.
"""
import json
import sys
from pathlib import Path

# Step-log fields that are results; the rest are timings and memory.
LOG_FIELDS = ("step", "loss", "lr", "grad_norm", "skipped", "loss_scale")


def log_values(path: Path):
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            rows.append({k: entry.get(k) for k in LOG_FIELDS})
    return rows


def onnx_weights(path: Path):
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(path), load_external_data=False)
    return {t.name: (t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes())
            for t in model.graph.initializer}


def compare(a: Path, b: Path) -> int:
    kinds = {"*.jsonl": 0, "*.onnx": 0, "*.npy": 0}
    values = 0
    for pattern in kinds:
        left = {p.relative_to(a) for p in a.rglob(pattern)}
        right = {p.relative_to(b) for p in b.rglob(pattern)}
        if left != right:
            only = sorted(str(p) for p in left ^ right)
            print(f"DIFFERENT file sets ({pattern}): only on one side: {only[:5]}")
            return 1
        for rel in sorted(left):
            if pattern == "*.jsonl":
                x, y = log_values(a / rel), log_values(b / rel)
                values += sum(len(r) for r in x)
            elif pattern == "*.onnx":
                x, y = onnx_weights(a / rel), onnx_weights(b / rel)
                values += len(x)
            else:
                x, y = (a / rel).read_bytes(), (b / rel).read_bytes()
                values += 1
            if x != y:
                print(f"DIFFERENT {rel}")
                return 1
            kinds[pattern] += 1
    print(", ".join(f"{n} {k} files" for k, n in kinds.items()) + f" ({values} logged values/initializers/arrays)")
    if not any(kinds.values()):
        print("DIFFERENT: nothing to compare")
        return 1
    print("identical")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(compare(Path(sys.argv[1]), Path(sys.argv[2])))
