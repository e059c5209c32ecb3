#!/usr/bin/python3
"""Prints the bubble table of docs/pipeline.md from dsopt-pipeline's output.

    scripts/pipeline_table.py [--tool build/bin/dsopt-pipeline] [--stages 4]
                              [--microbatches 8 16]

One row per schedule (interleaved with v = 2 and 4) and micro-batch count,
with uniform stages (F = 1, B = 2, W = 1 per micro-batch and rank).
"""
import argparse
import json
import subprocess

SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved", 4),
             ("zb-h1", 1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", default="build/bin/dsopt-pipeline")
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--microbatches", type=int, nargs="+", default=[8, 16])
    args = parser.parse_args()
    print("| schedule | v | m | makespan | idle per rank | bubble | textbook "
          "| peak in-flight per rank |")
    print("|---|---|---|---|---|---|---|---|")
    for m in args.microbatches:
        for schedule, v in SCHEDULES:
            summary = json.loads(subprocess.run(
                [args.tool, "--schedule", schedule, "--stages",
                 str(args.stages), "--microbatches", str(m), "--chunks",
                 str(v), "--json"],
                check=True, capture_output=True, text=True).stdout)
            textbook = summary["textbook_bubble_fraction"]
            idle = summary["idle"] / summary["stages"]
            peaks = " ".join(map(str, summary["peak_in_flight_per_rank"]))
            print(f"| {schedule} | {v} | {m} | {summary['makespan']:g} "
                  f"| {idle:g} | {summary['bubble_fraction']:.4f} "
                  f"| {'-' if textbook is None else f'{textbook:.4f}'} "
                  f"| {peaks} |")


if __name__ == "__main__":
    main()
