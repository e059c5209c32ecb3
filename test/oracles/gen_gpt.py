#!/usr/bin/python3
"""Write GPT-3-shaped ONNX training graphs of any size, without the weights.

The graph is built directly with onnx.helper. Its single output is the mean
token cross-entropy `loss`; inputs are `input_ids` and `labels`, int64 [B, T].

  input_ids -> Gather(wte) + Gather(wpe, Range(T))
  per layer:  LayerNormalization -> MatMul/Add qkv -> Split -> Reshape/Transpose
              -> MatMul q.k^T -> Mul scale -> Add causal mask -> Softmax
              -> MatMul v -> Transpose/Reshape -> MatMul/Add proj -> residual Add
              -> LayerNormalization -> MatMul/Add [D,4D] -> GELU (erf form;
                 --gelu tanh: the tanh approximation)
              -> MatMul/Add [4D,D] -> residual Add
  LayerNormalization -> MatMul(Transpose(wte)) (tied head)
  -> SoftmaxCrossEntropyLoss on [B*T, V] logits and [B*T] labels

Conventions the importer can rely on:
  * every float initializer is a trainable parameter, stored as external data
    in one file FILE.onnx.data next to the model (4096-byte aligned offsets);
    by default that file is sparse: its size is set, no byte is written;
  * float scalars (attention scale, GELU constants) are Constant nodes;
  * int64 shape constants (Reshape targets, Split sizes, Unsqueeze axes,
    Gather indices, Range bounds) are small inline initializers;
  * the causal mask is built in-graph (ConstantOfShape -> Trilu), never stored;
    with --mask constant it is a [seq, seq] Constant node holding the values
    as raw_data (as exporters bake masks), sliced to [T, T] with --dynamic.

With --dynamic, B and T are the dim_params "batch" and "seq" and every
Reshape target is computed from the reshaped tensor's shape (Shape -> Gather
-> Unsqueeze -> Concat), as PyTorch exports do with dynamic axes. The position
table then has --seq rows and T may be anything up to that.

--gelu tanh builds GPT-2's own activation (OpenAI's code, HF gelu_new,
llm.c): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as the primitive
ops PyTorch exports F.gelu(approximate='tanh') to at this opset (ONNX's Gelu
op needs opset 20, which the onnx package here does not know); dsopt
recognises the pattern as one tanh GELU. The default stays the exact erf
form.

--materialize writes real weights (N(0, 0.02); LayerNorm scales 1 + N(0, 0.02)
so that activations do not vanish through the stack), for tests that need
numbers; only sensible for small sizes.
"""

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np
import onnx
from onnx import TensorProto, helper

# (layers, d_model, heads) from the GPT-3 paper's model table. The table lists
# d_model 5140 for 13B, which 40 heads of 128 cannot split; the model as
# trained (and every reimplementation) uses 40 * 128 = 5120.
GPT3_SIZES: Dict[str, Tuple[int, int, int]] = {
    "125M": (12, 768, 12),
    "350M": (24, 1024, 16),
    "1.3B": (24, 2048, 16),
    "2.7B": (32, 2560, 32),
    "6.7B": (32, 4096, 32),
    "13B": (40, 5120, 40),
    "175B": (96, 12288, 96),
}

OPSET = 17
IR_VERSION = 8
DATA_ALIGNMENT = 4096
INIT_STD = 0.02
LAYER_NORM_EPS = 1e-5
# Additive mask for future positions; finite so no inf arithmetic can arise.
MASK_VALUE = -1e9
# --materialize refuses to write more weight bytes than this unless
# --materialize-limit-gib says otherwise (the weights are written a chunk of
# MATERIALIZE_CHUNK values at a time, so the limit is about disk, not memory).
MATERIALIZE_LIMIT_BYTES = 4 << 30
MATERIALIZE_CHUNK = 1 << 22


@dataclass(frozen=True)
class GPTConfig:
    layers: int
    d_model: int
    heads: int
    vocab: int
    seq: int
    batch: int
    dynamic: bool
    # Training-mode Dropout on the attention probabilities and the attention
    # block's output (Megatron's attention and hidden dropout); 0: none.
    dropout: float = 0.0
    # How the causal mask is built: "trilu" in-graph, "constant" baked.
    mask: str = "trilu"
    # The MLP's activation: "erf" (exact) or "tanh" (GPT-2's approximation).
    gelu: str = "erf"


class ExternalWeights:
    """Lays out float32 parameters back to back in one external data file."""

    def __init__(self, location: str):
        self.location = location  # file name relative to the model
        self.tensors: List[Tuple[TensorProto, int, float]] = []  # (tensor, offset, init mean)
        self.size = 0

    def add(self, name: str, shape: Sequence[int], mean: float) -> TensorProto:
        offset = -(-self.size // DATA_ALIGNMENT) * DATA_ALIGNMENT
        length = 4 * math.prod(shape)
        tensor = TensorProto(name=name, dims=shape, data_type=TensorProto.FLOAT)
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", offset), ("length", length)):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, str(value)
        self.tensors.append((tensor, offset, mean))
        self.size = offset + length
        return tensor

    @property
    def numel(self) -> int:
        return sum(math.prod(t.dims) for t, _, _ in self.tensors)

    def write(self, path: Path, rng: np.random.Generator = None) -> None:
        """Create the data file; without rng it is sparse (nothing written)."""
        with open(path, "wb") as f:
            if rng is not None:
                # Tensor by tensor, a chunk of MATERIALIZE_CHUNK values at a
                # time (the same values as drawing the whole tensor at once),
                # so that writing a model of any size needs little memory.
                for tensor, offset, mean in self.tensors:
                    f.seek(offset)
                    left = math.prod(tensor.dims)
                    while left:
                        n = min(left, MATERIALIZE_CHUNK)
                        values = rng.standard_normal(n, dtype=np.float32)
                        values *= np.float32(INIT_STD)
                        values += np.float32(mean)
                        f.write(values.astype("<f4", copy=False).tobytes())
                        left -= n
            f.truncate(self.size)


# A Reshape target entry: a fixed size, or "B", "T", "BT" (B * T), which are
# the leading two dimensions of the tensor being reshaped.
Dim = Union[int, str]


class GraphBuilder:
    def __init__(self, cfg: GPTConfig, weights: ExternalWeights):
        self.cfg = cfg
        self.weights = weights
        self.nodes: List[onnx.NodeProto] = []
        self.initializers: List[TensorProto] = []
        self._int_consts: Dict[Tuple[Tuple[int, ...], bytes], str] = {}
        self._float_consts: Dict[float, str] = {}
        self._names: Dict[str, int] = {}

    def _unique(self, hint: str) -> str:
        count = self._names.get(hint, 0)
        self._names[hint] = count + 1
        return hint if count == 0 else f"{hint}_{count}"

    def op(self, op_type: str, inputs: Sequence[str], name: str = None, outputs: int = 1, **attrs):
        """Append a node; returns its output name (or list of names)."""
        base = self._unique(name or op_type)
        outs = [base] if outputs == 1 else [f"{base}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=base, **attrs))
        return outs[0] if outputs == 1 else outs

    def param(self, name: str, shape: Sequence[int], mean: float = 0.0) -> str:
        self.initializers.append(self.weights.add(name, shape, mean))
        return name

    def i64(self, values, scalar: bool = False) -> str:
        """Inline int64 initializer (deduplicated); 0-d when scalar."""
        array = np.array(values, dtype=np.int64).reshape(() if scalar else -1)
        key = (array.shape, array.tobytes())
        if key not in self._int_consts:
            label = "_".join(str(v) for v in array.reshape(-1))
            name = self._unique(f"const_i64_{label}" if scalar else f"const_i64[{label}]")
            self.initializers.append(helper.make_tensor(name, TensorProto.INT64, array.shape, array.reshape(-1)))
            self._int_consts[key] = name
        return self._int_consts[key]

    def f32(self, value: float) -> str:
        """Float scalar as a Constant node (deduplicated)."""
        if value not in self._float_consts:
            self._float_consts[value] = self.op(
                "Constant", [], name="const_f32", value=helper.make_tensor("value", TensorProto.FLOAT, [], [value])
            )
        return self._float_consts[value]

    def _dim(self, shape: str, axis: int) -> str:
        """0-d int64 size of `axis` from a Shape output."""
        return self.op("Gather", [shape, self.i64(axis, scalar=True)], name="dim", axis=0)

    def reshape(self, x: str, target: Sequence[Dim]) -> str:
        cfg = self.cfg
        if not cfg.dynamic:
            sizes = {"B": cfg.batch, "T": cfg.seq, "BT": cfg.batch * cfg.seq}
            return self.op("Reshape", [x, self.i64([sizes.get(d, d) for d in target])])
        shape = self.op("Shape", [x])
        parts = []
        for d in target:
            if isinstance(d, int):
                parts.append(self.i64([d]))
                continue
            if d == "BT":
                size = self.op("Mul", [self._dim(shape, 0), self._dim(shape, 1)])
            else:
                size = self._dim(shape, "BT".index(d))
            parts.append(self.op("Unsqueeze", [size, self.i64([0])]))
        return self.op("Reshape", [x, self.op("Concat", parts, axis=0)])

    def linear(self, x: str, name: str, d_in: int, d_out: int) -> str:
        y = self.op("MatMul", [x, self.param(f"{name}.weight", [d_in, d_out])], name=f"{name}/MatMul")
        return self.op("Add", [y, self.param(f"{name}.bias", [d_out])], name=f"{name}/Add")

    def layer_norm(self, x: str, name: str) -> str:
        d = self.cfg.d_model
        scale = self.param(f"{name}.weight", [d], mean=1.0)
        return self.op(
            "LayerNormalization",
            [x, scale, self.param(f"{name}.bias", [d])],
            name=name,
            axis=-1,
            epsilon=LAYER_NORM_EPS,
        )

    def gelu(self, x: str) -> str:
        """x * (1 + erf(x / sqrt(2))) * 0.5, the exact form PyTorch exports;
        with cfg.gelu "tanh" the tanh approximation, node for node as
        torch.onnx exports F.gelu(approximate='tanh') at opset 17."""
        if self.cfg.gelu == "tanh":
            cube = self.op("Mul", [x, self.op("Mul", [x, x])])
            inner = self.op("Mul", [self.f32(math.sqrt(2.0 / math.pi)),
                                    self.op("Add", [x, self.op("Mul", [self.f32(0.044715), cube])])])
            return self.op("Mul", [self.f32(0.5), self.op("Mul", [x, self.op("Add", [
                self.f32(1.0), self.op("Tanh", [inner])])])])
        erf = self.op("Erf", [self.op("Div", [x, self.f32(math.sqrt(2.0))])])
        return self.op("Mul", [self.op("Mul", [x, self.op("Add", [erf, self.f32(1.0)])]), self.f32(0.5)])

    def dropout(self, x: str) -> str:
        """Training-mode Dropout of ratio cfg.dropout (x itself without)."""
        if not self.cfg.dropout:
            return x
        if not hasattr(self, "_dropout_args"):
            ratio, training = "dropout_ratio", "dropout_training"
            self.initializers.append(helper.make_tensor(ratio, TensorProto.FLOAT, [], [self.cfg.dropout]))
            self.initializers.append(helper.make_tensor(training, TensorProto.BOOL, [], [True]))
            self._dropout_args = [ratio, training]
        return self.op("Dropout", [x, *self._dropout_args])

    def attention(self, x: str, mask: str, name: str) -> str:
        cfg = self.cfg
        d, h = cfg.d_model, cfg.heads
        hd = d // h
        qkv = self.linear(x, f"{name}.qkv", d, 3 * d)
        q, k, v = self.op("Split", [qkv, self.i64([d, d, d])], name=f"{name}/Split", outputs=3, axis=-1)
        # [B, T, D] -> [B, T, H, hd] -> [B, H, T, hd]; k goes to [B, H, hd, T].
        q = self.op("Transpose", [self.reshape(q, ["B", "T", h, hd])], perm=[0, 2, 1, 3])
        k = self.op("Transpose", [self.reshape(k, ["B", "T", h, hd])], perm=[0, 2, 3, 1])
        v = self.op("Transpose", [self.reshape(v, ["B", "T", h, hd])], perm=[0, 2, 1, 3])
        scores = self.op("Mul", [self.op("MatMul", [q, k]), self.f32(1.0 / math.sqrt(hd))])
        probs = self.dropout(self.op("Softmax", [self.op("Add", [scores, mask])], axis=-1))
        ctx = self.op("Transpose", [self.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        return self.dropout(self.linear(self.reshape(ctx, ["B", "T", d]), f"{name}.proj", d, d))

    def block(self, x: str, mask: str, i: int) -> str:
        d = self.cfg.d_model
        name = f"h.{i}"
        x = self.op("Add", [x, self.attention(self.layer_norm(x, f"{name}.ln_1"), mask, f"{name}.attn")])
        hidden = self.gelu(self.linear(self.layer_norm(x, f"{name}.ln_2"), f"{name}.mlp.fc", d, 4 * d))
        return self.op("Add", [x, self.linear(hidden, f"{name}.mlp.proj", 4 * d, d)])

    def build(self) -> onnx.GraphProto:
        cfg = self.cfg
        batch, seq = ("batch", "seq") if cfg.dynamic else (cfg.batch, cfg.seq)
        inputs = [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, seq]),
            helper.make_tensor_value_info("labels", TensorProto.INT64, [batch, seq]),
        ]
        outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]

        if cfg.dynamic:
            seq_len = self._dim(self.op("Shape", ["input_ids"]), 1)
            seq_1d = self.op("Unsqueeze", [seq_len, self.i64([0])])
            mask_shape = self.op("Concat", [seq_1d, seq_1d], axis=0)
        else:
            seq_len = self.i64(cfg.seq, scalar=True)
            mask_shape = self.i64([cfg.seq, cfg.seq])
        # [T, T]: 0 on and below the diagonal, MASK_VALUE above it.
        if cfg.mask == "constant":
            values = np.triu(np.full((cfg.seq, cfg.seq), MASK_VALUE, dtype=np.float32), 1)
            mask = self.op(
                "Constant",
                [],
                name="causal_mask",
                value=helper.make_tensor("value", TensorProto.FLOAT, values.shape, values.tobytes(), raw=True),
            )
            if cfg.dynamic:
                mask = self.op("Slice", [mask, self.i64([0, 0]), mask_shape], name="causal_mask/Slice")
        else:
            fill = self.op(
                "ConstantOfShape",
                [mask_shape],
                name="mask_fill",
                value=helper.make_tensor("value", TensorProto.FLOAT, [1], [MASK_VALUE]),
            )
            mask = self.op("Trilu", [fill, self.i64(1, scalar=True)], name="causal_mask", upper=1)

        wte = self.param("wte", [cfg.vocab, cfg.d_model])
        positions = self.op("Range", [self.i64(0, scalar=True), seq_len, self.i64(1, scalar=True)], name="positions")
        x = self.op(
            "Add",
            [
                self.op("Gather", [wte, "input_ids"], name="wte/Gather", axis=0),
                self.op("Gather", [self.param("wpe", [cfg.seq, cfg.d_model]), positions], name="wpe/Gather", axis=0),
            ],
            name="embed",
        )
        for i in range(cfg.layers):
            x = self.block(x, mask, i)
        x = self.layer_norm(x, "ln_f")

        # Tied head: the same wte initializer that the embedding Gather reads.
        logits = self.op("MatMul", [x, self.op("Transpose", [wte], name="wte/Transpose", perm=[1, 0])], name="logits")
        self.op(
            "SoftmaxCrossEntropyLoss",
            [self.reshape(logits, ["BT", cfg.vocab]), self.reshape("labels", ["BT"])],
            name="loss",
            reduction="mean",
            ignore_index=-100,
        )
        return helper.make_graph(self.nodes, "gpt", inputs, outputs, initializer=self.initializers)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shape = parser.add_mutually_exclusive_group(required=True)
    shape.add_argument("--size", choices=GPT3_SIZES, help="a GPT-3 model size")
    shape.add_argument("--layers", type=int, help="number of layers (with --d-model and --heads)")
    parser.add_argument("--d-model", type=int, help="model width")
    parser.add_argument("--heads", type=int, help="attention heads; must divide --d-model")
    parser.add_argument("--vocab", type=int, default=50257, help="vocabulary size (default 50257)")
    parser.add_argument(
        "--seq", type=int, default=2048, help="context length T (default 2048); with --dynamic, the largest T"
    )
    parser.add_argument("--batch", type=int, default=1, help="batch size B (default 1); ignored with --dynamic")
    parser.add_argument("--dropout", type=float, default=0.0,
                        help="training-mode Dropout of this ratio on the attention probabilities "
                             "and the attention output (default 0: none)")
    parser.add_argument("--dynamic", action="store_true", help='symbolic B and T ("batch", "seq")')
    parser.add_argument("--mask", choices=("trilu", "constant"), default="trilu",
                        help="the causal mask: built in-graph by Trilu (default), or a [seq, seq] "
                             "Constant node with its values as raw_data, as exporters bake it")
    parser.add_argument("--gelu", choices=("erf", "tanh"), default="erf",
                        help="the MLP's GELU: exact erf (default) or GPT-2's tanh approximation")
    parser.add_argument("--materialize", action="store_true", help="write random weights instead of a sparse file")
    parser.add_argument("--seed", type=int, default=0, help="seed for --materialize (default 0)")
    parser.add_argument("--materialize-limit-gib", type=float, default=MATERIALIZE_LIMIT_BYTES / 2**30,
                        help="the most GiB of weights --materialize writes (default 4)")
    parser.add_argument("--out", required=True, type=Path, help="output FILE.onnx; weights go to FILE.onnx.data")
    args = parser.parse_args()
    if args.size:
        if args.d_model or args.heads:
            parser.error("--d-model/--heads go with --layers, not --size")
        args.layers, args.d_model, args.heads = GPT3_SIZES[args.size]
    elif not (args.d_model and args.heads):
        parser.error("--layers needs --d-model and --heads")
    if args.d_model % args.heads:
        parser.error(f"--heads {args.heads} does not divide --d-model {args.d_model}")
    return args


def main() -> int:
    args = parse_args()
    start = time.perf_counter()
    cfg = GPTConfig(args.layers, args.d_model, args.heads, args.vocab, args.seq, args.batch, args.dynamic,
                    args.dropout, args.mask, args.gelu)
    data_path = args.out.with_name(args.out.name + ".data")
    weights = ExternalWeights(data_path.name)
    graph = GraphBuilder(cfg, weights).build()
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="dsopt gen_gpt.py"
    )
    model.ir_version = IR_VERSION
    if args.materialize and weights.size > args.materialize_limit_gib * 2**30:
        sys.exit(f"--materialize: {weights.size / 2**30:.1f} GiB of weights is over the "
                 f"{args.materialize_limit_gib:g} GiB limit (--materialize-limit-gib)")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(args.out))
    weights.write(data_path, np.random.default_rng(args.seed) if args.materialize else None)

    # Check what was written without reading the (possibly sparse) weights.
    # The checker is given the path, not the proto: it resolves the external
    # data location against the model's directory (a proto's against the
    # current directory) and only checks that the file exists.
    onnx.checker.check_model(str(args.out))
    proto = onnx.load(str(args.out), load_external_data=False)
    onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)

    shape = "dynamic [batch, seq]" if cfg.dynamic else f"[{cfg.batch}, {cfg.seq}]"
    print(
        f"{args.out}: {cfg.layers} layers, d_model {cfg.d_model}, {cfg.heads} heads, vocab {cfg.vocab}, "
        f"inputs {shape}, {len(graph.node)} nodes, {len(graph.initializer)} initializers"
    )
    print(f"parameters: {weights.numel:,} ({weights.numel / 1e9:.3f} B)")
    print(f"{args.out.name}: {args.out.stat().st_size:,} bytes")
    allocated = data_path.stat().st_blocks * 512
    print(
        f"{data_path.name}: {weights.size:,} bytes apparent, {allocated:,} bytes allocated"
        f"{' (random weights)' if args.materialize else ' (sparse)'}"
    )
    print(f"generated in {time.perf_counter() - start:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
