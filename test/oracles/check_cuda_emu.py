#!/usr/bin/env python3
"""A generated cuda training program run under the CUDA emulation, its
losses compared with the same model's cpu program (docs/runtime.md, "The
CUDA emulation").

dsopt writes the program's sources (--target cuda --sources-only);
rewrite_launches.py turns src/train.cu into C++, which the host compiler
builds with the emulation's prelude and links with libdsrt_cuda_emu.a in
place of libdsrt_cuda.a and the CUDA libraries. dsopt also builds the cpu
program; both train --steps steps on --data, and every step's loss must
agree within --rtol (relative). Prints each step's two losses and
"cuda emu: ok", or the failures and exits 1.

--ranks N runs both programs under mpirun -np N (a --dp, --zero or --pp
program): the cuda program's NCCL calls move their data over MPI in the
emulation (runtime/tests/cuda/emu/nccl_mpi.cpp), one emulated device per
rank.
"""
import argparse
import os
import re
import shlex
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_fake_cuda  # noqa: E402


def run(command, **kw):
    return check_fake_cuda.run(command, label="cuda emu", **kw)


def build_flags(dsopt, target, extra=()):
    flags = {}
    for line in run([dsopt, "--print-build-flags", "--target", target, *extra]).stdout.splitlines():
        key, _, value = line.partition(": ")
        flags[key] = value
    return flags


def emu_libs(libs, emu_lib):
    """The cuda program's link line with the emulation for libdsrt_cuda.a and
    without the CUDA libraries (the emulation defines what they would)."""
    out = []
    for item in shlex.split(libs):
        name = Path(item).name
        if name == "libdsrt_cuda.a":
            out.append(emu_lib)
        elif item in ("-lcublasLt", "-lcublas", "-lnccl", "-lcudart") or \
                "cuda" in item and (item.startswith("-L") or item.startswith("-Wl,-rpath")):
            continue
        else:
            out.append(item)
    return out


def losses(exe, data, steps, cwd, ranks):
    command = [exe, "--data", data, "--steps", steps]
    env = dict(os.environ, DSRT_FAKE_CUDA_DEVICES=str(ranks))
    if ranks > 1:
        command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                   "-np", str(ranks), "-x", "DSRT_FAKE_CUDA_DEVICES", *command]
    out = run(command, cwd=cwd, env=env).stdout
    found = [float(m.group(1)) for m in re.finditer(r"^step \d+/\d+ \| loss (\S+)", out, re.M)]
    if len(found) != int(steps):
        raise SystemExit(f"cuda emu: FAILED: {exe} printed {len(found)} losses, not {steps}:\n"
                         + out)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsopt", required=True)
    parser.add_argument("--emu-lib", required=True, help="libdsrt_cuda_emu.a")
    parser.add_argument("--cxx", default="c++")
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--steps", default="3")
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--ranks", type=int, default=1, help="mpirun -np N (1: no mpirun)")
    parser.add_argument("--dsopt-flag", action="append", default=[],
                        help="an extra dsopt flag for both programs")
    args = parser.parse_args()
    src_root = Path(__file__).resolve().parents[2]
    emu = src_root / "runtime" / "tests" / "cuda" / "emu"
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)

    cuda_prog = work / "cuda"
    run([args.dsopt, args.model, "--target", "cuda", "--sources-only", "-o", cuda_prog,
         *args.dsopt_flag])
    source = cuda_prog / "src" / "train.cpp"
    run([sys.executable, emu / "rewrite_launches.py", cuda_prog / "src" / "train.cu", source])
    # The emulated program compiles at the -O level the dsopt flags name, as
    # dsopt would build the program it wrote.
    level = [f for f in args.dsopt_flag if f.startswith("--host-opt-level")]
    flags = build_flags(args.dsopt, "cuda", level)
    cxxflags = build_flags(args.dsopt, "cpu", level)["cxxflags"]
    cuda_include = Path(flags["nvcc"]).resolve().parent.parent / "include"
    exe = cuda_prog / "train_emu"
    run([args.cxx, *shlex.split(cxxflags), f"-I{cuda_include}", "-include", emu / "prelude.h",
         source, "-o", exe, *emu_libs(flags["libs"], args.emu_lib)])

    cpu_prog = work / "cpu"
    # Only its train runs: no forward program beside it.
    run([args.dsopt, args.model, "--target", "cpu", "--no-forward", "-o", cpu_prog, *args.dsopt_flag])

    (work / "run_cuda").mkdir(exist_ok=True)
    (work / "run_cpu").mkdir(exist_ok=True)
    got = losses(exe, args.data, args.steps, work / "run_cuda", args.ranks)
    want = losses(cpu_prog / "train", args.data, args.steps, work / "run_cpu", args.ranks)
    failures = 0
    for step, (g, w) in enumerate(zip(got, want), 1):
        ok = abs(g - w) <= args.rtol * max(abs(w), 1e-30)
        print(f"step {step}: cuda (emulated) loss {g:.6f}, cpu loss {w:.6f}"
              + ("" if ok else f": FAILED (rtol {args.rtol})"))
        failures += not ok
    if failures:
        print(f"cuda emu: {failures} failures")
        return 1
    print("cuda emu: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
