#!/usr/bin/python3
"""End-to-end test of dsrt::pipeline_main with PyTorch as the oracle.

Runs dsrt_train_pipeline (train_pipeline.cpp: a chain of linear layers, one
per virtual stage, a bias tied between the first and the last stage, MSE,
SGD with global-norm clipping) under mpirun for the action lists that
dsopt-pipeline --print-actions gives gpipe, 1f1b, zb-h1 and interleaved
(p = 2 and 3, m = 4; dp = 1 and 2), and once without mpirun as a single
stage. For each run it checks
  * every step's loss, lr and grad_norm (--log-json) against the same
    training in PyTorch on one process (dp * m micro-batches per step);
  * the trained weights in the model --save-onnx writes (parameters of
    every pp rank, the tied bias once);
  * the summary line: every rank's send/recv calls and bytes (the
    schedule's transfers and the tied sum), arena peaks, and the
    "pipeline" object with a measured bubble;
  * the --trace file: per world rank, the schedule's actions in order with
    the compiler's names, step after step, transfer groups sharing times;
and that a job of the wrong size, a pool whose slots do not fit what they
hold, a pool with too few slots, a missing program and a missing data file
on one rank stop every rank with a clear message.

usage: train_pipeline_e2e.py --exe PATH --model PATH --work DIR
                             (--mpirun PATH | --no-mpi REASON)
Without mpirun only the single-stage run is checked, and the script exits
77 (CTest's "skipped") after saying why.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

BATCH, IN, WIDTH, M, BATCHES, STEPS = 2, 5, 4, 4, 3, 5
LR, CLIP = 0.05, 0.5

# dsopt-pipeline --schedule S --stages P --microbatches 4 [--chunks 2] --print-actions
SCHEDULES = {
    ("gpipe", 2): [
        "F0 send-act0>1 F1 send-act1>1 F2 send-act2>1 F3 send-act3>1 recv-grad0<1 B0 "
        "recv-grad1<1 B1 recv-grad2<1 B2 recv-grad3<1 B3",
        "recv-act0<0 F0 recv-act1<0 F1 recv-act2<0 F2 recv-act3<0 F3 B0 send-grad0>0 B1 "
        "send-grad1>0 B2 send-grad2>0 B3 send-grad3>0"],
    ("1f1b", 2): [
        "F0 send-act0>1 F1 send-act1>1 recv-grad0<1 B0 F2 send-act2>1 recv-grad1<1 B1 F3 "
        "send-act3>1 recv-grad2<1 B2 recv-grad3<1 B3",
        "recv-act0<0 F0 B0 send-grad0>0 recv-act1<0 F1 B1 send-grad1>0 recv-act2<0 F2 B2 "
        "send-grad2>0 recv-act3<0 F3 B3 send-grad3>0"],
    ("zb-h1", 2): [
        "F0 send-act0>1 F1 send-act1>1 recv-grad0<1 Bi0 W0 F2 send-act2>1 recv-grad1<1 Bi1 W1 "
        "F3 send-act3>1 recv-grad2<1 Bi2 W2 recv-grad3<1 Bi3 W3",
        "recv-act0<0 F0 Bi0 send-grad0>0 recv-act1<0 F1 Bi1 W0 send-grad1>0 recv-act2<0 F2 Bi2 "
        "W1 send-grad2>0 recv-act3<0 F3 Bi3 send-grad3>0 W2 W3"],
    ("interleaved", 2): [
        "F0.0 send-act0.0>1 F1.0 send-act1.0>1 recv-act0.1<1 F0.1 send-act0.1>1 recv-act1.1<1 "
        "F1.1 send-act1.1>1 recv-grad0.1<1 F2.0 B0.1 send-grad0.1>1 send-act2.0>1 "
        "recv-grad1.1<1 F3.0 B1.1 send-grad1.1>1 send-act3.0>1 recv-grad0.0<1 recv-act2.1<1 "
        "F2.1 B0.0 send-act2.1>1 recv-grad1.0<1 recv-act3.1<1 F3.1 B1.0 send-act3.1>1 "
        "recv-grad2.1<1 B2.1 send-grad2.1>1 recv-grad3.1<1 B3.1 send-grad3.1>1 recv-grad2.0<1 "
        "B2.0 recv-grad3.0<1 B3.0",
        "recv-act0.0<0 F0.0 send-act0.0>0 recv-act1.0<0 F1.0 send-act1.0>0 recv-act0.1<0 F0.1 "
        "B0.1 send-grad0.1>0 recv-act1.1<0 F1.1 B1.1 send-grad1.1>0 recv-grad0.0<0 "
        "recv-act2.0<0 F2.0 B0.0 send-grad0.0>0 send-act2.0>0 recv-grad1.0<0 recv-act3.0<0 "
        "F3.0 B1.0 send-grad1.0>0 send-act3.0>0 recv-act2.1<0 F2.1 B2.1 send-grad2.1>0 "
        "recv-act3.1<0 F3.1 B3.1 send-grad3.1>0 recv-grad2.0<0 B2.0 send-grad2.0>0 "
        "recv-grad3.0<0 B3.0 send-grad3.0>0"],
    ("1f1b", 3): [
        "F0 send-act0>1 F1 send-act1>1 F2 send-act2>1 recv-grad0<1 B0 F3 send-act3>1 "
        "recv-grad1<1 B1 recv-grad2<1 B2 recv-grad3<1 B3",
        "recv-act0<0 F0 send-act0>2 recv-act1<0 F1 send-act1>2 recv-grad0<2 B0 send-grad0>0 "
        "recv-act2<0 F2 send-act2>2 recv-grad1<2 B1 send-grad1>0 recv-act3<0 F3 send-act3>2 "
        "recv-grad2<2 B2 send-grad2>0 recv-grad3<2 B3 send-grad3>0",
        "recv-act0<1 F0 B0 send-grad0>1 recv-act1<1 F1 B1 send-grad1>1 recv-act2<1 F2 B2 "
        "send-grad2>1 recv-act3<1 F3 B3 send-grad3>1"],
    ("zb-h1", 3): [
        "F0 send-act0>1 F1 send-act1>1 F2 send-act2>1 recv-grad0<1 Bi0 W0 F3 send-act3>1 "
        "recv-grad1<1 Bi1 W1 recv-grad2<1 Bi2 W2 recv-grad3<1 Bi3 W3",
        "recv-act0<0 F0 send-act0>2 recv-act1<0 F1 send-act1>2 recv-grad0<2 Bi0 send-grad0>0 "
        "recv-act2<0 F2 send-act2>2 recv-grad1<2 Bi1 W0 send-grad1>0 recv-act3<0 F3 "
        "send-act3>2 recv-grad2<2 Bi2 send-grad2>0 W1 recv-grad3<2 Bi3 send-grad3>0 W2 W3",
        "recv-act0<1 F0 Bi0 send-grad0>1 recv-act1<1 F1 Bi1 send-grad1>1 recv-act2<1 F2 Bi2 W0 "
        "send-grad2>1 recv-act3<1 F3 Bi3 send-grad3>1 W1 W2 W3"],
}
ONE_STAGE = "F0 F1 F2 F3 B0 B1 B2 B3"

# Every rank's arena (measured high-water mark == plan) for p = 2, worked
# out by hand from the layout train_pipeline.cpp describes (a bump
# allocator, alignment 64; f32 [2, 5] and [2, 4] take one 64-byte slot
# each, a scalar one, W0 [5, 4] two). A function's buffers are its data
# inputs and temporaries only: its received and stashed inputs (roles
# Recv, Stash, WeightStash) have offset -1 and are read in their pool slots, and what it passes on (F's
# stash:h<s> = its input, a non-last Bi's wstash:g = its recv:g<s+1>) is a
# view of them. The buffers region ends at the largest function's end;
# the pools follow.
#   pp 0: W0 @0, t @128, grad:W0 @192, grad:t @320 -> persistent 384;
#         forward_0 x @384, send:h1 @448 -> 512; backward_0 (stash:h0,
#         recv:g1 bound), backward_input_0 (recv:g1 bound) and
#         backward_weight_0 (wstash:g, stash:h0 bound) have no buffers
#         -> 384; optimizer_step lr @384, step @448, sq @512, grad_norm
#         @576 -> 640 -> pools from 640: tied 64, stash (stash:h0) 64 per
#         slot, act_out 64, grad_in 64, (zb-h1) wstash 64
#   pp 1: W1 @0, t @64, grad:W1 @128, grad:t @192 -> persistent 256;
#         forward_1 (recv:h1 bound) y @256, stash:pred @320, loss @384
#         -> 448; backward_1 (stash:pred, stash:h1 bound) y @256, g @320,
#         send:g1 @384 -> 448; backward_input_1 (stash:pred bound) y @256,
#         wstash:g @320, send:g1 @384 -> 448; backward_weight_1 (wstash:g,
#         stash:h1 bound) -> 256; optimizer_step lr, step, sq, grad_norm
#         @256..512 -> 512 -> pools from 512: tied 64, stash (stash:pred,
#         stash:h1) 128 per slot, act_in 64, grad_out 64, (zb-h1) wstash 64
# (Had the bound inputs buffers too, backward_1 would end at 576 and pp 1's
# 1F1B and GPipe arenas be 64 bytes larger; optimizer_step is the largest
# function on pp 0 and, under ZB-H1, on pp 1 either way.)
# Slots, counted on the action lists above: 1F1B stashes at most 2
# micro-batches on pp 0 and 1 on pp 1, GPipe all 4, ZB-H1 2 on both (W
# frees the stash) and 1 wstash on pp 0 (W right after Bi), 2 on pp 1.
# A sent slot stays held until the rank's next group of transfers (the
# send is in flight on the transfer stream while the computations between
# run), and every schedule here computes the next value to send before
# that group: act_out (pp 0) and grad_out (pp 1) hold 2 slots. The
# receiving pools hold one slot at a time.
HAND_ARENAS = {
    ("1f1b", 2): [640 + 64 + 2 * 64 + 2 * 64 + 64, 512 + 64 + 1 * 128 + 64 + 2 * 64],
    ("gpipe", 2): [640 + 64 + 4 * 64 + 2 * 64 + 64, 512 + 64 + 4 * 128 + 64 + 2 * 64],
    ("zb-h1", 2): [640 + 64 + 2 * 64 + 2 * 64 + 64 + 1 * 64,
                   512 + 64 + 2 * 128 + 64 + 2 * 64 + 2 * 64],
}

failures = []
clipping = {}  # label -> steps the reference clipped


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)
    return condition


def width(i):
    return IN if i == 0 else WIDTH


def initial_weight(s):
    i = np.arange(width(s), dtype=np.float64)[:, None]
    j = np.arange(width(s + 1), dtype=np.float64)[None, :]
    return (0.4 * np.sin(1.0 + 7.0 * s + 3.0 * i + j)).astype(np.float32)


def initial_bias():
    return (0.1 * (np.arange(WIDTH, dtype=np.float32) - 1.5)).astype(np.float32)


def write_model(path, layers):
    """The source model: the chain, with W0.. and t as initializers."""
    nodes, h = [], "x"
    for s in range(layers):
        nodes.append(helper.make_node("MatMul", [h, f"W{s}"], [f"z{s}"]))
        h = f"z{s}"
        if s == 0 or s == layers - 1:
            nodes.append(helper.make_node("Add", [h, "t"], [f"b{s}"]))
            h = f"b{s}"
    nodes += [helper.make_node("Sub", [h, "y"], ["d"]),
              helper.make_node("Mul", ["d", "d"], ["sq"]),
              helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0)]
    inits = [numpy_helper.from_array(initial_weight(s), f"W{s}") for s in range(layers)]
    inits.append(numpy_helper.from_array(initial_bias(), "t"))
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, IN]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, WIDTH])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], initializer=inits)
    model = helper.make_model(graph, producer_name="train_pipeline_e2e",
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save_model(model, path)


def write_data(directory, dp):
    rng = np.random.default_rng(7 + dp)
    rows = dp * M * BATCH
    x = rng.normal(0, 1, size=(BATCHES, rows, IN)).astype(np.float32)
    y = rng.normal(0, 1, size=(BATCHES, rows, WIDTH)).astype(np.float32)
    os.makedirs(directory, exist_ok=True)
    np.save(os.path.join(directory, "x.npy"), x)
    np.save(os.path.join(directory, "y.npy"), y)
    return x, y


def reference(layers, dp, x, y):
    """The same training on one process: dp * M micro-batches per step."""
    torch.set_num_threads(1)
    ws = [torch.tensor(initial_weight(s), requires_grad=True) for s in range(layers)]
    t = torch.tensor(initial_bias(), requires_grad=True)
    params = ws + [t]
    optimizer = torch.optim.SGD(params, lr=LR)
    rows = []
    micro = dp * M
    for step in range(1, STEPS + 1):
        batch = (step - 1) % BATCHES
        losses = []
        for j in range(micro):
            h = torch.from_numpy(x[batch, j * BATCH:(j + 1) * BATCH])
            target = torch.from_numpy(y[batch, j * BATCH:(j + 1) * BATCH])
            for s in range(layers):
                h = h @ ws[s]
                if s == 0 or s == layers - 1:
                    h = h + t
            loss = ((h - target) ** 2).mean()
            (loss / micro).backward()
            losses.append(loss.item())
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP).item()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        rows.append({"loss": sum(losses) / micro, "grad_norm": norm})
    return rows, {**{f"W{s}": w.detach().numpy() for s, w in enumerate(ws)},
                  "t": t.detach().numpy()}


def close(a, b, rtol=1e-5, atol=1e-6):
    return abs(a - b) <= atol + rtol * abs(b)


class Runner:
    def __init__(self, args):
        self.args = args
        self.env = dict(os.environ)
        # Open MPI as root, more ranks than cores; other MPIs ignore these.
        self.env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                         "OMPI_MCA_rmaps_base_oversubscribe": "1", "DSRT_COMM_TIMEOUT": "20"})

    def run(self, ranks, config, flags):
        env = dict(self.env)
        for key in list(env):
            if key.startswith("DSRT_PP_"):
                del env[key]
        env.update(config)
        command = [self.args.exe, *flags]
        if self.args.mpirun:
            command = [self.args.mpirun, "-np", str(ranks), *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=240, env=env)


def config_env(schedule, stages, chunks, dp, actions, breaks=None):
    env = {"DSRT_PP_SCHEDULE": schedule, "DSRT_PP_STAGES": str(stages),
           "DSRT_PP_CHUNKS": str(chunks), "DSRT_PP_DP": str(dp),
           "DSRT_PP_MICROBATCHES": str(M)}
    for r, text in enumerate(actions):
        env[f"DSRT_PP_ACTIONS_{r}"] = text
    if breaks:
        env["DSRT_PP_BREAK"] = breaks
    return env


# The trace writes each start and duration to the nearest ns, so a start
# plus a duration can pass the true end by up to 1 ns.
SLACK_US = 2e-3


def transfer_parts(name):
    """('recv', 'act', '0.1') of recv-act0.1<1; None for a computation."""
    for kind in ("send", "recv"):
        for what in ("act", "grad"):
            prefix = f"{kind}-{what}"
            if name.startswith(prefix):
                return kind, what, name[len(prefix):].split("<")[0].split(">")[0]
    return None


def check_trace(path, label, stages, dp, actions):
    """The measured schedule: each rank's computations on its track (tid
    r), its send_recv groups on its transfer stream's (tid world + r), in
    action order, step after step; each stream runs one action (one group)
    at a time, a receive ends before the computation that reads it begins,
    and a send begins after the computation that produced it ended."""
    if not check(os.path.exists(path), f"{label}: no trace written"):
        return
    events = json.load(open(path))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    world = stages * dp
    want_names = {w: f"pp {w // dp} dp {w % dp}" for w in range(world)}
    want_names.update({world + w: f"pp {w // dp} dp {w % dp} transfers" for w in range(world)})
    check(names == want_names, f"{label}: trace thread names {names}")
    for w in range(world):
        slices = [e for e in events if e.get("ph") == "X" and e["args"]["rank"] == w]
        want = actions[w // dp].split() * STEPS
        got = [e["name"] for e in slices]
        if not check(got == want, f"{label}: trace of rank {w} has {got[:12]}..., "
                                  f"expected {want[:12]}..."):
            continue
        steps = [e["args"]["step"] for e in slices]
        check(steps == sorted(steps) and steps[0] == 1 and steps[-1] == STEPS,
              f"{label}: rank {w}'s slices are not step after step")
        for e in slices:
            track = world + w if transfer_parts(e["name"]) else w
            check(e["tid"] == track, f"{label}: rank {w}: {e['name']} on track {e['tid']}, "
                                     f"expected {track}")
        for tid in (w, world + w):
            mine = [e for e in slices if e["tid"] == tid]
            for a, b in zip(mine, mine[1:]):
                # Consecutive transfers of one step in action order are one
                # group: they share its start and end.
                group = (tid != w and a["args"]["step"] == b["args"]["step"]
                         and slices.index(b) == slices.index(a) + 1)
                if group:
                    check(a["ts"] == b["ts"] and a["dur"] == b["dur"],
                          f"{label}: rank {w}: {a['name']} and {b['name']} are one group but "
                          f"have different times")
                else:
                    check(b["ts"] >= a["ts"] + a["dur"] - SLACK_US,
                          f"{label}: rank {w}: {b['name']} starts before {a['name']} ends")
        for i, e in enumerate(slices):
            parts = transfer_parts(e["name"])
            if not parts:
                continue
            kind, what, mb = parts
            computes = ("F",) if what == "act" else ("B", "Bi")
            wanted = {c + mb for c in computes}
            same_step = [x for x in slices if x["args"]["step"] == e["args"]["step"]]
            j = same_step.index(e)
            if kind == "recv":
                reader = next((x for x in same_step[j:] if x["name"] in wanted), None)
                if check(reader is not None, f"{label}: rank {w}: nothing reads {e['name']}"):
                    check(reader["ts"] >= e["ts"] + e["dur"] - SLACK_US,
                          f"{label}: rank {w}: {reader['name']} begins before {e['name']} ended")
            else:
                producer = next((x for x in reversed(same_step[:j]) if x["name"] in wanted), None)
                if check(producer is not None, f"{label}: rank {w}: nothing computes {e['name']}"):
                    check(e["ts"] >= producer["ts"] + producer["dur"] - SLACK_US,
                          f"{label}: rank {w}: {e['name']} begins before {producer['name']} ended")
        check(all(e["ts"] >= 0 and e["dur"] >= 0 for e in slices),
              f"{label}: rank {w}: negative times")


def check_run(runner, work, schedule, stages, chunks, dp):
    label = f"{schedule} p={stages} v={chunks} dp={dp}"
    actions = SCHEDULES[(schedule, stages)] if stages > 1 else [ONE_STAGE]
    layers = stages * chunks
    directory = os.path.join(work, label.replace(" ", "_").replace("=", ""))
    os.makedirs(directory)
    data = os.path.join(directory, "data")
    x, y = write_data(data, dp)
    write_model(runner.args.model, layers)
    rows, weights = reference(layers, dp, x, y)
    log = os.path.join(directory, "log.jsonl")
    saved = os.path.join(directory, "trained.onnx")
    trace = os.path.join(directory, "trace.json")
    result = runner.run(stages * dp, config_env(schedule, stages, chunks, dp, actions),
                        ["--data", data, "--steps", str(STEPS), "--log-json", log,
                         "--save-onnx", saved, "--trace", trace, "--threads", "1"])
    if not check(result.returncode == 0, f"{label}: exit {result.returncode}: {result.stderr}"):
        return
    lines = [json.loads(line) for line in open(log)]
    check(len(lines) == STEPS + 1, f"{label}: {len(lines)} JSON lines, expected {STEPS + 1}")
    clipped = 0
    for step, (got, want) in enumerate(zip(lines, rows), 1):
        check(got["step"] == step, f"{label}: step {step}: 'step' is {got['step']}")
        check(close(got["loss"], want["loss"]),
              f"{label}: step {step}: loss {got['loss']} vs PyTorch {want['loss']}")
        check(close(got["grad_norm"], want["grad_norm"]),
              f"{label}: step {step}: grad_norm {got['grad_norm']} vs PyTorch "
              f"{want['grad_norm']}")
        check(close(got["lr"], LR, 1e-9), f"{label}: step {step}: lr {got['lr']}")
        check(got["arena_peak_bytes"] == got["arena_planned_bytes"] > 0,
              f"{label}: step {step}: arena {got['arena_peak_bytes']} / "
              f"{got['arena_planned_bytes']}")
        clipped += want["grad_norm"] > CLIP
    clipping[label] = clipped

    summary = lines[-1]
    check(summary.get("summary") is True and summary["world"] == stages * dp,
          f"{label}: summary {summary}")
    pipeline = summary.get("pipeline", {})
    check({k: pipeline.get(k) for k in ("schedule", "stages", "chunks", "microbatches")} ==
          {"schedule": schedule, "stages": stages, "chunks": chunks, "microbatches": M},
          f"{label}: summary pipeline {pipeline}")
    bubble = pipeline.get("bubble_measured")
    check(isinstance(bubble, float) and 0 <= bubble < 1, f"{label}: bubble {bubble}")
    for entry in summary["ranks"]:
        w = entry["rank"]
        pp = w // dp
        check(entry["arena_peak_bytes"] > 0, f"{label}: rank {w} arena peak")
        if chunks == 1 and (schedule, stages) in HAND_ARENAS:
            want = HAND_ARENAS[(schedule, stages)][pp]
            check(entry["arena_peak_bytes"] == want,
                  f"{label}: rank {w}'s arena peak {entry['arena_peak_bytes']}, by hand {want}")
        # Each transfer of this model is one [2, 4] f32 tensor (x is never
        # sent); the tied bias' gradient, [4] f32, goes to the other sharer.
        sends = sum(1 for a in actions[pp].split() if a.startswith("send-"))
        recvs = sum(1 for a in actions[pp].split() if a.startswith("recv-"))
        tied = 1 if stages > 1 and pp in (0, stages - 1) else 0
        moved = entry["collective_bytes"]
        if stages == 1:
            check("send" not in moved, f"{label}: rank {w} reports send without transfers")
            continue
        want_send = {"sent": STEPS * (sends * 32 + tied * 16), "received": 0,
                     "calls": STEPS * (sends + tied)}
        want_recv = {"sent": 0, "received": STEPS * (recvs * 32 + tied * 16),
                     "calls": STEPS * (recvs + tied)}
        check(moved.get("send") == want_send,
              f"{label}: rank {w} send {moved.get('send')}, expected {want_send}")
        check(moved.get("recv") == want_recv,
              f"{label}: rank {w} recv {moved.get('recv')}, expected {want_recv}")

    if check(os.path.exists(saved), f"{label}: {saved} was not written"):
        model = onnx.load(saved)
        onnx.checker.check_model(model)
        values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        check(sorted(values) == sorted(weights), f"{label}: saved {sorted(values)}")
        for name, want in weights.items():
            got = values.get(name)
            check(got is not None and got.shape == want.shape and
                  np.allclose(got, want, rtol=1e-5, atol=1e-6),
                  f"{label}: saved {name} differs from PyTorch by "
                  f"{None if got is None else np.abs(got - want).max()}")
    check_trace(trace, label, stages, dp, actions)
    print(f"{label}: {STEPS} steps match PyTorch; measured bubble {bubble:.3f}")


def expect_failure(runner, work, label, ranks, config, fragments, setup=None, count=None):
    """Every rank exits 1; the job's stderr holds each fragment (`count`
    times: once per rank)."""
    directory = os.path.join(work, "bad_" + label)
    os.makedirs(directory)
    data = os.path.join(directory, "data")
    write_data(data, int(config["DSRT_PP_DP"]))
    if setup:
        setup(data)
    result = runner.run(ranks, config, ["--data", data, "--steps", "2"])
    ok = result.returncode != 0 and "step 1/" not in result.stdout
    for fragment in fragments:
        found = result.stderr.count(fragment)
        ok = ok and (found >= 1 if count is None else found == count)
    check(ok, f"{label}: exit {result.returncode}, stderr {result.stderr!r}, "
              f"expected {fragments}" + (f" {count} times" if count else ""))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--mpirun")
    parser.add_argument("--no-mpi", metavar="REASON")
    args = parser.parse_args()
    if not args.mpirun and not args.no_mpi:
        parser.error("give --mpirun PATH or --no-mpi")
    work = args.work
    if os.path.isdir(work):
        shutil.rmtree(work)
    os.makedirs(work)
    os.makedirs(os.path.dirname(args.model), exist_ok=True)
    runner = Runner(args)

    # One stage on one rank, without mpirun.
    saved_mpirun, args.mpirun = args.mpirun, None
    check_run(runner, work, "gpipe", 1, 1, 1)
    args.mpirun = saved_mpirun
    if not args.mpirun:
        if failures:
            return 1
        print(f"train_pipeline_e2e: SKIPPED the pipelines on several ranks: {args.no_mpi} "
              "(the single-stage run passed)")
        return 77

    for schedule, stages, chunks, dp in [("gpipe", 2, 1, 1), ("1f1b", 2, 1, 1),
                                         ("zb-h1", 2, 1, 1), ("interleaved", 2, 2, 1),
                                         ("1f1b", 3, 1, 1), ("zb-h1", 3, 1, 1),
                                         ("1f1b", 2, 1, 2)]:
        check_run(runner, work, schedule, stages, chunks, dp)

    write_model(args.model, 2)
    onef1b = config_env("1f1b", 2, 1, 1, SCHEDULES[("1f1b", 2)])
    expect_failure(runner, work, "job_size", 3, onef1b,
                   ["error: the program was compiled for 2 ranks (--pp=2 --dp=1; world 2) but "
                    "the job has 3; run it with mpirun -np 2"], count=3)
    expect_failure(runner, work, "slot_bytes", 2, {**onef1b, "DSRT_PP_BREAK": "slot_bytes"},
                   ["error: pp rank 1: memory plan: pool 'act_in' of stage 1 has slots of 128 "
                    "bytes but what a slot holds takes 64 bytes at alignment 64 "
                    "('recv:h1' f32 [2, 4])"], count=2)
    expect_failure(runner, work, "program_count", 2, {**onef1b, "DSRT_PP_BREAK": "count"},
                   ["error: training program: pipeline_main was given 1 pp rank programs but "
                    "pp rank 0's grid has pp=2; it needs one program per pp rank"], count=2)
    expect_failure(runner, work, "missing_data", 2, onef1b,
                   ["error: input 'y': missing file",
                    "error: rank 0: rank 1 failed before training: see its message"],
                   setup=lambda data: os.remove(os.path.join(data, "y.npy")), count=1)
    # Rank 0's stage 0 holds two micro-batches' stashes under 1F1B.
    expect_failure(runner, work, "slots", 2, {**onef1b, "DSRT_PP_BREAK": "slots"},
                   ["error: step 1 (global batch 0 of the files in '",
                    "'): memory plan violated: the stash pool of stage 0 has 1 slots, all "
                    "in use (micro-batches 0), when micro-batch 1 needs one",
                    "error: rank 1: rank 0 failed at step 1: see its message"], count=1)

    check(any(0 < n < STEPS for n in clipping.values()),
          f"some run should clip some steps but not all: {clipping}")
    if failures:
        print(f"train_pipeline_e2e: {len(failures)} failure(s)")
        return 1
    print("train_pipeline_e2e: gpipe, 1f1b, zb-h1 and interleaved pipelines (p = 2, 3; dp = 1, "
          "2) train as PyTorch does; broken plans and jobs are refused on every rank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
