#!/usr/bin/python3
"""Bigger than memory: a GPT whose model states do not fit in RAM trains with
its optimizer states and its parameters on NVMe (ZeRO-Infinity's
offload_optimizer and offload_param on nvme).

Writes a GPT-3-shaped model (test/oracles/gen_gpt.py --materialize, written
a chunk at a time; default about 2.1B parameters: 26 layers, d_model 2560,
vocabulary 50257, 128 tokens of batch 1), compiles it with ZeRO-3,
`offload_optimizer` and `offload_param` on nvme in WORK/nvme (bf16 by
default: the fp32 master weights, both Adam moments and the 16-bit
parameters live in the file space; the device and host arenas hold only
what the ops in flight need), prints the plan's bytes per memory space
(--plan-only stops there), and in the same run:

  1. measures the disk's own sequential O_DIRECT write and read speed in
     WORK/nvme with fio (io_uring, the aio block's block size and queue
     depth): the physical limit;
  2. trains --steps steps after one warm-up step (`train --log-json`;
     with --trace also `train --trace`, whose per-op times split the step
     into transfer ops and the other ops);
  3. reports, from plan.json's ranks[0].offload.bytes_per_step, the bytes
     read from and written to the file per step; the step time; the time
     those bytes take at the disk's speed (the I/O part of the step at
     best); the rest of the step (compute, host update and exposed copies);
     and the file I/O throughput achieved over the whole step
     (bytes / step time) against fio's (target >= 0.7).

The throughput over the whole step is a lower bound of the engine's own:
compute that does not overlap the I/O counts against it. So, per step, from
the log's file_io (the runtime's file engine counts it): the compute time
(the step less the exposed I/O wait, the time the program was blocked on
the file's operations), the exposed I/O wait, the time the engine had
requests in flight (reads and writes), the bytes, and the engine's
throughput = bytes / engine-busy time against fio's read and write speed;
and over the timed steps, the exposed I/O wait over the engine-busy time
(the share of the I/O that compute did not hide). --max-in-cpu sets
offload_param.max_in_cpu (0 puts every parameter shard in the file, so a
small model's parameters are read from it too).

Every command runs under a watchdog that samples its process tree's
resident memory and kills it past --mem-limit-gib (default 7), and prints
its peak RSS; --as-limit-gib caps each process's address space too. The
aio block's knobs are options (--block-size, --queue-depth, --intra-op,
--single-submit, --no-overlap-events); each configuration compiles its own
program (WORK/program-HASH), reused by later runs.

  bench/offload_bench.py --work /work/bench-nvme/run              # ~2.1B, ~45 GB of disk
  bench/offload_bench.py --work /work/bench-nvme/run --plan-only  # the plan's bytes
  bench/offload_bench.py --work /tmp/offload-dry --dry-run        # a tiny model, seconds
"""
import argparse
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GEN_GPT = ROOT / "test" / "oracles" / "gen_gpt.py"
sys.path.insert(0, str(ROOT / "scripts"))
from proc_tree import tree_rss  # noqa: E402

FULL = {"layers": 26, "d_model": 2560, "heads": 20, "vocab": 50257, "seq": 128, "batch": 1}
DRY = {"layers": 2, "d_model": 64, "heads": 2, "vocab": 512, "seq": 32, "batch": 2}
GIB = 1 << 30


class Measured:
    """A finished command: its output, wall time, the largest resident size
    of its process tree seen (sampled every 0.2 s), its peak RSS as the
    kernel counts it (ru_maxrss of the largest process), and the load
    average sampled while it ran."""

    def __init__(self, stdout, stderr, wall_s, tree_peak, maxrss, load):
        self.stdout, self.stderr, self.wall_s = stdout, stderr, wall_s
        self.tree_peak, self.maxrss, self.load = tree_peak, maxrss, load


def run(cmd, what, mem_limit=0, as_limit=0, **kw) -> Measured:
    """Runs `cmd`; stops the run, naming `what`, when it fails. With
    mem_limit the process tree is killed once its resident size passes it;
    with as_limit each process's address space is capped (prlimit --as)."""
    cmd = [str(c) for c in cmd]
    if as_limit:
        cmd = ["prlimit", f"--as={as_limit}", "--"] + cmd
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, start_new_session=True, **kw)
        peak, loads, killed = 0, [], None
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            rss = tree_rss(proc.pid)
            peak = max(peak, rss)
            loads.append(os.getloadavg()[0])
            if mem_limit and rss > mem_limit and killed is None:
                killed = rss
                os.killpg(proc.pid, signal.SIGKILL)
            time.sleep(0.2)
        wall = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if killed is not None:
        sys.exit(f"offload_bench: {what} killed: its processes held {killed / GIB:.2f} GiB, over "
                 f"--mem-limit-gib {mem_limit / GIB:g}")
    if proc.returncode != 0:
        sys.exit(f"offload_bench: {what} failed ({proc.returncode}): "
                 f"{(stderr or stdout).strip()[-2000:]}")
    return Measured(stdout, stderr, wall, peak, usage.ru_maxrss * 1024, loads)


def fio(directory: Path, rw: str, size: int, aio: dict) -> float:
    """Sequential O_DIRECT bytes per second of `rw` (write or read), with the
    aio block's request size and queue depth."""
    out = run(["fio", "--name=seq", f"--filename={directory / 'fio.bin'}", f"--rw={rw}",
               "--direct=1", "--ioengine=io_uring", f"--bs={aio['block_size']}",
               f"--iodepth={aio['queue_depth']}", f"--size={size}", "--output-format=json"],
              f"fio {rw}").stdout
    job = json.loads(out)["jobs"][0]
    return float(job["read" if rw == "read" else "write"]["bw_bytes"])


def trace_split(path: Path, steps: int):
    """Per timed step (the warm-up's left out), the seconds spent in ops that
    are file/host transfers and in all other ops, from train --trace.
    A step starts where the first function's first op runs again."""
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    first = (events[0]["args"].get("function"), events[0]["args"]["op"]) if events else None
    per_step, current = [], None
    for e in events:
        if (e["args"].get("function"), e["args"]["op"]) == first:
            current = {"transfer": 0.0, "compute": 0.0}
            per_step.append(current)
        kind = "transfer" if "transfer" in e["name"] else "compute"
        current[kind] += e["dur"] / 1e6
    if len(per_step) != steps + 1:
        return None
    timed = per_step[1:]
    return {k: statistics.median(s[k] for s in timed) for k in ("transfer", "compute")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True,
                        help="a directory on the disk under test (the file space goes in WORK/nvme)")
    parser.add_argument("--dsopt", type=Path, default=ROOT / "build" / "bin" / "dsopt")
    parser.add_argument("--dry-run", action="store_true", help="a tiny model, to check the script")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--threads", type=int, default=0, help="train --threads (0: all)")
    parser.add_argument("--offload-param", choices=("none", "cpu", "nvme"), default="nvme",
                        help="zero_optimization.offload_param.device (default nvme; not none "
                             "needs --zero 3)")
    parser.add_argument("--param-buffer-count", type=int, default=5,
                        help="offload_param.buffer_count: fetched parameters in flight (default 5)")
    parser.add_argument("--max-in-cpu", type=int, default=None,
                        help="offload_param.max_in_cpu (DeepSpeed's default 1e9: every shard of a "
                             "model under a billion parameters stays in host memory; 0: all in the file)")
    parser.add_argument("--zero", type=int, choices=(1, 2, 3), default=None,
                        help="ZeRO stage (default 3 with --offload-param, else 1)")
    parser.add_argument("--mem-limit-gib", type=float, default=7.0,
                        help="kill a command whose processes hold more resident memory "
                             "(default 7; 0: no limit)")
    parser.add_argument("--as-limit-gib", type=float, default=0,
                        help="cap each process's address space (prlimit --as; default 0: none)")
    parser.add_argument("--plan-only", action="store_true",
                        help="stop after printing the plan's bytes per memory space")
    parser.add_argument("--trace", action="store_true",
                        help="train --trace: split the step into transfer ops and the other ops")
    parser.add_argument("--block-size", type=int, default=1 << 20, help="aio.block_size (1 MiB)")
    parser.add_argument("--queue-depth", type=int, default=8, help="aio.queue_depth (8)")
    parser.add_argument("--intra-op", type=int, default=1, help="aio.intra_op_parallelism (1)")
    parser.add_argument("--single-submit", action="store_true", help="aio.single_submit true")
    parser.add_argument("--no-overlap-events", action="store_true", help="aio.overlap_events false")
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
    zero = args.zero or (3 if args.offload_param != "none" else 1)
    if args.offload_param != "none" and zero != 3:
        sys.exit("offload_bench: --offload-param needs --zero 3")
    mem_limit = int(args.mem_limit_gib * GIB)
    as_limit = int(args.as_limit_gib * GIB)
    work = args.work
    nvme = work / "nvme"
    nvme.mkdir(parents=True, exist_ok=True)

    model = work / "gpt.onnx"
    if not model.exists():
        run([sys.executable, GEN_GPT, "--layers", shape["layers"], "--d-model", shape["d_model"],
             "--heads", shape["heads"], "--vocab", shape["vocab"], "--seq", shape["seq"],
             "--batch", shape["batch"], "--materialize", "--materialize-limit-gib", 64,
             "--out", model], "gen_gpt.py", mem_limit)
    rng = np.random.default_rng(0)
    data = work / "data"
    data.mkdir(exist_ok=True)
    ids = rng.integers(0, shape["vocab"], size=(args.steps + 1, shape["batch"], shape["seq"]))
    np.save(data / "input_ids.npy", ids.astype(np.int64))
    np.save(data / "labels.npy", np.roll(ids, -1, axis=2).astype(np.int64))
    aio = {"block_size": args.block_size, "queue_depth": args.queue_depth,
           "intra_op_parallelism": args.intra_op, "single_submit": args.single_submit,
           "overlap_events": not args.no_overlap_events}
    zero_config = {"stage": zero, "offload_optimizer": {"device": "nvme", "nvme_path": str(nvme)}}
    if args.offload_param != "none":
        zero_config["offload_param"] = {"device": args.offload_param, "nvme_path": str(nvme),
                                        "buffer_count": args.param_buffer_count}
        if args.max_in_cpu is not None:
            zero_config["offload_param"]["max_in_cpu"] = args.max_in_cpu
    config_text = json.dumps({
        "train_micro_batch_size_per_gpu": shape["batch"],
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
        "zero_optimization": zero_config,
        "aio": aio}, sort_keys=True)
    # One program per configuration (and precision), reused by later runs.
    key = hashlib.sha256((config_text + args.precision).encode()).hexdigest()[:12]
    config = work / f"ds_config-{key}.json"
    config.write_text(config_text)
    common = [args.dsopt, model, "--config", config, "--precision", args.precision]
    plan_path = work / f"plan-{key}.json"
    planned = run(common + ["--emit=plan", "-o", plan_path], "dsopt --emit=plan", mem_limit, as_limit)
    plan = json.loads(plan_path.read_text())
    rank = plan["ranks"][0]
    moved = rank["offload"]["bytes_per_step"]
    file_read, file_write = moved.get("file_to_host", 0), moved.get("host_to_file", 0)
    spaces = rank["memory_spaces"]
    file_bytes = spaces["file"]["persistent_bytes"]
    d, layers = shape["d_model"], shape["layers"]
    params = (shape["vocab"] + shape["seq"]) * d + layers * (12 * d * d + 13 * d) + 2 * d
    print(f"model: {shape['layers']} layers, d_model {d}, vocabulary {shape['vocab']}, "
          f"{params / 1e9:.3f}B parameters ({16 * params / 1e9:.1f} GB of model states at 16 "
          f"bytes each), batch {shape['batch']} x {shape['seq']} tokens, {args.precision}, "
          f"ZeRO {zero}, offload_optimizer nvme, offload_param {args.offload_param}")
    print("plan peak bytes: " + ", ".join(
        f"{name} {spaces[name]['peak_bytes'] / 1e9:.3f} GB (persistent "
        f"{spaces[name]['persistent_bytes'] / 1e9:.3f})" for name in ("device", "host", "file")))
    print("bytes per step (plan.json): " + ", ".join(
        f"{k} {v / 1e9:.3f} GB" for k, v in sorted(moved.items()) if v))
    print(f"dsopt --emit=plan: {planned.wall_s:.1f} s, peak RSS {planned.maxrss / GIB:.2f} GiB")
    if args.plan_only:
        return 0

    program = work / f"program-{key}"
    if not (program / "train").exists():
        built = run(common + ["-o", program], "dsopt (compile)", mem_limit, as_limit)
        print(f"dsopt (compile): {built.wall_s:.1f} s, peak RSS {built.maxrss / GIB:.2f} GiB "
              f"(process tree {built.tree_peak / GIB:.2f} GiB)")

    size = args.fio_bytes or min(max(file_bytes, 64 << 20), 8 << 30)
    write_bw = fio(nvme, "write", size, aio)
    read_bw = fio(nvme, "read", size, aio)
    (nvme / "fio.bin").unlink(missing_ok=True)

    log = work / "train.jsonl"
    trace = work / "trace.json"
    cmd = [program / "train", "--data", data, "--steps", args.steps + 1, "--log-json", log,
           "--quiet"] + (["--threads", args.threads] if args.threads else []) \
        + (["--trace", trace] if args.trace else [])
    trained = run(cmd, "train", mem_limit, as_limit)
    steps = [json.loads(l) for l in log.read_text().splitlines() if '"step_time_s"' in l]
    if len(steps) != args.steps + 1:
        sys.exit(f"offload_bench: the log holds {len(steps)} steps, not {args.steps + 1}")
    step_s = statistics.median(s["step_time_s"] for s in steps[1:])
    io_s = file_read / read_bw + file_write / write_bw
    disk = (file_read + file_write) / io_s
    achieved = (file_read + file_write) / step_s
    load = trained.load
    print(f"train: peak RSS {trained.maxrss / GIB:.2f} GiB (process tree {trained.tree_peak / GIB:.2f} "
          f"GiB), {trained.wall_s:.1f} s for {args.steps + 1} steps; load average "
          f"{min(load):.1f}-{max(load):.1f} (mean {statistics.mean(load):.1f}) on {os.cpu_count()} cores")
    print("measured peak bytes (log): " + ", ".join(
        f"{name} {v['peak_bytes'] / 1e9:.3f} GB" for name, v in steps[-1]["memory_spaces"].items()))
    print(f"disk (fio, O_DIRECT, io_uring, {args.block_size >> 10} KiB x {args.queue_depth}): "
          f"write {write_bw / 1e9:.3f} GB/s, read {read_bw / 1e9:.3f} GB/s")
    print(f"per step: {file_read / 1e9:.3f} GB read, {file_write / 1e9:.3f} GB written "
          f"(plan.json)")
    print(f"step {step_s:.3f} s (median of {args.steps}, steps {[round(s['step_time_s'], 2) for s in steps]}"
          f"): I/O at disk speed {io_s:.3f} s, the rest {max(step_s - io_s, 0):.3f} s")
    if args.trace:
        split = trace_split(trace, args.steps)
        if split is None:
            print("trace: could not split the trace into steps")
        else:
            print(f"trace (median step): transfer ops {split['transfer']:.3f} s, other ops "
                  f"{split['compute']:.3f} s, outside ops {step_s - split['transfer'] - split['compute']:.3f} s")
    print(f"file I/O throughput over the step: {achieved / 1e9:.3f} GB/s = "
          f"{achieved / disk:.2f} of the disk's ({disk / 1e9:.3f} GB/s for this read/write mix)"
          f"; losses {[round(s['loss'], 4) for s in steps]}")
    print_engine_split(steps, read_bw, write_bw)
    return 0


def engine_split(step: dict, read_bw: float, write_bw: float) -> dict:
    """One step's split from its log line's file_io (the runtime's file
    engine): compute = step time - exposed I/O wait (the time the program
    was blocked on the file's operations); the engine's throughput = bytes /
    the time it had requests in flight, against fio's for the same bytes."""
    io = step["file_io"]
    read, written = io["bytes_read"], io["bytes_written"]
    busy = io["read_busy_s"] + io["write_busy_s"]
    fio_s = read / read_bw + written / write_bw
    out = {"step": step["step"], "step_s": step["step_time_s"], "wait_s": io["wait_s"],
           "compute_s": step["step_time_s"] - io["wait_s"], "busy_s": busy,
           "read": read, "written": written, "requests": io["requests"],
           "read_gbs": read / io["read_busy_s"] / 1e9 if io["read_busy_s"] > 0 else 0.0,
           "write_gbs": written / io["write_busy_s"] / 1e9 if io["write_busy_s"] > 0 else 0.0,
           "gbs": (read + written) / busy / 1e9 if busy > 0 else 0.0}
    out["read_ratio"] = out["read_gbs"] * 1e9 / read_bw
    out["write_ratio"] = out["write_gbs"] * 1e9 / write_bw
    out["ratio"] = busy and fio_s / busy
    out["exposed"] = io["wait_s"] / busy if busy > 0 else 0.0
    return out


def print_engine_split(steps: list, read_bw: float, write_bw: float) -> None:
    """Per step: compute, exposed I/O wait, engine-busy time, bytes and the
    engine's throughput against fio's (the warm-up step is step 1)."""
    if not all("file_io" in s for s in steps):
        print("engine split: the log has no file_io (the program has no file space)")
        return
    print("engine split per step (train --log-json file_io; step 1 is the warm-up and counts the "
          "file space's first writes):")
    print("  step | step s | compute s | exposed I/O wait s | engine busy s | GB read | "
          "GB written | requests | read GB/s (x fio) | write GB/s (x fio) | GB/s (x fio mix) | "
          "exposed wait / engine busy")
    for s in steps:
        e = engine_split(s, read_bw, write_bw)
        print(f"  {e['step']} | {e['step_s']:.2f} | {e['compute_s']:.2f} | {e['wait_s']:.2f} | "
              f"{e['busy_s']:.2f} | {e['read'] / 1e9:.3f} | {e['written'] / 1e9:.3f} | "
              f"{e['requests']} | {e['read_gbs']:.3f} ({e['read_ratio']:.2f}) | "
              f"{e['write_gbs']:.3f} ({e['write_ratio']:.2f}) | {e['gbs']:.3f} ({e['ratio']:.2f}) | {e['exposed']:.2f}")
    timed = [engine_split(s, read_bw, write_bw) for s in steps[1:]]
    if timed:
        wait, busy = sum(e["wait_s"] for e in timed), sum(e["busy_s"] for e in timed)
        print(f"exposed I/O wait over the timed steps: {wait:.3f} s of {busy:.3f} s engine busy "
              f"= {wait / busy if busy else 0:.2f}")


if __name__ == "__main__":
    sys.exit(main())
