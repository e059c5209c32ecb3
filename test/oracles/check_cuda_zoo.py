#!/usr/bin/env python3
"""Every zoo model's programs compile for --target cuda.

For each model of the zoo (test/oracles/export_zoo.py) dsopt generates the
forward program (--emit=cpp) and the training program (--emit=train-cpp)
for the cuda target, and one multi-rank variant of each kind that the cuda
runners start differently (mlp's training program for dp 2 with ZeRO-3, on
the NCCL transport's all-gathers and reduce-scatters, and for 2 pipeline
stages, on its sends and receives) and the offloaded one (mlp with its
optimizer states in files, through pinned host memory, the nvme case
covering the cpu one's transfers and host update); nvcc then compiles all of them to
object files, two at a time, with exactly the flags dsopt uses (dsopt --print-build-flags
--target cuda). With --link (when libdsrt_cuda was built) each object is
also linked as dsopt links it, and one program is run: without a GPU it
must exit 1 saying "no CUDA device".

Prints one line per program and a summary; exits 1 on any failure.
"""

import argparse
import concurrent.futures
import shlex
import subprocess
import sys
from pathlib import Path

MODELS = ["gpt2", "llama", "bert", "mlp", "cnn"]
PROGRAMS = {"forward": "--emit=cpp", "train": "--emit=train-cpp"}
# (model, name, dsopt flags): the multi-rank programs, one per runner.
MULTI_RANK = [("mlp", "train-dp2-zero3", ["--emit=train-cpp", "--dp=2", "--zero=3"]),
              ("mlp", "train-pp2", ["--emit=train-cpp", "--pp=2"]),
              ("mlp", "train-offload-nvme",
               ["--emit=train-cpp", "--offload-optimizer=nvme", "--nvme-path=/tmp"])]


def build_flags(dsopt: str) -> dict:
    out = subprocess.run([dsopt, "--print-build-flags", "--target", "cuda"],
                         check=True, capture_output=True, text=True).stdout
    flags = {}
    for line in out.splitlines():
        key, _, value = line.partition(": ")
        flags[key] = value
    return flags


def run(command: list, log: Path) -> str:
    """'' when `command` succeeds, else its first error lines."""
    done = subprocess.run(command, capture_output=True, text=True)
    log.write_text(" ".join(shlex.quote(c) for c in command) + "\n" + done.stdout + done.stderr)
    if done.returncode == 0:
        return ""
    lines = [l for l in (done.stdout + done.stderr).splitlines() if "error" in l]
    return "; ".join(lines[:3]) or f"exit status {done.returncode} (see {log})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", required=True, type=Path, help="export_zoo.py's output")
    parser.add_argument("--work", required=True, type=Path, help="scratch directory")
    parser.add_argument("--dsopt", default="dsopt")
    parser.add_argument("--cxx", default="c++")
    parser.add_argument("--link", action="store_true",
                        help="also link each program against libdsrt_cuda and run one")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    flags = build_flags(args.dsopt)

    failures = 0
    sources = []
    programs = [(model, kind, [emit]) for model in MODELS for kind, emit in PROGRAMS.items()]
    for model, kind, dsopt_flags in programs + MULTI_RANK:
        source = args.work / f"{model}_{kind}.cu"
        error = run([args.dsopt, str(args.zoo / f"{model}.onnx"), "--target", "cuda",
                     *dsopt_flags, "-o", str(source)],
                    args.work / f"{model}_{kind}.dsopt.log")
        if error:
            print(f"{model} {kind}: FAILED to generate: {error}")
            failures += 1
        else:
            sources.append((model, kind, source))

    def compile_one(item):
        model, kind, source = item
        obj = source.with_suffix(".o")
        command = [flags["nvcc"], *shlex.split(flags["nvccflags"]), "-c", str(source), "-o", str(obj)]
        error = run(command, source.with_suffix(".nvcc.log"))
        if not error and args.link:
            exe = source.with_suffix("")
            command = [args.cxx, str(obj), "-o", str(exe), *shlex.split(flags["libs"])]
            error = run(command, source.with_suffix(".link.log"))
            if error:
                return model, kind, "FAILED to link: " + error
            return model, kind, "compiled and linked"
        return model, kind, ("FAILED to compile: " + error) if error else "compiled"

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for model, kind, result in pool.map(compile_one, sources):
            print(f"{model} {kind}: {result}")
            failures += result.startswith("FAILED")

    if args.link and not failures:
        for name in ["mlp_forward", "mlp_train-dp2-zero3"]:
            done = subprocess.run([str(args.work / name)], capture_output=True, text=True)
            said = done.stderr.strip().splitlines()[:1]
            print(f"{name.replace('_', ' ')} without a GPU: exit {done.returncode}: "
                  f"{said[0] if said else ''}")

    print(f"cuda zoo: {len(programs) + len(MULTI_RANK)} programs, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
