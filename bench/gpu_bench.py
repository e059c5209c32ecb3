"""GPT-2 124M training throughput and MFU on one GPU, with dsopt --target cuda.

  gpu_bench.py [--build DIR] [--out DIR] [--steps N] [--precision bf16|fp32]
  gpu_bench.py --prepared PREP --program-build B [--out DIR] [--steps N] [--emulate]

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

--emulate (scripts/gpu-check.sh --device --emulate): B was built for the
CUDA emulation (docs/runtime.md, "The CUDA emulation") and there is no GPU.
Everything runs as above except the GEMM peak, which is built with nvcc
but not run: MFU is taken against the H200's nominal dense bf16 peak, and
bench.md and bench.json label every figure as the emulation's (the host
CPU's time, the emulated device's memory), not a GPU's. The prepared
program may be the tiny GPT (gpu_prepare.py --bench-size tiny), whose
dimensions the manifest gives.

Then each runtime setting of SETTINGS (environment variables of the cuda
backend whose defaults await a GPU's measurement) runs against the default
on the same program and data, a pair of short runs each: their ratio goes
into bench.md's settings table and bench.json's "settings" (--no-settings
leaves them out). The settings that won (WIN_RATIO) then run together
against one more default run: the step and MFU those defaults would give.

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
# The benchmark's model sizes: GPT-2 124M on the GPU, and a tiny GPT that
# the CUDA emulation trains in seconds (the rehearsal's bench stage).
SIZES = {
    "124m": {"title": "GPT-2 124M", "layers": 12, "d_model": 768, "heads": 12, "vocab": 50257,
             "seq": 1024, "batches": [256, 192, 128, 96, 64, 48, 32, 24, 16, 12, 8, 4, 2, 1]},
    "tiny": {"title": "tiny GPT", "layers": 2, "d_model": 64, "heads": 2, "vocab": 512,
             "seq": 64, "batches": [8, 4, 2, 1]},
}
D_MODEL, LAYERS, HEADS, SEQ, VOCAB = (SIZES["124m"][k] for k in
                                      ("d_model", "layers", "heads", "seq", "vocab"))
BATCHES = SIZES["124m"]["batches"]
# How the benchmark program is compiled (here and by scripts/gpu_prepare.py):
# fused attention, no [T, T] scores (docs/benchmarks.md).
DSOPT_FLAGS = ["--fuse-attention"]
FIT = 0.9
# Runtime settings the benchmark compares with the default on the same
# program, plan and data, each run right after a default run of the same
# length (the ratio of the pair): switches of the cuda backend whose
# default awaits such a measurement (docs/runtime.md, "Kernels").
SETTINGS = [
    ("bias gradients as product + column sums", {"DSRT_BIAS_GRAD": "separate"}),
    ("cuBLASLt workspace capped at 3 MiB (the tile panels')",
     {"DSRT_CUBLASLT_WORKSPACE": str(3 * 512 * 512 * 4)}),
    ("cuBLASLt's first 8 algorithms timed, the fastest kept", {"DSRT_CUBLASLT_TUNE": "8"}),
    ("attention rows32 tiling", {"DSRT_ATTENTION_KERNEL": "rows32"}),
    ("attention backward in one pass, dq by f32 atomics", {"DSRT_ATTENTION_GRAD": "atomic"}),
    ("attention forward at the compiler's registers (3 blocks a multiprocessor, not 4)",
     {"DSRT_ATTENTION_FORWARD_BLOCKS": "3"}),
    ("attention dQ at the compiler's registers (2 blocks a multiprocessor, not 3)",
     {"DSRT_ATTENTION_DQ_BLOCKS": "2"}),
]
SETTING_STEPS = 4
# A setting wins when its step is at least 1% shorter than its default's
# (the pairs' spread on an H200 was under 1%) with the loss within bf16's
# tolerance; the winners then run together against one more default run,
# the step those defaults would give, and its MFU.
WIN_RATIO = 0.99
# The H200's dense bf16 tensor-core peak (NVIDIA's data sheet, TFLOP/s):
# what --emulate, which measures nothing, takes MFU against.
NOMINAL_BF16_TFLOPS = 989.4


def generator_args(batch: int, size: str = "124m", gelu: str = "erf") -> list:
    """gen_gpt.py's flags for the `size` model (SIZES) at micro-batch
    `batch` (sparse weights; add --materialize for random ones); `gelu`
    "tanh" is GPT-2's own activation (gen_gpt.py --gelu)."""
    d = SIZES[size]
    return ["--layers", str(d["layers"]), "--d-model", str(d["d_model"]), "--heads", str(d["heads"]),
            "--vocab", str(d["vocab"]), "--seq", str(d["seq"]), "--batch", str(batch)] + (
                ["--gelu", gelu] if gelu != "erf" else [])


def dims_of(generator: list) -> dict:
    """The model's dimensions from its gen_gpt.py flags (generator_args)."""
    flags = dict(zip(generator[::2], generator[1::2]))
    return {"layers": int(flags["--layers"]), "d_model": int(flags["--d-model"]),
            "vocab": int(flags["--vocab"]), "seq": int(flags["--seq"])}


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


def gemm_peak(out: Path, emulate: bool = False):
    """The bf16 GEMM peak in TFLOP/s (bench/gemm_peak.cu, built now), or an
    error message. `emulate`: built but not run (there is no GPU), the
    nominal peak returned."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    peak_exe = out / "gemm_peak"
    built = run([nvcc, "-std=c++17", "-O3", "-arch=sm_90", ROOT / "bench" / "gemm_peak.cu",
                 "-o", peak_exe, "-lcublasLt"])
    if built.returncode != 0:
        return None, f"building gemm_peak failed:\n{built.stderr}"
    if emulate:
        return NOMINAL_BF16_TFLOPS, None
    measured = run([peak_exe])
    if measured.returncode != 0:
        return None, f"gemm_peak failed: {measured.stderr.strip()}"
    return float(measured.stdout.split(":")[-1].split()[0]), None


def train_and_report(program: Path, model: Path, batch: int, need: int, precision: str,
                     peak_tflops: float, memory: int, steps: int, work: Path, out: Path,
                     weights: Path = None, dims: dict = None, title: str = "GPT-2 124M",
                     emulate: bool = False, settings: bool = False, batches: list = None,
                     chosen_batch: bool = False) -> int:
    """Trains `steps` steps of `program` on random tokens, writes
    OUT/bench.md and OUT/bench.json. `dims`: the model's (dims_of), GPT-2
    124M's by default. `emulate`: the program runs on the CUDA emulation,
    and every figure is labelled so. `settings`: then compare SETTINGS
    (compare_settings) and add their table. `batches`: the micro-batches
    the largest fitting was chosen from (BATCHES by default);
    `chosen_batch`: `batch` was given (--bench-batch) instead."""
    dims = dims or {"layers": LAYERS, "d_model": D_MODEL, "vocab": VOCAB, "seq": SEQ}
    seq, layers, d_model = dims["seq"], dims["layers"], dims["d_model"]
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, dims["vocab"], size=(2, batch, seq + 1), dtype=np.int64)
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
    tokens_per_s = batch * seq / step_s
    params = parameter_count(model)
    flops_per_token = 6 * params + 12 * layers * seq * d_model
    mfu = tokens_per_s * flops_per_token / (peak_tflops * 1e12)
    measured_peak = steps_log[-1].get("memory_spaces", {}).get("device", {}).get("peak_bytes")
    result = {
        "model": title, "parameters": params, "seq": seq, "micro_batch": batch,
        "precision": precision, "steps": steps, "mean_step_s": step_s,
        "tokens_per_s": tokens_per_s, "flops_per_token": flops_per_token,
        "gemm_peak_tflops": peak_tflops, "mfu": mfu, "planned_device_bytes": need,
        "measured_device_peak_bytes": measured_peak, "gpu_memory_bytes": memory, "wall_s": wall,
        "final_loss": steps_log[-1].get("loss"),
        "emulated": emulate,
    }
    (out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    memory_line = (f"{measured_peak / 2**30:.2f} GiB measured, {need / 2**30:.2f} GiB planned"
                   + ("" if measured_peak == need else
                      f" (DIFFERENT: {measured_peak} and {need} bytes)")) if measured_peak is not None \
        else f"{need / 2**30:.2f} GiB planned (the run reported no device peak)"
    mfu_text = percent(mfu)
    # Under the emulation each figure is the host CPU's, and says so.
    emu = " (EMULATED: the host CPU, not a GPU)" if emulate else ""
    report = "\n".join([
        f"## {title} training on one GPU (bench/gpu_bench.py)"
        + (": REHEARSAL under the CUDA emulation, no GPU figure" if emulate else ""),
        "",
        "| | |", "|---|---|",
        f"| precision | {precision} |",
        f"| micro-batch x T | {batch} x {seq} ("
        + (f"--bench-batch; its plan fits 90% of {memory / 2**30:.0f} GiB" if chosen_batch else
           f"the largest of {', '.join(map(str, batches or BATCHES))} whose plan fits 90% of "
           f"{memory / 2**30:.0f} GiB") + ") |",
        f"| step | {step_s * 1000:.1f} ms (mean of {len(timed)} steps after the first){emu} |",
        f"| tokens/s | {tokens_per_s:,.0f}{emu} |",
        (f"| bf16 GEMM peak (nominal H200 dense bf16, not measured: no GPU) | {peak_tflops:.1f} TFLOP/s |"
         if emulate else f"| bf16 GEMM peak (cuBLASLt, measured) | {peak_tflops:.1f} TFLOP/s |"),
        f"| MFU | {mfu_text} ({flops_per_token / 1e9:.3g} GFLOP/token){emu} |",
        f"| device memory | {memory_line}{' (EMULATED device)' if emulate else ''} |",
        "",
    ])
    (out / "bench.md").write_text(report)
    print(report)
    if settings:
        table, rows, together = compare_settings(
            command, work, emulate,
            mfu_of=lambda step: batch * seq / step * flops_per_token / (peak_tflops * 1e12))
        result["settings"] = rows
        if together is not None:
            result["settings_winners"] = together
        (out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
        report += "\n" + table
        (out / "bench.md").write_text(report)
        print(table)
    op_profile(command, work, out, emulate)
    if measured_peak not in (None, need):
        print(f"gpu_bench: error: the measured device peak ({measured_peak} bytes) differs from "
              f"the planned one ({need} bytes)", file=sys.stderr)
        return 1
    return 0


def percent(fraction: float) -> str:
    """A fraction as a percentage: one decimal, or under 0.1% (the
    emulation's MFU) two significant digits, not "0.0%"."""
    return f"{fraction * 100:.1f}%" if fraction >= 1e-3 else f"{fraction * 100:.2g}%"


def timed_run(command: list, work: Path, name: str, env: dict):
    """`command` (train's, as train_and_report runs it) for SETTING_STEPS
    steps with `env` added: (mean step seconds after the first, final loss),
    or (None, the error)."""
    import os
    log = work / f"settings-{name}.jsonl"
    log.unlink(missing_ok=True)
    run_command = list(command)
    run_command[run_command.index("--steps") + 1] = SETTING_STEPS
    run_command[run_command.index("--log-json") + 1] = log
    done = run(run_command, env={**os.environ, **env})
    if done.returncode != 0:
        return None, f"exit {done.returncode}: {done.stderr.strip()[-400:]}"
    steps = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    timed = steps[1:] or steps
    return sum(x["step_time_s"] for x in timed) / len(timed), steps[-1].get("loss")


def winners(rows: list):
    """The settings of `rows` (compare_settings') that won: a ratio under
    WIN_RATIO and the same loss. Returns (their environment together,
    their titles)."""
    env, titles = {}, []
    for row in rows:
        if row.get("ratio") is not None and row["ratio"] < WIN_RATIO and \
                not row.get("loss_differs"):
            env.update(row["env"])
            titles.append(row["setting"])
    return env, titles


def compare_settings(command: list, work: Path, emulate: bool = False, mfu_of=None):
    """Each of SETTINGS against the default: a default run, then the
    setting's, SETTING_STEPS steps each on the same data; the ratio of
    their mean steps after the first. Then the winners (winners()) together
    against one more default run; `mfu_of(step_s)`, when given, gives the
    MFU of both. Returns the markdown table, the rows and the winners' row
    (None: no setting won) for bench.json. A setting whose run fails is
    reported, not fatal; one whose final loss differs from the default's by
    more than 2e-2 (bf16's tolerance in the model checks) is marked."""
    emu = " (EMULATED: the host CPU's times)" if emulate else ""
    lines = [f"### Runtime settings against the default, same program and data{emu}", "",
             f"Each pair: a default run, then the setting's, {SETTING_STEPS} steps each "
             "(the mean of the steps after the first).", "",
             "| setting | environment | default ms | setting ms | setting / default | final loss (default, setting) |",
             "|---|---|---|---|---|---|"]
    rows = []
    for i, (title, env) in enumerate(SETTINGS):
        env_text = " ".join(f"{k}={v}" for k, v in env.items())
        base, base_loss = timed_run(command, work, f"default-{i}", {})
        step, loss = timed_run(command, work, f"setting-{i}", env)
        row = {"setting": title, "env": env, "default_step_s": base, "step_s": step,
               "default_loss": base_loss, "loss": loss}
        if base is None or step is None:
            row["error"] = base_loss if base is None else loss
            lines.append(f"| {title} | `{env_text}` | FAILED: {row['error']} | | | |")
        else:
            ratio = step / base
            row["ratio"] = ratio
            mark = ""
            if base_loss is not None and loss is not None and \
                    abs(loss - base_loss) > 2e-2 * max(abs(base_loss), 1e-12):
                mark = " LOSS DIFFERS"
                row["loss_differs"] = True
            lines.append(f"| {title} | `{env_text}` | {base * 1000:.1f} | {step * 1000:.1f} | "
                         f"{ratio:.3f} | {base_loss:.6g}, {loss:.6g}{mark} |")
        rows.append(row)
    env, titles = winners(rows)
    if not titles:
        lines += ["", f"No setting won (a step at least {(1 - WIN_RATIO) * 100:.0f}% shorter, "
                  "the same loss): the defaults stand."]
        return "\n".join(lines) + "\n", rows, None
    env_text = " ".join(f"{k}={v}" for k, v in env.items())
    base, base_loss = timed_run(command, work, "default-winners", {})
    step, loss = timed_run(command, work, "winners", env)
    together = {"settings": titles, "env": env, "default_step_s": base, "step_s": step,
                "default_loss": base_loss, "loss": loss}
    lines += ["", f"The {len(titles)} winning settings together (a step at least "
              f"{(1 - WIN_RATIO) * 100:.0f}% shorter, the same loss), against one more "
              f"default run: `{env_text}`", ""]
    if base is None or step is None:
        together["error"] = base_loss if base is None else loss
        lines.append(f"FAILED: {together['error']}")
        return "\n".join(lines) + "\n", rows, together
    together["ratio"] = step / base
    lines += ["| | default | winners together |", "|---|---|---|",
              f"| step (ms) | {base * 1000:.1f} | {step * 1000:.1f} ({step / base:.3f}) |",
              f"| final loss | {base_loss:.6g} | {loss:.6g} |"]
    if mfu_of is not None:
        together["default_mfu"], together["mfu"] = mfu_of(base), mfu_of(step)
        lines.append(f"| MFU | {percent(together['default_mfu'])} | {percent(together['mfu'])} |")
    return "\n".join(lines) + "\n", rows, together


def op_table(trace: dict, emulate: bool = False) -> str:
    """Markdown: the last traced step's time per op kind (the trace's
    `name`), sorted by time, with the FLOP/s and bytes/s the ops' own
    counts (`args.flops`, `args.bytes`) give over their measured time."""
    ops = [e for e in (trace["traceEvents"] if isinstance(trace, dict) else trace)
           if e.get("ph") == "X"]
    if not ops:
        return "The traced run wrote no op entries.\n"
    last = max(e.get("args", {}).get("step", 0) for e in ops)
    ops = [e for e in ops if e.get("args", {}).get("step", 0) == last]
    begin = min(e["ts"] for e in ops)
    span = max(e["ts"] + e["dur"] for e in ops) - begin
    kinds = {}
    for e in ops:
        k = kinds.setdefault((e["name"], e.get("cat", "compute")), [0, 0.0, 0.0, 0.0])
        k[0] += 1
        k[1] += e["dur"]
        k[2] += e.get("args", {}).get("flops", 0) or 0
        k[3] += e.get("args", {}).get("bytes", 0) or 0
    compute = sum(v[1] for (name, cat), v in kinds.items() if cat == "compute")
    emu = " (EMULATED: the host CPU's times)" if emulate else ""
    lines = [f"Step {last} of the traced run{emu}: {len(ops)} ops, {span / 1e3:.2f} ms from the "
             f"first op's start to the last one's end; compute ops busy {compute / 1e3:.2f} ms "
             "(cudaEvents on each op's stream: an op lasts from when its stream reached it "
             "to when it finished).", "",
             "| op | stream | runs | total ms | share of compute | mean us | TFLOP/s | GB/s |",
             "|---|---|---|---|---|---|---|---|"]
    for (name, cat), (runs, dur, flops, nbytes) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        seconds = dur / 1e6
        rate = lambda v, unit, digits: f"{v / seconds / unit:.{digits}f}" if v and seconds > 0 else ""
        share = f"{100 * dur / compute:.1f}%" if cat == "compute" and compute else ""
        lines.append(f"| {name} | {cat} | {runs} | {dur / 1e3:.3f} | {share} | {dur / runs:.1f} | "
                     f"{rate(flops, 1e12, 2)} | {rate(nbytes, 1e9, 1)} |")
    return "\n".join(lines) + "\n"


def op_profile(command: list, work: Path, out: Path, emulate: bool) -> None:
    """Runs the benchmark's program again for 2 steps with --trace and
    writes OUT/ops.md (op_table) and OUT/trace.json: where the step's time
    goes, op by op. A failure here is reported, not fatal: the timed run
    above is the benchmark."""
    trace = out / "trace.json"
    traced = list(command)
    traced[traced.index("--steps") + 1] = 2
    log_at = traced.index("--log-json")
    del traced[log_at:log_at + 2]
    done = run([*traced, "--trace", trace])
    if done.returncode != 0 or not trace.is_file():
        print(f"gpu_bench: the traced run failed (exit {done.returncode}): "
              f"{done.stderr.strip()[-500:]}", file=sys.stderr)
        return
    table = op_table(json.loads(trace.read_text()), emulate)
    (out / "ops.md").write_text("## Where the benchmark's step goes, op by op "
                                "(bench/gpu_bench.py, train --trace)\n\n" + table)
    print(table)


def prepared(args, memory: int) -> int:
    """The device half: PREP's program, built in --program-build."""
    manifest = json.loads((args.prepared / "manifest.json").read_text())
    entry = next((p for p in manifest["programs"] if p["stage"] == "bench"), None)
    if entry is None:
        print(f"gpu_bench: {args.prepared}/manifest.json has no bench program "
              "(prepared with --no-bench?)", file=sys.stderr)
        return 1
    info = entry["bench"]
    if memory is None:
        # --emulate: the memory the micro-batch was chosen for stands in for
        # the device's.
        memory = int(info.get("gpu_memory_bytes", 139 * 2**30))
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
    peak_tflops, error = gemm_peak(args.out, emulate=args.emulate)
    if error:
        print(f"gpu_bench: {error}", file=sys.stderr)
        return 1
    return train_and_report(args.program_build, model, info["micro_batch"],
                            info["planned_device_bytes"], "bf16", peak_tflops, memory, args.steps,
                            work, args.out, weights=work, dims=dims_of(info["generator"]),
                            title=info.get("title", "GPT-2 124M"), emulate=args.emulate,
                            settings=args.settings, batches=info.get("batches"),
                            chosen_batch=bool(info.get("chosen_batch")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build-gpu", help="dsopt build with CUDA")
    parser.add_argument("--prepared", type=Path, help="gpu_prepare.py's directory (the device half)")
    parser.add_argument("--program-build", type=Path, help="with --prepared: the built program's directory")
    parser.add_argument("--out", type=Path, default=Path("gpu-bench"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--gelu", choices=["erf", "tanh"], default="erf",
                        help="the MLP's GELU: exact erf (default) or GPT-2's tanh approximation, "
                             "which the matmuls' cuBLASLt epilogues compute (docs/benchmarks.md)")
    parser.add_argument("--no-settings", dest="settings", action="store_false",
                        help="leave out the runtime settings' comparison (SETTINGS)")
    parser.add_argument("--emulate", action="store_true",
                        help="with --prepared: the program was built for the CUDA emulation (no GPU)")
    args = parser.parse_args()
    if args.prepared and not args.program_build:
        parser.error("--prepared needs --program-build")
    if args.emulate and not args.prepared:
        parser.error("--emulate needs --prepared")

    memory = None if args.emulate else gpu_memory_bytes()
    if memory is None and not args.emulate:
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
        model = work / f"gpt2-124m-b{batch}{'-tanh' if args.gelu == 'tanh' else ''}.onnx"
        if not model.exists():
            gen = run([sys.executable, ROOT / "test" / "oracles" / "gen_gpt.py",
                       *generator_args(batch, gelu=args.gelu),
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
                            args.steps, work, args.out, settings=args.settings)


if __name__ == "__main__":
    sys.exit(main())
