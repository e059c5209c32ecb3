#!/usr/bin/python3
"""torchvision's model families trained by dsopt against PyTorch: the table of docs/models.md.

Exports every torchvision family of the zoo (tv_* in test/oracles/models.py,
built by test/oracles/torchvision_models.py: small, random weights, every
parameter its own initializer), then for each one's unfolded export runs
test/oracles/check_zoo_train.py --forward: one dsopt build, whose forward
program must reproduce PyTorch's loss and logits (rel 1e-5), and whose
training program must follow PyTorch's trajectory over STEPS AdamW steps
with clipping under docs/training.md's tolerance rule (each tolerance
widened by 4 x PyTorch's own float32-vs-float64 drift on that quantity).
The families in models.TRAIN_MODE_FAMILIES (those with BatchNorm but
MNASNet) train and export in training mode: batch statistics, and their
running statistics, updated by dsopt, must match PyTorch's final buffers
(rel 1e-5, widened the same way). MNASNet trains in eval mode, and again in
training mode as the row mnasnet_bn (models.TRAIN_MODE_VARIANTS), which
checks its running statistics. Prints a Markdown table, one row per family, with the verdict and
the worst errors, each with dsopt's distance from PyTorch's float64 run
and PyTorch's drift.

  bench/torchvision_families.py --work /tmp/tv [--only resnet,swin] [--jobs 2]

Families in CONDITIONED train with their own optimizer params and steps
(the settings column), where the default run cannot tell a wrong optimizer
param from float32 noise. --perturb JSON gives dsopt other optimizer
params than PyTorch trains with: every family must then MISMATCH.

  bench/torchvision_families.py --work /tmp/tv --only deeplabv3 --perturb '{"betas": [0.9, 0.99]}'

--dsopt 'dsopt --host-opt-level=0' builds the programs at -O0, which
compiles fast and changes no number; --same-at-O3 FAMILIES builds those
families' programs at -O3 too, which must train bit-identically.

  bench/torchvision_families.py --work /tmp/tv --dsopt 'build/bin/dsopt --host-opt-level=0' --same-at-O3 resnet

It takes a few minutes on two cores (each family is one compile of its
generated programs). `make test` runs every family, at -O0, with ResNet's
program also built at -O3: test/Zoo/train-torchvision*.test.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ORACLES = ROOT / "test" / "oracles"
sys.path.insert(0, str(ORACLES))
from models import CLASSIFICATION_FAMILIES, SEGMENTATION_FAMILIES, TRAIN_MODE_FAMILIES, TRAIN_MODE_VARIANTS  # noqa: E402

PYTHON = "/usr/bin/python3"
STEPS = 10
# The table's rows: every family, and the training-mode rows of a family
# that trains in eval mode (MNASNet's, mnasnet_bn: running statistics
# checked, but no optimizer parameter decided there; docs/models.md).
ROWS = CLASSIFICATION_FAMILIES + SEGMENTATION_FAMILIES + tuple(TRAIN_MODE_VARIANTS)
# Families whose default run (AdamW lr 2e-3, weight decay 0.01, STEPS steps)
# is too ill-conditioned for the comparison to decide anything: PyTorch's
# own float32 runs (another thread count, another convolution algorithm)
# leave its default float32 run by more than the widened tolerances, so a
# wrong beta2 or weight decay passes too. Their settings, in dsopt and
# PyTorch alike: optimizer params replaced, and fewer steps (docs/models.md).
CONDITIONED = {
    "resnext": {"params": {"lr": 5e-4, "eps": 1e-6, "weight_decay": 0.1}, "steps": STEPS},
    "wide_resnet": {"params": {"lr": 5e-4, "weight_decay": 0.1}, "steps": STEPS},
    "deeplabv3": {"params": {"lr": 1e-3, "weight_decay": 0.1}, "steps": STEPS},
}
DEFAULT = {"params": {}, "steps": STEPS}
LINE = re.compile(r"^(tv_\w+) (\S+) (\S+): (.*)$")
# Each error comes with dsopt's distance from PyTorch's float64 run and
# PyTorch's own float32-vs-float64 drift: "X (f64 Y, f32 drift Z)".
WITH_F64 = r"\S+ \(f64 [^,]+, f32 drift [^)]+\)"
STATS = re.compile(rf"forward loss max\|d\| (?P<loss>{WITH_F64}), logits max\|d\| (?P<logits>{WITH_F64}); "
                   rf"max loss rel err (?P<rel>{WITH_F64}), max grad_norm rel err (?P<norm>{WITH_F64}), "
                   r"max weight abs err (?P<weight>\S+), widest weight tolerance (?P<tol>[^,);\s]+)"
                   r"(, (?P<stats>\d+) running statistics max rel err (?P<stats_err>[^);\s]+))?"
                   r"(; loss and grad_norm compared over steps 1-(?P<compared>\d+) of)?")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, type=Path, help="scratch directory")
    parser.add_argument("--dsopt", default=str(ROOT / "build" / "bin" / "dsopt"),
                        help="dsopt command, split like a shell would (e.g. 'dsopt --host-opt-level=0')")
    parser.add_argument("--only", default="", help="comma-separated families (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--perturb", default="", metavar="JSON",
                        help="optimizer params given to dsopt only (check_zoo_train.py --perturb), e.g. "
                        "'{\"betas\": [0.9, 0.99]}': every family must then MISMATCH")
    parser.add_argument("--same-at-O3", dest="same_at_o3", default="", metavar="FAMILIES",
                        help="comma-separated families whose program is also built at --host-opt-level=3 and "
                        "must train bit-identically to the one --dsopt built (check_zoo_train.py --same-at-O3)")
    args = parser.parse_args()

    families = list(ROWS)
    same_at_o3 = list(filter(None, args.same_at_o3.split(",")))
    if args.only:
        families = args.only.split(",")
    unknown = set(families + same_at_o3) - set(ROWS)
    if unknown:
        parser.error(f"unknown families {sorted(unknown)}; known: {', '.join(ROWS)}")
    if set(same_at_o3) - set(families):
        parser.error(f"--same-at-O3: {', '.join(sorted(set(same_at_o3) - set(families)))} not run (--only)")
    names = [f"tv_{f}" for f in families]
    env = dict(os.environ, PYTHONNOUSERSITE="1", OMP_NUM_THREADS="1")
    start = time.perf_counter()
    subprocess.run([PYTHON, str(ORACLES / "export_zoo.py"), "--out", str(args.work / "zoo"), "--only", ",".join(names)],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    exported = time.perf_counter() - start
    # One check_zoo_train.py run per distinct setting.
    groups = {}
    for family, name in zip(families, names):
        settings = CONDITIONED.get(family, DEFAULT)
        groups.setdefault(json.dumps(settings, sort_keys=True), []).append(name)
    rows, stderr = {}, []
    for key, group in groups.items():
        settings = json.loads(key)
        command = [PYTHON, str(ORACLES / "check_zoo_train.py"), "--zoo", str(args.work / "zoo"),
                   "--work", str(args.work / "train"), "--dsopt", args.dsopt,
                   "--only", ",".join(f"{n}_nofold.onnx" for n in group), "--configs", "adamw-gas1",
                   "--steps", str(settings["steps"]), "--forward", "--jobs", str(args.jobs)]
        if settings["params"]:
            command += ["--optimizer-params", json.dumps(settings["params"])]
        if args.perturb:
            command += ["--perturb", args.perturb]
        if same_at_o3:
            command += ["--same-at-O3", ",".join(f"tv_{f}" for f in same_at_o3)]
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        stderr += result.stderr.strip().splitlines()
        for line in result.stdout.splitlines():
            match = LINE.match(line)
            if match:
                rows[match.group(1)] = match.group(4)
    print(f"| family | kind | mode | settings | dsopt vs PyTorch | forward: loss, logits max abs diff | steps: loss, "
          "grad norm max rel err | final weights max abs err (widest tolerance) | running statistics max rel err |")
    short = lambda text: text.replace(" f32 drift ", " drift ")  # noqa: E731
    print("|---|---|---|---|---|---|---|---|---|")
    for family, name in zip(families, names):
        kind = "segmentation" if TRAIN_MODE_VARIANTS.get(family, family) in SEGMENTATION_FAMILIES else "classification"
        mode = "train" if family in TRAIN_MODE_FAMILIES or family in TRAIN_MODE_VARIANTS else "eval"
        settings = CONDITIONED.get(family, DEFAULT)
        conditioned = ", ".join([f"{k} {v:g}" for k, v in settings["params"].items()] + [f"{settings['steps']} steps"])
        verdict = rows.get(name, "FAIL no result: " + (stderr or ["?"])[-1])
        numbers = STATS.search(verdict)
        if verdict.startswith("matches PyTorch") and numbers:
            n = numbers.groupdict()
            stats = f"{n['stats_err']} ({n['stats']} tensors)" if n["stats"] else "-"
            steps = f" (steps 1-{n['compared']} only)" if n["compared"] else ""
            matches = "matches, bit-identical at -O3" if "; bit-identical at -O3" in verdict else "matches"
            print(f"| {family} | {kind} | {mode} | {conditioned} | {matches} | {short(n['loss'])}, {short(n['logits'])} | "
                  f"{short(n['rel'])}, {short(n['norm'])}{steps} | "
                  f"{n['weight']} ({n['tol']}) | {stats} |")
        else:
            print(f"| {family} | {kind} | {mode} | {conditioned} | {verdict.replace('|', '/')} | | | | |")
    failures = sum(not v.startswith("matches PyTorch") for v in rows.values()) + len(names) - len(rows)
    print(f"\n{len(names) - failures} of {len(names)} families match PyTorch "
          f"(export {exported:.0f}s, train and compare {time.perf_counter() - start - exported:.0f}s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
