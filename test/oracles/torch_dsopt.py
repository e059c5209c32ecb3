#!/usr/bin/python3
"""A PyTorch stand-in for dsopt's training build, to test check_zoo_train.py itself.

It speaks dsopt's training interface for zoo exports:

  torch_dsopt.py MODEL.onnx --config CFG.json [--frozen NAMES] -o OUTDIR
  OUTDIR/train --data DIR --steps N --log-json LOG.jsonl --save-onnx TRAINED.onnx [--seed S]

but `train` trains the zoo module (found through MODEL's zoo.json) with
train_reference.py and writes the log and the trained model in dsopt's
formats. Run against it, check_zoo_train.py must report every case as
matching, also with DSOPT_STANDIN_PERTURB=ulp:

  ulp       every initial weight moves by one float32 ulp up or down at
            random, so rounding differs from PyTorch's run all along, as it
            does in any other correct float32 implementation

With the other values of DSOPT_STANDIN_PERTURB it must catch the planted error:

  loss      step 5's logged loss is 1e-3 too large (relative)
  grad_norm step 2's logged gradient norm is 1e-2 too large (relative)
  weight    one element of the last parameter is off by 1e-3
  frozen    one frozen initializer changes (models that have one)
"""
import argparse
import json
import math
import os
import shlex
import sys
from pathlib import Path

PERTURBATIONS = ("ulp", "loss", "grad_norm", "weight", "frozen")
EMPTY_SPACES = {space: {"peak_bytes": 0, "persistent_bytes": 0} for space in ("device", "host", "file")}


def build(args) -> int:
    import onnx

    model = onnx.load(str(args.model), load_external_data=False)
    names = {i.name for i in model.graph.initializer}
    frozen = [n for n in args.frozen.split(",") if n]
    unknown = [n for n in frozen if n not in names]
    if unknown:
        print(f"torch_dsopt: error: {args.model}: --frozen {', '.join(unknown)} matches no initializer",
              file=sys.stderr)
        return 1
    json.loads(args.config.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    recipe = {"model": str(args.model.resolve()), "config": str(args.config.resolve()), "frozen": frozen}
    (args.out / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")
    # PyTorch plans no memory: every space of the stand-in's plan is empty,
    # as its log measures.
    (args.out / "plan.json").write_text(json.dumps({"ranks": [{"rank": 0, "memory_spaces": EMPTY_SPACES}]}) + "\n")
    train = args.out / "train"
    train.write_text("#!/bin/sh\n"
                     f"exec {shlex.quote(sys.executable)} {shlex.quote(str(Path(__file__).resolve()))} "
                     f"--train \"$(dirname \"$0\")\" \"$@\"\n")
    train.chmod(0o755)
    return 0


def run_training(args) -> int:
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from initializer_map import map_initializers
    from models import ZOO
    from train_reference import load_data, train

    recipe = json.loads((args.train / "recipe.json").read_text())
    model_path = Path(recipe["model"])
    zoo = json.loads((model_path.parent / "zoo.json").read_text())
    name = next(e["name"] for e in zoo if model_path.name in (e.get("file"), e.get("nofold_file")))
    zoo_model = ZOO[name]
    onnx_model = onnx.load(str(model_path))
    imap = map_initializers(onnx_model, zoo_model.build())
    if imap.frozen != recipe["frozen"]:
        # The stand-in cannot train an initializer that holds no parameter.
        print(f"torch_dsopt: error: frozen {recipe['frozen']}, but {imap.frozen} hold no parameter",
              file=sys.stderr)
        return 1
    config = json.loads(Path(recipe["config"]).read_text())
    perturb = os.environ.get("DSOPT_STANDIN_PERTURB", "")
    if perturb and perturb not in PERTURBATIONS:
        print(f"torch_dsopt: error: DSOPT_STANDIN_PERTURB={perturb}: expected one of {PERTURBATIONS}",
              file=sys.stderr)
        return 1
    module = zoo_model.build()
    if perturb == "ulp":
        g = torch.Generator().manual_seed(args.seed)
        with torch.no_grad():
            for p in module.parameters():
                up = torch.rand(p.shape, generator=g) < 0.5
                p.copy_(torch.nextafter(p, torch.where(up, torch.tensor(math.inf), torch.tensor(-math.inf))))
    run = train(zoo_model, config, load_data(args.data, zoo_model), args.steps, module=module)

    for entry in run.log:
        entry.update(step_time_s=run.seconds / len(run.log), arena_peak_bytes=0,
                     memory_spaces={space: {"peak_bytes": 0, "planned_bytes": 0} for space in EMPTY_SPACES})
    if perturb == "loss" and len(run.log) >= 5:
        run.log[4]["loss"] *= 1 + 1e-3
    if perturb == "grad_norm" and len(run.log) >= 2:
        run.log[1]["grad_norm"] *= 1 + 1e-2
    if perturb == "weight":
        run.params[imap.mapped[-1].parameter].flat[0] += 1e-3
    args.log_json.write_text("".join(json.dumps(e) + "\n" for e in run.log))

    by_initializer = {m.initializer: m for m in imap.mapped}
    for init in onnx_model.graph.initializer:
        m = by_initializer.get(init.name)
        if m is not None:
            value = run.params[m.parameter]
            value = np.ascontiguousarray(value.T if m.transposed else value)
        elif perturb == "frozen" and init.name == (imap.frozen or [None])[0]:
            value = onnx.numpy_helper.to_array(init) + np.float32(1.0)
        else:
            continue
        init.CopyFrom(onnx.numpy_helper.from_array(value, init.name))
    onnx.save(onnx_model, str(args.save_onnx))
    return 0


def main() -> int:
    if "--train" in sys.argv[1:2]:
        parser = argparse.ArgumentParser(prog="train")
        parser.add_argument("--train", type=Path, required=True)
        parser.add_argument("--data", type=Path, required=True)
        parser.add_argument("--steps", type=int, required=True)
        parser.add_argument("--log-json", type=Path, required=True)
        parser.add_argument("--save-onnx", type=Path, required=True)
        parser.add_argument("--seed", type=int, default=0)
        return run_training(parser.parse_args())
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--frozen", default="")
    # As dsopt's: the stand-in builds only `train` anyway.
    parser.add_argument("--no-forward", action="store_true")
    parser.add_argument("-o", dest="out", type=Path, required=True)
    return build(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
