#!/usr/bin/python3
"""End-to-end test of dsrt::train_main with PyTorch as the oracle.

Runs dsrt_train_linreg (train_linreg.cpp: linear regression, MSE, two
accumulation steps, global-norm clipping, SGD with momentum, DeepSpeed's
WarmupDecayLR with linear warmup) on .npy batches written here, and checks
  * every step's loss, lr and grad_norm (--log-json) against the same
    training in PyTorch with an lr schedule computed the way DeepSpeed's
    scheduler object is driven (constructor, then step() after each
    optimizer step);
  * the printed step lines, the summary and the measured arena peak;
  * --save-onnx: the trained weights, every other part of the model kept,
    onnx.load + onnx.checker pass, for an inline source model, a source with
    external data (the copy must not need the source's files) and
    --external-data;
  * bad data files and flags: exit status 1 and a message naming the input.

usage: train_e2e.py --exe PATH --model PATH --work DIR
(--model is the source model path compiled into the program.)
"""

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

BATCH, IN, OUT, ACCUMULATION, BATCHES, STEPS = 4, 64, 8, 2, 3, 10
ARENA_BYTES = 9728
MOMENTUM, CLIP = 0.9, 1.0
# set_schedule in train_linreg.cpp
MIN_LR, MAX_LR, WARMUP, TOTAL = 0.01, 0.05, 3, 8

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


def initial_weights():
    w = (0.05 * np.sin(np.arange(IN * OUT, dtype=np.float64))).astype(np.float32)
    b = (0.1 * np.arange(OUT, dtype=np.float64) - 0.3).astype(np.float32)
    return w.reshape(IN, OUT), b


TABLE = (np.arange(300, dtype=np.float32) * 0.5 - 7.0)  # 1200 bytes: goes external
SMALL = np.array([1, 2, 3], dtype=np.int64)


def branch(name):
    """An If branch with its own 1200-byte initializer (left as it is)."""
    return helper.make_graph(
        [helper.make_node("Identity", [name + "_table"], [name + "_out"])], name,
        [], [helper.make_tensor_value_info(name + "_out", TensorProto.FLOAT, [300])],
        initializer=[numpy_helper.from_array(TABLE + (1 if name == "then" else 2),
                                             name + "_table")])


def write_model(path, external):
    """The source model: the program's graph with W and b as initializers, a
    1200-byte and a small initializer that are not parameters and, in the
    inline model, an If whose branches hold initializers of their own."""
    w, b = initial_weights()
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["pred"]),
        helper.make_node("Sub", ["pred", "y"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
    ]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    initializers = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b"),
                    numpy_helper.from_array(TABLE, "table"),
                    numpy_helper.from_array(SMALL, "small")]
    if not external:
        # onnx's external-data writer would move subgraph tensors too.
        nodes.append(helper.make_node("If", ["flag"], ["branch_out"],
                                      then_branch=branch("then"), else_branch=branch("else")))
        outputs.append(helper.make_tensor_value_info("branch_out", TensorProto.FLOAT, [300]))
        initializers.append(numpy_helper.from_array(np.array(True), "flag"))
    graph = helper.make_graph(
        nodes, "linreg",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, IN]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, OUT])],
        outputs, initializer=initializers,
        doc_string="linear regression for the train runner test")
    model = helper.make_model(graph, producer_name="train_e2e",
                              opset_imports=[helper.make_opsetid("", 13)])
    model.metadata_props.add(key="purpose", value="kept verbatim")
    onnx.checker.check_model(model)
    for name in os.listdir(os.path.dirname(path)):
        if name.startswith(os.path.basename(path)):
            os.remove(os.path.join(os.path.dirname(path), name))
    if external:
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(path) + ".data", size_threshold=0)
    else:
        onnx.save_model(model, path)
    return model


def write_data(directory):
    # Targets near the initial model, so that the gradient norm starts above
    # the clipping threshold and falls below it as training goes.
    rng = np.random.default_rng(1234)
    w_true = (initial_weights()[0] + rng.normal(0, 0.08, size=(IN, OUT))).astype(np.float32)
    x = rng.normal(0, 1, size=(BATCHES, ACCUMULATION * BATCH, IN)).astype(np.float32)
    noise = rng.normal(0, 0.01, size=(BATCHES, ACCUMULATION * BATCH, OUT))
    y = (x @ w_true + noise).astype(np.float32)
    os.makedirs(directory, exist_ok=True)
    np.save(os.path.join(directory, "x.npy"), x)
    np.save(os.path.join(directory, "y.npy"), y)
    return x, y


class WarmupDecayLR:
    """The lr DeepSpeed's WarmupDecayLR (warmup_type 'linear') gives its
    optimizer: set by the constructor, then after every scheduler.step()."""

    def __init__(self):
        self.last_batch_iteration = -1
        self.warmup = max(2, WARMUP)

    def get_lr(self):
        it = self.last_batch_iteration
        if it < 0:
            return MIN_LR
        if it < self.warmup:
            gamma = it / self.warmup
        else:
            gamma = max(0.0, float(TOTAL - it) / float(max(1.0, TOTAL - self.warmup)))
        return MIN_LR + (MAX_LR - MIN_LR) * gamma

    def step(self):
        self.last_batch_iteration += 1


def reference(x, y):
    w, b = initial_weights()
    W = torch.tensor(w, requires_grad=True)
    B = torch.tensor(b, requires_grad=True)
    optimizer = torch.optim.SGD([W, B], lr=MIN_LR, momentum=MOMENTUM)
    scheduler = WarmupDecayLR()
    rows = []
    for step in range(1, STEPS + 1):
        lr = scheduler.get_lr()
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = (step - 1) % BATCHES
        losses = []
        for j in range(ACCUMULATION):
            xb = torch.from_numpy(x[batch, j * BATCH:(j + 1) * BATCH])
            yb = torch.from_numpy(y[batch, j * BATCH:(j + 1) * BATCH])
            loss = ((xb @ W + B - yb) ** 2).mean()
            (loss / ACCUMULATION).backward()
            losses.append(loss.item())
        norm = torch.nn.utils.clip_grad_norm_([W, B], CLIP).item()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        rows.append({"step": step, "loss": sum(losses) / ACCUMULATION, "lr": lr,
                     "grad_norm": norm})
    return rows, W.detach().numpy(), B.detach().numpy()


def run(exe, *args):
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


def close(a, b, rtol, atol=0.0):
    return abs(a - b) <= atol + rtol * abs(b)


def check_saved(path, w, b, expect_external, source):
    """The saved model loads, passes the checker, holds the trained W and b,
    and keeps everything else of the source."""
    check(os.path.exists(path), f"{path} was not written")
    if not os.path.exists(path):
        return
    onnx.checker.check_model(path)  # with a path: also checks external files exist
    raw = onnx.load(path, load_external_data=False)
    external = {t.name for t in raw.graph.initializer
                if t.data_location == TensorProto.EXTERNAL}
    check(external == expect_external,
          f"{path}: external initializers {sorted(external)}, expected {sorted(expect_external)}")
    for t in raw.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                check(entry.value == os.path.basename(path) + ".data",
                      f"{path}: {t.name} points to {entry.value}")
    model = onnx.load(path)
    onnx.checker.check_model(model)
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    check(values["W"].dtype == np.float32 and values["W"].shape == (IN, OUT), f"{path}: W type")
    check(np.allclose(values["W"], w, rtol=1e-5, atol=1e-6),
          f"{path}: W differs from PyTorch by {np.abs(values['W'] - w).max()}")
    check(np.allclose(values["b"], b, rtol=1e-5, atol=1e-6),
          f"{path}: b differs from PyTorch by {np.abs(values['b'] - b).max()}")
    check(np.array_equal(values["table"], TABLE), f"{path}: table changed")
    check(np.array_equal(values["small"], SMALL), f"{path}: small changed")
    # Everything but the initializers' data is the source's.
    a, s = onnx.ModelProto(), onnx.ModelProto()
    a.CopyFrom(model)
    s.CopyFrom(source)
    for m in (a, s):
        del m.graph.initializer[:]
    check(a.SerializeToString() == s.SerializeToString(),
          f"{path}: parts other than the initializers changed")
    names = [t.name for t in source.graph.initializer]
    check([t.name for t in model.graph.initializer] == names,
          f"{path}: initializer order changed")
    for node in raw.graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                table = attribute.g.initializer[0]
                check(table.data_location == TensorProto.DEFAULT and len(table.raw_data) == 1200,
                      f"{path}: the If branch's initializer {table.name} was changed")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    work = args.work
    if os.path.isdir(work):
        shutil.rmtree(work)
    os.makedirs(work)
    os.makedirs(os.path.dirname(args.model), exist_ok=True)
    data = os.path.join(work, "data")
    x, y = write_data(data)
    rows, w_ref, b_ref = reference(x, y)
    clipped = sum(1 for r in rows if r["grad_norm"] > CLIP)
    check(0 < clipped < STEPS, f"the reference should clip some steps but not all ({clipped})")

    # 1. An inline source model.
    source = write_model(args.model, external=False)
    log = os.path.join(work, "log.jsonl")
    out_inline = os.path.join(work, "inline.onnx")
    result = run(args.exe, "--data", data, "--steps", str(STEPS), "--log-json", log,
                 "--save-onnx", out_inline, "--threads", "1")
    check(result.returncode == 0, f"train failed: {result.stderr}")
    lines = [json.loads(line) for line in open(log)] if os.path.exists(log) else []
    check(len(lines) == STEPS, f"{len(lines)} JSON lines, expected {STEPS}")
    keys = {"step", "loss", "lr", "grad_norm", "step_time_s", "samples_per_s",
            "skipped", "arena_peak_bytes", "arena_planned_bytes", "memory_spaces"}
    for got, want in zip(lines, rows):
        s = want["step"]
        check(set(got) == keys, f"step {s}: JSON keys {sorted(got)}")
        check(got["step"] == s, f"step {s}: 'step' is {got['step']}")
        check(got["skipped"] is False, f"step {s}: skipped is {got['skipped']}")
        check(close(got["loss"], want["loss"], 1e-5, 1e-7),
              f"step {s}: loss {got['loss']} vs PyTorch {want['loss']}")
        check(close(got["lr"], want["lr"], 1e-8),
              f"step {s}: lr {got['lr']} vs DeepSpeed {want['lr']}")
        check(close(got["grad_norm"], want["grad_norm"], 1e-5, 1e-7),
              f"step {s}: grad_norm {got['grad_norm']} vs PyTorch {want['grad_norm']}")
        check(got["arena_peak_bytes"] == ARENA_BYTES == got["arena_planned_bytes"],
              f"step {s}: arena {got['arena_peak_bytes']} / {got['arena_planned_bytes']}")
        # Every space's measured high-water mark and plan: all in the device.
        want_spaces = {"device": {"peak_bytes": ARENA_BYTES, "planned_bytes": ARENA_BYTES},
                       "host": {"peak_bytes": 0, "planned_bytes": 0},
                       "file": {"peak_bytes": 0, "planned_bytes": 0}}
        check(got["memory_spaces"] == want_spaces, f"step {s}: memory spaces {got['memory_spaces']}")
        check(got["step_time_s"] > 0 and got["samples_per_s"] > 0, f"step {s}: timing")
    # steps_per_print = 3, plus the last step.
    printed = re.findall(r"^step (\d+)/10 \| loss [0-9.]+ \| lr \d\.\d{6}e[-+]\d+ \| "
                         r"grad_norm [0-9.]+ \| [0-9.]+ ms \| [0-9.]+ samples/s \| "
                         r"arena peak [0-9.]+ MiB$", result.stdout, re.M)
    check(printed == ["3", "6", "9", "10"], f"printed steps {printed}: {result.stdout!r}")
    check(f"arena: planned {ARENA_BYTES} bytes, measured high-water mark {ARENA_BYTES} bytes"
          in result.stderr, f"summary: {result.stderr!r}")
    check_saved(out_inline, w_ref, b_ref, set(), source)
    # ...and with --external-data: W (2048 bytes) goes to the data file; b is
    # too small; table is not a parameter and its data is inline, so it is
    # kept as it is, like the If branches' tables.
    out_ext_inline = os.path.join(work, "inline_external.onnx")
    result = run(args.exe, "--data", data, "--steps", str(STEPS), "--quiet",
                 "--save-onnx", out_ext_inline, "--external-data")
    check(result.returncode == 0, f"train --external-data failed: {result.stderr}")
    check(result.stdout == "" and result.stderr == "", "--quiet printed something")
    check_saved(out_ext_inline, w_ref, b_ref, {"W"}, source)

    # 2. A source model with every initializer external, saved with
    # --external-data and inline; then the source's data file goes away and
    # both copies must still load.
    source = write_model(args.model, external=True)
    out_ext = os.path.join(work, "external.onnx")
    result = run(args.exe, "--data", data, "--steps", str(STEPS), "--quiet",
                 "--save-onnx", out_ext, "--external-data")
    check(result.returncode == 0, f"train --external-data failed: {result.stderr}")
    out_from_ext = os.path.join(work, "from_external.onnx")
    result = run(args.exe, "--data", data, "--steps", str(STEPS), "--quiet",
                 "--save-onnx", out_from_ext)
    check(result.returncode == 0, f"train from an external source failed: {result.stderr}")
    source_inline = onnx.load(args.model)  # the source with its data loaded
    os.remove(args.model + ".data")
    check_saved(out_ext, w_ref, b_ref, {"W", "table"}, source_inline)
    check_saved(out_from_ext, w_ref, b_ref, set(), source_inline)
    check(not os.path.exists(out_from_ext + ".data"), "an inline save wrote a data file")

    # The source's external file is gone: --save-onnx must fail before training.
    result = run(args.exe, "--data", data, "--steps", "1", "--save-onnx",
                 os.path.join(work, "never.onnx"))
    check(result.returncode == 1 and "table" in result.stderr and "step 1" not in result.stdout,
          f"missing source data: {result.returncode} {result.stderr!r}")
    write_model(args.model, external=False)
    result = run(args.exe, "--data", data, "--steps", "1",
                 "--save-onnx", os.path.join(work, "no-such-dir", "m.onnx"))
    check(result.returncode == 1 and "no-such-dir" in result.stderr,
          f"bad --save-onnx directory: {result.returncode} {result.stderr!r}")

    # 4. Bad data files and flags: exit status 1, a message naming the input.
    def expect_error(name, files, flags, fragments):
        bad = os.path.join(work, "bad_" + name)
        os.makedirs(bad)
        for file, value in files.items():
            target = os.path.join(bad, file)
            if value is None:
                continue
            if isinstance(value, bytes):
                open(target, "wb").write(value)
            else:
                np.save(target, value)
        result = run(args.exe, "--data", bad, *flags)
        ok = result.returncode == 1 and all(f in result.stderr for f in fragments)
        ok = ok and "Traceback" not in result.stderr and "step 1/" not in result.stdout
        check(ok, f"{name}: exit {result.returncode}, stderr {result.stderr!r}, "
                  f"expected {fragments}")

    steps = ["--steps", "2"]
    expect_error("dtype", {"x.npy": x.astype(np.float64), "y.npy": y}, steps,
                 ["input 'x'", "x.npy"])
    expect_error("dtype_int", {"x.npy": x, "y.npy": y.astype(np.int32)}, steps,
                 ["input 'y'", "y.npy", "i32", "f32 [n, 8, 8]"])
    expect_error("shape", {"x.npy": x[:, :, :63], "y.npy": y}, steps,
                 ["input 'x'", "x.npy", "[3, 8, 63]", "f32 [n, 8, 64]"])
    expect_error("one_micro", {"x.npy": x[:, :4], "y.npy": y}, steps,
                 ["input 'x'", "[3, 4, 64]", "2 micro-batches of [4, 64]"])
    expect_error("rank", {"x.npy": x[0], "y.npy": y}, steps, ["input 'x'", "[8, 64]"])
    expect_error("n", {"x.npy": x, "y.npy": y[:2]}, steps,
                 ["input 'y'", "2 batches", "input 'x'", "3"])
    expect_error("empty", {"x.npy": x[:0], "y.npy": y[:0]}, steps, ["input 'x'", "[0, 8, 64]"])
    expect_error("missing", {"x.npy": x}, steps, ["input 'y'", "missing file", "y.npy"])
    expect_error("not_npy", {"x.npy": x, "y.npy": b"not a numpy file"}, steps,
                 ["input 'y'", "y.npy"])
    good = {"x.npy": x, "y.npy": y}
    expect_error("steps_zero", good, ["--steps", "0"], ["--steps", "'0'"])
    expect_error("steps_text", good, ["--steps", "ten"], ["--steps", "'ten'"])
    expect_error("steps_negative", good, ["--steps", "-3"], ["--steps", "'-3'"])
    expect_error("steps_missing", good, [], ["--steps"])
    expect_error("steps_no_value", good, ["--steps"], ["--steps needs a value"])
    expect_error("unknown_flag", good, ["--steps", "1", "--bogus"], ["--bogus"])
    expect_error("seed", good, ["--steps", "1", "--seed", "x"], ["--seed", "'x'"])
    expect_error("external_alone", good, ["--steps", "1", "--external-data"],
                 ["--external-data"])
    result = run(args.exe, "--data", os.path.join(work, "nowhere"), "--steps", "1")
    check(result.returncode == 1 and "nowhere" in result.stderr,
          f"missing --data directory: {result.stderr!r}")

    if failures:
        print(f"train_e2e: {len(failures)} failure(s)")
        return 1
    print(f"train_e2e: {STEPS} steps match PyTorch ({clipped} clipped); --save-onnx inline, "
          f"external source and --external-data load and check; bad data and flags rejected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
