#!/usr/bin/python3
"""The plan's per-layer activation bytes against Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", Table 2.

Per transformer layer the paper counts, with 2-byte activations and 1-byte
dropout masks (section 4.1): attention 11sbh + 5as^2b, MLP 19sbh, the two
LayerNorms 4sbh; with tensor parallelism over t ranks
sbh(10 + 24/t + 5as/(ht)), with sequence parallelism sbh(34/t + 5as/(ht)).

For gen_gpt.py's GPT (no dropout, f32) dsopt's plan must equal the
formula after this adjustment, term by term (docs/tensor-parallel.md):
  * no dropout: no masks (2sbh after attention and the MLP, split by t
    only under sequence parallelism; as^2b/t after the softmax) and no
    dropout output (2as^2b/t: the softmax output is what the product with
    V reads, and it is counted already);
  * f32: 4 bytes per element where the paper has 2 (x2);
  * dsopt keeps what Megatron does not count or keep:
    - each LayerNorm's mean and 1/std, b*s values each (2 norms; split by
      t under sequence parallelism),
    - the erf-form GELU as exported (Div, Erf, Add, Mul, Mul) keeps two
      [b, s, 4h/t] values more than Megatron's fused GELU (8sbh/t),
    - under sequence parallelism, the two norms' scales as the tp_copy
      views their backward reads (2h, no memory of their own: views of
      the parameters). The inputs of the column-parallel products are the
      rank's rows, all-gathered again in the backward, as in Megatron.
The plan's per-layer figure: the pipeline's per-stage `activation_bytes`
(the forward values each stage's backward reads) summed over both stages
of --pp 2, for L+1 layers minus for L layers.

Usage: check_korthikanti.py --gen-gpt GEN --dsopt DSOPT --work DIR
Prints one line per (s, b, h, a, t, mode) and 'korthikanti: ok'; exits 1
on any mismatch.
"""
import argparse
import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

# (s, b, h, a, t)
CASES = [(16, 2, 64, 4, 2), (32, 1, 64, 8, 4)]
VOCAB = 128
LAYERS = 2


def paper_bytes(s, b, h, a, t, sp):
    """Table 2, in bytes (2-byte activations, 1-byte masks)."""
    sbh = Fraction(s * b * h)
    if t == 1:
        return sbh * (34 + Fraction(5 * a * s, h))
    if sp:
        return sbh * (Fraction(34, t) + Fraction(5 * a * s, h * t))
    return sbh * (10 + Fraction(24, t) + Fraction(5 * a * s, h * t))


def dsopt_bytes(s, b, h, a, t, sp):
    """The paper's figure adjusted to gen_gpt's GPT in dsopt (see above)."""
    sbh, as2b, sb = s * b * h, a * s * s * b, s * b
    shared = Fraction(t if sp else 1)  # what the sequence split divides
    paper = paper_bytes(s, b, h, a, t, sp)
    no_dropout = paper - 2 * sbh / shared - Fraction(as2b, t) - Fraction(2 * as2b, t)
    f32 = 2 * no_dropout
    ln_stats = 4 * (2 * 2 * sb) / shared
    gelu = 4 * Fraction(8 * sbh, t)
    scales = 4 * 2 * h if sp else 0
    return f32 + ln_stats + gelu + scales, {
        "paper": paper, "no dropout": no_dropout, "f32": f32, "norm statistics": ln_stats,
        "erf GELU": gelu, "scale views": scales}


def stash(args, s, b, h, a, layers, flags):
    work = Path(args.work)
    model = work / f"gpt-s{s}-b{b}-h{h}-a{a}-L{layers}.onnx"
    if not model.exists():
        subprocess.run([*args.gen_gpt.split(), "--layers", str(layers), "--d-model", str(h),
                        "--heads", str(a), "--vocab", str(VOCAB), "--seq", str(s), "--batch",
                        str(b), "--out", str(model)], check=True, stdout=subprocess.DEVNULL)
    plan = work / "plan.json"
    subprocess.run([*args.dsopt.split(), str(model), "--pp", "2", *flags, "--emit=plan", "-o",
                    str(plan)], check=True, stderr=subprocess.DEVNULL)
    stages = json.loads(plan.read_text())["pipeline"]["per_stage"]
    return sum(stage["activation_bytes"] for stage in stages)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gen-gpt", required=True, help="gen_gpt.py command")
    ap.add_argument("--dsopt", required=True, help="dsopt command")
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    failures = 0
    for s, b, h, a, t in CASES:
        modes = [("one rank", 1, False, []), ("TP", t, False, ["--tp", str(t)]),
                 ("TP+SP", t, True, ["--tp", str(t), "--sequence-parallel"])]
        for name, ranks, sp, flags in modes:
            plan = (stash(args, s, b, h, a, LAYERS + 1, flags) -
                    stash(args, s, b, h, a, LAYERS, flags))
            want, terms = dsopt_bytes(s, b, h, a, ranks, sp)
            ok = plan == want
            failures += not ok
            detail = ", ".join(f"{k} {float(v):g}" for k, v in terms.items())
            print(f"s={s} b={b} h={h} a={a} t={ranks} {name}: plan {plan} bytes per layer, "
                  f"Table 2 adjusted {want} ({detail}){'' if ok else '  MISMATCH'}")
    print("korthikanti: ok" if not failures else f"korthikanti: {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
