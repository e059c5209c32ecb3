"""GPT-2 124M training throughput and MFU on one GPU, with dsopt --target cuda.

  gpu_bench.py [--build DIR] [--out DIR] [--steps N] [--precision bf16|fp32]
  gpu_bench.py --prepared PREP --program-build B [--out DIR] [--steps N]

GPT-2 small (d 768, 12 layers, 12 heads, T 1024, vocab 50257) from the GPT
generator (test/oracles/gen_gpt.py, random weights), in bf16, at the largest
micro-batch whose planned device memory fits in 90% of the GPU (dsopt's plan
decides, before anything runs), compiled with DSOPT_FLAGS (--fuse-attention).
Reports tokens/s over the steps after the
first, MFU against a bf16 GEMM peak measured in the same run by
bench/gemm_peak.cu (cuBLASLt, built here with nvcc), and the measured
device-memory peak against the plan. Model FLOPs per token are PaLM's
6 N + 12 L T d (N parameters, L layers, T tokens, d width).

The first form does everything on one machine (dsopt built with CUDA, and a
GPU). The second is the device half of the split GPU check
(scripts/gpu-check.sh --device): scripts/gpu_prepare.py chose the
micro-batch with dsopt and generated the program's sources (PREP/bench,
PREP/programs/bench-gpt2-124m), B holds that program built; this writes the
weights file again with the same generator (the same offsets, checked) and
runs it. It needs python3 with numpy and onnx, no dsopt.

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
# How the benchmark program is compiled (here and by scripts/gpu_prepare.py):
# fused attention, no [T, T] scores (docs/benchmarks.md).
DSOPT_FLAGS = ["--fuse-attention"]
FIT = 0.9


def generator_args(batch: int) -> list:
    """gen_gpt.py's flags for GPT-2 124M at micro-batch `batch` (sparse
    weights; add --materialize for random ones)."""
    return ["--layers", str(LAYERS), "--d-model", str(D_MODEL), "--heads", str(HEADS),
            "--vocab", str(VOCAB), "--seq", str(SEQ), "--batch", str(batch)]


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


def external_layout(model: Path) -> list:
    """(initializer, location, offset, length) of every initializer."""
    import onnx
    graph = onnx.load(str(model), load_external_data=False).graph
    return [(t.name, *(dict((e.key, e.value) for e in t.external_data).get(k) for k in
                       ("location", "offset", "length"))) for t in graph.initializer]


def gemm_peak(out: Path):
    """The bf16 GEMM peak in TFLOP/s (bench/gemm_peak.cu, built now), or an
    error message."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    peak_exe = out / "gemm_peak"
    built = run([nvcc, "-std=c++17", "-O3", "-arch=sm_90", ROOT / "bench" / "gemm_peak.cu",
                 "-o", peak_exe, "-lcublasLt"])
    if built.returncode != 0:
        return None, f"building gemm_peak failed:\n{built.stderr}"
    measured = run([peak_exe])
    if measured.returncode != 0:
        return None, f"gemm_peak failed: {measured.stderr.strip()}"
    return float(measured.stdout.split(":")[-1].split()[0]), None


def train_and_report(program: Path, model: Path, batch: int, need: int, precision: str,
                     peak_tflops: float, memory: int, steps: int, work: Path, out: Path,
                     weights: Path = None) -> int:
    """Trains `steps` steps of `program` on random tokens, writes
    OUT/bench.md and OUT/bench.json."""
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, size=(2, batch, SEQ + 1), dtype=np.int64)
    np.save(data / "input_ids.npy", tokens[:, :, :-1])
    np.save(data / "labels.npy", tokens[:, :, 1:])
    log = work / "log.jsonl"
    command = [program / "train", "--data", data, "--steps", steps, "--log-json", log, "--quiet"]
    if weights is not None:
        command += ["--weights", weights]
    start = time.time()
    trained = run(command)
    wall = time.time() - start
    if trained.returncode != 0:
        print(f"gpu_bench: training failed: {trained.stderr.strip()}", file=sys.stderr)
        return 1
    steps_log = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    timed = steps_log[1:] or steps_log
    step_s = sum(s["step_time_s"] for s in timed) / len(timed)
    tokens_per_s = batch * SEQ / step_s
    params = parameter_count(model)
    flops_per_token = 6 * params + 12 * LAYERS * SEQ * D_MODEL
    mfu = tokens_per_s * flops_per_token / (peak_tflops * 1e12)
    measured_peak = steps_log[-1].get("memory_spaces", {}).get("device", {}).get("peak_bytes")
    result = {
        "model": "GPT-2 124M", "parameters": params, "seq": SEQ, "micro_batch": batch,
        "precision": precision, "steps": steps, "mean_step_s": step_s,
        "tokens_per_s": tokens_per_s, "flops_per_token": flops_per_token,
        "gemm_peak_tflops": peak_tflops, "mfu": mfu, "planned_device_bytes": need,
        "measured_device_peak_bytes": measured_peak, "gpu_memory_bytes": memory, "wall_s": wall,
        "final_loss": steps_log[-1].get("loss"),
    }
    (out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
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
    (out / "bench.md").write_text(report)
    print(report)
    return 0 if measured_peak in (None, need) else 1


def prepared(args, memory: int) -> int:
    """The device half: PREP's program, built in --program-build."""
    manifest = json.loads((args.prepared / "manifest.json").read_text())
    entry = next((p for p in manifest["programs"] if p["stage"] == "bench"), None)
    if entry is None:
        print(f"gpu_bench: {args.prepared}/manifest.json has no bench program "
              "(prepared with --no-bench?)", file=sys.stderr)
        return 1
    info = entry["bench"]
    if info["planned_device_bytes"] > FIT * memory:
        print(f"gpu_bench: the prepared micro-batch {info['micro_batch']} plans "
              f"{info['planned_device_bytes'] / 2**30:.1f} GiB, over 90% of this GPU's "
              f"{memory / 2**30:.0f} GiB: prepare again with --gpu-memory-gib", file=sys.stderr)
        return 1
    work = args.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    # The same graph with real weights, written where the program reads them.
    model = work / info["model"]
    gen = run([sys.executable, ROOT / "test" / "oracles" / "gen_gpt.py", *info["generator"],
               "--materialize", "--out", model])
    if gen.returncode != 0:
        print(f"gpu_bench: the GPT generator failed: {gen.stderr.strip()}", file=sys.stderr)
        return 1
    carried = args.prepared / "bench" / info["model"]
    if external_layout(model) != external_layout(carried):
        print(f"gpu_bench: the regenerated {model.name} lays out its weights unlike the prepared "
              f"{carried} (different generator?): the program would read the wrong bytes",
              file=sys.stderr)
        return 1
    peak_tflops, error = gemm_peak(args.out)
    if error:
        print(f"gpu_bench: {error}", file=sys.stderr)
        return 1
    return train_and_report(args.program_build, model, info["micro_batch"],
                            info["planned_device_bytes"], "bf16", peak_tflops, memory, args.steps,
                            work, args.out, weights=work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build-gpu", help="dsopt build with CUDA")
    parser.add_argument("--prepared", type=Path, help="gpu_prepare.py's directory (the device half)")
    parser.add_argument("--program-build", type=Path, help="with --prepared: the built program's directory")
    parser.add_argument("--out", type=Path, default=Path("gpu-bench"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    args = parser.parse_args()
    if args.prepared and not args.program_build:
        parser.error("--prepared needs --program-build")

    memory = gpu_memory_bytes()
    if memory is None:
        print("gpu_bench: no GPU found (nvidia-smi is missing or lists none); "
              "this benchmark needs one NVIDIA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if args.prepared:
        return prepared(args, memory)
    dsopt = args.build / "bin" / "dsopt"
    if not dsopt.exists():
        print(f"gpu_bench: no dsopt at {dsopt} (build with CUDA first, or pass --build)", file=sys.stderr)
        return 1

    # The GEMM peak, measured now, on this GPU.
    peak_tflops, error = gemm_peak(args.out)
    if error:
        print(f"gpu_bench: {error}", file=sys.stderr)
        return 1

    # The model, at T 1024, and the largest micro-batch the plan fits.
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    precision = args.precision
    chosen = None
    for batch in BATCHES:
        model = work / f"gpt2-124m-b{batch}.onnx"
        if not model.exists():
            gen = run([sys.executable, ROOT / "test" / "oracles" / "gen_gpt.py", *generator_args(batch),
                       "--materialize", "--out", model])
            if gen.returncode != 0:
                print(f"gpu_bench: the GPT generator failed: {gen.stderr.strip()}", file=sys.stderr)
                return 1
        planned = run([dsopt, model, "--target", "cuda", "--precision", precision, "--emit=plan",
                       *DSOPT_FLAGS])
        if planned.returncode != 0 and precision == "bf16" and "precision" in planned.stderr:
            print(f"gpu_bench: dsopt refuses --precision bf16 ({planned.stderr.strip()}); "
                  "measuring fp32 instead, MFU still against the bf16 GEMM peak")
            precision = "fp32"
            planned = run([dsopt, model, "--target", "cuda", "--precision", precision, "--emit=plan",
                       *DSOPT_FLAGS])
        if planned.returncode != 0:
            print(f"gpu_bench: dsopt --emit=plan failed: {planned.stderr.strip()}", file=sys.stderr)
            return 1
        need = planned_device_bytes(json.loads(planned.stdout))
        if need <= FIT * memory:
            chosen = (batch, model, need)
            break
        model.unlink()
        Path(str(model) + ".data").unlink(missing_ok=True)
    if chosen is None:
        print("gpu_bench: not even micro-batch 1 fits in 90% of the GPU", file=sys.stderr)
        return 1
    batch, model, need = chosen

    program = work / "program"
    compiled = run([dsopt, model, "--target", "cuda", "--precision", precision, *DSOPT_FLAGS,
                    "-o", program])
    if compiled.returncode != 0:
        print(f"gpu_bench: dsopt failed: {compiled.stderr.strip()}", file=sys.stderr)
        return 1
    return train_and_report(program, model, batch, need, precision, peak_tflops, memory,
                            args.steps, work, args.out)


if __name__ == "__main__":
    sys.exit(main())
