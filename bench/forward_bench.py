#!/usr/bin/python3
"""Forward time of a GPT-2-small training graph: dsopt's program vs PyTorch.

The model is the zoo's `gpt2_small` (d_model 768, 12 layers, 12 heads,
vocabulary 50257, T = 256, B = 4, loss and logits), built once in PyTorch and
exported to ONNX. In the same run, on the same machine and with the same
thread count, it times

  PyTorch eager   model(input_ids, labels) under torch.no_grad(), eval mode
  dsopt           the compiled program's forward (`run` reports the time of
                  its op sequence, excluding loading weights and inputs)

as the minimum over --repeat runs after a warm-up, and prints the ratio
dsopt / PyTorch (below 1 means dsopt is faster). It also checks the two agree
(loss within rtol 1e-4), and reports how long dsopt took to compile the
model, and (--compile-1p3b) a GPT-3 1.3B graph, into executables.

Same threads means the same for both libraries' pools: PyTorch runs in a
fresh process per thread count with OMP_NUM_THREADS and OPENBLAS_NUM_THREADS
set (torch.set_num_threads alone leaves Debian's OpenBLAS on every core), and
dsopt's program gets --threads. Both use OMP_WAIT_POLICY=passive unless set:
OpenMP's and OpenBLAS's busy-waiting pools otherwise fight over the cores.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "oracles"))


TORCH_TIMER = """
import sys, time, torch
sys.path.insert(0, sys.argv[1])
import models
entry = models.ZOO["gpt2_small"]
model, inputs = entry.build(), entry.inputs()
torch.set_num_threads(int(sys.argv[2]))
with torch.no_grad():
    model(**inputs)  # warm-up
    best = float("inf")
    for _ in range(int(sys.argv[3])):
        start = time.perf_counter()
        loss = model(**inputs)[0]
        best = min(best, time.perf_counter() - start)
print(best, float(loss))
"""


def time_torch(threads, repeat):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", TORCH_TIMER,
                          os.path.join(ROOT, "test", "oracles"), str(threads), str(repeat)],
                         env=env, capture_output=True, text=True, check=True).stdout
    best, loss = out.split()
    return float(best), float(loss)


def time_dsopt(program, in_dir, out_dir, threads, repeat):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               OPENBLAS_NUM_THREADS=str(threads))
    best = float("inf")
    for attempt in range(repeat + 1):
        result = subprocess.run([os.path.join(program, "run"), "--inputs", in_dir,
                                 "--outputs", out_dir, "--threads", str(threads)],
                                capture_output=True, text=True, check=True, env=env)
        match = re.search(r"ran \d+ ops in ([0-9.]+) ms", result.stderr)
        if attempt:  # the first run warms the page cache
            best = min(best, float(match.group(1)) / 1000.0)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsopt", default=os.path.join(ROOT, "build", "bin", "dsopt"))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compile-1p3b", action="store_true",
                        help="also time compiling the GPT-3 1.3B graph")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")

    import numpy as np
    import torch
    import models

    rows, notes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        entry = models.ZOO["gpt2_small"]
        model = entry.build()
        inputs = entry.inputs()
        onnx_path = os.path.join(tmp, "gpt2_small.onnx")
        with torch.no_grad():
            torch.onnx.export(model, tuple(inputs.values()), onnx_path,
                              input_names=list(inputs), output_names=["loss", "logits"],
                              opset_version=17, do_constant_folding=True)
        in_dir, out_dir = os.path.join(tmp, "in"), os.path.join(tmp, "out")
        os.makedirs(in_dir)
        os.makedirs(out_dir)
        for name, value in inputs.items():
            np.save(os.path.join(in_dir, name + ".npy"), value.numpy())

        program = os.path.join(tmp, "program")
        start = time.perf_counter()
        subprocess.run([args.dsopt, onnx_path, "-o", program], check=True)
        compile_s = time.perf_counter() - start
        notes.append(f"compile gpt2_small (124M parameters) to an executable: {compile_s:.1f} s")

        for threads in [int(t) for t in args.threads.split(",")]:
            torch_s, torch_loss = time_torch(threads, args.repeat)
            dsopt_s = time_dsopt(program, in_dir, out_dir, threads, args.repeat)
            loss = float(np.load(os.path.join(out_dir, "loss.npy")))
            if abs(loss - torch_loss) > 1e-4 * abs(torch_loss):
                sys.exit(f"dsopt's loss {loss} differs from PyTorch's {torch_loss}")
            rows.append((threads, torch_s, dsopt_s))

        if args.compile_1p3b:
            gen = os.path.join(tmp, "gpt_1p3b.onnx")
            subprocess.run([sys.executable, os.path.join(ROOT, "test", "oracles", "gen_gpt.py"),
                            "--size", "1.3B", "--seq", "1024", "--out", gen],
                           check=True, capture_output=True)
            start = time.perf_counter()
            subprocess.run([args.dsopt, gen, "-o", os.path.join(tmp, "p1p3b")], check=True)
            notes.append(f"compile GPT-3 1.3B (T=1024, B=1) to an executable: "
                         f"{time.perf_counter() - start:.1f} s")

    if args.markdown:
        print("| threads | PyTorch eager | dsopt | dsopt / PyTorch |")
        print("|---:|---:|---:|---:|")
        for threads, torch_s, dsopt_s in rows:
            print(f"| {threads} | {torch_s * 1000:.0f} ms | {dsopt_s * 1000:.0f} ms "
                  f"| {dsopt_s / torch_s:.2f} |")
        print()
        for note in notes:
            print(f"- {note}")
    else:
        for threads, torch_s, dsopt_s in rows:
            print(f"threads {threads}: torch {torch_s * 1000:.1f} ms, dsopt "
                  f"{dsopt_s * 1000:.1f} ms, ratio {dsopt_s / torch_s:.2f}")
        for note in notes:
            print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
