#!/usr/bin/python3
"""Import time and peak memory of dsopt on GPT-3-shaped training graphs.

For each size it generates the graph with test/oracles/gen_gpt.py (weights as a
sparse external-data file, never written), then runs, each in a fresh process
and --repeat times:

  dsopt MODEL --emit=summary --mlir-timing   the full driver: import, the
                                             canonicalization pipeline and
                                             the summary; the import stage
                                             time is read from --mlir-timing
  onnx.load(MODEL, load_external_data=False) reference: parsing the same
                                             protobuf with ONNX's own loader

and reports medians of wall time and the peak resident set size of each
process (getrusage of the child). The ratio column is dsopt's total time
over the ONNX load time of the same file on the same machine in the same run.

Usage: bench/import_bench.py [--dsopt build/bin/dsopt] [--sizes 125M,1.3B,13B,175B]
                             [--repeat 5] [--markdown]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEN_GPT = os.path.join(ROOT, "test", "oracles", "gen_gpt.py")
PYTHON = "/usr/bin/python3"
ONNX_LOAD = ("import onnx, sys; m = onnx.load(sys.argv[1], load_external_data=False); "
             "print(len(m.graph.node))")


def measure(command):
    """Wall seconds and peak RSS (MiB) of one run of `command`."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    stdout = process.stdout.read()
    stderr = process.stderr.read()
    process.stdout.close()
    process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(command)}\n{stderr}")
    return elapsed, usage.ru_maxrss / 1024.0, stdout, stderr


def import_seconds(timing_report):
    """The `import` scope of dsopt's --mlir-timing report."""
    match = re.search(r"^\s*([0-9.]+)\s+\(\s*[0-9.]+%\)\s+import\s*$", timing_report,
                      re.MULTILINE)
    return float(match.group(1)) if match else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsopt", default=os.path.join(ROOT, "build", "bin", "dsopt"))
    parser.add_argument("--sizes", default="125M,1.3B,13B,175B")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dynamic", action="store_true",
                        help="symbolic batch/seq, Reshape targets computed in-graph")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            model = os.path.join(tmp, f"gpt_{size}.onnx")
            generate = [PYTHON, GEN_GPT, "--size", size, "--out", model]
            flags = []
            if args.dynamic:
                generate.append("--dynamic")
                flags = ["--batch", "1", "--dim", "seq=2048"]
            subprocess.run(generate, check=True, capture_output=True)
            dsopt_runs, onnx_runs, import_times = [], [], []
            for _ in range(args.repeat):
                wall, rss, _, stderr = measure(
                    [args.dsopt, model, "--emit=summary", "--mlir-timing", *flags])
                dsopt_runs.append((wall, rss))
                import_times.append(import_seconds(stderr))
                onnx_runs.append(measure([PYTHON, "-c", ONNX_LOAD, model])[:2])
            _, _, summary, _ = measure([args.dsopt, model, "--emit=summary", *flags])
            params = re.search(r"parameters\s+\d+ tensors, ([0-9,]+) elements", summary)
            row = {
                "size": size,
                "params": params.group(1) if params else "?",
                "onnx_bytes": os.path.getsize(model),
                "import_s": statistics.median(import_times),
                "total_s": statistics.median(w for w, _ in dsopt_runs),
                "rss_mib": statistics.median(r for _, r in dsopt_runs),
                "onnx_load_s": statistics.median(w for w, _ in onnx_runs),
                "onnx_rss_mib": statistics.median(r for _, r in onnx_runs),
            }
            row["ratio"] = row["total_s"] / row["onnx_load_s"]
            rows.append(row)
            print(f"{size}: {row}", file=sys.stderr)

    if args.markdown:
        print("| graph | parameters | .onnx size | import stage | dsopt total | peak RSS "
              "| onnx.load (reference) | its peak RSS | dsopt / onnx.load |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| GPT {r['size']} | {r['params']} | {r['onnx_bytes'] / 1024:.0f} KiB "
                  f"| {r['import_s'] * 1000:.0f} ms | {r['total_s'] * 1000:.0f} ms "
                  f"| {r['rss_mib']:.0f} MiB | {r['onnx_load_s'] * 1000:.0f} ms "
                  f"| {r['onnx_rss_mib']:.0f} MiB | {r['ratio']:.2f} |")
    else:
        for r in rows:
            print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
