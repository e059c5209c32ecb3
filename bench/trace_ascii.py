#!/usr/bin/python3
"""One step of a pipeline trace as text: a lane per rank, time left to right.

    bench/trace_ascii.py TRACE.json [--step N] [--width 100]

Reads the Chrome trace JSON of `OUT/train --trace` (measured) or of
`dsopt --emit=trace` (simulated, one step). Forward passes are drawn with
`=`, backward passes with `#` (zb-h1: its input part `#`, its weight part
`w`), each labelled with its name where it fits; time a rank spends in a
send or receive is `.`, idle time blank. A rank's transfers on a track of
their own (the runtime's transfer stream, the simulation's streamed sends)
are drawn on a lane below it, `~` while a send_recv group is in flight.
Below the lanes: the step's makespan and its bubble,
1 - compute / (ranks x makespan).
"""
import argparse
import json
import sys

FILL = {"F": "=", "B": "#", "Bi": "#", "W": "w"}


def kind_of(name: str) -> str:
    for prefix in ("Bi", "B", "W", "F"):
        if name.startswith(prefix) and name[len(prefix):len(prefix) + 1].isdigit():
            return prefix
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--step", type=int, default=0, help="which step (default: the last)")
    parser.add_argument("--width", type=int, default=100)
    args = parser.parse_args()
    trace = json.load(open(args.trace))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    slices = [e for e in events if e.get("ph") == "X"]
    steps = sorted({e.get("args", {}).get("step", 1) for e in slices})
    step = args.step or steps[-1]
    slices = [e for e in slices if e.get("args", {}).get("step", 1) == step]
    if not slices:
        sys.exit(f"{args.trace}: no slices for step {step}")
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    start = min(e["ts"] for e in slices)
    end = max(e["ts"] + e["dur"] for e in slices)
    span = end - start
    scale = args.width / span
    lanes = sorted({e["tid"] for e in slices})
    # A lane of transfers only is a transfer stream's: drawn after its
    # rank's (the lane of the same rank, or tid - ranks), not counted as a
    # rank.
    transfer_lanes = {t for t in lanes
                      if all(not kind_of(e["name"]) for e in slices if e["tid"] == t)}
    ranks = len(lanes) - len(transfer_lanes)
    if transfer_lanes:
        lanes.sort(key=lambda t: (t - ranks, 1) if t in transfer_lanes else (t, 0))
    label_width = max(len(names.get(t, f"rank {t}")) for t in lanes)
    compute = 0.0
    for tid in lanes:
        row = [" "] * args.width
        mine = sorted((e for e in slices if e["tid"] == tid), key=lambda e: e["ts"])
        for e in mine:
            c0 = int((e["ts"] - start) * scale)
            c1 = max(c0 + 1, int((e["ts"] + e["dur"] - start) * scale))
            kind = kind_of(e["name"])
            if kind:
                compute += e["dur"]
            fill = FILL.get(kind, "~" if tid in transfer_lanes else ".")
            for c in range(c0, min(c1, args.width)):
                if row[c] == " " or kind:
                    row[c] = fill
            if kind and c1 - c0 >= len(e["name"]) + 2:
                at = c0 + (c1 - c0 - len(e["name"])) // 2
                row[at:at + len(e["name"])] = list(e["name"])
        print(f"{names.get(tid, f'rank {tid}'):>{label_width}} |{''.join(row)}|")
    print(f"step {step}: makespan {span / 1000:.2f} ms, bubble "
          f"{1 - compute / (ranks * span):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
