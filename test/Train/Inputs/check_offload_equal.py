#!/usr/bin/python3
"""Offloaded training equals the same training without offload, bit for bit.

For each case of CASES (precision x data-parallel ranks x ZeRO stage) this
compiles the zoo's MLP without offload and with `--offload-optimizer cpu`
(optimizer states and the optimizer step on the host) and, for some cases,
`--offload-optimizer nvme` (the states in a file under --nvme-path, read
and written around each update); with `--suite more`, the cases of
MORE_CASES instead: ZeRO-3's parameter offload (offload_param cpu or nvme,
the MLP and GPT-2, with two pipeline stages and with two tensor-parallel
ranks, max_in_cpu splitting the shards between host memory and the file,
--offload-param), offload with two pipeline stages, and partial offload
(offload_optimizer.ratio 0.5). It trains each for STEPS steps on the same
data (under mpirun for several ranks) and requires:
  * every step's loss and gradient norm in the log to be the same float;
  * the saved models (--save-onnx) to be the same bytes;
  * the offloaded run's measured high-water mark of every memory space to
    equal its plan (the log's memory_spaces against plan.json), with the
    optimizer states out of the device arena (host persistent bytes > 0);
  * with a file space, the log's file_io of every step after the first to
    read and write plan.json's bytes per step, the I/O engine busy when it
    moved bytes and the program's wait for it inside the step;
and, for the case marked `checkpoint`, that both runs' checkpoints are the
same bytes and that the offloaded program resumed from its step-2
checkpoint ends where the uninterrupted run does.

The runtime itself stops a run whose transfers move other bytes than the
plan says (checked every run of every function), so a passing run also
proves that.

Compiles run two at a time. Prints one line per case and a final count;
exits 1 on any failure.
"""
import argparse
import concurrent.futures
import filecmp
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

STEPS = 3
TIMEOUT_S = 300
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]

# (precision, dp ranks, ZeRO stage, offload devices, checkpoint). At one
# rank ZeRO has nothing to shard over (every stage trains unsharded), so
# one stage stands for all three there. "nvme-fallback" runs the nvme
# program again with the I/O engine's fallbacks (the page cache and
# pread/pwrite, as where O_DIRECT and io_uring are refused).
CASES = [("mlp", precision, dp, stage, 1,
          ("cpu", "nvme") + (("nvme-fallback",) if dp == 1 else ())
          if precision == "fp32" and stage != 2 else
          ("cpu", "nvme") if dp == 1 else ("cpu",),
          precision == "fp32" and dp == 2 and stage == 2)
         for precision in ("fp32", "bf16")
         for dp, stage in ((1, 1), (2, 1), (2, 2), (2, 3))]
# "cpu-unfused": bf16's 16-bit parameter copy made by a separate host cast
# after the update (--no-fuse-param-copy) instead of in the update's loop:
# the same bits as the fused copy of the other two programs.
CASES = [case[:5] + (case[5] + ("cpu-unfused",),) + case[6:]
         if case[1:4] == ("bf16", 2, 2) else case for case in CASES]
# (model, precision, dp ranks, ZeRO stage, pipeline stages, variants,
# checkpoint[, tensor-parallel ranks]): "param-cpu"/"param-nvme" offload
# ZeRO-3's parameter shards (offload_param; with nvme, max_in_cpu 0 puts
# every shard in the file), "param-split" keeps the first shards within
# max_in_cpu in host memory and the rest in the file, "param-flag" is
# param-nvme given by --offload-param and --nvme-path (param-nvme reads
# through a pool of 2 buffers, param-flag through the default 5), "ratio-cpu" offloads
# half of the parameters' optimizer states.
MORE_CASES = [
    ("mlp", "fp32", 1, 3, 1, ("param-cpu", "param-nvme", "param-split", "param-flag"),
     False),
    ("mlp", "fp32", 2, 3, 1, ("param-cpu", "param-nvme", "param-both"), False),
    ("mlp", "bf16", 2, 3, 1, ("param-cpu",), False),
    ("gpt2", "fp32", 2, 3, 1, ("param-nvme",), False),
    ("mlp", "fp32", 1, 1, 2, ("cpu",), False),
    ("mlp", "fp32", 1, 1, 1, ("ratio-cpu",), False),
    ("mlp", "fp32", 1, 3, 2, ("param-cpu",), False),
    ("gpt2", "fp32", 1, 3, 1, ("param-cpu",), False, 2),
]
# The MLP's parameter shards in order are 2048, 64, 4096, 64, 640 and 10
# elements (one rank): max_in_cpu 2200 keeps the first two in host memory.
SPLIT_MAX_IN_CPU = 2200
FALLBACK_ENV = {"DSRT_FILE_IO_REFUSE": "direct,uring"}
# The config of each variant's offload beyond --offload-optimizer.
VARIANT_CONFIG = {
    "param-cpu": {"offload_param": {"device": "cpu"}},
    "param-nvme": {"offload_param": {"device": "nvme", "nvme_path": "NVME", "max_in_cpu": 0,
                                     "buffer_count": 2}},
    "param-split": {"offload_param": {"device": "nvme", "nvme_path": "NVME",
                                      "max_in_cpu": SPLIT_MAX_IN_CPU}},
    "param-flag": {"offload_param": {"max_in_cpu": 0}},
    "param-both": {"offload_param": {"device": "nvme", "nvme_path": "NVME", "max_in_cpu": 0},
                   "offload_optimizer": {"device": "nvme", "nvme_path": "NVME"}},
    "ratio-cpu": {"offload_optimizer": {"device": "cpu", "ratio": 0.5}},
}

# Stage 3 shards every parameter of the tiny model (none stays whole).
CONFIG = {"zero_optimization": {"stage3_param_persistence_threshold": 1}}


def run(command: List[str], cwd: Optional[Path] = None,
        env: Optional[dict] = None) -> Optional[str]:
    """None on success, else why it failed."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S,
                              cwd=cwd, env=dict(os.environ, **env) if env else None)
    except subprocess.TimeoutExpired:
        return f"{command[0]} timed out after {TIMEOUT_S} s"
    if done.returncode != 0:
        text = " | ".join(l for l in (done.stderr + done.stdout).splitlines() if l.strip())
        return f"{' '.join(command[:3])}... exit {done.returncode}: {text[:600]}"
    return None


def case_name(model: str, precision: str, dp: int, stage: int, pp: int, tp: int = 1) -> str:
    return (f"{model} {precision} dp{dp}" + (f" pp{pp}" if pp > 1 else "")
            + (f" tp{tp}" if tp > 1 else "") + f" zero{stage}")


def case_dir(args, model: str, precision: str, dp: int, stage: int, pp: int,
             tp: int = 1) -> Path:
    prefix = "" if model == "mlp" else f"{model}-"
    suffix = (f"-pp{pp}" if pp > 1 else "") + (f"-tp{tp}" if tp > 1 else "")
    return args.work / f"{prefix}{precision}-dp{dp}-z{stage}{suffix}"


def variant_config(args, variant: str, nvme: Path) -> Path:
    """The ds_config.json of `variant`: CONFIG and its offload keys."""
    offload = json.loads(json.dumps(VARIANT_CONFIG.get(variant, {})).replace("NVME", str(nvme)))
    config = json.loads(json.dumps(CONFIG))
    config["zero_optimization"].update(offload)
    path = nvme.parent / f"ds_config-{variant or 'base'}.json"
    path.write_text(json.dumps(config))
    return path


def compile_command(args, model: str, precision: str, dp: int, stage: int, pp: int, tp: int,
                    offload: str, out: Path) -> List[str]:
    # Four micro-batches per global batch: dp 1 accumulates 4, dp 2 two each.
    nvme = out.parent / "nvme-files"
    nvme.mkdir(parents=True, exist_ok=True)
    command = [*shlex.split(args.dsopt), str(args.model.parent / f"{model}.onnx"),
               "--config", str(variant_config(args, offload, nvme)), "--dp", str(dp),
               "--zero", str(stage), "--grad-accum", str(4 // dp), "--precision", precision,
               "--no-forward", "-o", str(out)]
    if pp > 1:
        command += ["--pp", str(pp)]
    if tp > 1:
        command += ["--tp", str(tp)]
    if offload in ("cpu", "nvme"):
        command += ["--offload-optimizer", offload]
    if offload == "param-flag":
        command += ["--offload-param", "nvme"]
    if offload == "cpu-unfused":
        command += ["--offload-optimizer", "cpu", "--no-fuse-param-copy"]
    if offload in ("nvme", "param-flag"):
        command += ["--nvme-path", str(nvme)]
    return command


def train_command(dp: int, out: Path, data: Path, steps: int, log: Path, onnx: Path,
                  extra: List[str]) -> List[str]:
    command = [str(out / "train"), "--data", str(data), "--steps", str(steps), "--log-json",
               str(log), "--save-onnx", str(onnx), "--quiet"] + extra
    return (MPIRUN + ["-np", str(dp)] + command) if dp > 1 else command


def read_log(path: Path) -> List[dict]:
    """The log's step records (its last line is the run's summary)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if "loss" in r]


def same_files(a: Path, b: Path) -> Optional[str]:
    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    other = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    if names != other:
        return f"checkpoints hold different files: {names} vs {other}"
    for name in names:
        if not filecmp.cmp(a / name, b / name, shallow=False):
            return f"checkpoint file {name} differs"
    return None


def check_case(args, model: str, precision: str, dp: int, stage: int, pp: int, tp: int,
               device: str, checkpoint: bool) -> Optional[str]:
    work = case_dir(args, model, precision, dp, stage, pp, tp)
    base, off = work / "base", work / device.replace("-fallback", "")
    data = args.data if model == "mlp" else args.gpt2_data
    ranks = dp * pp * tp
    (work / "nvme-files").mkdir(exist_ok=True)
    if not (base / "done").exists():
        why = run(train_command(ranks, base, data, STEPS, work / "base.jsonl",
                                work / "base.onnx", []))
        if why:
            return f"base run: {why}"
        (base / "done").touch()
    work = work / f"{device}-run"
    work.mkdir(exist_ok=True)
    for label, out in (("base", base), ("offload", off)):
        if label == "base" and not checkpoint:
            for name in ("base.jsonl", "base.onnx"):
                (work / name).write_bytes((work.parent / name).read_bytes())
            continue
        extra = ["--save-dir", str(work / f"ckpt-{label}"), "--save-interval", "2"] \
            if checkpoint else []
        why = run(train_command(ranks, out, data, STEPS, work / f"{label}.jsonl",
                                work / f"{label}.onnx", extra),
                  env=FALLBACK_ENV if device == "nvme-fallback" else None)
        if why:
            return f"{label} run: {why}"
    base_log, off_log = read_log(work / "base.jsonl"), read_log(work / "offload.jsonl")
    for b, o in zip(base_log, off_log):
        for key in ("loss", "grad_norm"):
            if b[key] != o[key]:
                return f"step {b['step']}: {key} {o[key]!r} offloaded, {b[key]!r} without"
    if len(base_log) != STEPS or len(off_log) != STEPS:
        return f"logs hold {len(base_log)} and {len(off_log)} steps, not {STEPS}"
    if not filecmp.cmp(work / "base.onnx", work / "offload.onnx", shallow=False):
        return "the saved models differ"
    plan = json.loads((off / "plan.json").read_text())
    summary = [r for r in map(json.loads, (work / "offload.jsonl").read_text().splitlines())
               if r.get("summary")]
    # Several ranks: the summary's line per rank; one: its last step's.
    measured_ranks = summary[-1]["ranks"] if summary else [dict(off_log[-1], rank=0)]
    if len(measured_ranks) != ranks:
        return "the offloaded run's log does not give every rank's memory"
    for measured in measured_ranks:
        planned = plan["ranks"][measured["rank"]]["memory_spaces"]
        for space, numbers in measured["memory_spaces"].items():
            if numbers["peak_bytes"] != planned[space]["peak_bytes"]:
                return (f"rank {measured['rank']}: {space} space measured "
                        f"{numbers['peak_bytes']} bytes, plan.json {planned[space]['peak_bytes']}")
        spaces = {"param-split": ("host", "file"), "param-both": ("file",),
                  "param-flag": ("file",)}.get(
                      device, ("file",) if "nvme" in device else ("host",))
        for space in spaces:
            if planned[space]["persistent_bytes"] <= 0:
                return f"rank {measured['rank']}: the {space} space holds no states"
    # The log's file_io (rank 0's file store): from step 2 on, each step
    # reads and writes the plan's bytes per step, the engine was busy when
    # it moved bytes, and the program waited at most the step.
    moved = plan["ranks"][0].get("offload", {}).get("bytes_per_step", {})
    for record in off_log[1:]:
        io = record.get("file_io")
        if plan["ranks"][0]["memory_spaces"]["file"]["persistent_bytes"] <= 0:
            if io is not None:
                return f"step {record['step']}: file_io logged without a file space"
            continue
        if io is None:
            return f"step {record['step']}: the log has no file_io"
        if (io["bytes_read"], io["bytes_written"]) != (moved.get("file_to_host", 0),
                                                      moved.get("host_to_file", 0)):
            return (f"step {record['step']}: file_io read {io['bytes_read']} and wrote "
                    f"{io['bytes_written']} bytes, plan.json {moved}")
        if io["bytes_read"] and io["read_busy_s"] <= 0 or \
                io["bytes_written"] and io["write_busy_s"] <= 0:
            return f"step {record['step']}: file_io moved bytes with no busy time: {io}"
        if not 0 <= io["wait_s"] <= record["step_time_s"]:
            return f"step {record['step']}: file_io wait_s {io['wait_s']} outside the step"
    if device != "cpu" and any((work.parent / "nvme-files").iterdir()):
        return "the file space's file was not removed at exit"
    if checkpoint:
        why = same_files(work / "ckpt-base", work / "ckpt-offload")
        if why:
            return why
        why = run(train_command(ranks, off, data, STEPS, work / "resumed.jsonl",
                                work / "resumed.onnx",
                                ["--resume", str(work / "ckpt-offload" / "step_2")]))
        if why:
            return f"resumed run: {why}"
        if not filecmp.cmp(work / "base.onnx", work / "resumed.onnx", shallow=False):
            return "the offloaded run resumed at step 2 ends with other weights"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="the zoo's mlp.onnx")
    parser.add_argument("--data", type=Path, required=True,
                        help="batches of 4 micro-batches (make_train_data.py --gas 4)")
    parser.add_argument("--gpt2-data", type=Path,
                        help="the same for the zoo's gpt2.onnx (--suite more)")
    parser.add_argument("--suite", choices=("optimizer", "more"), default="optimizer")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--dsopt", default="dsopt", help="dsopt command (split like a shell would)")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    # Every case with its tensor-parallel ranks (1 where it gives none).
    cases = [case[:6] + (case[7] if len(case) > 7 else 1, case[6])
             for case in (CASES if args.suite == "optimizer" else MORE_CASES)]

    compiles = []
    for model, precision, dp, stage, pp, devices, tp, _ in cases:
        work = case_dir(args, model, precision, dp, stage, pp, tp)
        for offload in ("",) + tuple(d for d in devices if d != "nvme-fallback"):
            compiles.append(((model, precision, dp, stage, pp, tp),
                             compile_command(args, model, precision, dp, stage, pp, tp,
                                             offload, work / (offload or "base"))))
    failed_compile = {}
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for key, why in zip([key for key, _ in compiles],
                            pool.map(lambda c: run(c[1]), compiles)):
            if why and key not in failed_compile:
                failed_compile[key] = f"compile: {why}"
    print(f"compiled in {time.monotonic() - started:.0f} s", file=sys.stderr)

    failures = 0
    for model, precision, dp, stage, pp, devices, tp, checkpoint in cases:
        for device in devices:
            key = (model, precision, dp, stage, pp, tp)
            why = failed_compile.get(key) or \
                check_case(args, *key, device, checkpoint)
            name = f"{case_name(*key)} {device}"
            if why:
                failures += 1
                print(f"{name}: FAILED: {why}")
            else:
                print(f"{name}: offloaded = not offloaded, bit for bit"
                      + (" (and its checkpoints, and resumed)" if checkpoint else ""))
    print(f"offload equivalence: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
