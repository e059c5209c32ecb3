#!/usr/bin/python3
"""Which ONNX initializer holds which PyTorch parameter.

torch.onnx.export keeps a parameter's state_dict name only where the
parameter is used as is. With constant folding, a Linear weight feeding
x @ W^T is pre-transposed into a new initializer (`onnx::MatMul_123`), and a
Gather of every row of a position table becomes a copy named after its
consumer (`onnx::Add_232`). map_initializers() finds each parameter's
initializer:

  1. by exact name (the value must then be equal too);
  2. otherwise by value: the one initializer, not claimed by name, that
     equals the parameter, or (2-D) its transpose.

A parameter that matches nothing, several initializers, or an initializer
another parameter also matches is an error: training would then not be the
same computation in both worlds (a duplicated parameter trains as two). Float
initializers that hold no parameter (BatchNorm running statistics, folded
masks and tables) are what dsopt must be told to freeze.

Run as a script, it prints the mapping of every export of a zoo.
"""
import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
               onnx.TensorProto.BFLOAT16}


class MappingError(RuntimeError):
    pass


@dataclass(frozen=True)
class Mapped:
    parameter: str
    initializer: str
    how: str  # "name", "value" or "transpose"

    @property
    def transposed(self) -> bool:
        return self.how == "transpose"


@dataclass
class InitializerMap:
    mapped: List[Mapped]  # in the module's parameter order
    frozen: List[str]  # float initializers that hold no parameter, in file order
    counts: Dict[str, int] = field(default_factory=dict)

    def by_parameter(self) -> Dict[str, Mapped]:
        return {m.parameter: m for m in self.mapped}

    def to_torch(self, initializer_value: np.ndarray, m: Mapped) -> np.ndarray:
        """An initializer's value laid out as its parameter."""
        return initializer_value.T if m.transposed else initializer_value


def initializer_arrays(model: onnx.ModelProto) -> Dict[str, np.ndarray]:
    return {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}


def map_initializers(model: onnx.ModelProto, module) -> InitializerMap:
    """Map every parameter of `module` (torch.nn.Module) to an initializer of `model`.

    `model` must carry its initializer data (onnx.load with external data,
    the default). Tied parameters are one parameter (named_parameters()
    lists each once) and must be one initializer.
    """
    inits = initializer_arrays(model)
    params = {n: p.detach().numpy() for n, p in module.named_parameters()}
    claimed: Dict[str, str] = {}  # initializer -> parameter
    mapped: List[Mapped] = []

    for name, value in params.items():
        if name in inits:
            got = inits[name]
            if got.shape != value.shape or not np.array_equal(got, value):
                raise MappingError(f"initializer {name} has the parameter's name but not its value "
                                   f"(shape {list(got.shape)}, parameter {list(value.shape)})")
            claimed[name] = name
    for name, value in params.items():
        candidates = []
        for init_name, init in inits.items():
            if claimed.get(init_name, name) != name or init.dtype != value.dtype:
                continue
            if init.shape == value.shape and np.array_equal(init, value):
                candidates.append(Mapped(name, init_name, "name" if init_name == name else "value"))
            elif value.ndim == 2 and init.shape == value.T.shape and np.array_equal(init, value.T):
                candidates.append(Mapped(name, init_name, "transpose"))
        if not candidates:
            raise MappingError(f"parameter {name} {list(value.shape)} is no initializer: none has its name, "
                               f"its value or its transposed value")
        if len(candidates) > 1:
            listed = ", ".join(f"{c.initializer} ({c.how})" for c in candidates)
            raise MappingError(f"parameter {name} matches several initializers: {listed}")
        m = candidates[0]
        if m.initializer in claimed and claimed[m.initializer] != name:
            raise MappingError(f"initializer {m.initializer} matches parameters {claimed[m.initializer]} and {name}")
        claimed[m.initializer] = name
        mapped.append(m)

    frozen = [i.name for i in model.graph.initializer if i.data_type in FLOAT_TYPES and i.name not in claimed]
    counts = {how: sum(m.how == how for m in mapped) for how in ("name", "value", "transpose")}
    return InitializerMap(mapped, frozen, counts)


def _error_cases() -> int:
    """Models whose parameters cannot be mapped are refused, with the reason."""
    import torch

    torch.manual_seed(0)
    two = torch.nn.Sequential(torch.nn.Linear(3, 4, bias=False), torch.nn.Linear(3, 4, bias=False))
    w0, w1 = (p.detach().numpy() for p in two.parameters())

    def graph(**arrays):  # "__" in a keyword stands for "::"
        inits = [onnx.numpy_helper.from_array(np.ascontiguousarray(v), k.replace("__", "::"))
                 for k, v in arrays.items()]
        return onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [], initializer=inits))

    cases = [
        ("a parameter with no initializer", graph(**{"0.weight": w0}), two),
        ("a parameter folded twice", graph(**{"0.weight": w0, "onnx__MatMul_1": w0.T, "1.weight": w1}), two),
        ("a name holding another value", graph(**{"0.weight": w1, "1.weight": w1}), two),
    ]
    with torch.no_grad():
        same = torch.nn.Sequential(torch.nn.Linear(3, 4, bias=False), torch.nn.Linear(3, 4, bias=False))
        same[1].weight.copy_(same[0].weight)
    w = same[0].weight.detach().numpy()
    cases.append(("two equal parameters, folded", graph(onnx__MatMul_1=w.T, onnx__MatMul_2=w.T), same))
    failures = 0
    for what, model, module in cases:
        try:
            map_initializers(model, module)
            print(f"error case {what}: WRONG, accepted")
            failures += 1
        except MappingError as e:
            print(f"error case {what}: {e}")
    return failures


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from models import ZOO

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", required=True, type=Path, help="directory of an export_zoo.py export")
    parser.add_argument("--verbose", action="store_true", help="also print every parameter's initializer")
    args = parser.parse_args()
    failures = _error_cases()
    with open(args.zoo / "zoo.json") as f:
        zoo = json.load(f)
    for entry in zoo:
        module = ZOO[entry["name"]].build()
        n_params = sum(1 for _ in module.parameters())
        for key in ("file", "nofold_file"):
            if not entry.get(key):
                continue
            try:
                result = map_initializers(onnx.load(str(args.zoo / entry[key])), module)
            except MappingError as e:
                print(f"{entry[key]}: ERROR {e}")
                failures += 1
                continue
            c = result.counts
            print(f"{entry[key]}: {len(result.mapped)} of {n_params} parameters mapped "
                  f"({c['name']} by name, {c['value']} by value, {c['transpose']} transposed); "
                  f"frozen [{','.join(result.frozen)}]")
            if args.verbose:
                for m in result.mapped:
                    if m.how != "name":
                        print(f"  {m.parameter} -> {m.initializer} ({m.how})")
    print(f"initializer map: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
