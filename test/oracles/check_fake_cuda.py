#!/usr/bin/env python3
"""Runs a cuda training program's host side behind the fake CUDA runtime.

dsopt writes the program's sources and plan (--target cuda --sources-only),
nvcc compiles src/train.cu with dsopt's flags and it is linked as dsopt links
it (against the shared cudart); the program then trains --steps steps with
the fake runtime (libdsrt_fake_cudart.so, docs/runtime.md "The fake CUDA
runtime") preloaded, under mpirun -np N when --ranks N > 1. From each rank's
report of the fake this checks:

  * no misuse: no launch of an unregistered kernel or with a bad
    configuration, no wait on an event never recorded, no stream or event
    used after it was destroyed, no copy between pageable buffers
  * device memory: exactly one cudaMalloc of the plan's device arena
    (memory_spaces.device.peak_bytes of the rank, which holds the kernels'
    workspaces); the other device allocations are printed
  * steps 2..N: no allocation or free, no stream creation or destruction, no
    cudaDeviceSynchronize, blocking cudaMemcpy/cudaMemset, asynchronous
    copy with pageable memory or constant address lookup
    (cudaGetSymbolAddress)
  * steps 2..N: the host synchronizations of each step, cudaStreamSynchronize
    and cudaEventSynchronize, are the plan's (plan.json, the rank's
    host_syncs: per step, by call, with what each is for), no more, no fewer
  * steps 2..N: no cuBLASLt descriptor, layout or preference created and
    no algorithm heuristic asked (the backend keeps them per product)
  * steps 1..N: every fill (a fill kernel launch or cudaMemsetAsync) on the
    function's stream, the one the step's cuBLASLt matmuls run on, so that
    it is ordered with the kernels before and after it
  * the kernel launches (by kernel), cuBLASLt matmuls and NCCL calls of
    steps 2..N are the same in every step

With --trace the program writes its Chrome trace, whose entries must come
from the timing marks (cudaEvents) the fake clock stamps, 1 ms per piece
of work queued, with no more host synchronizations. A pipeline program's
per-action entries: in each step every rank's actions in schedule order,
none before the previous one ended, every computation a whole, non-zero
number of fake milliseconds, and every step reads its marks
(cudaEventElapsedTime). Another program's per-op entries (each rank's
file): every op begins and lasts a whole number of fake milliseconds, the
ops of each track follow each other, the communication ops are on tracks
of their own (named for the communication stream; their count per step is
printed beside the plan's collectives), and each step reads two marks per
op and, from step 2, one for its origin.

Prints what it found, one line per fact, and "fake cuda: ok" or the
failures; exits 1 on any failure. --inject-step-malloc adds a cudaMalloc at
the start of the program's micro_step, and --inject-step-sync a
cudaStreamSynchronize of its stream, which the check must reject.

--fail-launch NAME[:K] then makes the fake fault the K-th launch of a
kernel whose name contains NAME (DSRT_FAKE_CUDA_FAIL_LAUNCH) and runs the
program (one rank) twice more, as is and with DSRT_CUDA_SYNC=1; each run
must fail, and its error lines are printed for the caller to check.
Repeated, each launch is faulted in runs of its own.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

# Calls that must not happen inside steps 2..N.
FORBIDDEN_IN_STEP = ["cudaMalloc", "cudaFree", "cudaHostAlloc", "cudaMallocHost", "cudaFreeHost",
                     "cudaStreamCreateWithFlags", "cudaStreamCreate", "cudaStreamDestroy",
                     "cudaDeviceSynchronize", "cudaMemcpy", "cudaMemset",
                     "cudaMemcpyAsync with pageable host memory",
                     # cuBLASLt's setup: the backend makes it on a product's
                     # first call and reuses it
                     "cublasLtCreate", "cublasLtMatmulDescCreate",
                     "cublasLtMatrixLayoutCreate", "cublasLtMatmulPreferenceCreate",
                     "cublasLtMatmulAlgoGetHeuristic",
                     # a constant's device address is looked up once
                     "cudaGetSymbolAddress"]
SYNCS = ["cudaStreamSynchronize", "cudaEventSynchronize"]


def run(command, label="fake cuda", **kw):
    """Runs command; on a non-zero exit prints it with its output and exits
    with "LABEL: FAILED: <program> exited N"."""
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kw)
    if done.returncode != 0:
        sys.stderr.write(" ".join(shlex.quote(str(c)) for c in command) + "\n" +
                         done.stdout + done.stderr)
        raise SystemExit(f"{label}: FAILED: {Path(str(command[0])).name} exited "
                         f"{done.returncode}")
    return done


def build(args, prog: Path) -> Path:
    run([args.dsopt, args.model, "--target", "cuda", "--sources-only", "-o", str(prog),
         *args.dsopt_flag])
    source = prog / "src" / "train.cu"
    injected = ""
    if args.inject_step_malloc:
        injected += "  { void *extra = nullptr; cudaMalloc(&extra, 256); }\n"
    if args.inject_step_sync:
        injected += "  cudaStreamSynchronize(dsrt::cuda::launch_stream(v1.stream));\n"
    if injected:
        text = source.read_text()
        head = "void dsopt_micro_step(dsrt::Program& v1) {\n"
        if head not in text:
            raise SystemExit(f"fake cuda: no '{head.strip()}' in {source}")
        source.write_text(text.replace(head, head + injected))
    flags = {}
    # The host compiler's -O level as dsopt's flags give it (the fake runs
    # no kernel, so it changes nothing the check sees).
    opt = [f for f in args.dsopt_flag if f.startswith("--host-opt-level")]
    out = run([args.dsopt, "--print-build-flags", "--target", "cuda", *opt]).stdout
    for line in out.splitlines():
        key, _, value = line.partition(": ")
        flags[key] = value
    obj = prog / "train.o"
    # Through the compiler launcher the tests use (ccache), from the source's
    # directory with a relative name, as dsopt compiles (docs/cli.md).
    launcher = os.environ.get("DSOPT_HOST_LAUNCHER", "")
    run([*([launcher] if launcher else []), flags["nvcc"], *shlex.split(flags["nvccflags"]),
         "-c", source.name, "-o", str(obj.resolve())], cwd=source.parent)
    exe = prog / "train_fake"
    run([args.cxx, str(obj), "-o", str(exe), *shlex.split(flags["libs"])])
    return exe


def is_fill(work: str) -> bool:
    return work == "cudaMemsetAsync" or "fill_kernel" in work


def fill_streams(who, phase, failures):
    """Requires every fill of a step on the stream its matmuls run on."""
    by_stream = {}
    for key, count in phase.get("stream_work", {}).items():
        stream, _, work = key.partition(" ")
        by_stream.setdefault(int(stream), {})[work] = count
    matmuls = {s: w.get("cublasLtMatmul", 0) for s, w in by_stream.items()}
    if not any(matmuls.values()):
        return
    function_stream = max(matmuls, key=matmuls.get)
    for stream, work in sorted(by_stream.items()):
        fills = sum(n for w, n in work.items() if is_fill(w))
        if fills and stream != function_stream:
            failures.append(f"{who}: {phase['name']}: {fills} fills on stream {stream}, not on "
                            f"the function's stream {function_stream}")


def failing_runs(command, env, spec) -> int:
    """Runs the program with launch `spec` faulting, without and with
    DSRT_CUDA_SYNC=1; prints each run's exit and error lines."""
    failed = True
    for label, sync in (("as is", None), ("DSRT_CUDA_SYNC=1", "1")):
        # The faulting runs write their own report: fake.json stays the
        # checked run's (other tools read it).
        run_env = dict(env, DSRT_FAKE_CUDA_FAIL_LAUNCH=spec,
                       DSRT_FAKE_CUDA_REPORT=env["DSRT_FAKE_CUDA_REPORT"] + ".fail")
        run_env.pop("DSRT_CUDA_SYNC", None)
        if sync:
            run_env["DSRT_CUDA_SYNC"] = sync
        done = subprocess.run(command, capture_output=True, text=True, env=run_env)
        print(f"{spec}, {label}: exit {done.returncode}")
        for line in (done.stdout + done.stderr).splitlines():
            if "error" in line or "fake cudart" in line:
                print(f"{spec}, {label}: {line}")
        failed = failed and done.returncode != 0
    print(f"fake cuda: {spec}: both runs failed" if failed else
          f"fake cuda: FAILED: {spec}: a run succeeded")
    return 0 if failed else 1


COMPUTE = ("forward", "backward", "weight-gradient")


def whole_ms(us: float) -> bool:
    return abs(us / 1000 - round(us / 1000)) < 1e-6


def check_op_trace(trace, report, plan, args, failures):
    """A per-op trace (train --trace of a program without a pipeline),
    timed by the fake's event clock: each rank's file."""
    for rank in range(args.ranks):
        path = trace if rank == 0 else Path(f"{trace}.rank{rank}")
        if not path.exists():
            failures.append(f"--trace wrote no {path}")
            continue
        data = json.loads(path.read_text())["traceEvents"]
        names = {e["tid"]: e["args"]["name"] for e in data
                 if e.get("ph") == "M" and e["name"] == "thread_name"}
        events = [e for e in data if e.get("ph") == "X"]
        who = f"rank {rank}"
        by_track = {}
        for e in events:
            by_track.setdefault((e["tid"], e["args"]["step"]), []).append(e)
            if not (whole_ms(e["ts"]) and whole_ms(e["dur"])):
                failures.append(f"trace: {who} step {e['args']['step']}: {e['name']} at "
                                f"{e['ts']} us lasting {e['dur']} us, not whole fake milliseconds")
        for (tid, step), ops in sorted(by_track.items()):
            # One stream each: ops follow each other.
            for before, after in zip(ops, ops[1:]):
                if after["ts"] < before["ts"] + before["dur"]:
                    failures.append(f"trace: {who} step {step}: {after['name']} at "
                                    f"{after['ts']} begins before {before['name']} ended")
        steps = sorted({e["args"]["step"] for e in events})
        comm = [e for e in events if e["cat"] == "communication"]
        comm_tracks = sorted({e["tid"] for e in comm})
        compute_tracks = sorted({e["tid"] for e in events if e["cat"] == "compute"})
        if set(comm_tracks) & set(compute_tracks):
            failures.append(f"trace: {who}: communication ops on compute tracks {comm_tracks}")
        for tid in comm_tracks:
            if "communication stream" not in names.get(tid, ""):
                failures.append(f"trace: {who}: track {tid} is named {names.get(tid)!r}")
        # The plan's collectives per step.
        top = plan.get("ranks", [])
        mine = next((e for e in top if e.get("rank") == rank), top[0] if top else {})
        calls = sum(c["calls"] for c in mine.get("collective_bytes", {}).values())
        per_step = [sum(e["args"]["step"] == s for e in comm) for s in steps]
        print(f"trace: {who}: {len(events)} ops over steps {steps[0]}..{steps[-1]} on "
              f"{len(compute_tracks)} compute and {len(comm_tracks)} communication tracks "
              f"({', '.join(names.get(t, '?') for t in comm_tracks)}); whole fake ms, in order "
              f"per track; ops last {min(e['dur'] for e in events) / 1000:g}.."
              f"{max(e['dur'] for e in events) / 1000:g} fake ms")
        print(f"trace: {who}: communication ops per step {per_step} "
              f"({', '.join(sorted({e['name'] for e in comm}))}); the plan's collectives "
              f"per step: {calls}")
        rpath = Path(f"{report}.rank{rank}") if args.ranks > 1 else report
        phases = json.loads(rpath.read_text())["phases"]
        reads = [p["calls"].get("cudaEventElapsedTime", 0) for p in phases[1:-1]]
        ops = [sum(e["args"]["step"] == s for e in events) for s in steps]
        print(f"{who}: timing marks read per step (cudaEventElapsedTime): {reads}, "
              f"ops traced per step: {ops}")
        # Two per op, and from step 2 one more: the step's origin from the last.
        want = [2 * n + (i > 0) for i, n in enumerate(ops)]
        if reads != want:
            failures.append(f"{who}: timing marks read per step {reads}, expected {want}")


def check_trace(trace, report, args, failures, plan=None):
    """A pipeline trace's actions, timed by the fake's event clock."""
    if not trace.exists():
        failures.append(f"--trace wrote no {trace}")
        return
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    if events and "op" in events[0]["args"]:
        check_op_trace(trace, report, plan, args, failures)
        return
    by_track = {}
    for e in events:
        by_track.setdefault((e["tid"], e["args"]["step"]), []).append(e)
    if not by_track:
        failures.append("trace: no action entries")
        return
    durations = []
    for (tid, step), actions in sorted(by_track.items()):
        # Written in schedule order; each begins after the one before ended
        # (1 ns of slack: the times are written to the nearest ns).
        for before, after in zip(actions, actions[1:]):
            if (after["ts"], after["dur"]) == (before["ts"], before["dur"]):
                continue  # one send_recv group: its transfers share their times
            if after["ts"] + 0.001 < before["ts"] + before["dur"]:
                failures.append(f"trace: rank {tid} step {step}: {after['name']} at "
                                f"{after['ts']} begins before {before['name']} ended")
        for a in actions:
            if a["cat"] not in COMPUTE:
                continue
            durations.append(a["dur"])
            if a["dur"] < 1000 or abs(a["dur"] / 1000 - round(a["dur"] / 1000)) > 1e-6:
                failures.append(f"trace: rank {tid} step {step}: {a['name']} lasts {a['dur']} us, "
                                f"not a whole number of the fake clock's milliseconds")
    steps = sorted({step for _, step in by_track})
    ranks = {e["args"].get("rank", e["tid"]) for e in events}
    print(f"trace: {len(events)} actions of {len(ranks)} ranks over steps "
          f"{steps[0]}..{steps[-1]}, in schedule order; computations last "
          f"{min(durations) / 1000:g}..{max(durations) / 1000:g} fake ms")
    for rank in range(args.ranks):
        path = Path(f"{report}.rank{rank}") if args.ranks > 1 else report
        phases = json.loads(path.read_text())["phases"]
        reads = [p["calls"].get("cudaEventElapsedTime", 0) for p in phases[1:-1]]
        print(f"rank {rank}: timing marks read per step (cudaEventElapsedTime): {reads}")
        if not all(reads):
            failures.append(f"rank {rank}: a step read no timing marks: {reads}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the ONNX model")
    parser.add_argument("--data", required=True, help="train --data DIR")
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--fake", required=True, help="libdsrt_fake_cudart.so")
    parser.add_argument("--dsopt", default="dsopt")
    parser.add_argument("--cxx", default="c++")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=1, help="mpirun -np N (1: no mpirun)")
    parser.add_argument("--dsopt-flag", action="append", default=[],
                        help="a flag for dsopt (--dp=2, --zero=3); repeat for more")
    parser.add_argument("--inject-step-malloc", action="store_true")
    parser.add_argument("--inject-step-sync", action="store_true")
    parser.add_argument("--trace", action="store_true",
                        help="run with --trace and check the trace's times")
    parser.add_argument("--fail-launch", metavar="NAME[:K]", action="append", default=[],
                        help="fault that launch; run without and with DSRT_CUDA_SYNC=1 "
                             "(repeat for more, each in runs of its own)")
    args = parser.parse_args()
    if args.fail_launch and args.ranks > 1:
        parser.error("--fail-launch runs one rank")
    args.work.mkdir(parents=True, exist_ok=True)
    prog = args.work / "prog"
    exe = build(args, prog)

    report = args.work / "fake.json"
    for old in args.work.glob("fake.json*"):
        old.unlink()
    # One fake device per rank (all ranks are on this host).
    env = dict(os.environ, DSRT_FAKE_CUDA_REPORT=str(report), LD_PRELOAD=args.fake,
               DSRT_FAKE_CUDA_DEVICES=str(args.ranks))
    command = [str(exe), "--data", args.data, "--steps", str(args.steps), "--quiet"]
    trace = args.work / "trace.json"
    if args.trace:
        command += ["--trace", str(trace)]
    if args.ranks > 1:
        command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                   "-np", str(args.ranks),
                   "-x", "DSRT_FAKE_CUDA_REPORT", "-x", "DSRT_FAKE_CUDA_DEVICES", "-x", "LD_PRELOAD",
                   *command]
    run(command, env=env)

    plan = json.loads((prog / "plan.json").read_text())
    failures = []
    for rank in range(args.ranks):
        path = Path(f"{report}.rank{rank}") if args.ranks > 1 else report
        if not path.exists():
            failures.append(f"rank {rank}: the fake wrote no report {path}")
            continue
        phases = json.loads(path.read_text())["phases"]
        who = f"rank {rank}"
        names = [p["name"] for p in phases]
        expected = ["setup"] + [f"step {s}" for s in range(1, args.steps + 1)] + ["end"]
        if names != expected:
            failures.append(f"{who}: phases {names}, expected {expected}")
            continue
        for p in phases:
            if p["error_count"]:
                failures.append(f"{who}: {p['name']}: {p['error_count']} misuses: " +
                                "; ".join(p["errors"][:3]))
        # Device memory: the arena once, at the plan's size.
        # The plan's top-level ranks[] has an entry per rank of the job, with
        # its pipeline coordinate (pp) and its memory spaces; train.ranks[]
        # one per pipeline rank (dp and tp ranks share it).
        top = plan.get("ranks", [])
        job = next((e for e in top if e.get("rank") == rank), top[0] if top else {})
        entries = plan["train"]["ranks"]
        pp = job.get("pp", 0)
        planned = next((e for e in entries if e.get("pipeline", {}).get("pp", 0) == pp), None)
        if planned is None:
            failures.append(f"{who}: the plan's train.ranks has no entry of pipeline rank {pp}")
            continue
        spaces = job.get("memory_spaces", {})
        space = spaces.get("device", {}).get("peak_bytes", planned["arena_bytes"])
        workspace = max(f.get("kernel_workspace_bytes", 0) for f in planned["functions"])
        allocs = [(p["name"], b) for p in phases for b in p["device_allocs"]]
        # The backend over-allocates by an alignment above 256 bytes.
        extra = planned.get("alignment", 0) if planned.get("alignment", 0) > 256 else 0
        arena = [a for a in allocs if a[1] == space + extra]
        print(f"{who}: device arena: {len(arena)} cudaMalloc of {space} bytes "
              f"(plan: arena_bytes {planned['arena_bytes']}, holding the kernels' "
              f"workspace of {workspace} bytes)")
        if len(arena) != 1 or arena[0][0] != "setup":
            failures.append(f"{who}: expected one cudaMalloc of the arena's {space} bytes before "
                            f"step 1, found {arena}")
        others = sorted(b for _, b in allocs if b != space + extra)
        print(f"{who}: other device allocations: {others}")
        host = spaces.get("host", {}).get("peak_bytes", 0)
        # offload_param.pin_memory false with parameters alone offloaded:
        # the host arena is ordinary host memory, no cudaHostAlloc.
        zero = plan["train"].get("config", {}).get("zero_optimization", {})
        pageable = (zero.get("offload_param", {}).get("device", "none") != "none" and
                    not zero.get("offload_param", {}).get("pin_memory", False) and
                    zero.get("offload_optimizer", {}).get("device", "none") == "none")
        if host and pageable:
            pinned = [(p["name"], b) for p in phases for b in p["host_allocs"]
                      if b in (host, host + 4096)]
            print(f"{who}: pageable host arena of {host} bytes: {len(pinned)} cudaHostAlloc "
                  f"of it (offload_param.pin_memory false)")
            if pinned:
                failures.append(f"{who}: the host space is pageable, yet cudaHostAlloc'ed: "
                                f"{pinned}")
        elif host:
            # An alignment above 256 bytes (4096: file transfers read and
            # write whole blocks) is had by over-allocating by it.
            pinned = [(p["name"], b) for p in phases for b in p["host_allocs"]
                      if b in (host, host + 4096)]
            print(f"{who}: pinned host arena: {len(pinned)} cudaHostAlloc of {host} bytes "
                  f"(plan: memory_spaces.host.peak_bytes, and its alignment)")
            if len(pinned) != 1 or pinned[0][0] != "setup":
                failures.append(f"{who}: expected one cudaHostAlloc of the host space's {host} "
                                f"bytes before step 1, found {pinned}")
        steps = phases[2:-1]  # steps 2..N
        for p in steps:
            bad = {c: p["calls"][c] for c in FORBIDDEN_IN_STEP if p["calls"].get(c)}
            if bad:
                failures.append(f"{who}: {p['name']}: " +
                                ", ".join(f"{c} x{n}" for c, n in sorted(bad.items())))
        # The host synchronizations of every step are the plan's.
        planned_syncs = planned.get("host_syncs")
        if planned_syncs is None:
            failures.append(f"{who}: the plan lists no host_syncs for rank {planned['rank']}")
        else:
            want = {c: 0 for c in SYNCS}
            for point in planned_syncs["points"]:
                want[point["call"]] = want.get(point["call"], 0) + point["count"]
            why = "; ".join(f"{pt['count']} {pt['call']} in {pt['function']}: {pt['what']}"
                            for pt in planned_syncs["points"])
            print(f"{who}: planned host synchronizations per step: "
                  f"{planned_syncs['per_step']} ({why})")
            if sum(want.values()) != planned_syncs["per_step"]:
                failures.append(f"{who}: the plan's host_syncs points add up to "
                                f"{sum(want.values())}, not its per_step "
                                f"{planned_syncs['per_step']}")
            for p in phases[1:-1]:
                got = {c: p["calls"].get(c, 0) for c in want}
                print(f"{who}: {p['name']}: host synchronizations: " +
                      ", ".join(f"{c} {n}" for c, n in got.items()))
                # Step 1 also waits for the setup's last uploads.
                if p["name"] != "step 1" and got != want:
                    failures.append(f"{who}: {p['name']}: host synchronizations " +
                                    ", ".join(f"{c} {n}" for c, n in got.items()) +
                                    ", the plan's are " +
                                    ", ".join(f"{c} {n}" for c, n in want.items()))

        for p in phases[1:-1]:
            fill_streams(who, p, failures)

        def work(p):
            return ({k: v for k, v in p["calls"].items()
                     if k == "kernel launch" or k.startswith("nccl") or k == "cublasLtMatmul"},
                    p["kernels"])
        first = work(steps[0])
        launches = first[0].get("kernel launch", 0)
        print(f"{who}: kernel launches per step: {launches}, cuBLASLt matmuls: "
              f"{first[0].get('cublasLtMatmul', 0)}, NCCL calls: "
              f"{sum(v for k, v in first[0].items() if k.startswith('nccl'))}")
        for p in steps[1:]:
            if work(p) != first:
                failures.append(f"{who}: {p['name']} launched other work than {steps[0]['name']}: "
                                f"{work(p)[0]} vs {first[0]}")
        waits = sum(p["calls"].get("cudaStreamWaitEvent", 0) for p in phases)
        print(f"{who}: stream waits: {waits}, each on a recorded, live event")
    if args.trace:
        check_trace(trace, report, args, failures, plan)
    for f in failures:
        print(f"FAILED: {f}")
    print("fake cuda: ok" if not failures else f"fake cuda: {len(failures)} failures")
    status = 1 if failures else 0
    for spec in args.fail_launch:
        status = max(status, failing_runs(command, env, spec))
    return status


if __name__ == "__main__":
    sys.exit(main())
