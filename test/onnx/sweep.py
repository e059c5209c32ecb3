#!/usr/bin/python3
"""Imports ONNX's backend test models with dsopt and checks the outcome.

Every test directory of the suites (node, pytorch-converted,
pytorch-operator, simple) holds a model.onnx. The sweep loads each model
(without external data), collects its op types with their domains and its
tensor element types, and classifies it:

  outside    it uses an op dsopt does not support (`dsopt --list-ops`);
             the blocking ops are recorded
  candidate  every op is supported; the model is imported with
             `dsopt MODEL --emit=mlir -o OUT`, and the printed IR is read
             back with `dsopt-opt OUT`, which parses and verifies it

A candidate ends up `imported` (exit 0, the IR round-trips, and the result
types of @main are those of the test's reference outputs) or `rejected`
(exit 1 with a `dsopt: error:` message, recorded). Anything else fails the
sweep: a crash, a timeout, another exit status, a rejection without a clear
message or reporting an internal error, IR that does not round-trip, result
types that differ from the reference outputs.

Rejected candidates may be retried as variants, each counted apart and
named `suite/test:VARIANT`:

  frozen   many node tests pass what dsopt needs at compile time (Reshape's
           shape, Slice's starts, reduction axes, Dropout's ratio) as graph
           inputs. The variant turns those inputs into initializers holding
           the values of test_data_set_0, the form exporters produce, so the
           importer's handling of the op is still exercised.
  opset13  (with --convert-old-opsets) a model of an opset below 13,
           converted with onnx.version_converter.

The expected-imports file lists one `suite/test` or `suite/test:VARIANT` per
line; the sweep fails when a listed test no longer imports. Tests that
import but are not listed are reported as a note; --update rewrites the
file.

The last line is the summary, e.g.
  sweep: 1072 tests, 314 imported, 257 rejected, 501 outside; frozen 64/64
  imported; 0 failures (26 s)

Examples:
  test/onnx/sweep.py --dsopt build/bin/dsopt --dsopt-opt build/bin/dsopt-opt
  test/onnx/sweep.py ... --verbose --markdown /tmp/sweep.md
  test/onnx/sweep.py ... --filter 'node/test_slice' --verbose
"""

import argparse
import collections
import concurrent.futures
import dataclasses
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import onnx
import onnx.version_converter

DEFAULT_DATA = "/usr/share/libonnx-testdata/data"
DEFAULT_SUITES = ("node", "pytorch-converted", "pytorch-operator", "simple")
DEFAULT_EXPECTED = Path(__file__).resolve().parent / "expected-imports.txt"
DEFAULT_DOMAINS = ("", "ai.onnx")
EXPECTED_HEADER = (
    "# Backend tests that dsopt must import (suite/test or suite/test:VARIANT,\n"
    "# sorted). Checked and rewritten (--update) by test/onnx/sweep.py.\n")

# Operands of supported ops that dsopt needs at compile time: op type ->
# input indices.
COMPILE_TIME_OPERANDS = {
    "Reshape": {1}, "Expand": {1}, "Split": {1}, "Squeeze": {1},
    "Unsqueeze": {1}, "ReduceSum": {1}, "ReduceMean": {1}, "ReduceMax": {1},
    "Slice": {1, 2, 3, 4}, "Trilu": {1}, "Dropout": {1, 2},
    "ConstantOfShape": {0}, "Range": {0, 1, 2},
    "Pad": {1, 3}, "Tile": {1}, "Resize": {1, 2, 3}, "OneHot": {1},
    "CumSum": {1}, "TopK": {1},
}

# MLIR element types of the ONNX types dsopt computes on.
MLIR_ELEMENT = {"FLOAT": "f32", "FLOAT16": "f16", "BFLOAT16": "bf16",
                "INT64": "i64", "INT32": "i32", "BOOL": "i1"}

Outcome = Tuple[str, str]  # (status, message)


@dataclasses.dataclass
class Result:
    name: str                      # suite/test
    suite: str
    path: Path
    status: str = ""               # imported, rejected, outside, failure
    message: str = ""              # rejection or failure details
    ops: Set[str] = dataclasses.field(default_factory=set)
    dtypes: Set[str] = dataclasses.field(default_factory=set)
    blocking: List[str] = dataclasses.field(default_factory=list)
    opset: Optional[int] = None
    # Graph inputs that feed compile-time operands.
    frozen_inputs: List[str] = dataclasses.field(default_factory=list)
    variants: Dict[str, Outcome] = dataclasses.field(default_factory=dict)


def op_key(domain: str, op_type: str) -> str:
    """`Relu` for ai.onnx, `domain.Op` for the others."""
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}.{op_type}"


def supported_ops(dsopt: str) -> Set[str]:
    """Parses `dsopt --list-ops`: a `domain (...):` header, then `  Op  note`
    lines."""
    out = subprocess.run([dsopt, "--list-ops"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    ops, domain = set(), None
    for line in out.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            domain = line.split()[0]
            continue
        if domain is None:
            raise RuntimeError(f"unexpected --list-ops line: {line!r}")
        ops.add(op_key(domain, line.split()[0]))
    if not ops:
        raise RuntimeError("dsopt --list-ops listed no operators")
    return ops


def dtype_name(elem_type: int) -> str:
    return onnx.TensorProto.DataType.Name(elem_type)


def walk_graph(graph, ops: Set[str], dtypes: Set[str]) -> None:
    """Op types and element types of a graph and of its subgraphs."""
    def add_type(type_proto):
        kind = type_proto.WhichOneof("value")
        if kind == "tensor_type":
            if type_proto.tensor_type.elem_type:
                dtypes.add(dtype_name(type_proto.tensor_type.elem_type))
        elif kind in ("sequence_type", "optional_type"):
            dtypes.add(kind.split("_")[0].upper())
            add_type(getattr(type_proto, kind).elem_type)
        elif kind:
            dtypes.add(kind.split("_")[0].upper())

    for value in list(graph.input) + list(graph.output) + list(graph.value_info):
        add_type(value.type)
    for tensor in graph.initializer:
        dtypes.add(dtype_name(tensor.data_type))
    for node in graph.node:
        ops.add(op_key(node.domain, node.op_type))
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                dtypes.add(dtype_name(attr.t.data_type))
            elif attr.type == onnx.AttributeProto.GRAPH:
                walk_graph(attr.g, ops, dtypes)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    walk_graph(sub, ops, dtypes)
            elif node.op_type == "Cast" and attr.name == "to":
                dtypes.add(dtype_name(attr.i))


def classify(result: Result, supported: Set[str]) -> None:
    try:
        model = onnx.load(str(result.path), load_external_data=False)
    except Exception as error:  # the test data itself is unreadable
        result.status = "outside"
        result.blocking = ["<unreadable model>"]
        result.message = str(error).splitlines()[0]
        return
    for opset in model.opset_import:
        if opset.domain in DEFAULT_DOMAINS:
            result.opset = opset.version
    walk_graph(model.graph, result.ops, result.dtypes)
    result.blocking = sorted(result.ops - supported)
    result.status = "outside" if result.blocking else "candidate"
    graph_inputs = {i.name for i in model.graph.input} - {
        t.name for t in model.graph.initializer}
    frozen = set()
    for node in model.graph.node:
        if node.domain not in DEFAULT_DOMAINS:
            continue
        for index in COMPILE_TIME_OPERANDS.get(node.op_type, ()):
            if index < len(node.input) and node.input[index] in graph_inputs:
                frozen.add(node.input[index])
    result.frozen_inputs = sorted(frozen)


def clear_rejection(stderr: str) -> Optional[str]:
    """The error message if dsopt rejected the model clearly, else None."""
    for line in stderr.splitlines():
        if line.startswith("dsopt: error: "):
            message = line[len("dsopt: error: "):]
            if "internal error" in message or "conversion failed" in message:
                return None
            return message
    return None


def reference_output_types(test_dir: Path) -> Optional[List[str]]:
    """The MLIR types of the outputs the test data expects, in graph order;
    None where the data set is missing or holds something other than
    tensors of types dsopt computes on."""
    data_dir = test_dir / "test_data_set_0"
    types = []
    for index in range(1000):
        pb = data_dir / f"output_{index}.pb"
        if not pb.is_file():
            break
        tensor = onnx.TensorProto()
        try:
            tensor.ParseFromString(pb.read_bytes())
        except Exception:  # a sequence or optional, not a tensor
            return None
        element = MLIR_ELEMENT.get(dtype_name(tensor.data_type))
        if element is None:
            return None
        types.append("tensor<" + "".join(f"{d}x" for d in tensor.dims) +
                     element + ">")
    return types or None


def output_types(mlir: str) -> List[str]:
    """Result types of @main, from `tensor<...> {ds.output = "..."}`."""
    signature = mlir[mlir.index("func.func @main"):].split("\n", 1)[0]
    return re.findall(r"(tensor<[^>]*>) \{ds\.output = ", signature)


def run_dsopt(model: Path, out: str, args,
              reference: Optional[List[str]]) -> Outcome:
    """Imports one model, reads the printed IR back and compares its result
    types with `reference`."""
    try:
        run = subprocess.run([args.dsopt, str(model), "--emit=mlir", "-o", out],
                             capture_output=True, text=True,
                             timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return "failure", f"dsopt timed out after {args.timeout} s"
    if run.returncode == 1:
        message = clear_rejection(run.stderr)
        if message is None:
            return "failure", "dsopt exited 1 without a clear error: " + (
                run.stderr.strip() or "(no output)")
        # Paths vary between machines; keep the message itself.
        return "rejected", message.replace(str(model) + ": ", "", 1)
    if run.returncode != 0:
        return "failure", (f"dsopt exited with status {run.returncode}: " +
                           run.stderr.strip()[-2000:])
    try:
        check = subprocess.run([args.dsopt_opt, out, "-o", os.devnull],
                               capture_output=True, text=True,
                               timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return "failure", f"dsopt-opt timed out after {args.timeout} s"
    if check.returncode != 0:
        return "failure", ("the printed IR does not parse and verify: " +
                           check.stderr.strip()[-2000:])
    with open(out) as f:
        computed = output_types(f.read())
    os.remove(out)
    if reference is not None and computed != reference:
        return "failure", (f"result types {', '.join(computed)} differ from "
                           f"the test data's {', '.join(reference)}")
    return "imported", ""


def freeze_inputs(model_path: Path, names: List[str], out: str,
                  data_dir: Optional[Path] = None) -> bool:
    """Writes a copy of the model whose graph inputs `names` are initializers
    holding the values of the test's first data set (`data_dir`, by default
    beside the model). False if the data set does not provide them."""
    model = onnx.load(str(model_path), load_external_data=False)
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    data_dir = data_dir or model_path.parent / "test_data_set_0"
    values = {}
    for index, value in enumerate(inputs):
        pb = data_dir / f"input_{index}.pb"
        if value.name in names and pb.is_file():
            tensor = onnx.TensorProto()
            tensor.ParseFromString(pb.read_bytes())
            tensor.name = value.name
            values[value.name] = tensor
    if set(values) != set(names):
        return False
    kept = [i for i in model.graph.input if i.name not in values]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(values[n] for n in names)
    onnx.save(model, out)
    return True


def convert_opset(model_path: Path, out: str) -> Optional[str]:
    """Writes the model converted to opset 13; the converter's error if it
    cannot."""
    try:
        model = onnx.load(str(model_path), load_external_data=False)
        onnx.save(onnx.version_converter.convert_version(model, 13), out)
    except Exception as error:  # the converter's own limits
        return str(error).strip().splitlines()[0] if str(error).strip() \
            else type(error).__name__
    return None


def import_model(result: Result, args, workdir: str) -> None:
    stem = os.path.join(workdir, result.name.replace("/", "__"))
    reference = reference_output_types(result.path.parent)
    result.status, result.message = run_dsopt(result.path, stem + ".mlir",
                                              args, reference)
    if result.status != "rejected":
        return
    # Only compile-time operands passed as graph inputs are worth freezing.
    if result.frozen_inputs and "known at compile time" in result.message:
        frozen = stem + ".frozen.onnx"
        if freeze_inputs(result.path, result.frozen_inputs, frozen):
            status, message = run_dsopt(Path(frozen), stem + ".frozen.mlir",
                                        args, reference)
            result.variants["frozen"] = status, message.replace(frozen, "", 1)
    if (args.convert_old_opsets and result.opset is not None and
            result.opset < 13):
        converted = stem + ".opset13.onnx"
        error = convert_opset(result.path, converted)
        if error is not None:
            result.variants["opset13"] = "unconvertible", error
        else:
            status, message = run_dsopt(Path(converted), stem + ".opset13.mlir",
                                        args, reference)
            # Converted, it may still pass compile-time operands as inputs:
            # frozen as the frozen variant freezes them.
            frozen = stem + ".opset13.frozen.onnx"
            if (status == "rejected" and result.frozen_inputs and
                    "known at compile time" in message and freeze_inputs(
                        Path(converted), result.frozen_inputs, frozen,
                        result.path.parent / "test_data_set_0")):
                converted = frozen
                status, message = run_dsopt(Path(frozen), stem + ".opset13.mlir",
                                            args, reference)
            result.variants["opset13"] = status, message.replace(
                converted, "", 1)


def read_expected(path: Path) -> List[str]:
    if not path.exists():
        return []
    names = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line)
    return names


def reason_of(message: str) -> str:
    """Groups rejection messages: the message without the node prefix, with
    names and numbers that vary between tests generalized."""
    text = re.sub(r"^node ('[^']*'|#\d+) \(([\w.]+), opset \d+\): ",
                  r"\2: ", message)
    if re.search(r"unsupported opset version \d+ of domain ai.onnx", text):
        return "opset below 13 (dsopt imports opsets 13 to 21)"
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"\[[\d, ]*\]", "[…]", text)
    text = re.sub(r"\b\d+(\.\d+)?\b", "N", text)
    return text


def write_markdown(path: Path, results: List[Result], counts,
                   variants: Dict[str, collections.Counter]) -> None:
    lines = ["| suite | tests | imported | rejected | outside |",
             "|---|---:|---:|---:|---:|"]
    for suite, c in counts.items():
        lines.append(f"| {suite} | {sum(c.values())} | {c['imported']} | "
                     f"{c['rejected']} | {c['outside']} |")
    total = collections.Counter(r.status for r in results)
    lines.append(f"| all | {len(results)} | {total['imported']} | "
                 f"{total['rejected']} | {total['outside']} |")
    if variants:
        lines += ["", "| variant | tried | imported | rejected | other |",
                  "|---|---:|---:|---:|---:|"]
        for name, c in sorted(variants.items()):
            other = sum(c.values()) - c["imported"] - c["rejected"]
            lines.append(f"| {name} | {sum(c.values())} | {c['imported']} | "
                         f"{c['rejected']} | {other} |")
    lines += ["", "### Rejected candidates by reason", "",
              "| reason | tests | variants imported | names |",
              "|---|---:|---:|---|"]
    by_reason = collections.defaultdict(list)
    for r in results:
        if r.status == "rejected":
            by_reason[reason_of(r.message)].append(r)
    for reason, group in sorted(by_reason.items(),
                                key=lambda kv: (-len(kv[1]), kv[0])):
        rescued = sum(1 for r in group for s, _ in r.variants.values()
                      if s == "imported")
        names = ", ".join(r.name for r in group)
        lines.append(f"| {reason} | {len(group)} | {rescued} | {names} |")
    variant_rejections = [(f"{r.name}:{v}", m) for r in results
                          for v, (s, m) in sorted(r.variants.items())
                          if s != "imported"]
    if variant_rejections:
        lines += ["", "### Variants that do not import", "",
                  "| variant | reason |", "|---|---|"]
        for name, message in variant_rejections:
            lines.append(f"| `{name}` | {message} |")
    lines += ["", "### Element types", "",
              "| type | tests | imported | rejected | outside |",
              "|---|---:|---:|---:|---:|"]
    by_type: Dict[str, collections.Counter] = collections.defaultdict(
        collections.Counter)
    for r in results:
        for dtype in r.dtypes:
            by_type[dtype][r.status] += 1
    for dtype, c in sorted(by_type.items(), key=lambda kv: -sum(kv[1].values())):
        lines.append(f"| {dtype} | {sum(c.values())} | {c['imported']} | "
                     f"{c['rejected']} | {c['outside']} |")
    lines += ["", "### Ops outside dsopt's set", "",
              "| op | tests it blocks | tests it alone blocks |",
              "|---|---:|---:|"]
    blocks, alone = collections.Counter(), collections.Counter()
    for r in results:
        if r.status == "outside":
            blocks.update(r.blocking)
            if len(r.blocking) == 1:
                alone[r.blocking[0]] += 1
    for op, n in sorted(blocks.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"| {op} | {n} | {alone[op]} |")
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="\n".join(__doc__.splitlines()[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsopt", default="dsopt")
    parser.add_argument("--dsopt-opt", default="dsopt-opt")
    parser.add_argument("--data", default=DEFAULT_DATA,
                        help="ONNX backend test data (default: %(default)s)")
    parser.add_argument("--suites", default=",".join(DEFAULT_SUITES),
                        help="comma-separated suites (default: %(default)s)")
    parser.add_argument("--filter", default="",
                        help="only tests whose suite/test matches this regex "
                        "(the expected list is then checked for those only)")
    parser.add_argument("--expected", type=Path, default=DEFAULT_EXPECTED,
                        help="the expected-imports file (default: %(default)s)")
    parser.add_argument("--update", action="store_true",
                        help="rewrite the expected-imports file with the tests "
                        "that import now")
    parser.add_argument("--convert-old-opsets", action="store_true",
                        help="retry rejected models of opsets below 13 "
                        "converted to opset 13 (the opset13 variant)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=30,
                        help="seconds per dsopt or dsopt-opt run")
    parser.add_argument("--markdown", type=Path,
                        help="write the count, rejection and outside-op "
                        "tables to this file")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="print every test's outcome")
    args = parser.parse_args()

    start = time.monotonic()
    supported = supported_ops(args.dsopt)
    data = Path(args.data)
    suites = [s for s in args.suites.split(",") if s]
    pattern = re.compile(args.filter) if args.filter else None
    results: List[Result] = []
    for suite in suites:
        suite_dir = data / suite
        if not suite_dir.is_dir():
            print(f"sweep: error: no test suite at {suite_dir}", file=sys.stderr)
            return 2
        for test in sorted(os.listdir(suite_dir)):
            model = suite_dir / test / "model.onnx"
            name = f"{suite}/{test}"
            if not model.is_file() or (pattern and not pattern.search(name)):
                continue
            result = Result(name=name, suite=suite, path=model)
            classify(result, supported)
            results.append(result)

    candidates = [r for r in results if r.status == "candidate"]
    with tempfile.TemporaryDirectory(prefix="dsopt-sweep-") as workdir, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for future in [pool.submit(import_model, r, args, workdir)
                       for r in candidates]:
            future.result()

    # Outcomes by name, variants included.
    outcome: Dict[str, Outcome] = {}
    for r in results:
        outcome[r.name] = r.status, r.message or " ".join(r.blocking)
        for variant, result in r.variants.items():
            outcome[f"{r.name}:{variant}"] = result
    failures = sorted(n for n, (s, _) in outcome.items() if s == "failure")
    imported = sorted(n for n, (s, _) in outcome.items() if s == "imported")

    # A listed test is checked when this run could have imported it: its
    # base name passes --filter, and its variant is one this run tries.
    tried_variants = {"frozen"} | ({"opset13"} if args.convert_old_opsets
                                   else set())

    def in_scope(name: str) -> bool:
        base, _, variant = name.partition(":")
        return ((not pattern or bool(pattern.search(base))) and
                (not variant or variant in tried_variants))

    expected = read_expected(args.expected)
    checked = [n for n in expected if in_scope(n)]
    lost = [n for n in checked if n not in imported]
    new = [n for n in imported if n not in set(expected)]

    if args.verbose:
        dtypes = {r.name: " ".join(sorted(r.dtypes)) for r in results}
        for name, (status, detail) in sorted(outcome.items()):
            types = dtypes.get(name, "")
            print(f"{status:9} {name}  [{types}]  {detail}".rstrip())

    counts: Dict[str, collections.Counter] = {}
    for suite in suites:
        counts[suite] = collections.Counter(
            r.status for r in results if r.suite == suite)
        c = counts[suite]
        print(f"{suite}: {sum(c.values())} tests, {c['imported']} imported, "
              f"{c['rejected']} rejected, {c['outside']} outside")
    variants: Dict[str, collections.Counter] = collections.defaultdict(
        collections.Counter)
    for r in results:
        for variant, (status, _) in r.variants.items():
            variants[variant][status] += 1
    for name in failures:
        print(f"FAILURE {name}: {outcome[name][1]}")
    for name in lost:
        status, detail = outcome.get(name, ("not in the test data", ""))
        print(f"FAILURE {name} is listed in {args.expected.name} but "
              f"{status or 'was not tried'}" + (f": {detail}" if detail else ""))
    if new and not args.update:
        print(f"note: {len(new)} tests import but are not in "
              f"{args.expected.name} (add them with --update):")
        for name in new:
            print(f"  {name}")

    if args.update:
        keep = [n for n in expected if not in_scope(n)]
        names = sorted(set(keep) | set(imported))
        args.expected.write_text(EXPECTED_HEADER + "".join(
            n + "\n" for n in names))
        print(f"wrote {len(names)} tests to {args.expected}")
    if args.markdown:
        write_markdown(args.markdown, results, counts, variants)

    total = collections.Counter(r.status for r in results)
    variant_text = "".join(
        f"; {v} {c['imported']}/{sum(c.values())} imported"
        for v, c in sorted(variants.items()))
    num_failures = len(failures) + (0 if args.update else len(lost))
    print(f"sweep: {len(results)} tests, {total['imported']} imported, "
          f"{total['rejected']} rejected, {total['outside']} outside"
          f"{variant_text}; {num_failures} failures "
          f"({time.monotonic() - start:.0f} s)")
    return 1 if num_failures else 0


if __name__ == "__main__":
    sys.exit(main())
