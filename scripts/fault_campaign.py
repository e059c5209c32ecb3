#!/usr/bin/python3
"""Kills ranks of a training job at random moments and checks what follows.

  fault_campaign.py --program DIR/train --np N --data DATA --work WORK
                    [--steps S] [--kills K] [--signal KILL|STOP|TERM]
                    [--bound SECONDS] [--seed SEED] [--mpirun MPIRUN] [--in-save]

For each of K faults: a run of S steps that writes a checkpoint after every
step is started under mpirun; once its first checkpoint is committed, after
a random delay (so that the fault lands in compute, in a collective or in a
save), a random rank gets the signal (TERM goes to mpirun, as a user's
Ctrl-C or a scheduler's stop would). Checked:

  * every rank and mpirun are gone within --bound seconds of the signal, and
    mpirun's status is non-zero;
  * the survivors' messages name what they were doing (and, for STOP, the
    silent rank's world rank and grid coordinates);
  * the checkpoint directory's `latest` names a complete checkpoint, and a
    run resumed from it (same program, same ranks) logs exactly the losses
    of an uninterrupted run of S steps, bit for bit.

With --in-save every fault lands inside a save: rank 0 of the faulted run
pauses in the save of a random step once that checkpoint's files are
written and synced, before their rename (DSRT_SAVE_PAUSE_STEP), and the
fault follows its message; the checks add that `latest` still names the
step before and the cut checkpoint was left uncommitted.

The uninterrupted run is made once. A fault that lands after the last
checkpoint (or after the run ended) is retried with a shorter delay. The
summary line gives the faults, where they landed (from the survivors'
messages) and the slowest stop; WORK/campaign.log keeps every line, and
WORK/faultN/stderr.txt each faulted run's messages.

What is timed waits for events, not for sleeps: the fault for the first
committed checkpoint, the victim's world rank is read from its environment
(OMPI_COMM_WORLD_RANK; process ids are not in rank order), and only the
faulted run gets the short --heartbeat, raised to at least 10 times the
uninterrupted run's slowest step (the bound grows by as much), so that a
machine loaded by other work does not turn slowness into silence.
docs/runtime.md, "A failed rank stops the job", describes the guarantees.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

# The logs' losses by step, as the checkpoint tests read them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test",
                                "Train", "Inputs"))
from checkpoint_util import losses  # noqa: E402
import proc_tree  # noqa: E402  (this directory)


# WORK/campaign.log keeps every line the campaign says, also when a test
# pipes its output away.
LOG = None


def say(line, err=False):
    print(line, file=sys.stderr if err else sys.stdout, flush=True)
    if LOG:
        with open(LOG, "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {line}\n")


def fail(message):
    say(f"fault_campaign: {message}", err=True)
    sys.exit(1)


def launcher(args, np):
    return [args.mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
            "-np", str(np)]


def slowest_step(log):
    """The longest step_time_s of a --log-json log (seconds)."""
    slowest = 0.0
    with open(log) as f:
        for line in f:
            entry = json.loads(line)
            slowest = max(slowest, float(entry.get("step_time_s", 0)))
    return slowest


def environment(args, faulted):
    """The runs' environment. Only the faulted run has --heartbeat: the
    uninterrupted and the resumed runs keep the default, so that a loaded
    machine cannot fail them with a short one."""
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("DSRT_HEARTBEAT_TIMEOUT", None)
    if faulted:
        env["DSRT_HEARTBEAT_TIMEOUT"] = str(args.heartbeat)
    return env


def run_to_end(args, extra, log):
    cmd = launcher(args, args.np) + [args.program, "--data", args.data, "--steps",
                                     str(args.steps), "--seed", "7", "--quiet",
                                     "--log-json", log] + extra
    done = subprocess.run(cmd, env=environment(args, False), capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        fail(f"{' '.join(cmd)} exited with {done.returncode}:\n{done.stderr}")


def world_rank(pid):
    """A rank process's world rank, from the environment its launcher gave
    it (neither the order of the process ids nor the order of starting is
    the ranks' order: Open MPI starts them from several threads, and ids
    wrap around). None when it cannot be read (the process is gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for name in (b"OMPI_COMM_WORLD_RANK=", b"PMIX_RANK="):
        for entry in env:
            if entry.startswith(name):
                return int(entry[len(name):])
    return None


def rank_processes(pid):
    """The rank processes: mpirun's children (Open MPI starts them directly
    on the local node), by world rank."""
    out = {}
    for child in proc_tree.children(pid):
        rank = world_rank(child)
        if rank is not None:
            out[rank] = child
    return out


# Where a survivor's message says it was: its phase, and the operation of
# its communication thread.
MOMENT = re.compile(r"stopped by SIG\w+ at step \d+: ([^,;]+)(?:, in (\w+))?")


def one_fault(args, rng, index, reference, delay_max):
    work = os.path.join(args.work, f"fault{index}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ckpt = os.path.join(work, "ckpt")
    cmd = launcher(args, args.np) + [args.program, "--data", args.data, "--steps",
                                     str(args.steps), "--seed", "7", "--quiet",
                                     "--save-dir", ckpt, "--save-interval", "1"]
    err_path = os.path.join(work, "stderr.txt")
    env = environment(args, True)
    # --in-save: rank 0 pauses inside the save of step `paused`, its files
    # written and not yet renamed into place, and says so: the fault lands
    # there.
    paused = rng.randint(2, args.steps - 1) if args.in_save else None
    if paused:
        env["DSRT_SAVE_PAUSE_STEP"] = str(paused)
    marker = f"pausing in the save of checkpoint step_{paused} "
    with open(err_path, "w") as err:
        job = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                               stderr=err, start_new_session=True)
    try:
        start = time.time()

        def ready():
            if paused:
                with open(err_path, errors="replace") as f:
                    return marker in f.read()
            return os.path.exists(os.path.join(ckpt, "latest"))
        while not ready():
            if job.poll() is not None:
                fail(f"fault {index}: the job ended (status {job.returncode}) before "
                     + (f"pausing in the save of step_{paused}" if paused else
                        "its first checkpoint") + f"; see {err_path}")
            if time.time() - start > 120:
                fail(f"fault {index}: not ready after 120 s; see {err_path}")
            time.sleep(0.01)
        if not paused:
            time.sleep(rng.uniform(0, delay_max))
        ranks = rank_processes(job.pid)
        if job.poll() is not None:
            if job.returncode != 0:
                fail(f"fault {index}: the job failed on its own (status {job.returncode}) "
                     f"before the fault; see {err_path}")
            return None  # the run ended first: retried
        if sorted(ranks) != list(range(args.np)):
            say(f"fault {index}: mpirun's child processes are ranks {sorted(ranks)}, not "
                f"0..{args.np - 1}; retried", err=True)
            return None
        victim = rng.randrange(args.np)
        sent = time.time()
        if args.signal == "TERM":
            os.kill(job.pid, signal.SIGTERM)
        else:
            os.kill(ranks[victim], getattr(signal, "SIG" + args.signal))
        try:
            status = job.wait(timeout=args.bound)
        except subprocess.TimeoutExpired:
            fail(f"fault {index}: SIG{args.signal} to rank {victim}: the job still runs "
                 f"{args.bound} s later; see {err_path}")
        took = time.time() - sent
        # mpirun has returned; its ranks must be gone too.
        deadline = time.time() + 2
        while any(proc_tree.alive(p) for p in ranks.values()) and time.time() < deadline:
            time.sleep(0.05)
        left = [p for p in ranks.values() if proc_tree.alive(p)]
        if left:
            fail(f"fault {index}: ranks {left} outlived mpirun")
        with open(os.path.join(ckpt, "latest")) as f:
            if f.read().strip() == f"step_{args.steps}":
                say(f"fault {index}: SIG{args.signal} landed after the last step; retried",
                    err=True)
                return None
        if status == 0:
            fail(f"fault {index}: SIG{args.signal} to rank {victim}, yet mpirun exited 0")
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    text = open(err_path, errors="replace").read()
    moments = MOMENT.findall(text)
    if args.signal == "STOP":
        # The silent rank is named by world rank and grid coordinates.
        named = re.search(r"error: dsrt: world rank (\d+) \(([^)]*)\) has sent no heartbeat",
                          text)
        if not named or int(named.group(1)) != victim:
            fail(f"fault {index}: no message names the stopped world rank {victim}:\n{text}")
        where = "stopped rank named: " + named.group(0)[len("error: dsrt: "):]
    else:
        if not moments:
            fail(f"fault {index}: no survivor says what it was doing:\n{text}")
        phase, op = moments[0]
        where = "save" if "checkpoint" in phase else (f"collective ({op})" if op else
                                                      f"compute ({phase.strip()})")
    if paused:
        # The cut save is absent: `latest` names the step before, and the
        # whole checkpoint of step `paused` waits in its temporary directory.
        with open(os.path.join(ckpt, "latest")) as f:
            latest = f.read().strip()
        if latest != f"step_{paused - 1}":
            fail(f"fault {index}: killed inside the save of step_{paused}, yet latest is "
                 f"{latest}")
        if not os.path.exists(os.path.join(ckpt, f".tmp-step_{paused}", "manifest")):
            fail(f"fault {index}: no written manifest of step_{paused} was left uncommitted")
        where = f"save (step_{paused} written, not renamed)"
    # The latest complete checkpoint resumes to the uninterrupted losses.
    with open(os.path.join(ckpt, "latest")) as f:
        latest = f.read().strip()
    resumed_log = os.path.join(work, "resumed.jsonl")
    run_to_end(args, ["--resume", ckpt], resumed_log)
    ref, got = losses(reference), losses(resumed_log)
    if not got:
        fail(f"fault {index}: the resumed run logs no step")
    for step, loss in got.items():
        if ref.get(step) != loss:
            fail(f"fault {index}: resumed from {latest}: step {step} loss {loss!r}, the "
                 f"uninterrupted run's {ref.get(step)!r}")
    target = "mpirun" if args.signal == "TERM" else f"rank {victim}"
    say(f"fault {index}: SIG{args.signal} to {target}: all ranks gone in {took:.1f} s "
        f"(status {status}); landed in {where}; resumed from {latest}: steps "
        f"{min(got)}..{max(got)} bit-identical")
    return took, where


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--program", required=True)
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--kills", type=int, default=1)
    p.add_argument("--signal", choices=["KILL", "STOP", "TERM"], default="KILL")
    p.add_argument("--bound", type=float, default=30)
    p.add_argument("--heartbeat", type=float, default=20,
                   help="DSRT_HEARTBEAT_TIMEOUT of the faulted runs (seconds)")
    p.add_argument("--delay", type=float, default=0.5,
                   help="largest random delay after the first checkpoint (seconds)")
    p.add_argument("--in-save", action="store_true",
                   help="land every fault inside a save: rank 0 pauses in the save of a "
                        "random step (DSRT_SAVE_PAUSE_STEP), its files written and not renamed")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    args = p.parse_args()
    if args.in_save and args.steps < 3:
        p.error("--in-save needs --steps >= 3 (a save to keep, one to cut, one after)")
    os.makedirs(args.work, exist_ok=True)
    global LOG
    LOG = os.path.join(args.work, "campaign.log")
    rng = random.Random(args.seed)
    reference = os.path.join(args.work, "uninterrupted.jsonl")
    if not os.path.exists(reference):
        run_to_end(args, [], reference)
    # A loaded machine slows every thread, the heartbeat's too: the faulted
    # runs' heartbeat timeout is at least 10 of the uninterrupted run's
    # slowest steps, and the bound grows by what it adds.
    step = slowest_step(reference)
    if 10 * step > args.heartbeat:
        added = 10 * step - args.heartbeat
        say(f"fault_campaign: the slowest step took {step:.2f} s: heartbeat timeout "
            f"{args.heartbeat:g} s -> {args.heartbeat + added:.1f} s, bound {args.bound:g} s -> "
            f"{args.bound + added:.1f} s", err=True)
        args.heartbeat += added
        args.bound += added
    slowest, landed, index, delay = 0.0, {}, 0, args.delay
    while index < args.kills:
        result = one_fault(args, rng, index, reference, delay)
        if result is None:
            delay /= 2
            if delay < 1e-3:
                fail("the run ends before any fault can land; use more --steps")
            continue
        took, where = result
        slowest = max(slowest, took)
        kind = where.split(" ")[0]
        landed[kind] = landed.get(kind, 0) + 1
        index += 1
    say(f"fault_campaign: {args.kills} x SIG{args.signal} on {args.np} ranks: every job "
        f"stopped within {slowest:.1f} s (bound {args.bound:g} s); landed: "
        + ", ".join(f"{k} {v}" for k, v in sorted(landed.items())))


if __name__ == "__main__":
    main()
