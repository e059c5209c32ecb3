#!/usr/bin/python3
"""Time to compile a model into its programs: repeated layers emitted once
(the default) against one kernel call per op (--flat-codegen), in the same run.

For each model it runs `dsopt MODEL ... -o OUT` (import, passes, code
generation and the host compiler on every generated program: `run` and
`train`, built in parallel) both ways and reports the wall time of the whole
dsopt process and its CPU time (user + system, with the host compilers'),
each the minimum over --repeat runs, the size of the generated training
program's source, and the ratios default / flat. On a loaded machine the
wall time stretches with the load; the CPU time much less.

  gpt2_small   the zoo's GPT-2 small (12 layers, d_model 768, T = 256, B = 4),
               AdamW with gradient clipping, one rank
  gpt3_175b    test/zoo/gen_gpt.py --size 175B (96 layers, d_model 12288,
               T = 2048), ZeRO-3 over --dp 8: the program every rank runs,
               with all 96 layers (compiled only; its arena is 100s of GiB)

  bench/compile_bench.py --repeat 3 --markdown
  bench/compile_bench.py --only gpt3_175b --repeat 1
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
sys.path.insert(0, os.path.join(ROOT, "test", "zoo"))

GPT2_CONFIG = {
    "train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
    "gradient_clipping": 1.0,
}


def export_gpt2_small(tmp):
    import torch
    import models
    entry = models.ZOO["gpt2_small"]
    model, inputs = entry.build(), entry.inputs()
    path = os.path.join(tmp, "gpt2_small.onnx")
    with torch.no_grad():
        torch.onnx.export(model, tuple(inputs.values()), path, input_names=list(inputs),
                          output_names=["loss", "logits"], opset_version=17,
                          do_constant_folding=True, training=torch.onnx.TrainingMode.PRESERVE)
    config = os.path.join(tmp, "gpt2_config.json")
    with open(config, "w") as f:
        json.dump(GPT2_CONFIG, f)
    return [path, "--config", config]


def generate_gpt3_175b(tmp):
    path = os.path.join(tmp, "gpt3_175b.onnx")
    subprocess.run([sys.executable, os.path.join(ROOT, "test", "zoo", "gen_gpt.py"), "--size", "175B",
                    "--out", path], check=True, capture_output=True)
    return [path, "--zero", "3", "--dp", "8"]


MODELS = {"gpt2_small": export_gpt2_small, "gpt3_175b": generate_gpt3_175b}


def compile_once(dsopt, args, out, flat):
    command = [dsopt, *args, "-o", out] + (["--flat-codegen"] if flat else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(os.path.join(out, "src", "train.cpp")) as f:
        lines = sum(1 for _ in f)
    return seconds, cpu, lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsopt", default=os.path.join(ROOT, "build", "bin", "dsopt"))
    parser.add_argument("--repeat", type=int, default=3, help="runs per variant; the minimum counts")
    parser.add_argument("--only", choices=sorted(MODELS), action="append", help="benchmark only these")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or list(MODELS):
            model_args = MODELS[name](tmp)
            best = {}
            for flat in (False, True):
                times, cpus, lines = [], [], 0
                for r in range(args.repeat):
                    out = os.path.join(tmp, f"{name}-{'flat' if flat else 'blocks'}-{r}")
                    seconds, cpu, lines = compile_once(args.dsopt, model_args, out, flat)
                    times.append(seconds)
                    cpus.append(cpu)
                    subprocess.run(["rm", "-rf", out], check=True)
                best[flat] = (min(times), min(cpus), lines)
                print(f"{name} {'flat' if flat else 'blocks'}: {min(times):.1f} s wall, {min(cpus):.1f} s CPU "
                      f"(runs: {', '.join(f'{t:.1f}' for t in times)}), train.cpp {lines} lines",
                      file=sys.stderr)
            rows.append((name, best[False], best[True]))

    if args.markdown:
        print("| model | blocks: wall | CPU | train.cpp lines | flat: wall | CPU | train.cpp lines "
              "| blocks / flat: wall | CPU |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, (t, c, n), (tf, cf, nf) in rows:
            print(f"| {name} | {t:.1f} s | {c:.1f} s | {n:,} | {tf:.1f} s | {cf:.1f} s | {nf:,} "
                  f"| {t / tf:.2f} | {c / cf:.2f} |")
    else:
        for name, (t, c, n), (tf, cf, nf) in rows:
            print(f"{name}: {t:.1f} s wall, {c:.1f} s CPU ({n} lines) vs flat {tf:.1f} s, {cf:.1f} s CPU "
                  f"({nf} lines): ratios {t / tf:.2f} wall, {c / cf:.2f} CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
