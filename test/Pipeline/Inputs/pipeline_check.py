#!/usr/bin/python3
"""Checks dsopt-pipeline's simulated schedules against the literature.

    pipeline_check.py TOOL textbook     gpipe and 1f1b over p x m, exact
    pipeline_check.py TOOL interleaved  v = 2, 4 against (p-1)/(vm+p-1)
    pipeline_check.py TOOL zero-bubble  zb-h1's bubble against 1f1b's
    pipeline_check.py TOOL memory       peak in-flight micro-batches
    pipeline_check.py trace FILE P M V  a Chrome trace of the tool

The expected values are computed here from the published formulas with
exact fractions, independently of the C++ that simulates the schedules:
the tool's makespan and compute time must give exactly the textbook bubble
fraction, 1 - compute / (p * makespan). Prints one line per configuration
and exits non-zero at the first mismatch.
"""
import json
import subprocess
import sys
from fractions import Fraction

GRID_STAGES = (2, 3, 4, 8)
GRID_MICROBATCHES = (1, 4, 8, 16)


# The checks run under the simulator's three send semantics: grouping the
# transfers for rendezvous, and running the groups on a transfer stream of
# their own (the runtime's), must not change a schedule's times.
SEMANTICS = ("streamed", "rendezvous", "buffered")


def run(tool, schedule, p, m, v=None, forward=1, backward=2, weight=None,
        semantics="streamed"):
    command = [tool, "--schedule", schedule, "--stages", str(p),
               "--microbatches", str(m), "--forward", str(forward),
               "--backward", str(backward), "--semantics", semantics,
               "--json"]
    if v is not None:
        command += ["--chunks", str(v)]
    if weight is not None:
        command += ["--weight", str(weight)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(command)}: {result.stderr.strip()}")
    return json.loads(result.stdout)


SAME = {"runs": 0}


def both(tool, *args, **kwargs):
    """The summary under streamed sends, after checking that rendezvous and
    buffered sends give the same makespan, compute and peaks: the builders
    group the transfers so that rendezvous costs no time without latency."""
    summaries = {s: run(tool, *args, **kwargs, semantics=s) for s in SEMANTICS}
    first = summaries[SEMANTICS[0]]
    for key in ("makespan", "total_compute", "busy", "peak_in_flight",
                "peak_in_flight_per_rank"):
        for other in SEMANTICS[1:]:
            if first[key] != summaries[other][key]:
                sys.exit(f"FAIL: {args}: {key} {first[key]} with "
                         f"{SEMANTICS[0]} sends, {summaries[other][key]} with "
                         f"{other} sends")
    SAME["runs"] += 1
    return first


def same_line():
    print(f"streamed, rendezvous and buffered sends: the same times in "
          f"{SAME['runs']} runs")


def bubble(summary):
    """The simulated bubble fraction, exactly: every cost here is a dyadic
    rational, so the tool's sums are exact in binary floating point."""
    p = summary["stages"]
    return 1 - Fraction(summary["total_compute"]) / (
        p * Fraction(summary["makespan"]))


def expect(label, got, want):
    if got != want:
        sys.exit(f"FAIL: {label}: simulated {got} ({float(got):.6f}), "
                 f"expected {want} ({float(want):.6f})")
    print(f"{label}: {got} ok")


def textbook(tool):
    count = 0
    for schedule in ("gpipe", "1f1b"):
        # F = 1, B = 2 (split as Bi = Bw = 1), and uneven F = 1, B = 3.
        for forward, backward in ((1, 2), (1, 3)):
            for p in GRID_STAGES:
                for m in GRID_MICROBATCHES:
                    summary = both(tool, schedule, p, m, forward=forward,
                                   backward=backward)
                    label = f"{schedule} p={p} m={m} F={forward} B={backward}"
                    expect(label + " makespan",
                           Fraction(summary["makespan"]),
                           Fraction((m + p - 1) * (forward + backward)))
                    expect(label + " bubble", bubble(summary),
                           Fraction(p - 1, m + p - 1))
                    count += 1
    print(f"gpipe and 1f1b: {count} configurations match (p-1)/(m+p-1)")
    same_line()


def interleaved(tool):
    count = 0
    for v in (2, 4):
        for p in (2, 4, 8):
            for m in sorted({p, 2 * p, 8, 16}):
                if m % p:
                    continue
                summary = both(tool, "interleaved", p, m, v)
                label = f"interleaved p={p} m={m} v={v}"
                # Megatron: bubble time (p-1)(tf+tb)/v next to the ideal
                # m(tf+tb); as a fraction of p * makespan, (p-1)/(vm+p-1).
                expect(label + " bubble", bubble(summary),
                       Fraction(p - 1, v * m + p - 1))
                count += 1
    print(f"interleaved: {count} configurations match (p-1)/(v*m+p-1)")
    same_line()


def zero_bubble(tool):
    worst = 0
    for p in GRID_STAGES:
        for m in GRID_MICROBATCHES:
            if m < p:
                continue
            # F = Bi = W = 1: the paper's uniform case.
            zb = both(tool, "zb-h1", p, m, backward=2, weight=1)
            base = both(tool, "1f1b", p, m, backward=2, weight=1)
            idle = Fraction(zb["idle"])
            base_idle = Fraction(base["idle"])
            ratio = idle / base_idle
            fraction_ratio = bubble(zb) / bubble(base)
            worst = max(worst, ratio)
            # The paper's ZB-H1 bubble: (p-1)(F + B - W) per rank.
            expect(f"zb-h1 p={p} m={m} idle per rank", idle / p,
                   Fraction(p - 1))
            print(f"zb-h1 p={p} m={m}: bubble {float(bubble(zb)):.6f}, "
                  f"1f1b {float(bubble(base)):.6f}; idle time ratio "
                  f"{float(ratio):.4f}, bubble fraction ratio "
                  f"{float(fraction_ratio):.4f}")
            if ratio > Fraction(2, 5):
                sys.exit(f"FAIL: zb-h1 p={p} m={m}: idle time ratio "
                         f"{float(ratio):.4f} > 0.4")
    print(f"zb-h1: idle time at most {float(worst):.4f} of 1f1b's")
    same_line()


def memory(tool):
    for p in GRID_STAGES:
        for m in GRID_MICROBATCHES:
            peaks = {s: both(tool, s, p, m)["peak_in_flight"]
                     for s in ("gpipe", "1f1b", "zb-h1")}
            want = {"gpipe": [m] * p,
                    "1f1b": [min(p - r, m) for r in range(p)],
                    "zb-h1": [min(p, m)] * p}
            for schedule, peak in peaks.items():
                if peak != want[schedule]:
                    sys.exit(f"FAIL: {schedule} p={p} m={m}: peak in-flight "
                             f"{peak}, expected {want[schedule]}")
            if peaks["1f1b"][0] != min(p, m):
                sys.exit(f"FAIL: 1f1b p={p} m={m}: stage 0 peak "
                         f"{peaks['1f1b'][0]}")
            print(f"p={p} m={m}: gpipe {peaks['gpipe']}, 1f1b "
                  f"{peaks['1f1b']}, zb-h1 {peaks['zb-h1']} ok")
    print("peak in-flight micro-batches match")
    same_line()


def trace(path, p, m, v):
    with open(path) as file:
        events = json.load(file)["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    # Each rank's computations on track r; with streamed sends its
    # transfers on a track of their own, p + r.
    streamed = any(e["tid"] >= p for e in slices)
    want = {(0, r) for r in range(p)}
    want |= {(0, p + r) for r in range(p)} if streamed else set()
    tracks = sorted({(e["pid"], e["tid"]) for e in slices})
    if set(tracks) != want:
        sys.exit(f"FAIL: tracks {tracks} for {p} ranks")
    for e in slices:
        on_transfers = e["tid"] >= p
        if on_transfers != (streamed and e["cat"] == "communication"):
            sys.exit(f"FAIL: {e['name']} on track {e['tid']}")
    names = {e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    want_names = {f"rank {r}" for r in range(p)}
    want_names |= {f"rank {r} transfers" for r in range(p)} if streamed else set()
    if names != want_names:
        sys.exit(f"FAIL: track names {sorted(names)}")
    categories = {e["cat"] for e in slices}
    for track in tracks:
        mine = [e for e in slices if (e["pid"], e["tid"]) == track]
        count = {kind: sum(1 for e in mine if e["name"].startswith(kind)
                           and e["name"][1:].isdigit())
                 for kind in "FBW"}
        if track[1] < p and (count["F"] != m * v or count["B"] != m * v):
            sys.exit(f"FAIL: track {track}: {count['F']} F and {count['B']} "
                     f"B slices, expected {m * v} of each")
        for e in mine:
            if e["dur"] < 0 or e["ts"] < 0:
                sys.exit(f"FAIL: negative time in {e}")
        # A rank, and its transfer stream, runs one action at a time; the
        # transfers of one rendezvous group run together, over the same span.
        mine.sort(key=lambda e: (e["ts"], e["ts"] + e["dur"]))
        for a, b in zip(mine, mine[1:]):
            together = (a["cat"] == b["cat"] == "communication"
                        and a["ts"] == b["ts"] and a["dur"] == b["dur"])
            if b["ts"] < a["ts"] + a["dur"] - 1e-9 and not together:
                sys.exit(f"FAIL: {a['name']} and {b['name']} overlap on "
                         f"track {track}")
        if track[1] < p:
            print(f"track {track[1]}: {count['F']} F, {count['B']} B, "
                  f"{count['W']} W slices")
        else:
            print(f"track {track[1]}: {len(mine)} transfers")
    print(f"{len(tracks)} tracks; categories {', '.join(sorted(categories))}")


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "trace":
        trace(sys.argv[2], *map(int, sys.argv[3:]))
        return
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    tool, check = sys.argv[1:]
    {"textbook": textbook, "interleaved": interleaved,
     "zero-bubble": zero_bubble, "memory": memory}[check](tool)


if __name__ == "__main__":
    main()
