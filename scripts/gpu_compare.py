#!/usr/bin/env python3
"""Compares what a cuda run wrote with what the cpu run of the same
programs wrote (scripts/gpu-check.sh).

  gpu_compare.py forward CPU_WORK CUDA_WORK --rtol R
      every .npy output under CUDA_WORK against the file of the same
      relative path under CPU_WORK: |cuda - cpu| <= rtol * max(|cpu|)
      per output (a dot product's rounding is relative to its terms).
  gpu_compare.py train CPU_WORK CUDA_WORK --rtol R
      every log.jsonl under CUDA_WORK against CPU_WORK's: each step's loss
      within rel R.

Prints one line per file and a summary; exits 1 on any mismatch, a file
missing on either side, or nothing to compare.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np


def steps(path: Path) -> list:
    """The step entries (with a loss) of a --log-json log; none where the
    file is missing."""
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [s for s in entries if "loss" in s]


def losses(path: Path):
    return [s["loss"] for s in steps(path)]


def loss_rel_err(cpu: list, cuda: list) -> float:
    """The largest relative difference of two runs' losses, step by step,
    relative to the cpu's."""
    return max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(cpu, cuda))


def compare(kind: str, cpu: Path, cuda: Path, rtol: float) -> int:
    """Every file of `kind` under `cuda` against `cpu`'s; prints one line per
    file and a summary, returns the number of failures."""
    pattern = "*.npy" if kind == "forward" else "log.jsonl"

    def found(root: Path):
        return sorted(p for p in root.rglob(pattern) if kind == "train" or p.parent.name == "outputs")

    cuda_files = found(cuda)
    failures = 0
    # A result the cpu run has and the cuda run did not write (a program
    # that exited 0 without it) fails too: only the programs that ran.
    ran = {p.relative_to(cuda).parts[0] for p in cuda.iterdir()} if cuda.is_dir() else set()
    for cpu_file in found(cpu):
        rel = cpu_file.relative_to(cpu)
        if rel.parts[0] in ran and not (cuda / rel).exists():
            print(f"{rel}: MISSING in the cuda run")
            failures += 1
    for cuda_file in cuda_files:
        rel = cuda_file.relative_to(cuda)
        cpu_file = cpu / rel
        if not cpu_file.exists():
            print(f"{rel}: MISSING in the cpu run")
            failures += 1
            continue
        if kind == "forward":
            a, b = np.load(cpu_file), np.load(cuda_file)
            if a.shape != b.shape:
                print(f"{rel}: MISMATCH shapes {a.shape} (cpu) and {b.shape} (cuda)")
                failures += 1
                continue
            if a.dtype.kind not in "fc":
                ok = np.array_equal(a, b)
                print(f"{rel}: {'equal' if ok else 'MISMATCH (integers differ)'}")
                failures += not ok
                continue
            scale = max(float(np.max(np.abs(a))) if a.size else 0.0, 1e-30)
            err = float(np.max(np.abs(a.astype(np.float64) - b))) / scale if a.size else 0.0
            ok = err <= rtol and np.isfinite(b).all() == np.isfinite(a).all()
        else:
            a, b = losses(cpu_file), losses(cuda_file)
            if len(a) != len(b) or not a:
                print(f"{rel}: MISMATCH {len(a)} cpu steps, {len(b)} cuda steps")
                failures += 1
                continue
            err = loss_rel_err(a, b)
            ok = err <= rtol
        print(f"{rel}: {'matches' if ok else 'MISMATCH'} (max rel err {err:.1e}, tolerance {rtol:.0e})")
        failures += not ok
    if not cuda_files:
        print(f"nothing to compare: no {pattern} under {cuda}")
        failures += 1
    print(f"cuda vs cpu {kind}: {len(cuda_files)} files, {failures} failures")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["forward", "train"])
    parser.add_argument("cpu", type=Path)
    parser.add_argument("cuda", type=Path)
    parser.add_argument("--rtol", type=float, required=True)
    args = parser.parse_args()
    return 1 if compare(args.kind, args.cpu, args.cuda, args.rtol) else 0


if __name__ == "__main__":
    sys.exit(main())
