#!/usr/bin/python3
"""Checks the pipeline ranks' programs (dsopt --pp N --emit=train-mlir) fit together.

    split_check.py TRAIN.mlir

The output holds the cut step and, nested in it, one module per pipeline
rank ("module @pp<r>", in rank order; ds-pipeline-ranks). From
the function signatures alone this checks that
  * rank r holds virtual stages r, r + p, ... and a function per part of each;
  * what stage s sends at forward time (fwd_s's results of role send) is
    exactly what stage s + 1 receives (fwd_{s+1}'s arguments of role recv),
    in the same order with the same types, and likewise backwards for
    gradients;
  * every stash argument of a backward part of stage s is a stash result
    of fwd_s of the same type (and every wstash argument of zb-h1's weight
    part a wstash result of its input part);
  * only the last stage's forward returns the loss, and every rank's
    @optimizer_step all-reduces the gradient norm over the pp axis (0).
Prints a summary line; exits 1 with the first problem found.
"""
import re
import sys

ARG = re.compile(r"%arg\d+: (tensor<[^>]*>) \{([^{}]*)\}")
RESULT = re.compile(r"(tensor<[^>]*>) \{([^{}]*)\}")
NAME = re.compile(r'ds\.(?:input|output) = "([^"]*)"')
ROLE = re.compile(r"ds\.role = #ds\.role<(\w+)>")


def role_of(attrs):
    m = ROLE.search(attrs)
    return m.group(1) if m else None


def named(pairs, role):
    """The (id, type) of the values of role `role`, in order."""
    return [(NAME.search(attrs).group(1), type_) for type_, attrs in pairs
            if role_of(attrs) == role]


def parse(text):
    ranks = re.split(r"^  module @pp\d+ ", text, flags=re.M)[1:]
    modules = []
    for body in ranks:
        functions = {}
        for m in re.finditer(r"func\.func @(\w+)\((.*?)\)(?: -> \((.*?)\))? attributes", body):
            name, args, results = m.group(1), m.group(2), m.group(3) or ""
            functions[name] = {"args": ARG.findall(args), "results": RESULT.findall(results)}
        rank = int(re.search(r"ds\.pipeline_rank = #ds\.pipeline_rank<rank = (\d+),", body).group(1))
        stages = [int(s) for s in re.findall(r"#ds\.rank_stage<stage = (\d+), forward = @\w+", body)]
        norm = re.search(r"shard\.all_reduce %\w+ on @grid grid_axes = \[0\]", body) is not None
        modules.append({"rank": rank, "stages": stages, "functions": functions, "norm": norm})
    return modules


def main():
    modules = parse(open(sys.argv[1]).read())
    p = len(modules)
    if p < 2:
        sys.exit("expected the modules of at least 2 pipeline ranks")
    functions = {}
    stages_of = {}
    for r, module in enumerate(modules):
        if module["rank"] != r:
            sys.exit(f"module {r} says it is pipeline rank {module['rank']}")
        if not module["norm"]:
            sys.exit(f"rank {r}: no all_reduce of the gradient norm over grid axis 0 (pp)")
        for name, function in module["functions"].items():
            functions[name] = function
        stages_of[r] = module["stages"]
    v = len(stages_of[0])
    total = p * v
    for r in range(p):
        if stages_of[r] != [c * p + r for c in range(v)]:
            sys.exit(f"rank {r} holds stages {stages_of[r]}, expected {[c * p + r for c in range(v)]}")
    split = any(name.startswith("bwdi_") for name in functions)
    backward = "bwdi_" if split else "bwd_"
    transfers = 0
    for s in range(total):
        fwd = functions.get(f"fwd_{s}")
        bwd = functions.get(f"{backward}{s}")
        if fwd is None or bwd is None or (split and f"bwdw_{s}" not in functions):
            sys.exit(f"stage {s}: a function of its parts is missing")
        losses = [NAME.search(a).group(1) for t, a in fwd["results"]
                  if role_of(a) is None]
        if (s == total - 1) != (len(losses) == 1) or len(losses) > 1:
            sys.exit(f"stage {s}: forward returns {losses or 'no loss'}")
        if s + 1 < total:
            sent = named(fwd["results"], "send")
            received = named(functions[f"fwd_{s + 1}"]["args"], "recv")
            if sent != received or not sent:
                sys.exit(f"stage {s} -> {s + 1}: sends {sent}, the next stage receives {received}")
            grads = named(functions[f"{backward}{s + 1}"]["results"], "send")
            got = named(bwd["args"], "recv")
            if grads != got:
                sys.exit(f"stage {s + 1} -> {s}: sends gradients {grads}, stage {s} receives {got}")
            transfers += len(sent) + len(grads)
        stash = dict(named(fwd["results"], "stash"))
        parts = [bwd] + ([functions[f"bwdw_{s}"]] if split else [])
        for part in parts:
            for value, type_ in named(part["args"], "stash"):
                if stash.get(value) != type_:
                    sys.exit(f"stage {s}: backward reads stashed {value} ({type_}), "
                             f"forward stashes {stash.get(value)}")
        if split:
            wstash = dict(named(bwd["results"], "wstash"))
            for value, type_ in named(functions[f"bwdw_{s}"]["args"], "wstash"):
                if wstash.get(value) != type_:
                    sys.exit(f"stage {s}: W reads weight-stashed {value}, B gives {wstash.get(value)}")
    print(f"split ok: {p} ranks, {total} stages, {transfers} values cross cuts"
          f"{', split backward' if split else ''}")


if __name__ == "__main__":
    main()
