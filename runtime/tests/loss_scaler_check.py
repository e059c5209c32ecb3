"""dsrt::LossScaler against DeepSpeed's rule (test/oracles/deepspeed_loss_scaler.py)
on random overflow sequences and options, and on the sequences that exercise
each branch: hysteresis used up, refilled on doubling or on every clean step,
the window, the floor and the error at the minimum."""
import argparse
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "test", "oracles"))
from deepspeed_loss_scaler import scale_sequence  # noqa: E402


def run(exe, options, flags):
    args = [exe, str(options["loss_scale"]), str(options["initial_scale_power"]),
            str(options["loss_scale_window"]), str(options["hysteresis"]),
            "1" if options["consecutive_hysteresis"] else "0", str(options["min_loss_scale"]),
            "".join("1" if f else "0" for f in flags)]
    p = subprocess.run(args, capture_output=True, text=True)
    lines = p.stdout.splitlines()
    scales, error = [], None
    for line in lines:
        if line.startswith("error: "):
            error = line
            break
        step, before, after, skipped = line.split()
        scales.append(float(before))
        if int(skipped) != int(flags[int(step) - 1]):
            sys.exit(f"step {step}: skipped={skipped} but overflow={flags[int(step) - 1]}")
    return scales, error, p.returncode


def check(exe, options, flags, what):
    want, raised_at = scale_sequence(flags, **options)
    got, error, rc = run(exe, options, flags)
    if raised_at is None:
        if rc != 0 or got != want:
            sys.exit(f"{what}: options {options} flags {flags}:\n dsrt     {got} (rc {rc}, {error})"
                     f"\n deepspeed {want}")
    else:
        # The raising step runs with its scale and then stops with an error
        # that names it (1-based).
        if rc != 1 or got != want[:raised_at] or error is None or \
                f"overflow at step {raised_at + 1} " not in error or "minimum" not in error:
            sys.exit(f"{what}: options {options} flags {flags}: DeepSpeed raises at step "
                     f"{raised_at + 1}; dsrt: rc {rc}, {error}, scales {got} vs {want}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--exe", required=True)
    parser.add_argument("--cases", type=int, default=400)
    a = parser.parse_args()
    base = dict(loss_scale=0, initial_scale_power=16, loss_scale_window=1000, hysteresis=2,
                consecutive_hysteresis=False, min_loss_scale=1)
    # Hand-picked branches.
    check(a.exe, dict(base, loss_scale_window=3), [1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0], "window")
    check(a.exe, dict(base, loss_scale_window=2, consecutive_hysteresis=True),
          [1, 0, 1, 0, 1, 1, 0, 0], "consecutive")
    check(a.exe, dict(base, initial_scale_power=2, hysteresis=1, min_loss_scale=1),
          [1, 1, 1, 1], "minimum")
    check(a.exe, dict(base, initial_scale_power=32, hysteresis=1), [1] * 16 + [0] * 8, "from 2^32")
    check(a.exe, dict(base, loss_scale=128), [1, 0, 1, 1, 0], "static")
    rng = random.Random(1234)
    for i in range(a.cases):
        options = dict(loss_scale=rng.choice([0, 0, 0, 0, 8]),
                       initial_scale_power=rng.randint(0, 8),
                       loss_scale_window=rng.randint(1, 6), hysteresis=rng.randint(1, 4),
                       consecutive_hysteresis=rng.random() < 0.5,
                       min_loss_scale=rng.choice([1, 0.25, 4]))
        p = rng.random()
        flags = [rng.random() < p for _ in range(rng.randint(1, 40))]
        check(a.exe, options, flags, f"random case {i}")
    print(f"loss scaler: {a.cases + 5} sequences agree with DeepSpeed's rule")


if __name__ == "__main__":
    main()
