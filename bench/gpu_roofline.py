"""A roofline model of one training step of a cuda program, op by op.

  gpu_roofline.py [--dsopt DSOPT] [--batch B] [--out DIR] [--fake-report FAKE.json]
  gpu_roofline.py --mlir STEP.mlir ...
  gpu_roofline.py --layers 2 --d-model 64 --heads 2 --vocab 100 --seq 32 --batch 2 ...

A model, not a measurement. From the training step dsopt generates for the
cuda target (GPT-2 124M in bf16 at gpu_bench.py's micro-batch by default:
the largest whose plan fits 90% of an H200's memory), read as its
memory-planned ds IR (--emit=train-mlir, generic form), this lists every op
of @micro_step and @optimizer_step with

  * the runtime work it makes: cuBLASLt matmuls, kernel launches by kernel,
    2D copies (what the fake CUDA runtime counts, docs/runtime.md);
  * its FLOPs: 2 m n k per matmul, one per element and arithmetic op of a
    fused loop, a few per element for the row kernels;
  * its minimum bytes: every operand read once and every result written
    once, in its own element type (a broadcast operand at its own size);
  * the time it takes at the roofline: max(FLOPs / peak, bytes / bandwidth),
    the peak being the bf16 dense tensor-core rate for a 16-bit matmul and
    the f32 rate otherwise.

It sums them into a predicted step time, tokens/s and the MFU ceiling
(PaLM's 6 N + 12 L T d FLOPs per token, as gpu_bench.py counts, over the
predicted step at the bf16 peak), and the share of each kind of op. The
peaks are NVIDIA's H200 SXM datasheet figures
(https://www.nvidia.com/en-us/data-center/h200/): BF16 tensor core 1,979
TFLOP/s with sparsity, so 989.5 dense; FP32 67 TFLOP/s; HBM3e 4.8 TB/s.
Launch latency is not in the roofline: the launch count is printed beside
it. The roofline is a floor no kernel beats; docs/benchmarks.md says where
the kernels as written stay above it.

--fake-report reads a report of the fake CUDA runtime of the same program
(check_fake_cuda.py --work W leaves it in W/fake.json; any micro-batch, the
launches do not depend on it) and checks that the launches the model
predicts, by kernel, are what the program made in its second step; exits 1
when they differ. --check-megatron checks the matmul FLOPs against
Megatron-LM's formula for GPT (Narayanan et al. 2021, eq. 3 without
recomputation: 72 B s l h^2 (1 + s / 6h + V / 12 l h)); exits 1 when they
differ.
"""
import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
from collections import Counter, OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

# NVIDIA H200 SXM datasheet (https://www.nvidia.com/en-us/data-center/h200/).
PEAK_BF16_TENSOR = 989.5e12  # 1,979 TFLOP/s with 2:4 sparsity, halved: dense
PEAK_FP32 = 67e12
HBM_BYTES_PER_S = 4.8e12
H200_MEMORY_GIB = 139.0  # what nvidia-smi shows of its 141 GB

DTYPE_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i64": 8, "i32": 4, "i8": 1, "i1": 1,
               "ui8": 1}
KINDS = ["matmul", "attention softmax", "fused attention", "layernorm", "gelu", "bias, residual", "bias grads",
         "adamw", "cross-entropy", "casts", "copies", "checks", "other"]
# Ops the runtime's unary() runs as one unary_float_kernel.
UNARY = {"sqrt", "reciprocal", "exp", "log", "tanh", "erf", "sigmoid", "neg", "relu", "leaky_relu",
         "gelu", "gelu_tanh", "softplus", "elu", "celu", "sin", "cos", "floor", "ceil", "round"}


class Tensor:
    def __init__(self, text):
        m = re.fullmatch(r"tensor<(?:([0-9x]+)x)?([a-z]+[0-9]*)>", text.strip())
        if not m:
            raise ValueError(f"not a ranked tensor type: {text}")
        self.shape = [int(d) for d in m.group(1).split("x")] if m.group(1) else []
        self.dtype = m.group(2)
        self.numel = math.prod(self.shape)
        self.bytes = self.numel * DTYPE_BYTES[self.dtype]

    def __str__(self):
        return "x".join(map(str, self.shape)) + ("x" if self.shape else "") + self.dtype


def split_types(text):
    """The types of `(a, b)` or `a` (commas inside <> kept)."""
    text = text.strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [t.strip() for t in out]


def tensors(types):
    return [Tensor(t) for t in types if t.startswith("tensor<")]


def warp_rows(x, params, lane_elems):
    """Whether runtime/src/cuda/norm.cu takes layer norm rows of x (normalized
    over the trailing dims its scale covers) a warp per row: whole 16-byte
    vectors, at most lane_elems elements a lane in one of its lane widths
    (1, 2, 3, 4, 6 or 8 vectors), every parameter of the normalized shape
    (the arena's tensors are 16-byte aligned)."""
    n = params[0].numel if params else 0
    vec = 16 // DTYPE_BYTES[x.dtype]
    if n == 0 or n % vec or any(p.numel != n for p in params):
        return False
    k = -(-(n // vec) // 32)
    return any(k <= w and w * vec <= lane_elems for w in (1, 2, 3, 4, 6, 8))


class Op:
    def __init__(self, func, name, attrs, operands, results, body, line=""):
        self.func, self.name, self.attrs = func, name, attrs
        m = re.match(r'^\s*(?:(%[\w]+)(?::\d+)? = )?"[\w.]+"\(([^)]*)\)', line)
        self.value = m.group(1) if m and m.group(1) else None
        self.uses = [u.split("#")[0] for u in re.findall(r"%[\w#]+", m.group(2))] if m else []
        self.operands, self.results, self.body = operands, results, body
        self.kind = ""
        self.flops = 0
        self.dense_flops = 0  # fused attention's products, as Megatron counts them
        self.bytes = 0
        self.launches = Counter()


SIGNATURE = re.compile(r"^(.*)\s:\s*(\(.*\))\s*->\s*(.*)$")
OP_START = re.compile(r'^    (?:%[\w#:]+ = )?"([\w.]+)"')


def parse(text):
    """The top-level ops of @micro_step and @optimizer_step, in order."""
    ops, func, pending, body, start = [], None, None, [], ""
    for line in text.splitlines():
        if line.startswith('  "func.func"'):
            m = re.search(r'sym_name = "(\w+)"', line)
            func = m.group(1) if m else None
            continue
        if pending is not None:
            if line.startswith("    })"):
                sig = SIGNATURE.match(line)
                ops.append(Op(func, pending, sig.group(1), split_types(sig.group(2)),
                              split_types(sig.group(3)), body, start))
                pending, body = None, []
            else:
                m = re.match(r'^\s+(?:%[\w#:]+ = )?"([\w.]+)"', line)
                if m:
                    body.append(m.group(1))
            continue
        m = OP_START.match(line)
        if not m or func is None:
            continue
        if line.rstrip().endswith("({"):
            pending, body, start = m.group(1), [], line
            continue
        sig = SIGNATURE.match(line)
        if sig:
            ops.append(Op(func, m.group(1), sig.group(1), split_types(sig.group(2)),
                          split_types(sig.group(3)), [], line))
        else:  # no results: "(args) -> ()" is still a signature
            ops.append(Op(func, m.group(1), line, [], [], []))
    return ops


def is_scores(t, seq):
    """An attention-score-shaped tensor: [..., T, T]."""
    return len(t.shape) >= 3 and t.shape[-1] == seq and t.shape[-2] == seq


def matmul_flops(a, out):
    """2 m n k of a product whose result is `out` ([..., m, n]) and whose
    left operand is `a` (transposed or not, with batch dims, or with extra
    leading dims summed over: a weight gradient)."""
    m = out.shape[-2] if len(out.shape) >= 2 else 1
    batch = out.numel // (m * out.shape[-1])
    if len(a.shape) > len(out.shape):
        k = a.numel // (m * batch)
    else:
        k = a.shape[-1] if a.shape[-2] == m else a.shape[-2]
    return 2 * out.numel * k


def column_parts(x, axes):
    """runtime/src/workspace_shapes.h's reduce_column_parts for x, as
    [rows, columns], summed over its rows (`axes`, the leading ones): the
    blocks a tile of 8 columns (16 of 2-byte elements) is split into, 1
    (one launch) or more (a second launch over the parts)."""
    rows = math.prod(n for d, n in enumerate(x.shape) if d in axes)
    columns = math.prod(n for d, n in enumerate(x.shape) if d not in axes)
    tile = 16 if DTYPE_BYTES[x.dtype] == 2 else 8
    tiles, parts = -(-columns // tile), 1
    if rows >= 2048:
        while parts < 32 and tiles * parts < 128:
            parts *= 2
    return parts


def binary_fast(out, operands):
    """runtime/src/cuda/elementwise.cu's binary_fast_kernel case: each
    operand, over y's axes of size > 1, has all of them (y's shape), none
    (a scalar) or only trailing ones (broadcast along leading axes), and
    operands of the last kind have the same trailing size."""
    rows = set()
    for t in operands:
        shape = [1] * (len(out.shape) - len(t.shape)) + list(t.shape)
        present = [s != 1 for s, o in zip(shape, out.shape) if o != 1]
        first = present.index(True) if True in present else len(present)
        if not all(present[first:]):
            return False
        if 0 < first < len(present):
            rows.add(math.prod(s for s, o in zip(shape, out.shape) if o != 1 and s != 1))
    return len(rows) <= 1


def chunk_launches(sizes):
    """adamw_multi's launches: the tables of chunk_table.h's chunk_tables()
    (its constants read from the header), one launch each."""
    header = (ROOT / "runtime" / "src" / "cuda" / "chunk_table.h").read_text()
    const = {k: int(v) for k, v in re.findall(r"constexpr int\w* (kChunk\w+) = (\d+);", header)}
    max_tensors, max_blocks = const["kChunkTensors"], const["kChunkBlocks"]
    elements, max_pieces = const["kChunkElements"], max_blocks + max_tensors
    tables = [{"tensors": [], "blocks": 0, "pieces": 0}]
    in_block = 0
    for i, n in enumerate(sizes):
        start = 0
        while start < n:
            t = tables[-1]
            block_full = t["blocks"] == 0 or in_block == elements
            new_tensor = not t["tensors"] or t["tensors"][-1] != i
            if ((block_full and t["blocks"] == max_blocks) or
                    (new_tensor and len(t["tensors"]) == max_tensors) or t["pieces"] == max_pieces):
                tables.append({"tensors": [], "blocks": 1, "pieces": 0})
                t, in_block = tables[-1], 0
            elif block_full:
                t["blocks"] += 1
                in_block = 0
            if not t["tensors"] or t["tensors"][-1] != i:
                t["tensors"].append(i)
            take = min(n - start, elements - in_block)
            t["pieces"] += 1
            in_block += take
            start += take
    return sum(1 for t in tables if t["blocks"])


def classify(op, seq):
    """Kind, FLOPs, minimum bytes and launches of one op."""
    ins, outs = tensors(op.operands), tensors(op.results)
    name = op.name.split(".", 1)[1] if op.name.startswith("ds.") else op.name
    op.bytes = sum(t.bytes for t in ins) + sum(t.bytes for t in outs)
    out = outs[0] if outs else None
    n = out.numel if out else 0
    if name in ("reshape", "constant") or op.name == "func.return":
        op.kind, op.bytes = None, 0  # views and module constants: no work
        return
    if name in ("matmul", "gemm", "matmul_bias", "matmul_bias_grad", "matmul_lhs_bias_grad",
                "matmul_bias_gelu", "matmul_dgelu"):
        # matmul_bias(_grad), matmul_lhs_bias_grad: the bias, residual or bias gradient ride in
        # the product's cuBLASLt epilogue: their bytes are the op's, their
        # adds (a few per output element) are not counted as matmul FLOPs,
        # which Megatron-LM's formula checks.
        op.kind, op.flops = "matmul", matmul_flops(ins[0], out)
        op.launches["cublasLtMatmul"] = 1
        if name in ("matmul_bias_gelu", "matmul_dgelu") and out.shape[-1] % 8:
            # The tanh GELU (or its derivative) rides in the epilogue only
            # where cuBLASLt's aux ld, the product's n, is a multiple of 8.
            op.launches["gelu_tanh_kernel"] = 1
        if name == "gemm" and len(ins) > 2 and ins[2].shape != out.shape:
            op.launches["expand_kernel"] = 1  # a broadcast C is expanded into Y first
    elif name == "fused":
        op.flops = n * sum(1 for b in op.body if b.startswith(("arith.", "math."))
                           and b != "arith.constant")
        if any(is_scores(t, seq) for t in ins + outs):
            op.kind = "attention softmax"  # the scores' scale and mask, the gradient's scale
        elif ("math.erf" in op.body or "math.tanh" in op.body
              or ("math.exp" in op.body and "arith.negf" in op.body)):
            op.kind = "gelu"
        else:
            op.kind = "bias, residual"
        op.launches["dsopt_fused_kernel"] = 1
    elif name in ("attention", "attention_grad", "attention_packed", "attention_packed_grad"):
        # --fuse-attention: q, k, v [..., T, Dh] (tokens_major: [..., T, H,
        # Dh]; packed: one [..., T, 3, H, Dh]) in, nothing [T, T] out. The
        # products of the (query, key) pairs it computes (T (T + 1) / 2 per
        # head when causal): q kᵀ and p v forward (4 Dh per pair); the
        # backward recomputes q kᵀ and forms do vᵀ, dq, dk, dv (10 Dh), as a
        # tensor-core kernel would (FlashAttention-2); the exponentials.
        q = ins[0]
        packed = name.startswith("attention_packed")
        name = name.replace("_packed", "")
        t = q.shape[-4] if packed else q.shape[-3] if "tokens_major" in op.attrs else q.shape[-2]
        dh = q.shape[-1]
        heads = q.numel // (t * dh * (3 if packed else 1))
        pairs = heads * (t * (t + 1) // 2 if "causal" in op.attrs else t * t)
        op.kind = "fused attention"
        op.flops = pairs * ((4 * dh + 3) if name == "attention" else (10 * dh + 5))
        # Megatron's formula counts the full [T, T] products: 2 forward, 4 backward.
        op.dense_flops = heads * t * t * 2 * dh * (2 if name == "attention" else 4)
        if name == "attention":
            op.launches["attention_kernel"] = 1
        else:
            op.launches.update(["attention_delta_kernel", "attention_dkv_kernel",
                                "attention_dq_kernel"])
    elif name in ("softmax", "softmax_grad"):
        op.kind, op.flops = "attention softmax", 5 * n
        op.launches[name + "_kernel"] = 1
    elif name == "layer_norm":
        op.kind, op.flops = "layernorm", 8 * ins[0].numel
        op.launches["layer_norm_warp_kernel" if warp_rows(ins[0], ins[1:], 64)
                    else "layer_norm_kernel"] = 1
    elif name == "layer_norm_grad":
        op.kind, op.flops = "layernorm", 12 * ins[0].numel
        # One launch: the rows kernel's last blocks finish dscale and dbias
        # (runtime/src/cuda/norm.cu); a broadcast scale or bias (fewer
        # elements than the normalized shape) leaves both to a kernel each
        # after it. An addend (the residual gradient) rides in the rows.
        op.launches["layer_norm_grad_warp_kernel" if warp_rows(ins[1], ins[2:3], 32)
                    else "layer_norm_grad_rows_kernel"] = 1
        normalized = ins[0].numel // max(1, ins[2].numel)
        if any(t.numel != normalized for t in outs[1:]):
            for t in outs[1:]:
                op.launches["layer_norm_param_grad_kernel" if t.numel == normalized
                            else "layer_norm_param_grad_broadcast_kernel"] += 1
    elif name in ("softmax_cross_entropy", "softmax_cross_entropy_grad",
                  "softmax_cross_entropy_with_grad"):
        op.kind, op.flops = "cross-entropy", 4 * max(t.numel for t in ins)
        m = re.search(r"#ds<reduction (\w+)>", op.attrs)
        reduction = m.group(1) if m else "mean"
        # runtime/src/cuda/loss.cu: the row kernel writes a reduction none's
        # losses itself; a mean's gradient first totals the weights.
        if name == "softmax_cross_entropy":
            op.launches["log_softmax_rows_kernel"] = 1
            if reduction != "none":
                op.launches["nll_total_kernel"] = 1
        elif name == "softmax_cross_entropy_with_grad":
            # The loss's pass writes the gradient: the weights' total for
            # a mean, the rows, the loss's total.
            # Contiguous classes whose row fits a block's shared memory
            # (sm_90's 227 KiB opt-in less 1 KiB) are read once into it.
            scores = ins[0]
            vec = 16 // DTYPE_BYTES[scores.dtype]
            fits = (scores.shape[1] + vec) * DTYPE_BYTES[scores.dtype] <= 227 * 1024 - 1024
            if reduction == "mean":
                op.launches["weight_total_kernel"] = 1
            op.launches["cross_entropy_grad_shared_kernel"
                        if len(scores.shape) == 2 and fits else "cross_entropy_grad_rows_kernel"] = 1
            if reduction != "none":
                op.launches["sample_total_kernel"] = 1
        else:
            if reduction == "mean":
                op.launches["weight_total_kernel"] = 1
            op.launches["softmax_cross_entropy_grad_kernel"] = 1
    elif name == "cast":
        op.kind = "casts"
        op.launches["cast_kernel"] = 1
    elif name in ("add", "sub", "mul", "div"):
        op.kind = "attention softmax" if is_scores(out, seq) else "bias, residual"
        op.flops = n
        op.launches["binary_fast_kernel" if binary_fast(out, ins[:2]) else "binary_kernel"] = 1
    elif name == "reduce_sum":
        op.kind, op.flops = "bias grads", ins[0].numel
        m = re.search(r"axes = array<i64(?::\s*([0-9, ]*))?>", op.attrs)
        axes = {int(a) for a in m.group(1).split(",")} if m and m.group(1) else set()
        # runtime/src/cuda/reduce.cu: reduced axes leading and kept ones
        # innermost (size-1 axes ignored) is the column kernel's case.
        groups = []
        for d, size in enumerate(ins[0].shape):
            if size != 1 and (not groups or groups[-1] != (d in axes)):
                groups.append(d in axes)
        columns = groups == [True, False]
        # At most 256 rows: a sum in registers (reduce_few_rows_kernel).
        few = columns and math.prod(n for d, n in enumerate(ins[0].shape) if d in axes) <= 256
        op.launches["reduce_few_rows_kernel" if few else
                    "reduce_columns_kernel" if columns else "reduce_kernel"] = 1
        if columns and not few and column_parts(ins[0], axes) > 1:
            op.launches["reduce_column_parts_kernel"] = 1
    elif name == "transpose":
        op.kind = "copies"
        op.launches["transpose_kernel"] = 1
    elif name in ("concat", "split"):
        op.kind = "copies"
        op.launches["cudaMemcpy2DAsync"] = len(ins) if name == "concat" else len(outs)
    elif name == "gather_grad":
        # runtime/src/cuda/movement.cu: a radix sort of the positions by row
        # (3 launches a pass of 8 bits, at least one pass), the rows' starts,
        # the sums by tiles of sorted positions, the long and empty rows.
        op.kind = "copies"
        m = re.search(r"axis = (-?\d+)", op.attrs)
        axis = int(m.group(1)) if m else 0
        extent = out.shape[axis] if out.shape else 1
        if ins[1].numel and out.numel:  # else a fill at most
            passes = max(1, -(-(extent - 1).bit_length() // 8))
            for k in ("gather_sort_count_kernel", "gather_sort_scan_kernel", "gather_sort_place_kernel"):
                op.launches[k] = passes
            for k in ("gather_row_starts_kernel", "gather_grad_sum_kernel", "gather_grad_finish_kernel"):
                op.launches[k] = 1
    elif name in ("gather", "trilu"):
        op.kind = "copies"
        kernel = name + "_kernel"
        if name == "gather":  # rows of 32 elements and more: a warp a row
            m = re.search(r"axis = (-?\d+)", op.attrs)
            axis = int(m.group(1)) if m else 0
            axis = axis + len(ins[0].shape) if axis < 0 else axis
            if math.prod(ins[0].shape[axis + 1:]) >= 32:
                kernel = "gather_rows_kernel"
        op.launches[kernel] = 1
        if name == "gather":  # the table is read at the indexed rows only
            op.bytes = ins[1].bytes + 2 * out.bytes
    elif name == "adamw_multi":
        # (lr, step, the masters, the gradients, m, v): 4 lists after 2 scalars
        masters = ins[2:2 + (len(ins) - 2) // 4]
        op.kind, op.flops = "adamw", 12 * sum(t.numel for t in masters)
        op.launches["adamw_multi_kernel"] = chunk_launches([t.numel for t in masters])
    elif name == "sum_of_squares":
        # A block per chunk, the chunk tables' launches (as adamw_multi's).
        op.kind, op.flops = "adamw", 2 * sum(t.numel for t in ins)
        launches = chunk_launches([t.numel for t in ins])
        if launches:  # else a fill
            op.launches["sum_of_squares_kernel"] = launches
    elif name == "sqrt" and op.func == "optimizer_step":
        op.kind, op.flops = "adamw", 2 * sum(t.numel for t in ins)
        op.launches["unary_float_kernel"] = 1
    elif name in UNARY:
        op.kind, op.flops = "other", n
        op.launches["unary_float_kernel"] = 1
    else:
        op.kind = "other"
        op.launches[name + "_kernel"] = 1


def runtime_ops(micro_results, trainable):
    """Work the runtime adds around the ops: the non-finite check of the
    gradients the micro step returns, reading each once, in one launch per
    kNonfiniteTensors of them (runtime/src/cuda/backend.cu)."""
    grads = [t for t in micro_results[1:1 + trainable] if t.numel > 0]
    if not grads:
        return []
    backend = (ROOT / "runtime" / "src" / "cuda" / "backend.cu").read_text()
    per_launch = int(re.search(r"constexpr int kNonfiniteTensors = (\d+);", backend).group(1))
    op = Op("micro_step", "runtime.nonfinite_check", "", [str(t) for t in grads], [], [])
    op.kind, op.bytes = "checks", sum(t.bytes for t in grads)
    op.launches["nonfinite_multi_kernel"] = -(-len(grads) // per_launch)
    return [op]


def roofline(op):
    # Fused attention's products read q, k, v (and do) in 16 bits; its f32
    # log-sum-exp is not a product operand.
    operands = tensors(op.operands)
    if op.kind == "fused attention":
        operands = [t for t in operands if len(t.shape) == len(operands[0].shape)]
    tensor_core = op.kind in ("matmul", "fused attention") and all(
        t.dtype in ("bf16", "f16") for t in operands)
    peak = PEAK_BF16_TENSOR if tensor_core else PEAK_FP32
    return max(op.flops / peak, op.bytes / HBM_BYTES_PER_S)


def dsopt_step(dsopt, model, flags):
    done = subprocess.run([dsopt, str(model), "--target", "cuda", "--emit=train-mlir",
                           "--mlir-print-op-generic", *flags], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"gpu_roofline: dsopt failed: {done.stderr.strip()}")
    return done.stdout


def gpt_model(work, layers, d, heads, vocab, seq, batch, gelu="erf"):
    model = Path(work) / f"gpt-l{layers}-d{d}-b{batch}-{gelu}.onnx"
    args = ["--layers", str(layers), "--d-model", str(d), "--heads", str(heads),
            "--vocab", str(vocab), "--seq", str(seq), "--batch", str(batch), "--gelu", gelu]
    done = subprocess.run([sys.executable, str(ROOT / "test" / "oracles" / "gen_gpt.py"), *args,
                           "--out", str(model)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"gpu_roofline: gen_gpt.py failed: {done.stderr.strip()}")
    return model


def bench_batch(dsopt, work, args):
    """gpu_bench.py's choice: the largest micro-batch whose planned device
    memory fits 90% of the GPU's."""
    import gpu_bench
    for batch in gpu_bench.BATCHES:
        model = gpt_model(work, args.layers, args.d_model, args.heads, args.vocab, args.seq, batch,
                          args.gelu)
        done = subprocess.run([dsopt, str(model), "--target", "cuda", "--precision",
                               args.precision, "--emit=plan", *args.dsopt_flag],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"gpu_roofline: dsopt --emit=plan failed: {done.stderr.strip()}")
        need = gpu_bench.planned_device_bytes(json.loads(done.stdout))
        if need <= gpu_bench.FIT * args.gpu_memory_gib * 2**30:
            return batch, model
    raise SystemExit("gpu_roofline: not even micro-batch 1 fits")


def kernel_family(mangled):
    """A fake-runtime kernel name (mangled) as the model names it."""
    if re.search(r"dsopt_fused_\d+_kernel", mangled):
        return "dsopt_fused_kernel"
    name = mangled
    # <length><identifier> in the mangling; a hash before it may end in digits
    for m in re.finditer(r"\d+", mangled):
        for i in range(len(m.group())):
            ident = mangled[m.end():m.end() + int(m.group()[i:])]
            if re.fullmatch(r"[A-Za-z_]+_kernel", ident) and name == mangled:
                name = ident
    # Variants of one kernel the model counts as one: the tiled transpose,
    # the register-capped attention forward and dQ
    # (DSRT_ATTENTION_FORWARD_BLOCKS, DSRT_ATTENTION_DQ_BLOCKS).
    return {"transpose_tiled_kernel": "transpose_kernel",
            "attention_capped_kernel": "attention_kernel",
            "attention_dq_capped_kernel": "attention_dq_kernel"}.get(name, name)


def check_fake(report_path, predicted):
    phases = json.loads(Path(report_path).read_text())["phases"]
    step = next((p for p in phases if p["name"] == "step 2"), None)
    if step is None:
        return [f"{report_path}: no 'step 2' phase (train at least 2 steps)"]
    seen = Counter()
    for mangled, count in step["kernels"].items():
        seen[kernel_family(mangled)] += count
    for call in ("cublasLtMatmul", "cudaMemcpy2DAsync"):
        seen[call] += step["calls"].get(call, 0)
    # Fills (cudaMemsetAsync, fill_kernel) zero what the step accumulates
    # into; the model counts no bytes for them (a few small buffers).
    fills = seen.pop("fill_kernel", 0) + step["calls"].get("cudaMemsetAsync", 0)
    problems = []
    for name in sorted(set(seen) | set(predicted)):
        if seen[name] != predicted[name]:
            problems.append(f"{name}: the model predicts {predicted[name]}, the program made "
                            f"{seen[name]}")
    print(f"cross-check with {report_path} (step 2): {sum(seen.values())} launches and calls, "
          f"{len(seen)} kinds, plus {fills} fills: "
          + ("as predicted" if not problems else f"{len(problems)} differ"))
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsopt", default=str(ROOT / "build" / "bin" / "dsopt"))
    parser.add_argument("--mlir", type=Path, help="a saved --emit=train-mlir --mlir-print-op-generic")
    parser.add_argument("--model", type=Path, help="an ONNX training graph instead of a GPT "
                        "(no MFU: that needs the GPT's shape)")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, help="micro-batch (default: gpu_bench.py's choice)")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
    parser.add_argument("--gpu-memory-gib", type=float, default=H200_MEMORY_GIB)
    parser.add_argument("--dsopt-flag", action="append", default=[])
    parser.add_argument("--gelu", choices=["erf", "tanh"], default="erf",
                        help="the GPT's MLP activation (gen_gpt.py --gelu): exact erf (default) or "
                             "GPT-2's tanh approximation")
    parser.add_argument("--ops", action="store_true", help="print every op")
    parser.add_argument("--json", type=Path, help="write the per-op table as JSON")
    parser.add_argument("--fake-report", type=Path)
    parser.add_argument("--check-megatron", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as work:
        batch = args.batch
        if args.mlir:
            text = args.mlir.read_text()
        else:
            model = args.model
            if model is None:
                if batch is None:
                    batch, model = bench_batch(args.dsopt, work, args)
                else:
                    model = gpt_model(work, args.layers, args.d_model, args.heads, args.vocab,
                                      args.seq, batch, args.gelu)
            text = dsopt_step(args.dsopt, model,
                              ["--precision", args.precision, *args.dsopt_flag])
    ops = parse(text)
    micro = [o for o in ops if o.func == "micro_step"]
    if not micro:
        raise SystemExit("gpu_roofline: no @micro_step in the IR")
    ret = next(o for o in micro if o.name == "func.return")
    # The trainable parameters: the master copies adamw_multi updates.
    update = next((o for o in ops if o.name == "ds.adamw_multi"), None)
    masters = tensors(update.operands)[2:2 + (len(update.operands) - 2) // 4] if update else []
    trainable, n_params = len(masters), sum(t.numel for t in masters)
    ids = next((t for o in micro for t in tensors(o.operands) if o.name == "ds.gather"
                and t.dtype in ("i64", "i32")), None)
    tokens = ids.numel if ids else (batch or 1) * args.seq
    for op in ops:
        classify(op, args.seq)
    # The bias add and the scaling that feed GELU's fused loops are GELU's
    # (unfused: each its own pass over the [B, T, 4d] activation).
    by_value = {o.value: o for o in ops if o.value}
    for _ in range(2):
        for o in ops:
            if o.kind == "gelu":
                for u in o.uses:
                    d = by_value.get(u)
                    if d is not None and d.kind == "bias, residual" and d.name != "ds.fused":
                        d.kind = "gelu"
    ops = [o for o in ops if o.kind] + runtime_ops(tensors(ret.operands), trainable)

    total = sum(roofline(o) for o in ops)
    by_kind = OrderedDict((k, [0.0, 0, 0, 0]) for k in KINDS)
    launches = Counter()
    for o in ops:
        k = by_kind.setdefault(o.kind, [0.0, 0, 0, 0])
        k[0] += roofline(o)
        k[1] += o.flops
        k[2] += o.bytes
        k[3] += sum(o.launches.values())
        launches.update(o.launches)

    matmul_flops_total = by_kind["matmul"][1] + sum(o.dense_flops for o in ops)
    print(f"## Roofline model of one training step ({'micro-batch ' + str(batch) + ', ' if batch else ''}"
          f"{tokens} tokens; H200 SXM datasheet peaks: {PEAK_BF16_TENSOR / 1e12:.1f} TFLOP/s bf16 dense "
          f"tensor core, {PEAK_FP32 / 1e12:.0f} TFLOP/s f32, {HBM_BYTES_PER_S / 1e12:.1f} TB/s HBM3e)")
    print()
    print("| kind | roofline ms | share | GFLOP | GB moved (min) | launches |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, (t, f, b, n) in by_kind.items():
        if n or t:
            print(f"| {kind} | {t * 1e3:.3f} | {100 * t / total:.1f}% | {f / 1e9:,.1f} | "
                  f"{b / 1e9:,.2f} | {n} |")
    print(f"| **step** | **{total * 1e3:.3f}** | 100% | {sum(v[1] for v in by_kind.values()) / 1e9:,.1f} | "
          f"{sum(v[2] for v in by_kind.values()) / 1e9:,.2f} | {sum(launches.values())} |")
    print()
    layers, seq, d = args.layers, args.seq, args.d_model
    print(f"predicted step {total * 1e3:.3f} ms" +
          (f": {tokens / total:,.0f} tokens/s at the roofline" if args.model is None else ""))
    if n_params and args.model is None:  # a GPT of --layers, --seq, --d-model
        palm = 6 * n_params + 12 * layers * seq * d
        mfu = tokens * palm / total / PEAK_BF16_TENSOR
        print(f"MFU ceiling {100 * mfu:.1f}% ({n_params:,} parameters; PaLM's 6 N + 12 L T d = "
              f"{palm / 1e9:.3f} GFLOP/token over the predicted step at the bf16 peak)")
    print(f"matmul FLOPs {matmul_flops_total:,}; all ops' {sum(o.flops for o in ops):,}")
    print(f"launches per step: {sum(launches.values())} "
          f"({', '.join(f'{k} {v}' for k, v in launches.most_common())})")

    if args.ops:
        print()
        print("| # | function | op | kind | result | GFLOP | MB | roofline us | launches |")
        print("|---|---|---|---|---|---:|---:|---:|---|")
        for i, o in enumerate(ops):
            res = ", ".join(str(t) for t in tensors(o.results)[:2])
            print(f"| {i} | {o.func} | {o.name} | {o.kind} | {res} | {o.flops / 1e9:.3f} | "
                  f"{o.bytes / 1e6:.1f} | {roofline(o) * 1e6:.1f} | "
                  f"{', '.join(f'{k} {v}' for k, v in o.launches.items())} |")
    if args.json:
        args.json.write_text(json.dumps({
            "tokens": tokens, "step_s": total, "peaks": {
                "bf16_tensor_flops": PEAK_BF16_TENSOR, "fp32_flops": PEAK_FP32,
                "hbm_bytes_per_s": HBM_BYTES_PER_S},
            "kinds": {k: {"s": v[0], "flops": v[1], "bytes": v[2], "launches": v[3]}
                      for k, v in by_kind.items()},
            "ops": [{"function": o.func, "op": o.name, "kind": o.kind, "flops": o.flops,
                     "bytes": o.bytes, "s": roofline(o), "launches": dict(o.launches),
                     "results": [str(t) for t in tensors(o.results)]} for o in ops]},
            indent=1) + "\n")

    problems = []
    if args.check_megatron:
        b_s = tokens
        h, l, v = d, layers, args.vocab
        # 72 B s l h^2 (1 + s/(6h) + V/(12 l h)), kept in integers.
        megatron = 72 * b_s * l * h * h + 12 * b_s * l * seq * h + 6 * b_s * v * h
        print(f"Megatron-LM's formula: {megatron:,} FLOPs; the model's matmuls: "
              f"{matmul_flops_total:,}")
        if megatron != matmul_flops_total:
            problems.append(f"matmul FLOPs {matmul_flops_total:,} differ from Megatron-LM's "
                            f"{megatron:,}")
    if args.fake_report:
        problems += check_fake(args.fake_report, launches)
    for p in problems:
        print(f"gpu_roofline: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
