#!/usr/bin/env python3
"""The warp-stall sampler (bench/pc_sampling.cpp) without a GPU.

  pc_sampling_test.py report --records EXE --formatter bench/pc_stalls.py --work DIR
  pc_sampling_test.py no-driver --library libdsrt_pc_sampling.so --work DIR

report: records of known kernels, PCs and stall reasons through the
sampler's aggregation and JSON (EXE: runtime/tests/cuda/pc_sampling_records.cpp),
then bench/pc_stalls.py's table of that JSON, each checked against what the
records must give; and the formatter's verdicts on the JSON of a machine
that cannot sample (SKIP, exit 0) and of a failed sampling (exit 1).

no-driver: the library loaded with dlopen and its InitializeInjection called
by hand, where no CUDA driver called it: it must return, say on stderr why
nothing is sampled, and write a JSON saying so at exit. Exits 77 (skipped)
when the library cannot be loaded here (no libcupti).
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

FAILURES = []


def check(condition: bool, what: str) -> None:
    if not condition:
        FAILURES.append(what)
        print(f"FAIL: {what}")


STALLED = "smsp__pcsamp_warps_issue_stalled_"
ATTENTION = "_ZN4dsrt12_GLOBAL__N_116attention_kernelIfLi64EEEvPKT_S4_"


def records() -> str:
    lines = []
    # 13 kernels with more samples than the attention kernel, and "six"
    # with more than all: the attention kernel ranks 15th.
    for i in range(13):
        lines.append(f"k{i:02d}\t16\t{STALLED}selected\t{1000 - 10 * i}")
    # The attention kernel: two PCs of 50 samples each (a tie: the lower
    # offset first), and _not_issued samples that must not add to its total.
    lines += [
        f"{ATTENTION}\t16\t{STALLED}long_scoreboard\t45",
        f"{ATTENTION}\t16\t{STALLED}barrier\t5",
        f"{ATTENTION}\t32\t{STALLED}barrier\t25",
        f"{ATTENTION}\t32\t{STALLED}long_scoreboard\t5",
        f"{ATTENTION}\t32\t{STALLED}selected\t20",
        f"{ATTENTION}\t16\t{STALLED}long_scoreboard_not_issued\t40",
        f"{ATTENTION}\t48\t{STALLED}barrier_not_issued\t7",
    ]
    # A kernel of six reasons (the table shows five) and a name to escape.
    for n, reason in enumerate(["wait", "math_pipe_throttle", "mio_throttle", "short_scoreboard",
                                "not_selected", "branch_resolving"]):
        lines.append(f"six\t{64 + n}\t{STALLED}{reason}\t{600 - 100 * n}")
    lines.append(f'we"ird\\name\t0\t{STALLED}selected\t1')
    lines.append("#totals\t5000\t3\t11\t0")
    lines.append("#totals\t2000\t4\t1\t1")
    return "\n".join(lines) + "\n"


def report(args) -> None:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([args.records], input=records(), capture_output=True, text=True)
    check(done.returncode == 0, f"pc_sampling_records exit {done.returncode}: {done.stderr}")
    data = json.loads(done.stdout)
    (work / "stalls.json").write_text(done.stdout)
    kernels = data["kernels"]
    names = [k["name"] for k in kernels]
    check(data["status"] == "ok" and "error" not in data, f"status: {data.get('status')}")
    check(data["total_samples"] == 7000 and data["dropped_samples"] == 7
          and data["non_user_samples"] == 12 and data["hardware_buffer_full"] is True,
          f"totals: {data}")
    check([k["samples"] for k in kernels] == sorted((k["samples"] for k in kernels), reverse=True),
          "kernels are not by samples, most first")
    attention = next((k for k in kernels if k["mangled"] == ATTENTION), None)
    check(attention is not None, f"no attention kernel in {names}")
    if attention:
        check(attention["name"] ==
              "void dsrt::(anonymous namespace)::attention_kernel<float, 64>(float const*, float const*)",
              f"demangled: {attention['name']}")
        check(names.index(attention["name"]) == 14, f"attention ranks {names.index(attention['name'])}")
        check(attention["samples"] == 100, f"attention samples {attention['samples']} (not 100: "
              "the _not_issued reasons counted?)")
        check(attention["stalls"] == {f"{STALLED}long_scoreboard": 50, f"{STALLED}barrier": 30,
                                      f"{STALLED}selected": 20,
                                      f"{STALLED}long_scoreboard_not_issued": 40,
                                      f"{STALLED}barrier_not_issued": 7},
              f"attention stalls {attention['stalls']}")
        check(list(attention["stalls"])[:3] == [f"{STALLED}long_scoreboard", f"{STALLED}long_scoreboard_not_issued",
                                                f"{STALLED}barrier"],
              f"stalls not by count: {list(attention['stalls'])}")
        check(attention["top_pcs"] == [
            {"pc_offset": 16, "samples": 50, "reason": f"{STALLED}long_scoreboard"},
            {"pc_offset": 32, "samples": 50, "reason": f"{STALLED}barrier"}],
            f"attention top PCs {attention['top_pcs']}")
    six = next((k for k in kernels if k["name"] == "six"), {})
    check(len(six.get("top_pcs", [])) == 3, f"top PCs of six: {six.get('top_pcs')} (3 asked)")
    check('we"ird\\name' in names, f"escaped name lost: {names}")

    out = work / "stalls.md"
    done = subprocess.run([sys.executable, args.formatter, work / "stalls.json", "--out", out],
                          capture_output=True, text=True)
    check(done.returncode == 0, f"pc_stalls.py exit {done.returncode}: {done.stdout}{done.stderr}")
    text = out.read_text() if out.is_file() else ""
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line][1:]
    check(len(rows) == 13, f"{len(rows)} rows, not the top 12 and the attention kernel:\n{text}")
    check(rows[0].startswith("| six | 2,100 | 14.6% |") and rows[1].startswith("| k00 | 1,000 | "),
          f"not six then k00 first:\n{text}")
    check(not any(r.startswith("| k11 |") for r in rows), f"k11 (13th, not attention) listed:\n{text}")
    check("| dsrt::(anonymous namespace)::attention_kernel<float, 64> (#15) | 100 | 0.7% | "
          "long_scoreboard 50.0% | barrier 30.0% | selected 20.0% |  |  |" in text,
          f"attention row wrong:\n{text}")
    six_row = next((r for r in rows if r.startswith("| six |")), "")
    check("| wait 28.6% | math_pipe_throttle 23.8% |" in six_row and "not_selected 9.5% |" in six_row
          and "branch_resolving" not in six_row, f"six's row is not its top 5 reasons: {six_row}")
    check("- dsrt::(anonymous namespace)::attention_kernel<float, 64>: 0x10 50.0% long_scoreboard, "
          "0x20 50.0% barrier" in text, f"attention's hottest PCs missing:\n{text}")
    check("14,421 samples of 16 kernels; 7 dropped by the hardware; THE HARDWARE BUFFER OVERFLOWED"
          in text, f"summary line wrong:\n{text}")

    # The formatter's verdicts on a machine that cannot sample, a failed
    # sampling and an empty one.
    for status, line, code, expect in [
            ("unsupported", "cuptiPCSamplingEnable: CUPTI_ERROR_NOT_SUPPORTED", 0,
             "SKIP stalls: CUPTI PC sampling is not available here: cuptiPCSamplingEnable"),
            ("error", "cuptiPCSamplingGetData: CUPTI_ERROR_OUT_OF_MEMORY", 1,
             "error: PC sampling error: cuptiPCSamplingGetData"),
            ("ok", None, 1, "error: PC sampling ok: CUPTI reported no samples")]:
        status_line = f"#status\t{status}" + (f"\t{line}" if line else "") + "\n"
        done = subprocess.run([args.records], input=status_line, capture_output=True, text=True)
        (work / f"{status}.json").write_text(done.stdout)
        done = subprocess.run([sys.executable, args.formatter, work / f"{status}.json",
                               "--out", work / f"{status}.md"], capture_output=True, text=True)
        check(done.returncode == code and done.stdout.startswith(expect),
              f"{status}: exit {done.returncode}, printed {done.stdout!r}, not {code} and {expect!r}")


def no_driver(args) -> int:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    load = ("import ctypes, sys\n"
            "try:\n"
            "    library = ctypes.CDLL(sys.argv[1])\n"
            "except OSError as error:\n"
            "    print('cannot load:', error)\n"
            "    sys.exit(77)\n"
            "print('InitializeInjection returned', library.InitializeInjection(), flush=True)\n")

    def run(env: dict):
        environment = {k: v for k, v in os.environ.items() if not k.startswith("DSRT_PCSAMPLE")}
        environment.update(env)
        return subprocess.run([sys.executable, "-c", load, args.library], capture_output=True,
                              text=True, env=environment, timeout=60)

    out = work / "stalls.json"
    out.unlink(missing_ok=True)
    done = run({"DSRT_PCSAMPLE_OUT": str(out)})
    if done.returncode == 77:
        print(f"SKIP: {args.library} cannot be loaded here (no libcupti?): {done.stdout.strip()}")
        return 77
    print(done.stdout + done.stderr)
    check(done.returncode == 0, f"the process exited {done.returncode}")
    check("InitializeInjection returned 1" in done.stdout, "InitializeInjection did not return 1")
    check("dsrt pc sampling:" in done.stderr, "nothing said on stderr")
    data = json.loads(out.read_text()) if out.is_file() else {}
    # No driver: cuptiSubscribe fails. A driver without a GPU (or one that
    # is there, but no context): subscribed, and no context was created.
    check(data.get("status") in ("error", "unsupported", "no-context") and data.get("error")
          and data.get("kernels") == [], f"the JSON at exit: {data}")
    if data.get("status") != "no-context":
        check(f"{data.get('error')}" in done.stderr or "cuptiSubscribe failed" in done.stderr,
              f"stderr does not name the failed call: {done.stderr}")

    # A setting out of range: reported, written, nothing called.
    done = run({"DSRT_PCSAMPLE_OUT": str(out), "DSRT_PCSAMPLE_INTERVAL": "3"})
    data = json.loads(out.read_text()) if out.is_file() else {}
    check(done.returncode == 0 and "DSRT_PCSAMPLE_INTERVAL failed: must be N in 5..31" in done.stderr
          and data.get("status") == "error", f"interval 3: {done.stderr} {data}")
    # No output named: nothing sampled, said so.
    out.unlink(missing_ok=True)
    done = run({})
    check(done.returncode == 0 and "DSRT_PCSAMPLE_OUT is not set" in done.stderr
          and not out.exists(), f"without DSRT_PCSAMPLE_OUT: {done.stderr}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("report")
    r.add_argument("--records", required=True)
    r.add_argument("--formatter", required=True)
    r.add_argument("--work", required=True)
    n = sub.add_parser("no-driver")
    n.add_argument("--library", required=True)
    n.add_argument("--work", required=True)
    args = parser.parse_args()
    if args.mode == "report":
        report(args)
    elif no_driver(args) == 77:
        return 77
    if FAILURES:
        print(f"{len(FAILURES)} checks failed")
        return 1
    print("pc sampling: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
