#!/usr/bin/python3
"""Training-step time and peak memory of GPT-2 small: dsopt vs PyTorch eager.

The model is the zoo's `gpt2_small` (d_model 768, 12 layers, 12 heads,
vocabulary 50257, T = 256, B = 4, tied embedding), built once in PyTorch and
exported to ONNX. One training step is forward, backward, global-norm
clipping at 1.0 and an AdamW update of all 124M parameters. In the same run,
on the same machine and with the same thread count, it measures

  PyTorch eager   loss.backward(), clip_grad_norm_, torch.optim.AdamW.step(),
                  zero_grad(), in a fresh process per thread count
  dsopt           the compiled `train` program on the same batch (its log's
                  step_time_s)

as the minimum step time over --steps steps after a warm-up step, and prints
the ratio dsopt / PyTorch (below 1 means dsopt is faster). It checks that the
first step's losses agree (rtol 1e-4).

Memory. For dsopt the training step's memory is its arena, planned at
compile time and measured by the program (parameters, gradients, AdamW's two
moments and every activation, all in one allocation). For PyTorch it is the
growth of the resident set from just before the model is built to the peak
of training (weights, gradients, optimizer state, activations and the
allocator's slack). Both processes' whole peak resident sets are reported
too (they include the libraries: libtorch and Python for one, libdsrt and
OpenBLAS for the other).

Same threads means the same for both libraries' pools: OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS set for both, --threads for dsopt, OMP_WAIT_POLICY=passive
unless set.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "oracles"))

TORCH_TRAINER = """
import json, resource, sys, time
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
import torch
sys.path.insert(0, sys.argv[1])
import models
torch.set_num_threads(int(sys.argv[2]))
steps = int(sys.argv[3])
base = rss()
entry = models.ZOO["gpt2_small"]
model, inputs = entry.build(), entry.inputs()
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=False)
times, losses = [], []
for step in range(steps + 1):
    start = time.perf_counter()
    loss = model(**inputs)[0]
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    times.append(time.perf_counter() - start)
    losses.append(float(loss))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"best": min(times[1:]), "loss": losses[0], "peak_rss": peak, "base_rss": base}))
"""

CONFIG = {
    "train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
    "gradient_clipping": 1.0,
}


def run_torch(threads, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", TORCH_TRAINER, os.path.join(ROOT, "test", "oracles"),
                          str(threads), str(steps)],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_dsopt(program, data, threads, steps, work):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    log = os.path.join(work, f"train-{threads}.jsonl")
    rss = os.path.join(work, f"rss-{threads}.txt")
    # GNU time reports the program's own peak resident set (KiB).
    subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss, os.path.join(program, "train"),
                    "--data", data, "--steps", str(steps + 1), "--threads", str(threads),
                    "--log-json", log, "--quiet"],
                   check=True, env=env)
    entries = [json.loads(line) for line in open(log)]
    return {"best": min(e["step_time_s"] for e in entries[1:]), "loss": entries[0]["loss"],
            "arena": entries[0]["arena_peak_bytes"], "planned": entries[0]["arena_planned_bytes"],
            "peak_rss": int(open(rss).read().split()[-1]) * 1024}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsopt", default=os.path.join(ROOT, "build", "bin", "dsopt"))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
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
                              opset_version=17, do_constant_folding=True,
                              training=torch.onnx.TrainingMode.PRESERVE)
        del model
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        for name, value in inputs.items():
            np.save(os.path.join(data, name + ".npy"), value.numpy()[None])
        config = os.path.join(tmp, "ds_config.json")
        with open(config, "w") as f:
            json.dump(CONFIG, f)

        program = os.path.join(tmp, "program")
        start = time.perf_counter()
        subprocess.run([args.dsopt, onnx_path, "--config", config, "-o", program], check=True,
                       capture_output=True)
        notes.append(f"compile gpt2_small to `run` and `train`: {time.perf_counter() - start:.1f} s")

        for threads in [int(t) for t in args.threads.split(",")]:
            torch_result = run_torch(threads, args.steps)
            dsopt_result = run_dsopt(program, data, threads, args.steps, tmp)
            if abs(dsopt_result["loss"] - torch_result["loss"]) > 1e-4 * abs(torch_result["loss"]):
                sys.exit(f"dsopt's first loss {dsopt_result['loss']} differs from PyTorch's "
                         f"{torch_result['loss']}")
            if dsopt_result["arena"] != dsopt_result["planned"]:
                sys.exit("dsopt's measured arena differs from its plan")
            rows.append((threads, torch_result, dsopt_result))

    mib = lambda b: b / 2**20  # noqa: E731
    if args.markdown:
        print("| threads | PyTorch step | dsopt step | dsopt / PyTorch | PyTorch memory (RSS growth) "
              "| dsopt arena | dsopt / PyTorch | PyTorch peak RSS | dsopt peak RSS |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for threads, t, d in rows:
            grow = t["peak_rss"] - t["base_rss"]
            print(f"| {threads} | {t['best'] * 1000:.0f} ms | {d['best'] * 1000:.0f} ms "
                  f"| {d['best'] / t['best']:.2f} | {mib(grow):.0f} MiB | {mib(d['arena']):.0f} MiB "
                  f"| {d['arena'] / grow:.2f} | {mib(t['peak_rss']):.0f} MiB | {mib(d['peak_rss']):.0f} MiB |")
        print()
        for note in notes:
            print(f"- {note}")
    else:
        for threads, t, d in rows:
            grow = t["peak_rss"] - t["base_rss"]
            print(f"threads {threads}: step torch {t['best'] * 1000:.1f} ms, dsopt {d['best'] * 1000:.1f} ms, "
                  f"ratio {d['best'] / t['best']:.2f}; memory torch {mib(grow):.0f} MiB (RSS growth), "
                  f"dsopt arena {mib(d['arena']):.0f} MiB, ratio {d['arena'] / grow:.2f}; peak RSS torch "
                  f"{mib(t['peak_rss']):.0f} MiB, dsopt {mib(d['peak_rss']):.0f} MiB")
        for note in notes:
            print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
