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

  3. otherwise, as a table folded into a gather of itself: Swin's relative
     position bias table P, indexed by a constant index buffer, is folded by
     the exporter into one initializer D = P[index] (reshaped, permuted)
     that holds only P's values, more of them than P has. The graph then no
     longer has P: its copies in D would train as independent numbers, which
     is not PyTorch's computation. Such a pair is `derived`: D is frozen in
     dsopt and P in PyTorch (a warning says so; export with
     do_constant_folding=False to train the table, as PyTorch's own warning
     about folding training exports advises).

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
    # Parameters folded into a gather of themselves (3. above): the
    # parameter, frozen in PyTorch, and the derived initializer, in frozen.
    derived: List[Mapped] = field(default_factory=list)

    @property
    def frozen_parameters(self) -> List[str]:
        return [m.parameter for m in self.derived]

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
    derived: List[Mapped] = []

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
            gathered = _gathered_from(value, inits, claimed)
            if gathered is not None:
                claimed[gathered] = name
                derived.append(Mapped(name, gathered, "gather"))
                continue
            raise MappingError(f"parameter {name} {list(value.shape)} is no initializer: none has its name, "
                               f"its value or its transposed value, nor is gathered from it")
        if len(candidates) > 1:
            listed = ", ".join(f"{c.initializer} ({c.how})" for c in candidates)
            raise MappingError(f"parameter {name} matches several initializers: {listed}")
        m = candidates[0]
        if m.initializer in claimed and claimed[m.initializer] != name:
            raise MappingError(f"initializer {m.initializer} matches parameters {claimed[m.initializer]} and {name}")
        claimed[m.initializer] = name
        mapped.append(m)

    derived_names = {m.initializer for m in derived}
    frozen = [i.name for i in model.graph.initializer
              if i.data_type in FLOAT_TYPES and (i.name not in claimed or i.name in derived_names)]
    counts = {how: sum(m.how == how for m in mapped) for how in ("name", "value", "transpose")}
    counts["gather"] = len(derived)
    return InitializerMap(mapped, frozen, counts, derived)


def _gathered_from(value: np.ndarray, inits: Dict[str, np.ndarray], claimed: Dict[str, str]):
    """The one unclaimed initializer that holds only `value`'s elements, more
    of them than `value` has, and every one of them (a table gathered by an
    index that reaches every row), or None. Random weights make a chance
    match of every element impossible in practice."""
    elements = set(value.reshape(-1).tolist())
    if value.size < 2 or len(elements) != value.size:
        return None
    found = [n for n, init in inits.items()
             if n not in claimed and init.dtype == value.dtype and init.size > value.size
             and set(init.reshape(-1).tolist()) == elements]
    return found[0] if len(found) == 1 else None


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
    # A table folded into a gather of itself (Swin's relative position bias)
    # is found, and both sides are frozen; a gather that misses an entry is
    # not the table.
    table = torch.nn.ParameterDict({"t": torch.nn.Parameter(torch.randn(3, 2))})
    t = table["t"].detach().numpy()
    folded = map_initializers(graph(onnx__Add_1=t[[2, 0, 1, 0, 2, 1]].T.copy()), table)
    print(f"gather case: {[(m.parameter, m.initializer, m.how) for m in folded.derived]}, frozen {folded.frozen}")
    failures += [m.initializer for m in folded.derived] != ["onnx::Add_1"]
    cases.append(("a gather that misses a table entry", graph(onnx__Add_1=t[[2, 0, 0]]), table))
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
            gathered = f", {c['gather']} folded into a gather (frozen)" if c["gather"] else ""
            print(f"{entry[key]}: {len(result.mapped)} of {n_params} parameters mapped "
                  f"({c['name']} by name, {c['value']} by value, {c['transpose']} transposed{gathered}); "
                  f"frozen [{','.join(result.frozen)}]")
            if args.verbose:
                for m in result.mapped + result.derived:
                    if m.how != "name":
                        print(f"  {m.parameter} -> {m.initializer} ({m.how})")
    print(f"initializer map: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
