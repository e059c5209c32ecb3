#!/usr/bin/python3
"""What a DeepSpeed config (ds_config JSON) means for one training step, in PyTorch.

This is the reference that dsopt's compiled training programs are compared
with. It covers the part of ds_config that dsopt compiles:

  optimizer {type: AdamW | Adam | SGD | Lion, params {...}}
      AdamW: torch.optim.AdamW (decoupled weight decay)
      Adam:  torch.optim.Adam (weight decay added to the gradient, L2)
      SGD:   torch.optim.SGD (momentum, dampening, nesterov, weight_decay)
      Lion:  `Lion` below (decoupled weight decay, sign of the interpolated
             momentum)
      A missing parameter takes torch.optim's default (Lion: lr 1e-4,
      betas (0.9, 0.99), weight_decay 0); an unknown one is an error, so a
      config never silently means something else here than in dsopt.
  scheduler {type: WarmupLR | WarmupDecayLR | WarmupCosineLR, params {...}}
      as deepspeed/runtime/lr_schedules.py: the constructor sets the lr of the
      first optimizer step, step() runs after every optimizer step, so step s
      (1-based) uses last_batch_iteration = s - 2.
  gradient_clipping, train_batch_size, train_micro_batch_size_per_gpu,
  gradient_accumulation_steps (one rank: global = micro * accumulation).

Run as a script, it checks the schedules and Lion against hand-computed
numbers and prints one line per check.
"""

import math
import sys
from typing import Dict, Iterable, List, Tuple

import torch

OPTIMIZER_PARAMS = {
    "AdamW": ("lr", "betas", "eps", "weight_decay"),
    "Adam": ("lr", "betas", "eps", "weight_decay", "adam_w_mode"),
    "SGD": ("lr", "momentum", "dampening", "nesterov", "weight_decay"),
    "Lion": ("lr", "betas", "weight_decay"),
}

SCHEDULER_PARAMS = {
    "WarmupLR": ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"),
    "WarmupDecayLR": ("total_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type"),
    "WarmupCosineLR": ("total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type"),
}


class ConfigError(ValueError):
    """A ds_config this reference cannot give a meaning to."""


def _section(config: Dict, key: str) -> Tuple[str, Dict]:
    section = config.get(key)
    if section is None:
        return None, {}
    kind, params = section.get("type"), section.get("params", {})
    known = OPTIMIZER_PARAMS if key == "optimizer" else SCHEDULER_PARAMS
    if kind not in known:
        raise ConfigError(f"{key}.type {kind!r}: expected one of {', '.join(known)}")
    unknown = sorted(set(params) - set(known[kind]))
    if unknown:
        raise ConfigError(f"{key}.params of {kind}: unknown {', '.join(unknown)}")
    return kind, params


# --------------------------------------------------------------------------
# Batch sizes
# --------------------------------------------------------------------------


def batch_sizes(config: Dict, model_batch: int) -> Tuple[int, int, int]:
    """(micro batch, gradient accumulation steps, global batch) on one rank.

    The micro batch is the model's static batch; the config may restate it but
    not contradict it. Any two of train_batch_size, the micro batch and
    gradient_accumulation_steps determine the third, as in DeepSpeed.
    """
    micro = config.get("train_micro_batch_size_per_gpu", model_batch)
    if micro != model_batch:
        raise ConfigError(f"train_micro_batch_size_per_gpu {micro} differs from the model's batch {model_batch}")
    total = config.get("train_batch_size")
    gas = config.get("gradient_accumulation_steps")
    if gas is None:
        gas = total // micro if total is not None else 1
    if not isinstance(gas, int) or gas < 1:
        raise ConfigError(f"gradient_accumulation_steps {gas!r} must be a positive integer")
    if total is not None and total != micro * gas:
        raise ConfigError(f"train_batch_size {total} != micro batch {micro} * gradient_accumulation_steps {gas}")
    return micro, gas, micro * gas


# --------------------------------------------------------------------------
# Optimizers
# --------------------------------------------------------------------------


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms").

        c = b1 * m + (1 - b1) * g
        p = p * (1 - lr * wd) - lr * sign(c)
        m = b2 * m + (1 - b2) * g
    """

    def __init__(self, params: Iterable, lr: float = 1e-4, betas=(0.9, 0.99), weight_decay: float = 0.0):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                m = self.state[p].setdefault("exp_avg", torch.zeros_like(p))
                c = m.mul(beta1).add_(p.grad, alpha=1 - beta1)
                p.mul_(1 - lr * wd).add_(torch.sign(c), alpha=-lr)
                m.mul_(beta2).add_(p.grad, alpha=1 - beta2)
        return None


def make_optimizer(config: Dict, params: List[torch.nn.Parameter]) -> torch.optim.Optimizer:
    kind, p = _section(config, "optimizer")
    if kind is None:
        raise ConfigError("no optimizer section")
    betas = tuple(p["betas"]) if "betas" in p else None
    if kind in ("AdamW", "Adam"):
        # DeepSpeed's "Adam" is FusedAdam with adam_w_mode=True (decoupled
        # weight decay, torch.optim.AdamW) unless adam_w_mode is false.
        decoupled = kind == "AdamW" or p.get("adam_w_mode", True)
        cls = torch.optim.AdamW if decoupled else torch.optim.Adam
        kwargs = {k: v for k, v in (("lr", p.get("lr")), ("betas", betas), ("eps", p.get("eps")),
                                    ("weight_decay", p.get("weight_decay"))) if v is not None}
        return cls(params, foreach=False, **kwargs)
    if kind == "SGD":
        if "lr" not in p:
            raise ConfigError("optimizer SGD needs params.lr")
        return torch.optim.SGD(params, lr=p["lr"], momentum=p.get("momentum", 0.0),
                               dampening=p.get("dampening", 0.0), nesterov=p.get("nesterov", False),
                               weight_decay=p.get("weight_decay", 0.0), foreach=False)
    # DeepSpeed's FusedLion defaults.
    return Lion(params, lr=p.get("lr", 1e-3), betas=betas or (0.9, 0.999), weight_decay=p.get("weight_decay", 0.0))


# --------------------------------------------------------------------------
# Learning-rate schedules
# --------------------------------------------------------------------------


class Schedule:
    """A DeepSpeed lr scheduler driving a torch optimizer's lr.

    Constructing it sets the lr of the first optimizer step; step() advances
    last_batch_iteration and sets the lr of the next one. With no scheduler
    section the lr is the optimizer's, constant.
    """

    def __init__(self, config: Dict, optimizer: torch.optim.Optimizer = None, base_lr: float = None):
        self.kind, p = _section(config, "scheduler")
        self.optimizer = optimizer
        self.base_lr = base_lr if base_lr is not None else optimizer.param_groups[0]["lr"]
        self.min_lr = p.get("warmup_min_lr", 0.0)
        self.max_lr = p.get("warmup_max_lr", 0.001)
        self.warmup_num_steps = max(2, p.get("warmup_num_steps", 1000))
        self.warmup_type = p.get("warmup_type", "log")
        if self.warmup_type not in ("log", "linear"):
            raise ConfigError(f"scheduler.params.warmup_type {self.warmup_type!r}: expected log or linear")
        if self.kind in ("WarmupDecayLR", "WarmupCosineLR") and "total_num_steps" not in p:
            raise ConfigError(f"scheduler {self.kind} needs params.total_num_steps")
        self.total_num_steps = p.get("total_num_steps")
        self.warmup_min_ratio = p.get("warmup_min_ratio", 0.0)
        self.cos_min_ratio = p.get("cos_min_ratio", 0.0001)
        self.last_batch_iteration = -1
        self._apply(self.initial_lr())

    def initial_lr(self) -> float:
        if self.kind in ("WarmupLR", "WarmupDecayLR"):
            return self.min_lr
        if self.kind == "WarmupCosineLR":
            return 0.0
        return self.base_lr

    def _warmup_gamma(self, it: int) -> float:
        if self.warmup_type == "log":
            return math.log(it + 1) / math.log(self.warmup_num_steps)
        return it / self.warmup_num_steps

    def lr_at_iteration(self, it: int) -> float:
        """The lr step() sets when last_batch_iteration becomes `it` (>= 0)."""
        if self.kind is None:
            return self.base_lr
        warm = it < self.warmup_num_steps
        if self.kind == "WarmupCosineLR":
            if warm:
                ratio = self.warmup_min_ratio + self._warmup_gamma(it) * (1.0 - self.warmup_min_ratio)
            else:
                real, total = it - self.warmup_num_steps + 1, self.total_num_steps - self.warmup_num_steps
                if total <= 0:
                    raise ConfigError(f"WarmupCosineLR: total_num_steps {self.total_num_steps} must exceed "
                                      f"warmup_num_steps {self.warmup_num_steps}")
                cosine = (1.0 + math.cos(math.pi * real / total)) / 2.0
                ratio = max(0.0, self.cos_min_ratio + (1.0 - self.cos_min_ratio) * cosine)
            return self.base_lr * ratio
        if warm:
            gamma = self._warmup_gamma(it)
        elif self.kind == "WarmupDecayLR":
            gamma = max(0.0, (self.total_num_steps - it) / max(1.0, self.total_num_steps - self.warmup_num_steps))
        else:
            gamma = 1.0
        return self.min_lr + (self.max_lr - self.min_lr) * gamma

    def lr_for_step(self, step: int) -> float:
        """The lr optimizer step `step` (1-based) uses."""
        return self.initial_lr() if step == 1 else self.lr_at_iteration(step - 2)

    def step(self) -> None:
        self.last_batch_iteration += 1
        self._apply(self.lr_at_iteration(self.last_batch_iteration))

    def _apply(self, lr: float) -> None:
        if self.optimizer is not None:
            for group in self.optimizer.param_groups:
                group["lr"] = lr


def lr_schedule(config: Dict, steps: int, base_lr: float = None) -> List[float]:
    """The lr of optimizer steps 1..steps (base_lr: the optimizer's lr)."""
    if base_lr is None:
        base_lr = _section(config, "optimizer")[1].get("lr", 1e-3)
    schedule = Schedule(config, base_lr=base_lr)
    return [schedule.lr_for_step(s) for s in range(1, steps + 1)]


# --------------------------------------------------------------------------
# Checks against hand-computed numbers
# --------------------------------------------------------------------------


def _sched(kind: str, **params) -> Dict:
    return {"optimizer": {"type": "AdamW", "params": {"lr": 0.02}}, "scheduler": {"type": kind, "params": params}}


# (name, config, {step: lr}); every number below is worked out by hand from
# the formulas in the module docstring (step s uses iteration s - 2).
SCHEDULE_CHECKS = [
    ("constant", {"optimizer": {"type": "SGD", "params": {"lr": 0.05}}}, {1: 0.05, 2: 0.05, 20: 0.05}),
    ("WarmupLR log", _sched("WarmupLR", warmup_min_lr=0.0, warmup_max_lr=0.01, warmup_num_steps=10),
     # iteration 1: log(2)/log(10) = 0.30103; iteration 9: log(10)/log(10) = 1
     {1: 0.0, 2: 0.0, 3: 0.0030103, 11: 0.01, 12: 0.01}),
    ("WarmupLR linear", _sched("WarmupLR", warmup_min_lr=0.001, warmup_max_lr=0.005, warmup_num_steps=4,
                               warmup_type="linear"),
     {1: 0.001, 2: 0.001, 3: 0.002, 4: 0.003, 5: 0.004, 6: 0.005, 9: 0.005}),
    # warmup_num_steps 1 counts as 2: iteration 0 -> 0, iteration 1 -> 1/2.
    ("WarmupLR linear warmup 1", _sched("WarmupLR", warmup_min_lr=0.0, warmup_max_lr=0.01, warmup_num_steps=1,
                                        warmup_type="linear"),
     {1: 0.0, 2: 0.0, 3: 0.005, 4: 0.01}),
    ("WarmupDecayLR", _sched("WarmupDecayLR", total_num_steps=10, warmup_min_lr=0.0, warmup_max_lr=0.01,
                             warmup_num_steps=4, warmup_type="linear"),
     # iteration 4: (10-4)/6 = 1; 7: 3/6; 10: 0; 12: max(0, -2/6)
     {1: 0.0, 4: 0.005, 6: 0.01, 9: 0.005, 12: 0.0, 14: 0.0}),
    ("WarmupCosineLR", _sched("WarmupCosineLR", total_num_steps=10, warmup_min_ratio=0.1, warmup_num_steps=4,
                              cos_min_ratio=0.0, warmup_type="linear"),
     # base lr 0.02. iteration 0: ratio 0.1; 2: 0.1 + 0.5 * 0.9 = 0.55;
     # 4: (1 + cos(pi/6))/2 = 0.9330127; 6: (1 + cos(pi/2))/2 = 0.5; 9: 0;
     # 12: (1 + cos(3pi/2))/2 = 0.5 (the cosine comes back up past the end)
     {1: 0.0, 2: 0.002, 4: 0.011, 6: 0.018660254, 8: 0.01, 11: 0.0, 14: 0.01}),
    ("WarmupCosineLR cos_min_ratio", _sched("WarmupCosineLR", total_num_steps=10, warmup_num_steps=4,
                                            cos_min_ratio=0.1),
     # iteration 9: 0.1 + 0.9 * 0 = 0.1; iteration 6: 0.1 + 0.9 * 0.5 = 0.55
     {11: 0.002, 8: 0.011}),
]


def _lion_check() -> List[float]:
    """Two Lion steps on p = 1: g = 0.5, then g = -1 (lr 0.1, wd 0.1).

    step 1: c = 0.05 -> +1;  p = 1 * 0.99 - 0.1 = 0.89;       m = 0.005
    step 2: c = 0.0045 - 0.1 -> -1;  p = 0.89 * 0.99 + 0.1 = 0.9811;
            m = 0.99 * 0.005 - 0.01 = -0.00505
    """
    p = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    opt = Lion([p], lr=0.1, betas=(0.9, 0.99), weight_decay=0.1)
    out = []
    for g in (0.5, -1.0):
        p.grad = torch.tensor([g], dtype=torch.float64)
        opt.step()
        out += [p.item(), opt.state[p]["exp_avg"].item()]
    return out


def self_test() -> int:
    failures = 0
    for name, config, expected in SCHEDULE_CHECKS:
        steps = max(expected)
        lrs = lr_schedule(config, steps)
        # The same numbers through a real optimizer, as the training loop uses them.
        opt = make_optimizer(config, [torch.nn.Parameter(torch.zeros(1))])
        schedule = Schedule(config, opt)
        driven = []
        for _ in range(steps):
            driven.append(opt.param_groups[0]["lr"])
            schedule.step()
        bad = [s for s, want in expected.items()
               if not (math.isclose(lrs[s - 1], want, rel_tol=1e-6, abs_tol=1e-12)
                       and lrs[s - 1] == driven[s - 1])]
        failures += bool(bad)
        shown = ", ".join(f"{s}:{lrs[s - 1]:.9g}" for s in sorted(expected))
        print(f"schedule {name}: {'ok' if not bad else 'WRONG at steps ' + str(bad)} ({shown})")
    lion = _lion_check()
    ok = all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(lion, (0.89, 0.005, 0.9811, -0.00505)))
    failures += not ok
    print(f"optimizer Lion: {'ok' if ok else 'WRONG'} ({', '.join(f'{v:.9g}' for v in lion)})")
    cases = [({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3}, (2, 3, 6)),
             ({"train_batch_size": 8}, (2, 4, 8)), ({}, (2, 1, 2))]
    for config, want in cases:
        got = batch_sizes(config, 2)
        failures += got != want
        print(f"batch sizes {config}: {'ok' if got == want else 'WRONG'} {got}")
    for bad in ({"train_micro_batch_size_per_gpu": 4}, {"train_batch_size": 8, "gradient_accumulation_steps": 3}):
        try:
            batch_sizes(bad, 2)
            failures += 1
            print(f"batch sizes {bad}: WRONG, accepted")
        except ConfigError as e:
            print(f"batch sizes {bad}: rejected: {e}")
    print(f"ds_reference: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(self_test())
