#!/usr/bin/env python3
"""Checks a fake-cudart report of a run with DSRT_CUBLASLT_TUNE=N.

    check_tune_report.py N REPORT

The fake's heuristic returns N algorithms numbered N-1 down to 0, number k
taking 1 + k ms of its clock (fake_cudart.cpp), so the tuner must keep
number 0: every algorithm is called while timed (a warm-up call and the
timed ones, the same count each), and number 0 besides on every call after.
Exit 0 when number 0 was called more often than each other number and
every number was called; 1 otherwise, saying which counts it found.
"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    n, report = int(sys.argv[1]), json.load(open(sys.argv[2]))
    counts = [0] * n
    for phase in report["phases"]:
        for key, value in phase["calls"].items():
            prefix = "cublasLtMatmul algorithm "
            if key.startswith(prefix):
                number = int(key[len(prefix):])
                if number >= n:
                    print(f"check_tune_report: algorithm {number} called, the heuristic gave {n}")
                    return 1
                counts[number] += value
    print("calls by algorithm number:", counts)
    if any(c == 0 for c in counts):
        print("check_tune_report: some algorithm was never timed")
        return 1
    if any(counts[0] <= c for c in counts[1:]):
        print("check_tune_report: the fastest algorithm (number 0) was not the one kept")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
