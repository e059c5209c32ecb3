#!/usr/bin/python3
"""Export the model zoo (models.py) to ONNX training graphs.

For every model NAME this writes into --out:
  NAME.onnx           constant-folded export (torch's default)
  NAME_nofold.onnx    export without constant folding: parameters keep their
                      state_dict names, Linear weights appear as initializer
                      -> Transpose -> MatMul instead of pre-transposed copies
  NAME_dynbatch.onnx  (--dynamic-batch) folded export whose axis 0 of every
                      input and of `logits` is the dim_param "batch"
  NAME.inputs.npz     the example inputs, keyed by ONNX input name
  NAME.outputs.npz    PyTorch's outputs (eval mode, or train mode for a model
                      with train_mode), keyed by ONNX output name
and a zoo.json index describing all of them.

Exports use torch's TrainingMode.PRESERVE on a module in eval mode: the graph
has eval semantics (BatchNormalization uses running statistics), but the
exporter's eval-only peephole that fuses BatchNorm into the preceding Conv is
skipped, so BatchNorm parameters stay separate, trainable initializers.
A model with train_mode (models.py) is exported in TrainingMode.TRAINING:
BatchNormalization-15 with training_mode=1 and its running statistics as
outputs, Dropout with training_mode true. Running the module in train mode
updates its running statistics, so the outputs come from a fresh copy; the
exporter's trace runs it too and the file would hold the statistics after
one batch, so the file's running statistics are set back to the module's
initial ones (every BatchNormalization's must be a buffer of the module).

Every file is re-loaded with onnx.load and checked with onnx.checker (with
strict shape inference). Output is deterministic: the same command writes
the same bytes.
"""

import argparse
import dataclasses
import io
import json
import sys
import time
import warnings
import zipfile
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np
import onnx
import onnx.mapping
import onnx.numpy_helper
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import ZOO, ZooModel  # noqa: E402

# Emitted for every PRESERVE export with folding on. Its premise (a module in
# training mode) does not hold here: the module is in eval mode.
_PRESERVE_FOLDING_WARNING = "It is recommended that constant folding be turned off"
_BATCHES_TRACKED_WARNING = "ONNX Preprocess - Removing mutation from node aten::add_ on block input: '.*num_batches_tracked'"

# Ops that only relay a tensor; the tied-weight check looks through them.
_RELAY_OPS = ("Transpose", "Identity", "Cast")


def _save_npz(path: Path, arrays: Dict[str, np.ndarray]) -> None:
    """np.savez with a fixed zip timestamp, so the bytes are reproducible."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, array in arrays.items():
            buf = io.BytesIO()
            # np.ascontiguousarray would turn a 0-d loss into shape (1,).
            array = np.asarray(array)
            if not array.flags.c_contiguous:
                array = array.copy(order="C")
            np.lib.format.write_array(buf, array, allow_pickle=False)
            zf.writestr(zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0)), buf.getvalue())


def _export(
    module: torch.nn.Module,
    inputs: Dict[str, torch.Tensor],
    output_names: Sequence[str],
    path: Path,
    opset: int,
    fold: bool,
    dynamic_axes: Dict[str, Dict[int, str]] = None,
    train_mode: bool = False,
) -> List[str]:
    """Export one file; returns the distinct warnings torch raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message=_PRESERVE_FOLDING_WARNING)
        # Train mode: BatchNorm's num_batches_tracked counter does not reach
        # the graph; PyTorch reads it only for momentum=None, which these
        # models do not use.
        warnings.filterwarnings("ignore", message=_BATCHES_TRACKED_WARNING)
        torch.onnx.export(
            module,
            tuple(inputs.values()),
            str(path),
            export_params=True,
            opset_version=opset,
            do_constant_folding=fold,
            input_names=list(inputs),
            output_names=list(output_names),
            dynamic_axes=dynamic_axes,
            training=torch.onnx.TrainingMode.TRAINING if train_mode else torch.onnx.TrainingMode.PRESERVE,
        )
    return sorted({f"{w.category.__name__}: {w.message}" for w in caught})


def _load_and_check(path: Path) -> onnx.ModelProto:
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    return proto


def _value_info(value: onnx.ValueInfoProto):
    """(dtype name, shape) with dim_params as strings."""
    tensor_type = value.type.tensor_type
    dtype = onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[tensor_type.elem_type].name
    shape = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in tensor_type.shape.dim]
    return dtype, shape


def _check_outputs_match(proto: onnx.ModelProto, outputs: Dict[str, np.ndarray]) -> None:
    """The graph's declared outputs have the names, dtypes and shapes of
    PyTorch's. A dimension the exporter's shape inference lost (a dim_param
    such as Swin's 'Gemmlogits_dim_0') is unknown, not wrong: dsopt infers
    it from the inputs, and the loss and training checks compare values."""
    declared = {v.name: _value_info(v) for v in proto.graph.output}
    for name, array in outputs.items():
        dtype, shape = declared[name]
        shape = [want if isinstance(got, str) else got for got, want in zip(shape, array.shape)] + shape[array.ndim:]
        if dtype != array.dtype.name or shape != list(array.shape):
            raise RuntimeError(f"output {name}: graph says {dtype}{shape}, PyTorch gives {array.dtype}{list(array.shape)}")


def _check_tied(proto: onnx.ModelProto, name: str) -> Dict[str, object]:
    """Verify that a tied parameter is one initializer feeding all its uses.

    Returns the op types that consume it (looking through relay ops such as
    Transpose) and the relay ops in between. Fails if the initializer is
    missing, if another initializer holds a copy of it (plain or transposed),
    or if it does not feed both a Gather and a MatMul/Gemm.
    """
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer}
    if name not in inits:
        raise RuntimeError(f"tied parameter {name} is not an initializer")
    weight = inits[name]
    copies = [
        other
        for other, value in inits.items()
        if other != name
        and ((value.shape == weight.shape and np.array_equal(value, weight))
             or (value.shape == weight.T.shape and np.array_equal(value, weight.T)))
    ]
    if copies:
        raise RuntimeError(f"tied parameter {name} is duplicated as {copies}")

    consumers, relays, frontier = [], [], [name]
    while frontier:
        tensor = frontier.pop()
        for node in proto.graph.node:
            if tensor in node.input:
                if node.op_type in _RELAY_OPS:
                    relays.append(node.op_type)
                    frontier.extend(node.output)
                else:
                    consumers.append(node.op_type)
    if "Gather" not in consumers or not {"MatMul", "Gemm"} & set(consumers):
        raise RuntimeError(f"tied parameter {name} feeds {consumers}, expected Gather and MatMul/Gemm")
    return {"consumers": sorted(consumers), "through": sorted(relays)}


def _check_distinct(proto: onnx.ModelProto, module: torch.nn.Module, file_name: str) -> None:
    """Every parameter of the module is its own initializer: torch 1.13's
    exporter merges initializers of equal values, which would make two
    parameters train as one (parameters the module ties are one already)."""
    from initializer_map import MappingError, map_initializers

    try:
        imap = map_initializers(proto, module)
    except MappingError as e:
        raise RuntimeError(f"{file_name}: a parameter is not its own initializer: {e}") from e
    n_params = len(dict(module.named_parameters()))
    if len({m.initializer for m in imap.mapped}) != n_params:
        raise RuntimeError(f"{file_name}: {n_params} parameters, {len(imap.mapped)} initializers hold them")


def _restore_buffers(path: Path, module: torch.nn.Module) -> None:
    """Sets the running statistics of a train-mode export back to the
    module's initial buffers: the exporter's trace ran one forward in train
    mode, which updated them before they were written."""
    proto = onnx.load(str(path))
    buffers = {n: b.numpy() for n, b in module.named_buffers() if b.is_floating_point()}
    inits = {i.name: i for i in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type != "BatchNormalization":
            continue
        for name in node.input[3:5]:
            if name not in buffers or name not in inits:
                raise RuntimeError(f"{path.name}: running statistic {name} of {node.name} is not a buffer "
                                   "of the module held in an initializer")
            inits[name].CopyFrom(onnx.numpy_helper.from_array(buffers[name], name))
    onnx.save(proto, str(path))


def _file_summary(proto: onnx.ModelProto, path: Path) -> Dict[str, object]:
    return {
        "file": path.name,
        "op_types": sorted({n.op_type for n in proto.graph.node}),
        "num_initializers": len(proto.graph.initializer),
        # Includes buffers such as BatchNorm running statistics.
        "initializer_numel": int(sum(np.prod(i.dims, dtype=np.int64) for i in proto.graph.initializer)),
        "num_nodes": len(proto.graph.node),
        "ir_version": proto.ir_version,
        "opset": {o.domain or "ai.onnx": o.version for o in proto.opset_import},
    }


def export_model(model: ZooModel, out: Path, opset: int, dynamic_batch: bool) -> Dict[str, object]:
    module = model.build()
    inputs = model.inputs()
    with torch.no_grad():
        # A train-mode forward updates the running statistics: run a copy.
        outputs = {n: t.numpy() for n, t in zip(model.output_names, model.build()(*inputs.values()))}
    _save_npz(out / f"{model.name}.inputs.npz", {n: t.numpy() for n, t in inputs.items()})
    _save_npz(out / f"{model.name}.outputs.npz", outputs)

    variants = [("folded", f"{model.name}.onnx", True, None), ("nofold", f"{model.name}_nofold.onnx", False, None)]
    if dynamic_batch:
        axes = {n: {0: "batch"} for n in inputs}
        axes.update({n: {0: "batch"} for n in model.output_names if outputs[n].ndim > 0})
        variants.append(("dynbatch", f"{model.name}_dynbatch.onnx", True, axes))

    files = {}
    for kind, file_name, fold, axes in variants:
        path = out / file_name
        start = time.perf_counter()
        exported = model.build() if model.train_mode else module
        for message in _export(exported, inputs, model.output_names, path, opset, fold, axes, model.train_mode):
            print(f"  torch warning ({file_name}): {message}", file=sys.stderr)
        if model.train_mode:
            _restore_buffers(path, module)
        seconds = time.perf_counter() - start
        proto = _load_and_check(path)
        if axes is None:
            _check_outputs_match(proto, outputs)
        summary = _file_summary(proto, path)
        summary["tied"] = {name: _check_tied(proto, name) for name in model.tied}
        if not fold:
            _check_distinct(proto, module, file_name)
        files[kind] = summary
        print(
            f"{file_name:24s} {len(proto.graph.node):5d} nodes {summary['num_initializers']:4d} initializers "
            f"{path.stat().st_size / 1e6:9.3f} MB {seconds:6.2f}s  ops: {' '.join(summary['op_types'])}"
        )

    return {
        "name": model.name,
        "file": files["folded"]["file"],
        "nofold_file": files["nofold"]["file"],
        "dynbatch_file": files["dynbatch"]["file"] if dynamic_batch else None,
        "inputs_npz": f"{model.name}.inputs.npz",
        "outputs_npz": f"{model.name}.outputs.npz",
        # JSON objects are unordered for some readers; this keeps the order.
        "input_names": list(inputs),
        "inputs": {n: [t.numpy().dtype.name, list(t.shape)] for n, t in inputs.items()},
        "outputs": [{"name": n, "dtype": a.dtype.name, "shape": list(a.shape)} for n, a in outputs.items()],
        "num_parameters": sum(p.numel() for p in module.parameters()),  # tied counted once
        "num_initializers_in_onnx": {k: f.pop("num_initializers") for k, f in files.items()},
        "op_types": {k: f.pop("op_types") for k, f in files.items()},
        "opset": opset,
        "config": dataclasses.asdict(model.config),
        # Per variant (folded, nofold, dynbatch): file, nodes, ir_version, ...
        "files": files,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="output directory (created if missing)")
    parser.add_argument(
        "--only",
        help="comma-separated model names; default: every model exported by default "
        f"({', '.join(n for n, m in ZOO.items() if m.exported_by_default)}); also available: "
        f"{', '.join(n for n, m in ZOO.items() if not m.exported_by_default)}",
    )
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    parser.add_argument(
        "--dynamic-batch", action="store_true", help="also write NAME_dynbatch.onnx with a symbolic batch axis"
    )
    args = parser.parse_args()

    if args.only:
        names = args.only.split(",")
        unknown = [n for n in names if n not in ZOO]
        if unknown:
            parser.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(ZOO)}")
    else:
        names = [n for n, m in ZOO.items() if m.exported_by_default]

    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    entries = [export_model(ZOO[name], args.out, args.opset, args.dynamic_batch) for name in names]
    (args.out / "zoo.json").write_text(json.dumps(entries, indent=2) + "\n")
    print(f"exported {len(entries)} model(s) to {args.out} in {time.perf_counter() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
