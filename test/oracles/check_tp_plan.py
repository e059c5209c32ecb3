#!/usr/bin/python3
"""Checks a tensor-parallel plan.json against Megatron-LM's layout.

The models are gen_gpt.py's GPT and the zoo's GPT-2 (fused qkv, GELU MLP,
tied head) and LLaMA (q, k, v, SwiGLU). Megatron splits, per layer, the
attention's input projections and the MLP's up (and gate) projections with
their biases by output column, the attention and MLP output projections by
input row, and the token embedding and the LM head (tied or not) by
vocabulary row (VocabParallelEmbedding, the vocabulary-parallel head and
cross-entropy); everything else (norms, the output projections' biases, the
position embedding) is whole on every rank. Per step and rank the forward
does two all-reduces of b*s*h elements per layer and the backward two more;
the embedding adds one of b*s*h forward, the head one backward, the
cross-entropy three of b*s forward; the gradient norm sums the split
parameters' squares over tp with one more (of one f32).

Under --precision bf16 (--element-bytes 2) the parameters and the
activations' collectives are 2 bytes per element, as Megatron's bf16
all-reduces on NCCL send them; the cross-entropy's three stay f32 (Megatron
casts the logits with output.float()), and so does the gradient norm's.

Usage: check_tp_plan.py MODEL.onnx PLAN.json --tp N [--dp D]
           --layers L --hidden H [--layout gen-gpt|gpt2|llama]
           [--element-bytes 4|2]
(b and s from the model's first input.)
Prints one line per check and 'tp plan: ok' when all hold; exits 1
otherwise.
"""

import argparse
import json
import re
import sys

import numpy as np
import onnx
from onnx import numpy_helper

# Parameters Megatron splits, per model family (by the exporters' names):
# the axis of the ONNX initializer, and the blocks (a fused qkv projection's
# output is three blocks, Q, K and V, each split over the ranks).
LAYOUTS = {
    # gen_gpt.py: MatMul weights [in, out].
    "gen-gpt": [
        (r"^wte$", 0, 1),
        (r"h\.\d+\.attn\.qkv\.weight$", 1, 3),
        (r"h\.\d+\.attn\.qkv\.bias$", 0, 3),
        (r"h\.\d+\.attn\.proj\.weight$", 0, 1),
        (r"h\.\d+\.mlp\.fc\.weight$", 1, 1),
        (r"h\.\d+\.mlp\.fc\.bias$", 0, 1),
        (r"h\.\d+\.mlp\.proj\.weight$", 0, 1),
    ],
    # The zoo's GPT-2 (models.py, exported without constant folding):
    # nn.Linear weights [out, in].
    "gpt2": [
        (r"^wte\.weight$", 0, 1),
        (r"blocks\.\d+\.attn\.qkv\.weight$", 0, 3),
        (r"blocks\.\d+\.attn\.qkv\.bias$", 0, 3),
        (r"blocks\.\d+\.attn\.proj\.weight$", 1, 1),
        (r"blocks\.\d+\.fc\.weight$", 0, 1),
        (r"blocks\.\d+\.fc\.bias$", 0, 1),
        (r"blocks\.\d+\.fc_out\.weight$", 1, 1),
    ],
    # The zoo's LLaMA: separate q, k, v; SwiGLU gate and up; no biases.
    "llama": [
        (r"^embed\.weight$", 0, 1),
        (r"^lm_head\.weight$", 0, 1),
        (r"blocks\.\d+\.attn\.[qkv]\.weight$", 0, 1),
        (r"blocks\.\d+\.attn\.o\.weight$", 1, 1),
        (r"blocks\.\d+\.(gate|up)\.weight$", 0, 1),
        (r"blocks\.\d+\.down\.weight$", 1, 1),
    ],
}
SPLIT = []
# The position table: whole on every rank, read at constant positions.
POSITION_TABLE = r"^wpe(\.weight)?$"

def megatron_split(name):
    for pattern, dim, blocks in SPLIT:
        if re.search(pattern, name):
            return dim, blocks
    return None


def ring_all_reduce_sent(nbytes: int, ranks: int) -> int:
    """Bytes one rank sends in a ring all-reduce of nbytes split evenly:
    (N - 1) / N of them in the reduce-scatter, as many in the all-gather."""
    return 2 * (ranks - 1) * nbytes // ranks


def ring_scalar_sent(ranks: int, rank: int) -> int:
    """Bytes rank `rank` sends in a ring all-reduce of one f32: the element
    sits in chunk 0; a rank sends a chunk in the reduce-scatter unless it
    is its own (rank 0's), and in the all-gather unless it is the next
    rank's (rank N-1's)."""
    return 4 * (rank != 0) + 4 * (rank != ranks - 1)


def check_sequence_parallel(check, tag, tp, params, layers, activation,
                            position_bytes, small, ranks):
    """Megatron's sequence parallelism: each of the 4L + 2 all-reduces of
    b*s*h elements (per layer two g forward and two f backward, the
    embedding's g, the head's f) is a reduce-scatter and an all-gather of
    the same tensor, which send (N - 1)/N of it each, as much as the
    all-reduce's 2 (N - 1)/N; on top, the gradients of the whole
    parameters the sequence-split ops read (the norms' scales and biases,
    the row-parallel biases: every parameter Megatron does not split but
    the position table) are all-reduced over tp, and the position table,
    read at the rank's rows, has its gradient all-gathered (s*h). As in
    Megatron, the input of each column-parallel product (per layer the
    attention's and the MLP's, and the head's: 2L + 1) is kept as the
    rank's rows and all-gathered again in the backward for the weight
    gradient (Korthikanti et al. 2022, 4.2.3)."""
    half = (ranks - 1) * activation // ranks
    whole = [b for n, b in params.items()
             if not megatron_split(n) and not re.search(POSITION_TABLE, n)]
    check(f"{tag} tp reduce_scatter calls", tp["reduce_scatter"]["calls"],
          4 * layers + 2)
    check(f"{tag} tp reduce_scatter bytes sent", tp["reduce_scatter"]["sent"],
          (4 * layers + 2) * half)
    regathers = 2 * layers + 1
    check(f"{tag} tp all_gather calls", tp["all_gather"]["calls"],
          4 * layers + 2 + 1 + regathers)
    check(f"{tag} tp all_gather bytes sent", tp["all_gather"]["sent"],
          (4 * layers + 2 + regathers) * half
          + (ranks - 1) * position_bytes // ranks)
    check(f"{tag} tp all_reduce calls", tp["all_reduce"]["calls"],
          len(whole) + 3 + 1)
    check(f"{tag} tp all_reduce bytes sent", tp["all_reduce"]["sent"],
          sum(ring_all_reduce_sent(b, ranks) for b in whole) + small)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("plan")
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--layout", choices=sorted(LAYOUTS), default="gen-gpt")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--sequence-parallel", action="store_true",
                    help="the plan of --sequence-parallel (Korthikanti et al. "
                    "2022, 4.2.2)")
    ap.add_argument("--element-bytes", type=int, choices=(2, 4), default=4,
                    help="bytes of the working type: 2 for --precision bf16")
    args = ap.parse_args()
    element = args.element_bytes
    SPLIT.extend(LAYOUTS[args.layout])

    model = onnx.load(args.model, load_external_data=False)
    params, shapes = {}, {}
    for init in model.graph.initializer:
        if init.data_type == onnx.TensorProto.FLOAT:
            params[init.name] = int(np.prod(init.dims)) * element
            shapes[init.name] = list(init.dims)
    layers, d_model = args.layers, args.hidden
    batch, seq = (d.dim_value for d in
                  model.graph.input[0].type.tensor_type.shape.dim[:2])
    expected_params = sum(b // args.tp if megatron_split(n) else b
                          for n, b in params.items())

    plan = json.load(open(args.plan))
    failures = []

    def check(what, got, want):
        ok = got == want
        print(f"{what}: {got} (expected {want}){'' if ok else '  MISMATCH'}")
        if not ok:
            failures.append(what)

    check("world", plan["world"], args.dp * args.tp)
    check("grid", plan["grid"], {"dp": args.dp, "pp": 1, "tp": args.tp})
    ranks = plan["ranks"]
    check("ranks", [(r["rank"], r["dp"], r["tp"]) for r in ranks],
          [(d * args.tp + t, d, t) for d in range(args.dp)
           for t in range(args.tp)])
    activation = batch * seq * d_model * element
    rows = batch * seq * 4
    for r in ranks:
        tag = f"rank {r['rank']}"
        check(f"{tag} param_bytes", r["param_bytes"], expected_params)
        tp = r["tp_collective_bytes"]
        # Megatron's f and g: per layer two all-reduces of b*s*h forward
        # and two backward; the vocabulary-parallel embedding's g forward
        # and the LM head's f backward, two more of b*s*h; the
        # vocabulary-parallel cross-entropy's max, sum of exponentials and
        # target logit, three of b*s; and, as in Megatron's clip_grad_norm,
        # the split parameters' share of the gradient norm (one f32).
        small = 3 * ring_all_reduce_sent(rows, args.tp) + ring_scalar_sent(
            args.tp, r.get("tp", 0))
        if args.sequence_parallel:
            check_sequence_parallel(check, tag, tp, params, layers, activation,
                                    seq * d_model * element, small, args.tp)
            continue
        check(f"{tag} tp all_reduce calls", tp["all_reduce"]["calls"],
              4 * layers + 2 + 3 + 1)
        check(f"{tag} tp all_reduce bytes sent", tp["all_reduce"]["sent"],
              (4 * layers + 2) * ring_all_reduce_sent(activation, args.tp) +
              small)
        for kind in ("all_gather", "reduce_scatter"):
            check(f"{tag} tp {kind} calls", tp[kind]["calls"], 0)
    # Every parameter of the training program: its piece's shape and split.
    pieces = plan["train"]["ranks"][0]["params"]
    check("parameters named as the model's",
          sorted(p["name"] for p in pieces) == sorted(params), True)
    mismatched = []
    for p in pieces:
        layout = megatron_split(p["name"])
        shape = list(shapes[p["name"]])
        want = None
        if layout:
            shape[layout[0]] //= args.tp
            want = {"dim": layout[0], "blocks": layout[1], "ranks": args.tp}
        if p["shape"] != shape or p.get("tp_split") != want:
            mismatched.append(f"{p['name']} {p['shape']} {p.get('tp_split')}")
    check("parameters laid out as Megatron's", mismatched, [])
    if failures:
        print("tp plan: FAILED:", ", ".join(failures))
        return 1
    print("tp plan: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
