#!/usr/bin/python3
"""Make libFuzzer seeds for dsopt_import_fuzz from ONNX models.

Every model keeps its graph (nodes, attributes, inputs, outputs, value
infos, opsets) unchanged; only the payload of large floating-point
initializers moves out of the file: an initializer whose inline data is
larger than --inline-limit bytes becomes external data in `weights.bin`
(location, offset, length), the file the fuzz target provides in its model
directory (zero-filled, WEIGHTS_BYTES long; tools/fuzz/import_fuzz.cpp).
Smaller initializers and every integer one (shapes, axes, indices that the
importer folds into attributes) stay inline, so a seed still covers inline
payloads, constant folding and external data.

A seed is then a few kilobytes instead of the half megabyte of a zoo
model's weights, which libFuzzer would otherwise copy, mutate and parse on
every execution.

  fuzz_seeds.py --out DIR MODEL.onnx...

writes DIR/<name>.onnx for every model and prints one line per seed (its
size before and after).
"""

import argparse
import sys
from pathlib import Path

import onnx
import onnx.numpy_helper

# Must match kWeightsBytes in tools/fuzz/import_fuzz.cpp.
WEIGHTS_BYTES = 1 << 20

_FLOAT_TYPES = {
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.BFLOAT16,
    onnx.TensorProto.DOUBLE,
}


def shrink(model: onnx.ModelProto, inline_limit: int) -> int:
    """Moves large float initializers to weights.bin; returns its bytes."""
    offset = 0
    for tensor in model.graph.initializer:
        if tensor.data_type not in _FLOAT_TYPES:
            continue
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            continue
        data = onnx.numpy_helper.to_array(tensor).tobytes()
        if len(data) <= inline_limit:
            continue
        tensor.ClearField("raw_data")
        tensor.ClearField("float_data")
        tensor.ClearField("int32_data")
        tensor.ClearField("double_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, value in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(len(data)))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        offset += len(data)
    if offset > WEIGHTS_BYTES:
        raise ValueError(f"needs {offset} bytes of external data, more than the fuzz target's {WEIGHTS_BYTES}")
    return offset


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="output directory (created if missing)")
    parser.add_argument(
        "--inline-limit", type=int, default=1024, help="float initializers above this many bytes move out (default 1024)"
    )
    parser.add_argument("models", nargs="+", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.models:
        model = onnx.load_model(str(path), load_external_data=False)
        try:
            external = shrink(model, args.inline_limit)
        except ValueError as err:
            print(f"fuzz_seeds: {path}: {err}", file=sys.stderr)
            return 1
        data = model.SerializeToString()
        (args.out / path.name).write_bytes(data)
        print(f"{path.name}: {path.stat().st_size} -> {len(data)} bytes ({external} bytes external)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
