#!/usr/bin/env python3
"""GPT-2 124M training throughput and MFU on one GPU, with dsopt --target cuda.

  gpu_bench.py [--build DIR] [--out DIR] [--steps N] [--precision bf16|fp32]

GPT-2 small (d 768, 12 layers, 12 heads, T 1024, vocab 50257) from the GPT
generator (test/oracles/gen_gpt.py, random weights), in bf16, at the largest
micro-batch whose planned device memory fits in 90% of the GPU (dsopt's plan
decides, before anything runs). Reports tokens/s over the steps after the
first, MFU against a bf16 GEMM peak measured in the same run by
bench/gemm_peak.cu (cuBLASLt, built here with nvcc), and the measured
device-memory peak against the plan. Model FLOPs per token are PaLM's
6 N + 12 L T d (N parameters, L layers, T tokens, d width).

Writes OUT/bench.md and OUT/bench.json. Exits 2, with a clear message, when
there is no GPU; 1 when a step fails.
"""
import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
D_MODEL, LAYERS, HEADS, SEQ, VOCAB = 768, 12, 12, 1024, 50257
BATCHES = [64, 48, 32, 24, 16, 12, 8, 4, 2, 1]
FIT = 0.9


def gpu_memory_bytes():
    """Total memory of GPU 0, or None when there is no GPU."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    done = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True)
    lines = done.stdout.split()
    if done.returncode != 0 or not lines:
        return None
    return int(lines[0]) * 1024 * 1024


def run(command, **kwargs):
    print("+", " ".join(str(c) for c in command), flush=True)
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)


def planned_device_bytes(plan):
    """The training program's planned device peak (plan.json, rank 0)."""
    rank = plan["ranks"][0]
    device = rank.get("memory_spaces", {}).get("device", {})
    return int(device.get("peak_bytes", rank["arena_peak_bytes"]))


def parameter_count(model: Path) -> int:
    import onnx
    graph = onnx.load(str(model), load_external_data=False).graph
    return sum(int(np.prod(t.dims)) for t in graph.initializer)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build-gpu", help="dsopt build with CUDA")
    parser.add_argument("--out", type=Path, default=Path("gpu-bench"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    args = parser.parse_args()

    memory = gpu_memory_bytes()
    if memory is None:
        print("gpu_bench: no GPU found (nvidia-smi is missing or lists none); "
              "this benchmark needs one NVIDIA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    dsopt = args.build / "bin" / "dsopt"
    if not dsopt.exists():
        print(f"gpu_bench: no dsopt at {dsopt} (build with CUDA first, or pass --build)", file=sys.stderr)
        return 1

    # The GEMM peak, measured now, on this GPU.
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    peak_exe = args.out / "gemm_peak"
    built = run([nvcc, "-std=c++17", "-O3", "-arch=sm_90", ROOT / "bench" / "gemm_peak.cu",
                 "-o", peak_exe, "-lcublasLt"])
    if built.returncode != 0:
        print(f"gpu_bench: building gemm_peak failed:\n{built.stderr}", file=sys.stderr)
        return 1
    measured = run([peak_exe])
    if measured.returncode != 0:
        print(f"gpu_bench: gemm_peak failed: {measured.stderr.strip()}", file=sys.stderr)
        return measured.returncode
    peak_tflops = float(measured.stdout.split(":")[-1].split()[0])

    # The model, at T 1024, and the largest micro-batch the plan fits.
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    precision = args.precision
    chosen = None
    for batch in BATCHES:
        model = work / f"gpt2-124m-b{batch}.onnx"
        if not model.exists():
            gen = run(["/usr/bin/python3", ROOT / "test" / "oracles" / "gen_gpt.py", "--layers", LAYERS,
                       "--d-model", D_MODEL, "--heads", HEADS, "--vocab", VOCAB, "--seq", SEQ,
                       "--batch", batch, "--materialize", "--out", model])
            if gen.returncode != 0:
                print(f"gpu_bench: the GPT generator failed: {gen.stderr.strip()}", file=sys.stderr)
                return 1
        planned = run([dsopt, model, "--target", "cuda", "--precision", precision, "--emit=plan"])
        if planned.returncode != 0 and precision == "bf16" and "precision" in planned.stderr:
            print(f"gpu_bench: dsopt refuses --precision bf16 ({planned.stderr.strip()}); "
                  "measuring fp32 instead, MFU still against the bf16 GEMM peak")
            precision = "fp32"
            planned = run([dsopt, model, "--target", "cuda", "--precision", precision, "--emit=plan"])
        if planned.returncode != 0:
            print(f"gpu_bench: dsopt --emit=plan failed: {planned.stderr.strip()}", file=sys.stderr)
            return 1
        plan = json.loads(planned.stdout)
        need = planned_device_bytes(plan)
        if need <= FIT * memory:
            chosen = (batch, model, plan, need)
            break
        model.unlink()
        Path(str(model) + ".data").unlink(missing_ok=True)
    if chosen is None:
        print("gpu_bench: not even micro-batch 1 fits in 90% of the GPU", file=sys.stderr)
        return 1
    batch, model, plan, need = chosen

    program = work / "program"
    compiled = run([dsopt, model, "--target", "cuda", "--precision", precision, "-o", program])
    if compiled.returncode != 0:
        print(f"gpu_bench: dsopt failed: {compiled.stderr.strip()}", file=sys.stderr)
        return 1
    data = work / "data"
    data.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, size=(2, batch, SEQ + 1), dtype=np.int64)
    np.save(data / "input_ids.npy", tokens[:, :, :-1])
    np.save(data / "labels.npy", tokens[:, :, 1:])
    log = work / "log.jsonl"
    start = time.time()
    trained = run([program / "train", "--data", data, "--steps", args.steps, "--log-json", log, "--quiet"])
    wall = time.time() - start
    if trained.returncode != 0:
        print(f"gpu_bench: training failed: {trained.stderr.strip()}", file=sys.stderr)
        return 1
    steps = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    timed = steps[1:] or steps
    step_s = sum(s["step_time_s"] for s in timed) / len(timed)
    tokens_per_s = batch * SEQ / step_s
    params = parameter_count(model)
    flops_per_token = 6 * params + 12 * LAYERS * SEQ * D_MODEL
    mfu = tokens_per_s * flops_per_token / (peak_tflops * 1e12)
    measured_peak = steps[-1].get("memory_spaces", {}).get("device", {}).get("peak_bytes")
    result = {
        "model": "GPT-2 124M", "parameters": params, "seq": SEQ, "micro_batch": batch,
        "precision": precision, "steps": args.steps, "mean_step_s": step_s,
        "tokens_per_s": tokens_per_s, "flops_per_token": flops_per_token,
        "gemm_peak_tflops": peak_tflops, "mfu": mfu, "planned_device_bytes": need,
        "measured_device_peak_bytes": measured_peak, "gpu_memory_bytes": memory, "wall_s": wall,
    }
    (args.out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    memory_line = (f"{measured_peak / 2**30:.2f} GiB measured, {need / 2**30:.2f} GiB planned"
                   + ("" if measured_peak == need else " (DIFFERENT)")) if measured_peak is not None \
        else f"{need / 2**30:.2f} GiB planned (the run reported no device peak)"
    report = "\n".join([
        "## GPT-2 124M training on one GPU (bench/gpu_bench.py)",
        "",
        "| | |", "|---|---|",
        f"| precision | {precision} |",
        f"| micro-batch x T | {batch} x {SEQ} (largest whose plan fits 90% of {memory / 2**30:.0f} GiB) |",
        f"| step | {step_s * 1000:.1f} ms (mean of {len(timed)} steps after the first) |",
        f"| tokens/s | {tokens_per_s:,.0f} |",
        f"| bf16 GEMM peak (cuBLASLt, measured) | {peak_tflops:.1f} TFLOP/s |",
        f"| MFU | {mfu * 100:.1f}% ({flops_per_token / 1e9:.2f} GFLOP/token) |",
        f"| device memory | {memory_line} |",
        "",
    ])
    (args.out / "bench.md").write_text(report)
    print(report)
    return 0 if measured_peak in (None, need) else 1


if __name__ == "__main__":
    sys.exit(main())
