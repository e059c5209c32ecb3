#!/usr/bin/env python3
"""The device half of the split GPU check (scripts/gpu-check.sh --device):
the programs that gpu_prepare.py generated, built against a standalone
libdsrt_cuda, run on the GPU and compared with the cpu runs' results.
Needs python3 with numpy (gpu_compare.py), no dsopt and no PyTorch.

  gpu_device.py targets PREP
      one line per program: its name and the executables to build
  gpu_device.py no-device PREP BUILDS
      runs every built executable as a machine without a GPU must see it:
      exit 1 saying "no CUDA device" (the build-only proof)
  gpu_device.py run PREP OUT BUILDS STAGE [--timeout S]
      runs STAGE's programs (BUILDS/NAME/EXE), their outputs under
      OUT/work/STAGE/NAME, then compares them with PREP's cpu results

  gpu_device.py checkpoint PREP OUT BUILDS [--timeout S]
      the checkpoint stage's programs (each the plain training program of
      a model): a run saving a checkpoint after step K (its losses those of
      the cpu run), a run resuming that checkpoint (steps K+1.. equal to
      the saving run's, loss and gradient norm to the bit), and a run
      resuming the cpu program's checkpoint of step K (the cpu's losses)

  gpu_device.py trace TRACE [--require-overlap]
      a per-op Chrome trace (train --trace, timed by cudaEvents): the ops
      on the compute and on the communication stream's tracks, and how
      long both ran at once (the union of the communication ops' intervals
      intersected with the compute ops'), and the same for the file
      space's reads and writes on the I/O stream's tracks; --require-overlap
      fails when a trace with communication ops has none overlapping compute

BUILDS/NAME is the CMake build directory of PREP/programs/NAME/src.
Exits 1 on any failure.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_compare  # noqa: E402


def manifest(prep: Path) -> dict:
    path = prep / "manifest.json"
    if not path.exists():
        sys.exit(f"gpu_device: no {path}: run scripts/gpu-check.sh --prepare {prep} where dsopt is built")
    return json.loads(path.read_text())


def targets(prep: Path) -> int:
    exes = {}
    for program in manifest(prep)["programs"]:
        exes.setdefault(program["name"], set()).add(program["exe"])
    for name, names in exes.items():
        print(name, *sorted(names))
    return 0


def no_device(prep: Path, builds: Path) -> int:
    failures = 0
    seen = set()
    for program in manifest(prep)["programs"]:
        exe = builds / program["name"] / program["exe"]
        if exe in seen:
            continue
        seen.add(exe)
        if not exe.exists():
            print(f"{program['name']}/{program['exe']}: NOT BUILT ({exe})")
            failures += 1
            continue
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
        done = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
        said = (done.stdout + done.stderr).strip().splitlines()
        ok = done.returncode == 1 and any("no CUDA device" in line for line in said)
        print(f"{program['name']}/{program['exe']} without a GPU: exit {done.returncode}: "
              f"{said[0] if said else ''}{'' if ok else ' (UNEXPECTED)'}")
        failures += not ok
    print(f"no-device: {len(seen)} executables, {failures} failures")
    return 1 if failures else 0


def expand(args, prep: Path, out: Path) -> list:
    return [a.replace("{prep}", str(prep)).replace("{out}", str(out)) for a in args]


def run_logged(label: str, command: list, target: Path, timeout: int, env: dict = None):
    """Runs `command` (echoed), its output into TARGET/run.log: the
    completed process, or None after printing why `label` failed (a
    timeout, or a non-zero exit with its last lines)."""
    print("+", " ".join(command), flush=True)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        print(f"{label}: FAILED: timed out after {timeout} s")
        return None
    (target / "run.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        print(f"{label}: FAILED (exit {done.returncode}): "
              + " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:]))
        return None
    return done


def run_stage(prep: Path, out: Path, builds: Path, stage: str, timeout: int) -> int:
    programs = [p for p in manifest(prep)["programs"] if p["stage"] == stage]
    if not programs:
        print(f"SKIP {stage}: no {stage} program in {prep}/manifest.json")
        return 0
    work = out / "work" / stage
    shutil.rmtree(work, ignore_errors=True)
    failures = 0
    compares = {}
    for program in programs:
        name, exe = program["name"], builds / program["name"] / program["exe"]
        target = work / name
        target.mkdir(parents=True)
        command = [str(exe), *expand(program["args"], prep, target)]
        ranks = program.get("ranks", 1)
        if ranks > 1:
            failures += run_ranks(command, ranks, target)
            continue
        env = dict(os.environ, **program.get("env", {}))
        done = run_logged(name, command, target, timeout, env)
        if done is None:
            failures += 1
            continue
        if program.get("expect") and program["expect"] not in done.stdout + done.stderr:
            print(f"{name}: FAILED: its output does not say '{program['expect']}'")
            failures += 1
            continue
        compare = program["compare"]
        if compare and compare.get("ref"):
            # Against another program's cpu log (ZeRO-3, offload: the plain run).
            ref = out / "work" / f"{stage}-ref" / name / "log.jsonl"
            ref.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(expand([compare["ref"]], prep, target)[0], ref)
        if compare:
            compares[(compare["kind"], compare["rtol"], bool(compare.get("ref")))] = True
    for kind, rtol, own_ref in compares:
        cpu = out / "work" / f"{stage}-ref" if own_ref else prep / "ref" / stage
        failures += gpu_compare.compare(kind, cpu, work, rtol)
    print(f"{stage}: {len(programs)} programs, {failures} failures")
    return 1 if failures else 0


def checkpoint_stage(prep: Path, out: Path, builds: Path, timeout: int) -> int:
    programs = [p for p in manifest(prep)["programs"] if p["stage"] == "checkpoint"]
    if not programs:
        print(f"SKIP checkpoint: no checkpoint program in {prep}/manifest.json")
        return 0
    work = out / "work" / "checkpoint"
    shutil.rmtree(work, ignore_errors=True)
    failures = 0
    for program in programs:
        name, exe, spec = program["name"], builds / program["name"] / program["exe"], \
            program["checkpoint"]
        k, rtol = spec["step"], spec["rtol"]
        cpu = gpu_compare.steps(Path(expand([spec["ref"]], prep, work)[0]))

        def train(run: str, extra: list) -> list:
            target = work / name / run
            target.mkdir(parents=True)
            command = [str(exe), *expand(program["args"], prep, target), *extra]
            done = run_logged(f"{name} {run}", command, target, timeout)
            return None if done is None else gpu_compare.steps(target / "log.jsonl")

        def near(run: str, got: list, want: list) -> int:
            if not want or [s["step"] for s in got] != [s["step"] for s in want]:
                print(f"{name} {run}: MISMATCH steps {[s['step'] for s in got]}, "
                      f"the cpu's {[s['step'] for s in want]}")
                return 1
            err = gpu_compare.loss_rel_err([s["loss"] for s in want], [s["loss"] for s in got])
            ok = err <= rtol
            print(f"{name} {run}: losses of steps {got[0]['step']}-{got[-1]['step']} "
                  f"{'match' if ok else 'MISMATCH'} the cpu's (max rel err {err:.1e}, "
                  f"tolerance {rtol:.0e})")
            return 0 if ok else 1

        saved_dir = work / name / "save" / "ckpt"
        saving = train("save", ["--save-dir", str(saved_dir), "--save-interval", str(k)])
        if saving is None:
            failures += 1
            continue
        failures += near("save", saving, cpu)
        if not (saved_dir / f"step_{k}").is_dir():
            print(f"{name} save: FAILED: no checkpoint {saved_dir}/step_{k}")
            failures += 1
            continue
        later = [s for s in saving if s["step"] > k]
        own = train("resume", ["--resume", str(saved_dir / f"step_{k}")])
        if own is None:
            failures += 1
        else:
            fields = ("step", "loss", "grad_norm")
            same = [tuple(s.get(f) for f in fields) for s in own] == \
                [tuple(s.get(f) for f in fields) for s in later]
            print(f"{name} resume: steps {k + 1}-{later[-1]['step'] if later else k} "
                  + ("equal the saving run's, loss and gradient norm to the bit" if same and later
                     else "MISMATCH the saving run's: "
                     + "; ".join(f"step {a.get('step')}: {a.get('loss')!r} / {a.get('grad_norm')!r} "
                                 f"against {b.get('loss')!r} / {b.get('grad_norm')!r}"
                                 for a, b in zip(own, later)) + f" ({len(own)} and {len(later)} steps)"))
            failures += not (same and later)
        from_cpu = train("resume-cpu", ["--resume", expand([spec["cpu"]], prep, work)[0]])
        if from_cpu is None:
            failures += 1
        else:
            failures += near("resume-cpu", from_cpu, [s for s in cpu if s["step"] > k])
    print(f"checkpoint: {len(programs)} programs, {failures} failures")
    return 1 if failures else 0


def run_ranks(command: list, ranks: int, target: Path) -> int:
    """`ranks` processes of one program on the one GPU: NCCL cannot put two
    ranks of a communicator on one device, so rank 1 must be refused at
    once with dsrt's message and the job exit non-zero, not hang."""
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print(f"SKIP {ranks} ranks: mpirun is not installed")
        return 0
    try:
        done = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                               *command], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        print(f"error: the {ranks}-rank job on one GPU hung")
        return 1
    text = done.stdout + done.stderr
    (target / "run.log").write_text(text)
    # The verdict first (gpu-check.sh's summary quotes the log's first
    # error line), then the job's output.
    failed = done.returncode != 0 and "has no CUDA device of its own" not in text
    if failed:
        print(f"error: the {ranks}-rank job failed (exit {done.returncode}) without dsrt's message "
              "for a rank without a GPU; its output:")
    print(text)
    if done.returncode == 0:
        print(f"note: {ranks} ranks ran on one GPU (NCCL allowed it)")
        return 0
    if failed:
        return 1
    print(f"{ranks} ranks on one GPU: refused as expected (exit {done.returncode})")
    return 0


def union(intervals: list) -> list:
    """Sorted, disjoint (begin, end) pairs covering `intervals`."""
    merged = []
    for begin, end in sorted(intervals):
        if merged and begin <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([begin, end])
    return merged


def overlap_us(a: list, b: list) -> float:
    """The time two disjoint, sorted interval lists share."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


PIPELINE_COMPUTE = ("forward", "backward", "weight-gradient")


def trace_overlap(path: Path, require: bool) -> int:
    """Per rank: how long compute and communication entries overlap. An op
    trace (train --trace) has one process per rank, each of which must
    overlap with --require-overlap where it communicates. A pipeline trace
    (train --trace of a --pp program) has one process whose entries name
    their rank (args.rank), computations in the categories forward,
    backward and weight-gradient and send_recv groups on each rank's
    transfer stream; there the schedule decides which ranks can overlap
    (1F1B's last stage receives each input in the group that sends the
    previous gradient, so it cannot), and --require-overlap asks it of one
    rank at least."""
    events = json.loads(path.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    ops = [e for e in events if e.get("ph") == "X"]
    if not ops:
        print(f"{path}: FAILED: no op entries")
        return 1
    pipeline = any("rank" in e.get("args", {}) for e in ops)
    label = "rank" if pipeline else "pid"

    def owner(e):
        return e["args"]["rank"] if pipeline else e["pid"]

    def category(e):
        return "compute" if e.get("cat") in PIPELINE_COMPUTE else e.get("cat")

    failures, overlapping, communicating = 0, 0, 0
    for who in sorted({owner(e) for e in ops}):
        mine = [e for e in ops if owner(e) == who]
        spans = {cat: union([(e["ts"], e["ts"] + e["dur"]) for e in mine if category(e) == cat])
                 for cat in ("compute", "communication", "io")}
        counts = {cat: sum(category(e) == cat for e in mine) for cat in spans}
        busy = {cat: sum(end - begin for begin, end in spans[cat]) for cat in spans}
        shared = overlap_us(spans["compute"], spans["communication"])
        share = f" ({100 * shared / busy['communication']:.1f}% of the communication time)" \
            if busy["communication"] else ""
        print(f"{path.name}: {label} {who}: {counts['compute']} compute ops busy "
              f"{busy['compute'] / 1e3:.3f} ms, {counts['communication']} communication ops busy "
              f"{busy['communication'] / 1e3:.3f} ms; overlapped {shared / 1e3:.3f} ms{share}")
        if counts["io"]:
            # The file space's reads and writes (NVMe offload) on the I/O stream.
            io_shared = overlap_us(spans["compute"], spans["io"])
            print(f"{path.name}: {label} {who}: {counts['io']} I/O ops busy "
                  f"{busy['io'] / 1e3:.3f} ms; overlapped with compute {io_shared / 1e3:.3f} ms")
        communicating += counts["communication"] > 0
        # A pipeline rank counts from 1 us of overlap (its timing marks'
        # resolution on cpu; what the ms figures show).
        overlapping += shared >= 1.0
        if not counts["communication"]:
            print(f"{path.name}: {label} {who}: no communication ops (nothing to overlap)")
        elif require and not pipeline and shared <= 0:
            print(f"{path.name}: {label} {who}: FAILED: no communication op overlaps compute")
            failures += 1
    if require and pipeline and communicating:
        if overlapping:
            print(f"{path.name}: {overlapping} of {communicating} ranks overlap transfers "
                  f"with compute")
        else:
            print(f"{path.name}: FAILED: no rank's transfers overlap its compute")
            failures += 1
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("targets")
    t.add_argument("prep", type=Path)
    n = sub.add_parser("no-device")
    n.add_argument("prep", type=Path)
    n.add_argument("builds", type=Path)
    r = sub.add_parser("run")
    r.add_argument("prep", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("builds", type=Path)
    r.add_argument("stage")
    r.add_argument("--timeout", type=int, default=300)
    c = sub.add_parser("checkpoint")
    c.add_argument("prep", type=Path)
    c.add_argument("out", type=Path)
    c.add_argument("builds", type=Path)
    c.add_argument("--timeout", type=int, default=300)
    o = sub.add_parser("trace")
    o.add_argument("trace", type=Path)
    o.add_argument("--require-overlap", action="store_true")
    args = parser.parse_args()
    if args.command == "trace":
        return trace_overlap(args.trace, args.require_overlap)
    prep = args.prep.resolve()
    if args.command == "targets":
        return targets(prep)
    if args.command == "no-device":
        return no_device(prep, args.builds.resolve())
    if args.command == "checkpoint":
        return checkpoint_stage(prep, args.out.resolve(), args.builds.resolve(), args.timeout)
    return run_stage(prep, args.out.resolve(), args.builds.resolve(), args.stage, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
