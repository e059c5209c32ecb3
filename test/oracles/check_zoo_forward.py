#!/usr/bin/python3
"""Compiles every zoo model with dsopt, runs it, and compares with PyTorch.

For each model of an exported zoo (export_zoo.py), and each of its exports
(constant-folded and not), this compiles `dsopt MODEL --no-train -o OUT`
(the forward program only), writes the
example inputs as .npy files, runs `OUT/run`, and compares every output with
PyTorch's eval-mode forward saved at export time (MODEL.outputs.npz):
|dsopt - torch| <= atol + rtol * max(|torch|, scale) elementwise, where scale
is the largest magnitude of that output: a dot product's rounding error is
relative to the terms it sums, not to a result that happens to cancel near
zero (the float32 discrepancy of a logit near 0 is that of its neighbours).
It also checks the
program's measured arena high-water mark equals the plan's arena size.

Prints one line per program and exits non-zero on any mismatch.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys

import numpy as np


def compile_and_run(args, model_path, inputs, workdir):
    out = os.path.join(workdir, "program")
    # Only `run` is run: no training program beside it (--no-train).
    compiled = subprocess.run([*shlex.split(args.dsopt), model_path, "--no-train", "-o", out], capture_output=True,
                              text=True, timeout=600)
    if compiled.returncode != 0:
        return None, f"dsopt failed: {compiled.stderr.strip()}"
    return run_forward(out, inputs, workdir, args.threads)


def run_forward(out, inputs, workdir, threads=1):
    """Runs the compiled OUT/run on `inputs` ({name: array}); returns
    ({output name: array}, None) or (None, what went wrong). The measured
    arena high-water mark must equal the plan's."""
    in_dir = os.path.join(workdir, "inputs")
    out_dir = os.path.join(workdir, "outputs")
    os.makedirs(in_dir, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)
    for name, value in inputs.items():
        np.save(os.path.join(in_dir, name + ".npy"), value)
    run = subprocess.run([os.path.join(out, "run"), "--inputs", in_dir, "--outputs", out_dir,
                          "--threads", str(threads)],
                         capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        return None, f"run failed: {run.stderr.strip()}"
    with open(os.path.join(out, "plan.json")) as f:
        plan = json.load(f)
    match = re.search(r"measured high-water mark (\d+) bytes", run.stderr)
    # A training graph's plan describes its training job at the top level and
    # the forward program (`run`) under "forward".
    planned = plan.get("forward", plan)["ranks"][0]["arena_bytes"]
    if not match or int(match.group(1)) != planned:
        return None, (f"arena high-water mark {match.group(1) if match else '?'} "
                      f"differs from the plan's {planned}")
    outputs = {name[:-4]: np.load(os.path.join(out_dir, name))
               for name in os.listdir(out_dir) if name.endswith(".npy")}
    return outputs, None


def compare_outputs(outputs, expected, rtol=1e-5, atol=1e-7, expected64=None, noise_factor=0.0):
    """Every expected output against dsopt's, within atol + rtol * max(|torch|,
    the output's largest magnitude) elementwise. With `expected64` (the same
    forward in float64) each output's bound widens by noise_factor times the
    largest |float32 - float64| of the reference over that output, and the
    summary gives dsopt's distance from float64 and that drift too. Returns (summary of the largest differences, [mismatches])."""
    worst, errors = [], []
    for name, want in expected.items():
        got = outputs.get(name)
        if got is None or got.shape != want.shape:
            errors.append(f"output {name} has shape {None if got is None else got.shape}, torch {want.shape}")
            continue
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        scale = float(np.abs(want).max()) if want.size else 0.0
        bound = atol + rtol * np.maximum(np.abs(want.astype(np.float64)), scale)
        summary = f"{name} max|d| {diff.max(initial=0):.2e}"
        if expected64 is not None:
            want64 = expected64[name].astype(np.float64)
            drift = float(np.abs(want.astype(np.float64) - want64).max(initial=0))
            bound = bound + noise_factor * drift
            summary += (f" (f64 {float(np.abs(got.astype(np.float64) - want64).max(initial=0)):.2e}, "
                        f"f32 drift {drift:.2e})")
        if not np.all(diff <= bound):
            i = np.unravel_index(np.argmax(diff - bound), diff.shape)
            errors.append(f"output {name} differs at {i}: dsopt {got[i]!r}, torch {want[i]!r}"
                          f" (bound {float(np.broadcast_to(bound, diff.shape)[i]):.2e})")
        worst.append(summary)
    return ", ".join(worst), errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", required=True)
    parser.add_argument("--work", required=True, help="scratch directory")
    parser.add_argument("--dsopt", default="dsopt", help="dsopt command (split like a shell would)")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--atol", type=float, default=1e-7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated model names")
    args = parser.parse_args()

    with open(os.path.join(args.zoo, "zoo.json")) as f:
        zoo = json.load(f)
    only = set(filter(None, args.only.split(",")))
    failures = 0
    for model in zoo:
        if only and model["name"] not in only:
            continue
        inputs = dict(np.load(os.path.join(args.zoo, model["inputs_npz"])))
        expected = dict(np.load(os.path.join(args.zoo, model["outputs_npz"])))
        for key in ("file", "nofold_file"):
            path = os.path.join(args.zoo, model[key])
            workdir = os.path.join(args.work, os.path.basename(path)[:-5])
            outputs, error = compile_and_run(args, path, inputs, workdir)
            label = os.path.basename(path)
            if error:
                print(f"FAIL {label}: {error}")
                failures += 1
                continue
            worst, errors = compare_outputs(outputs, expected, args.rtol, args.atol)
            for error in errors:
                print(f"FAIL {label}: {error}")
            failures += len(errors)
            if not errors:
                print(f"{label}: matches PyTorch ({worst})")
    print(f"zoo forward: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
