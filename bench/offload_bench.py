#!/usr/bin/python3
"""Bigger than memory: a GPT whose model states do not fit in RAM trains with
its optimizer states on NVMe (ZeRO-Infinity's offload_optimizer nvme).

Writes a GPT-3-shaped model (test/oracles/gen_gpt.py; default about 2.1B
parameters: 26 layers, d_model 2560, vocabulary 50257), compiles it with
`--offload-optimizer nvme --nvme-path WORK/nvme` (bf16 by default: the
16-bit parameters and gradients stay in the program's arena, the fp32
master weights and both Adam moments, 12 bytes per parameter, live in the
file space), and in the same run:

  1. measures the disk's own sequential O_DIRECT write and read speed in
     WORK/nvme with fio (io_uring, the aio block's block size and queue
     depth): the physical limit;
  2. trains --steps steps after one warm-up step (`train --log-json`);
  3. reports, from plan.json's ranks[0].offload.bytes_per_step, the bytes
     read from and written to the file per step; the step time; the time
     those bytes take at the disk's speed (the I/O part of the step at
     best); the rest of the step (compute, host update and exposed copies);
     and the file I/O throughput achieved over the whole step
     (bytes / step time) against fio's (target >= 0.7).

The throughput over the whole step is a lower bound of the engine's own:
compute that does not overlap the I/O counts against it.

  bench/offload_bench.py --work /nvme/dsopt-bench                 # ~2.1B, needs ~40 GB free
  bench/offload_bench.py --work /tmp/offload-dry --dry-run        # a tiny model, seconds

Do not run the full size on a shared machine: it needs most of a 24 GiB
machine's memory and tens of GB of disk.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GEN_GPT = ROOT / "test" / "oracles" / "gen_gpt.py"

FULL = {"layers": 26, "d_model": 2560, "heads": 20, "vocab": 50257, "seq": 512, "batch": 1}
DRY = {"layers": 2, "d_model": 64, "heads": 2, "vocab": 512, "seq": 32, "batch": 2}


def run(cmd, what, **kw):
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if done.returncode != 0:
        sys.exit(f"offload_bench: {what} failed ({done.returncode}): "
                 f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout


def fio(directory: Path, rw: str, size: int, block: int, depth: int) -> float:
    """Sequential O_DIRECT bytes per second of `rw` (write or read)."""
    out = run(["fio", "--name=seq", f"--filename={directory / 'fio.bin'}", f"--rw={rw}",
               "--direct=1", "--ioengine=io_uring", f"--bs={block}", f"--iodepth={depth}",
               f"--size={size}", "--output-format=json"], f"fio {rw}")
    job = json.loads(out)["jobs"][0]
    return float(job["read" if rw == "read" else "write"]["bw_bytes"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True,
                        help="a directory on the disk under test (the file space goes in WORK/nvme)")
    parser.add_argument("--dsopt", type=Path, default=ROOT / "build" / "bin" / "dsopt")
    parser.add_argument("--dry-run", action="store_true", help="a tiny model, to check the script")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--threads", type=int, default=0, help="train --threads (0: all)")
    parser.add_argument("--fio-bytes", type=int, default=0,
                        help="bytes fio writes and reads (default: the file space's, at most 8 GiB)")
    for key, value in FULL.items():
        parser.add_argument("--" + key.replace("_", "-"), type=int, default=None,
                            help=f"default {value} ({DRY[key]} with --dry-run)")
    args = parser.parse_args()
    shape = dict(DRY if args.dry_run else FULL)
    for key in shape:
        if getattr(args, key) is not None:
            shape[key] = getattr(args, key)
    if args.steps < 1:
        sys.exit("offload_bench: --steps must be >= 1")
    work = args.work
    nvme = work / "nvme"
    nvme.mkdir(parents=True, exist_ok=True)

    model = work / "gpt.onnx"
    if not model.exists():
        run([sys.executable, GEN_GPT, "--layers", shape["layers"], "--d-model", shape["d_model"],
             "--heads", shape["heads"], "--vocab", shape["vocab"], "--seq", shape["seq"],
             "--batch", shape["batch"], "--materialize", "--out", model], "gen_gpt.py")
    rng = np.random.default_rng(0)
    data = work / "data"
    data.mkdir(exist_ok=True)
    ids = rng.integers(0, shape["vocab"], size=(args.steps + 1, shape["batch"], shape["seq"]))
    np.save(data / "input_ids.npy", ids.astype(np.int64))
    np.save(data / "labels.npy", np.roll(ids, -1, axis=2).astype(np.int64))
    aio = {"block_size": 1 << 20, "queue_depth": 8}
    config = work / "ds_config.json"
    config.write_text(json.dumps({
        "train_micro_batch_size_per_gpu": shape["batch"],
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
        "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "nvme",
                                                                "nvme_path": str(nvme)}},
        "aio": aio}))
    common = [args.dsopt, model, "--config", config, "--precision", args.precision]
    plan_path = work / "plan.json"
    run(common + ["--emit=plan", "-o", plan_path], "dsopt --emit=plan")
    plan = json.loads(plan_path.read_text())
    rank = plan["ranks"][0]
    moved = rank["offload"]["bytes_per_step"]
    file_read, file_write = moved.get("file_to_host", 0), moved.get("host_to_file", 0)
    file_bytes = rank["memory_spaces"]["file"]["persistent_bytes"]
    program = work / "program"
    if not (program / "train").exists():
        run(common + ["-o", program], "dsopt (compile)")

    size = args.fio_bytes or min(max(file_bytes, 64 << 20), 8 << 30)
    write_bw = fio(nvme, "write", size, aio["block_size"], aio["queue_depth"])
    read_bw = fio(nvme, "read", size, aio["block_size"], aio["queue_depth"])
    (nvme / "fio.bin").unlink(missing_ok=True)

    log = work / "train.jsonl"
    cmd = [program / "train", "--data", data, "--steps", args.steps + 1, "--log-json", log,
           "--quiet"] + (["--threads", args.threads] if args.threads else [])
    run(cmd, "train")
    steps = [json.loads(l) for l in log.read_text().splitlines() if '"step_time_s"' in l]
    if len(steps) != args.steps + 1:
        sys.exit(f"offload_bench: the log holds {len(steps)} steps, not {args.steps + 1}")
    step_s = statistics.median(s["step_time_s"] for s in steps[1:])
    io_s = file_read / read_bw + file_write / write_bw
    disk = (file_read + file_write) / io_s
    achieved = (file_read + file_write) / step_s
    print(f"model: {shape['layers']} layers, d_model {shape['d_model']}, vocabulary "
          f"{shape['vocab']}, {args.precision}; file space {file_bytes / 1e9:.3f} GB")
    print(f"disk (fio, O_DIRECT, io_uring, 1 MiB x 8): write {write_bw / 1e9:.3f} GB/s, "
          f"read {read_bw / 1e9:.3f} GB/s")
    print(f"per step: {file_read / 1e9:.3f} GB read, {file_write / 1e9:.3f} GB written "
          f"(plan.json)")
    print(f"step {step_s:.3f} s (median of {args.steps}): I/O at disk speed {io_s:.3f} s, "
          f"the rest {max(step_s - io_s, 0):.3f} s")
    print(f"file I/O throughput over the step: {achieved / 1e9:.3f} GB/s = "
          f"{achieved / disk:.2f} of the disk's ({disk / 1e9:.3f} GB/s for this read/write mix)"
          f"; losses {[round(s['loss'], 4) for s in steps]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
