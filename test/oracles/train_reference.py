#!/usr/bin/python3
"""PyTorch reference training of a zoo model under a DeepSpeed config.

The module is built exactly as export_zoo.py builds it (models.py, same seed),
so its initial weights are the exported initializers. It trains with the
semantics the exported graph computes: eval mode (BatchNorm normalizes with
its running statistics, which never change), or for a model with train_mode
train mode (BatchNorm normalizes with the batch's statistics and updates its
running statistics on every micro-batch's forward). float32, one thread.

One optimizer step s (1-based) on one rank, with DeepSpeed's semantics:
  the global batch (s - 1) mod n_batches of the data is split along its first
  axis into gradient_accumulation_steps micro-batches; for each, backward of
  loss / gas; then clip_grad_norm_ over the trainable parameters (when
  gradient_clipping > 0), optimizer.step(), lr scheduler step, zero_grad.
  The log records the mean micro-batch loss, the lr of the update, and the
  global gradient L2 norm before clipping.

As a script it takes the train program's arguments:

  train_reference.py --model gpt2 --config ds.json --data DIR --steps 20 \\
      --log-json log.jsonl [--save-params params.npz] [--frozen NAME,...]
"""
import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ds_reference  # noqa: E402
from models import ZOO, ZooModel  # noqa: E402


@dataclass
class TrainRun:
    log: List[Dict[str, float]]  # per step: step, loss, lr, grad_norm
    params: Dict[str, np.ndarray]  # final named_parameters (tied ones once)
    seconds: float
    buffers: Dict[str, np.ndarray] = None  # final float named_buffers (running statistics)


def check_data(model: ZooModel, data: Dict[str, np.ndarray], global_batch: int) -> int:
    """Validate the [n_batches, global_batch, *sample] layout; returns n_batches."""
    example = model.inputs()
    missing = [n for n in example if n not in data]
    if missing:
        raise ValueError(f"{model.name}: no data for input(s) {', '.join(missing)}")
    n_batches = None
    for name, value in example.items():
        array = data[name]
        want = (global_batch, *value.shape[1:])
        if array.dtype != value.numpy().dtype or array.ndim < 2 or tuple(array.shape[1:]) != want:
            raise ValueError(f"{model.name} input {name}: data is {array.dtype}{list(array.shape)}, expected "
                             f"{value.numpy().dtype}[n_batches, {', '.join(map(str, want))}]")
        if n_batches not in (None, array.shape[0]):
            raise ValueError(f"{model.name}: inputs disagree on the number of batches")
        n_batches = array.shape[0]
    if not n_batches:
        raise ValueError(f"{model.name}: the data holds no batch")
    return n_batches


def global_grad_norm(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """clip_grad_norm_'s total norm, without clipping."""
    grads = [p.grad.detach() for p in params if p.grad is not None]
    return torch.norm(torch.stack([torch.norm(g, 2.0) for g in grads]), 2.0)


def _cast_float_inputs(dtype: torch.dtype):
    """A forward pre-hook giving a submodule its float inputs in `dtype`."""
    def hook(_, args):
        return tuple(a.to(dtype) if torch.is_tensor(a) and a.is_floating_point() else a
                     for a in args)
    return hook


# Activations PyTorch 1.13 cannot differentiate in bfloat16 on the CPU (no
# bf16 Hardswish backward kernel there, nor Hardtanh's, which ReLU6 uses).
# For Hardtanh and ReLU6 computing in f32 changes nothing (a clamp of bf16
# values is exact).
_F32_IN_BF16 = (torch.nn.Hardswish, torch.nn.Hardsigmoid, torch.nn.Hardtanh)


def _compute_in_f32(sub: torch.nn.Module) -> None:
    """Makes `sub`, an element-wise activation, compute in float32 on its
    bfloat16 input and round its result to bfloat16 (to nearest even): what
    a bf16 GPU kernel does (it loads each element to f32, computes, stores
    bf16), and what dsopt's kernels do. Its gradient is computed the same
    way: the f32 backward of the f32 function, rounded to bfloat16."""
    forward = sub.forward
    sub.forward = lambda x: forward(x.float()).to(x.dtype)


def _batch_norm_f32(bn: torch.nn.modules.batchnorm._BatchNorm) -> None:
    """Makes `bn`, a training-mode BatchNorm of a bfloat16 module, keep its
    running statistics in float32 and normalise in float32: its bfloat16
    input and weights converted, the batch statistics and the running
    update in float32, the result rounded to bfloat16 (its gradients
    likewise: the f32 backward, rounded). This is CUDA autocast's BatchNorm
    (batch_norm is on none of autocast's lists, so it runs on the 16-bit
    activations with the module's float32 buffers, in float32 inside) and
    dsopt's (ds-precision computes ds.batch_norm_train in f32 and keeps the
    running statistics in the model's type)."""
    bn.running_mean = bn.running_mean.float()
    bn.running_var = bn.running_var.float()

    def forward(x):
        bn.num_batches_tracked.add_(1)  # as _BatchNorm.forward
        momentum = bn.momentum
        if momentum is None:  # a cumulative average
            momentum = 1.0 / float(bn.num_batches_tracked)
        return F.batch_norm(x.float(), bn.running_mean, bn.running_var, bn.weight.float(),
                            bn.bias.float(), True, momentum, bn.eps).to(x.dtype)
    bn.forward = forward


def train(model: ZooModel, config: Dict, data: Dict[str, np.ndarray], steps: int,
          frozen: Sequence[str] = (), dtype: torch.dtype = torch.float32,
          module: torch.nn.Module = None, bf16: bool = False,
          buffer_micro_batches: Sequence[int] = None, bf16_batch_norm: bool = False) -> TrainRun:
    """Train `model` from its exported weights; `frozen`: parameter names kept fixed.

    dtype float64 runs the same computation in double precision (parameters,
    buffers and float inputs): how far float32 training drifts from it is the
    rounding noise float32 training itself carries. `module`: the module to
    train instead of model.build() (e.g. with altered weights).

    bf16 runs DeepSpeed's bf16 regime (BF16_Optimizer): the module, its
    buffers and float inputs in bfloat16 (tensors a module makes in forward
    too: each submodule gets its float inputs in bfloat16), gradients
    accumulated in bfloat16 across micro-batches; the optimizer updates fp32
    master copies of the trainable parameters from the gradients converted
    to fp32 (clipping and the norm on those), and the module's weights are
    the masters rounded to bfloat16 (to nearest even) after each step.
    Hardswish and Hardsigmoid compute in float32 on their bfloat16 inputs,
    their results and gradients rounded to bfloat16 (_compute_in_f32). The
    returned params are the masters. A training-mode BatchNorm keeps float32
    running statistics and normalises in float32 (_batch_norm_f32), as
    autocast and dsopt do; bf16_batch_norm instead leaves it to DeepSpeed's
    module.bfloat16(): buffers and arithmetic in bfloat16.

    buffer_micro_batches: the micro-batches of each step (indices into its
    gradient accumulation) whose forward keeps its buffer updates; the
    others' are undone. This is PyTorch DDP without SyncBatchNorm over
    ranks that each take gas / ranks consecutive micro-batches: every rank
    normalises with its own batch's statistics, the gradients are averaged
    (the same as accumulating all micro-batches on one rank), and
    broadcast_buffers=True hands every forward rank 0's buffers, so rank
    0's are the buffers that persist: range(gas // ranks). Parameters and
    losses do not depend on it (a training-mode forward does not read the
    running statistics).
    """
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    start = time.perf_counter()
    module = (module if module is not None else model.build()).to(dtype)  # eval or train mode
    named = dict(module.named_parameters())
    unknown = sorted(set(frozen) - set(named))
    if unknown:
        raise ValueError(f"{model.name}: frozen name(s) {', '.join(unknown)} are no parameters")
    for name in frozen:
        named[name].requires_grad_(False)
    trainable = [p for n, p in named.items() if n not in frozen]
    masters = trainable
    if bf16:
        masters = [p.detach().clone().requires_grad_(True) for p in trainable]
        module.to(torch.bfloat16)
        for sub in module.modules():
            sub.register_forward_pre_hook(_cast_float_inputs(torch.bfloat16))
            if isinstance(sub, _F32_IN_BF16):
                _compute_in_f32(sub)
            if (isinstance(sub, torch.nn.modules.batchnorm._BatchNorm) and sub.training
                    and sub.track_running_stats and not bf16_batch_norm):
                _batch_norm_f32(sub)
        dtype = torch.bfloat16

    micro, gas, global_batch = ds_reference.batch_sizes(config, model.config.batch)
    n_batches = check_data(model, data, global_batch)
    clip = float(config.get("gradient_clipping", 0.0) or 0.0)
    optimizer = ds_reference.make_optimizer(config, masters)
    schedule = ds_reference.Schedule(config, optimizer)
    names = list(model.inputs())

    log = []
    for step in range(1, steps + 1):
        batch = (step - 1) % n_batches
        losses = []
        for k in range(gas):
            inputs = [torch.from_numpy(np.ascontiguousarray(data[n][batch, k * micro:(k + 1) * micro]))
                      for n in names]
            inputs = [x.to(dtype) if x.is_floating_point() else x for x in inputs]
            kept = None
            if buffer_micro_batches is not None and k not in buffer_micro_batches:
                kept = [b.detach().clone() for b in module.buffers()]
            loss = module(*inputs)[0]
            (loss / gas).backward()
            if kept is not None:  # after backward, which reads what forward saved
                with torch.no_grad():
                    for b, value in zip(module.buffers(), kept):
                        b.copy_(value)
            losses.append(loss.item())
        if bf16:
            for master, p in zip(masters, trainable):
                master.grad = None if p.grad is None else p.grad.float()
        if clip > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(masters, max_norm=clip)
        else:
            grad_norm = global_grad_norm(masters)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if bf16:
            with torch.no_grad():
                for master, p in zip(masters, trainable):
                    p.copy_(master)
                    p.grad = None
        log.append({"step": step, "loss": sum(losses) / gas, "lr": lr, "grad_norm": float(grad_norm)})

    master_of = {id(p): m for p, m in zip(trainable, masters)}
    params = {n: master_of.get(id(p), p).detach() for n, p in module.named_parameters()}
    params = {n: (p.float() if bf16 else p).numpy().copy() for n, p in params.items()}
    buffers = {n: b.detach().float().numpy().copy() for n, b in module.named_buffers() if b.is_floating_point()}
    return TrainRun(log, params, time.perf_counter() - start, buffers)


def load_data(directory: Path, model: ZooModel) -> Dict[str, np.ndarray]:
    return {n: np.load(directory / (n.replace("/", "_") + ".npy")) for n in model.inputs()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, choices=sorted(ZOO))
    parser.add_argument("--config", required=True, type=Path, help="DeepSpeed config JSON")
    parser.add_argument("--data", required=True, type=Path, help="<input name>.npy per graph input")
    parser.add_argument("--steps", required=True, type=int)
    parser.add_argument("--log-json", type=Path, help="write one JSON object per step")
    parser.add_argument("--save-params", type=Path, help="write the final parameters as .npz")
    parser.add_argument("--frozen", default="", help="comma-separated parameter names kept fixed")
    args = parser.parse_args()

    model = ZOO[args.model]
    config = json.loads(args.config.read_text())
    run = train(model, config, load_data(args.data, model), args.steps, list(filter(None, args.frozen.split(","))))
    for entry in run.log:
        print(f"step {entry['step']:4d}  loss {entry['loss']:.6f}  lr {entry['lr']:.6g}  "
              f"grad_norm {entry['grad_norm']:.6f}")
    print(f"{args.model}: {args.steps} steps in {run.seconds:.2f}s")
    if args.log_json:
        args.log_json.write_text("".join(json.dumps(e) + "\n" for e in run.log))
    if args.save_params:
        np.savez(args.save_params, **run.params)
    return 0


if __name__ == "__main__":
    sys.exit(main())
