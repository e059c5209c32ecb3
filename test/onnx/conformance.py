#!/usr/bin/python3
"""Compiles ONNX's backend tests with dsopt, runs them and checks the numbers.

Every backend test the import sweep lists as importing (expected-imports.txt,
including its `frozen` and `opset13` variants, prepared the same way as the
sweep prepares them) is compiled to C++ with `dsopt --emit=cpp --no-main
--symbol-prefix tN_`. The programs are compiled in a few translation units and
linked into ONE executable with a dispatcher, so the whole sweep costs a
handful of compiler runs rather than one per test. Each test data set is then
run through it, and every output is compared with the reference using ONNX's
backend-test tolerances: |got - expected| <= atol + rtol * |expected|, with
rtol 1e-3 and atol 1e-7.

A test passes when all its data sets match. A data set dsopt cannot express
(an input dsopt had to freeze has another value there, an element type it
does not compute on) makes the test `unsupported`, with the reason. The
sweep fails if a test listed in expected-passes.txt does not pass; tests that
pass but are not listed are reported (`--update` rewrites the list). With
--markdown it writes the per-test report.
"""
import argparse
import concurrent.futures
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import onnx
from onnx import numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sweep  # noqa: E402  (the sweep's model preparation)

DEFAULT_PASSES = HERE / "expected-passes.txt"
RTOL, ATOL = 1e-3, 1e-7
# Backend tests whose reference outputs contradict their own model; checked
# against the generator in onnx/backend/test/case/node/.
REFERENCE_BUGS = {
    "node/test_adam_multiple":
        "ONNX 1.12's generator computes the reference with epsilon = 1e-2 but "
        "does not pass epsilon to the node (adam.py, export_adam_multiple); "
        "dsopt follows the model's default 1e-6 and matches ONNX's own "
        "`apply_adam` with the node's attributes exactly "
        "(test/OnnxConformance/adam-multiple.test)",
    "node/test_cast_FLOAT_to_BFLOAT16":
        "ONNX 1.12's reference truncates f32 to bf16 (keeps the upper 16 bits, "
        "cast.py); IEEE, PyTorch and dsopt round to nearest even",
    "node/test_castlike_FLOAT_to_BFLOAT16_expanded":
        "the data set's 'like' input has shape [1] but the model declares [3, 4]",
    "node/test_castlike_BFLOAT16_to_FLOAT_expanded":
        "the data set's 'like' input has shape [1] but the model declares [3, 4]",
}
PROGRAMS_PER_UNIT = 40
NUMPY_OF = {"f32": np.float32, "f16": np.float16, "i64": np.int64,
            "i32": np.int32, "bool": np.bool_}


@dataclasses.dataclass
class Test:
    entry: str            # suite/test or suite/test:VARIANT
    index: int
    path: Path            # the test's directory
    model: Path = None    # the model dsopt compiles
    frozen: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    status: str = ""      # pass, fail, unsupported
    message: str = ""

    @property
    def symbol(self) -> str:
        return f"t{self.index}_"


def load_tensor(path: Path) -> np.ndarray:
    tensor = onnx.TensorProto()
    tensor.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(tensor)


def prepare(test: Test, work: Path) -> None:
    """The model to compile: the test's own, frozen or converted."""
    name, _, variant = test.entry.partition(":")
    model_path = test.path / "model.onnx"
    stem = work / f"t{test.index}"
    if variant == "frozen":
        test.model = freeze(test, model_path, str(stem) + ".onnx")
    elif variant == "opset13":
        out = str(stem) + ".opset13.onnx"
        error = sweep.convert_opset(model_path, out)
        if error:
            raise RuntimeError(error)
        test.model = Path(out)
        # Compile-time operands still passed as inputs are frozen, as the
        # sweep's opset13 variant freezes them.
        if frozen_input_names(onnx.load(out, load_external_data=False)):
            test.model = freeze(test, Path(out), str(stem) + ".onnx")
    else:
        test.model = model_path


def freeze(test: Test, model_path: Path, out: str) -> Path:
    """The model with its compile-time inputs frozen to the values of the
    test's first data set, which test.frozen records."""
    model = onnx.load(str(model_path), load_external_data=False)
    names = frozen_input_names(model)
    data = test.path / "test_data_set_0"
    if not sweep.freeze_inputs(model_path, names, out, data):
        raise RuntimeError("cannot freeze the compile-time inputs")
    for index, value in enumerate(graph_inputs(model)):
        if value.name in names:
            test.frozen[value.name] = load_tensor(data / f"input_{index}.pb")
    return Path(out)


def graph_inputs(model) -> list:
    initializers = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def frozen_input_names(model) -> List[str]:
    """Graph inputs feeding operands dsopt needs at compile time."""
    inputs = {i.name for i in graph_inputs(model)}
    names = []
    for node in model.graph.node:
        for index in sweep.COMPILE_TIME_OPERANDS.get(node.op_type, ()):
            if index < len(node.input) and node.input[index] in inputs:
                if node.input[index] not in names:
                    names.append(node.input[index])
    return names


def emit_cpp(test: Test, dsopt: str, src: Path) -> Optional[str]:
    out = src / f"t{test.index}.cpp"
    result = subprocess.run(
        [dsopt, str(test.model), "--emit=cpp", "--no-main",
         "--symbol-prefix", test.symbol, "-o", str(out)],
        capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        return result.stderr.strip() or f"dsopt exited {result.returncode}"
    return None


def build_flags(dsopt: str):
    out = subprocess.run([dsopt, "--print-build-flags"], capture_output=True,
                         text=True, check=True).stdout
    flags = dict(line.split(": ", 1) for line in out.strip().splitlines())
    return flags["cxxflags"].split(), flags["libs"].split()


def build_bundle(tests: List[Test], dsopt: str, work: Path, jobs: int) -> Path:
    """One executable running any of the tests by name."""
    cxxflags, libs = build_flags(dsopt)
    cxx = os.environ.get("CXX", "c++")
    src = work / "src"
    units = []
    for start in range(0, len(tests), PROGRAMS_PER_UNIT):
        unit = src / f"unit{len(units)}.cpp"
        with open(unit, "w") as out:
            for test in tests[start:start + PROGRAMS_PER_UNIT]:
                out.write((src / f"t{test.index}.cpp").read_text())
                out.write("\n")
        units.append(unit)
    main = src / "main.cpp"
    with open(main, "w") as out:
        out.write('#include "dsrt/program.h"\n#include <cstdio>\n#include <cstring>\n\n')
        for test in tests:
            out.write(f"void {test.symbol}describe(dsrt::ProgramInfo&);\n"
                      f"void {test.symbol}run(dsrt::Program&);\n")
        out.write("\nstruct Entry { const char *name; dsrt::DescribeFn describe; "
                  "dsrt::RunFn run; };\nstatic const Entry entries[] = {\n")
        for test in tests:
            out.write(f'  {{"{test.symbol}", {test.symbol}describe, {test.symbol}run}},\n')
        out.write("};\n\nint main(int argc, char **argv) {\n"
                  "  if (argc < 2) { std::fprintf(stderr, \"usage: bundle PROGRAM ...\\n\"); return 2; }\n"
                  "  for (const Entry &e : entries)\n"
                  "    if (std::strcmp(e.name, argv[1]) == 0)\n"
                  "      return dsrt::forward_main(argc - 1, argv + 1, e.describe, e.run);\n"
                  "  std::fprintf(stderr, \"no program %s\\n\", argv[1]);\n  return 2;\n}\n")
    objects = []

    def compile_unit(unit: Path) -> Path:
        obj = unit.with_suffix(".o")
        # -O0: the level changes no number (no FP contraction, no fast math:
        # docs/cli.md), and these compiles are most of the sweep's time.
        result = subprocess.run([cxx, *cxxflags, "-O0", "-c", str(unit), "-o", str(obj)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"compiling {unit} failed:\n{result.stderr[:4000]}")
        return obj

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        objects = list(pool.map(compile_unit, units + [main]))
    exe = work / "bundle"
    result = subprocess.run([cxx, *[str(o) for o in objects], "-o", str(exe), *libs],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"linking failed:\n{result.stderr[:4000]}")
    return exe


def describe_io(model_path: Path):
    model = onnx.load(str(model_path), load_external_data=False)
    return [i.name for i in graph_inputs(model)], [o.name for o in model.graph.output]


def training_dropout(model) -> Optional[float]:
    """The ratio of a model's training-mode Dropout, None if it has none.
    NumPy draws its reference masks; dsopt draws its own (Philox), so such
    tests are checked for what dropout must do, not for NumPy's numbers."""
    for node in model.graph.node:
        if node.op_type == "Dropout" and len(node.input) >= 3 and node.input[2]:
            ratio = 0.5
            for init in model.graph.initializer:
                if len(node.input) > 1 and init.name == node.input[1]:
                    ratio = float(numpy_helper.to_array(init))
            return ratio
    return None


def check_dropout(x: np.ndarray, y: np.ndarray, mask: Optional[np.ndarray],
                  ratio: float) -> Optional[str]:
    """Every kept element is x / (1 - ratio), every dropped one 0; the mask
    says which; the dropped fraction is within 5 sigma of the ratio."""
    keep = (y != 0) if mask is None else mask.astype(bool)
    scale = 1.0 / (1.0 - ratio) if ratio < 1 else 0.0
    if not np.allclose(y[keep], x[keep] * scale, rtol=RTOL, atol=ATOL):
        return "kept elements are not x / (1 - ratio)"
    if np.any(y[~keep] != 0):
        return "dropped elements are not zero"
    n = x.size
    sigma = np.sqrt(n * ratio * (1 - ratio)) if 0 < ratio < 1 else 0
    dropped = int((~keep).sum())
    if abs(dropped - n * ratio) > 5 * sigma + 1:
        return f"{dropped} of {n} elements dropped with ratio {ratio}"
    return None


def run_test(test: Test, exe: Path, work: Path) -> None:
    original = onnx.load(str(test.path / "model.onnx"), load_external_data=False)
    original_inputs = [i.name for i in graph_inputs(original)]
    inputs, outputs = describe_io(test.model)
    data_sets = sorted(test.path.glob("test_data_set_*"))
    if not data_sets:
        test.status, test.message = "unsupported", "no test data"
        return
    for data in data_sets:
        in_dir = work / f"t{test.index}" / data.name / "in"
        out_dir = work / f"t{test.index}" / data.name / "out"
        in_dir.mkdir(parents=True, exist_ok=True)
        out_dir.mkdir(parents=True, exist_ok=True)
        for index, name in enumerate(original_inputs):
            pb = data / f"input_{index}.pb"
            if not pb.is_file():
                continue
            value = load_tensor(pb)
            if name in test.frozen:
                if value.shape != test.frozen[name].shape or \
                        not np.array_equal(value, test.frozen[name]):
                    test.status = "unsupported"
                    test.message = (f"{data.name}: input '{name}' differs from the "
                                    "value compiled in (a compile-time operand)")
                    return
                continue
            if name not in inputs:
                continue
            np.save(in_dir / f"{name.replace('/', '_')}.npy", value)
        result = subprocess.run([str(exe), test.symbol, "--inputs", str(in_dir),
                                 "--outputs", str(out_dir), "--quiet", "--threads", "1"],
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            test.status, test.message = "fail", f"{data.name}: {result.stderr.strip()}"
            return
        model = onnx.load(str(test.model), load_external_data=False)
        ratio = training_dropout(model)
        if ratio is not None:
            x = load_tensor(data / "input_0.pb")
            y = np.load(out_dir / f"{outputs[0].replace('/', '_')}.npy")
            mask = None
            if len(outputs) > 1:
                mask = np.load(out_dir / f"{outputs[1].replace('/', '_')}.npy")
            problem = check_dropout(x, y, mask, ratio)
            if problem:
                test.status, test.message = "fail", f"{data.name}: dropout: {problem}"
                return
            continue
        for index, name in enumerate(outputs):
            pb = data / f"output_{index}.pb"
            if not pb.is_file():
                continue
            expected = load_tensor(pb)
            got_path = out_dir / f"{name.replace('/', '_')}.npy"
            got = np.load(got_path)
            if got.shape != expected.shape:
                test.status = "fail"
                test.message = (f"{data.name}: output '{name}' has shape {got.shape}, "
                                f"expected {expected.shape}")
                return
            if expected.dtype == np.bool_ or np.issubdtype(expected.dtype, np.integer):
                ok = np.array_equal(got.astype(expected.dtype), expected)
            else:
                g = got.astype(np.float64)
                e = expected.astype(np.float64)
                # NaN and infinities must match as such.
                same_special = np.array_equal(np.isnan(g), np.isnan(e)) and \
                    np.array_equal(g[np.isinf(e)], e[np.isinf(e)])
                finite = np.isfinite(e)
                ok = same_special and np.all(
                    np.abs(g[finite] - e[finite]) <= ATOL + RTOL * np.abs(e[finite]))
            if not ok:
                diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
                test.status = "fail"
                test.message = (f"{data.name}: output '{name}' differs "
                                f"(max |diff| {np.nanmax(diff) if diff.size else 0:.3g})")
                return
    test.status = "pass"


def judge_reference_bugs(test: Test) -> None:
    """A mismatch on a test whose reference is known to be wrong is reported
    as such, not as dsopt's failure; a pass there would mean dsopt copies the
    bug."""
    reason = REFERENCE_BUGS.get(test.entry)
    if reason and test.status == "fail":
        test.status, test.message = "reference-bug", reason


def read_list(path: Path) -> List[str]:
    if not path.exists():
        return []
    return [line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsopt", default="dsopt")
    parser.add_argument("--data", default=sweep.DEFAULT_DATA)
    parser.add_argument("--imports", default=str(sweep.DEFAULT_EXPECTED),
                        help="the sweep's list of importing tests")
    parser.add_argument("--expected", default=str(DEFAULT_PASSES))
    parser.add_argument("--update", action="store_true")
    parser.add_argument("--filter", default="", help="substring of the test names")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--work", help="keep the work directory here")
    parser.add_argument("--markdown", help="write the per-test report here")
    args = parser.parse_args()

    started = time.time()
    entries = [e for e in read_list(Path(args.imports)) if args.filter in e]
    tests = [Test(entry, i, Path(args.data) / entry.partition(":")[0])
             for i, entry in enumerate(entries)]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="dsopt-conf-"))
    if work.exists() and args.work:
        shutil.rmtree(work)
    (work / "src").mkdir(parents=True, exist_ok=True)
    try:
        compiled = []

        def prepare_and_emit(test: Test) -> Test:
            try:
                prepare(test, work)
            except Exception as error:  # the test cannot be prepared
                test.status, test.message = "unsupported", f"cannot prepare: {error}"
                return test
            error = emit_cpp(test, args.dsopt, work / "src")
            if error:
                test.status, test.message = "fail", f"dsopt --emit=cpp failed: {error}"
            return test

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for test in pool.map(prepare_and_emit, tests):
                if not test.status:
                    compiled.append(test)
        exe = build_bundle(compiled, args.dsopt, work, args.jobs)
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda t: run_test(t, exe, work), compiled))
        for test in compiled:
            judge_reference_bugs(test)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)

    counts = {s: sum(t.status == s for t in tests)
              for s in ("pass", "fail", "unsupported", "reference-bug")}
    for test in tests:
        if test.status != "pass":
            print(f"{test.status}: {test.entry}: {test.message}")
    passing = sorted(t.entry for t in tests if t.status == "pass")
    expected = read_list(Path(args.expected))
    if args.filter:
        expected = [e for e in expected if args.filter in e]
    regressions = sorted(set(expected) - set(passing))
    new = sorted(set(passing) - set(expected))
    for entry in regressions:
        print(f"REGRESSION: {entry} no longer passes")
    if new and not args.update:
        print(f"note: {len(new)} passing tests are not in {args.expected}; "
              "rerun with --update to add them")
    if args.update:
        Path(args.expected).write_text(
            "# Backend tests whose numbers dsopt must reproduce (ONNX tolerances).\n"
            "# Checked and rewritten (--update) by test/onnx/conformance.py.\n" +
            "".join(e + "\n" for e in passing))
    if args.markdown:
        write_markdown(Path(args.markdown), tests + other_tests(args, entries))
    print(f"conformance: {len(tests)} tests, {counts['pass']} pass, {counts['fail']} fail, "
          f"{counts['unsupported']} unsupported, {counts['reference-bug']} with a wrong "
          f"reference; {len(regressions)} regressions "
          f"({time.time() - started:.0f} s)")
    return 1 if regressions else 0


def other_tests(args, imported: List[str]) -> List[Test]:
    """Backend tests that do not import, as `unsupported`, with the reason the
    import sweep gives (docs/onnx-node-sweep.md has the full messages)."""
    supported = sweep.supported_ops(args.dsopt)
    names = {e.partition(":")[0] for e in imported}
    others = []
    for suite in sweep.DEFAULT_SUITES:
        for directory in sorted((Path(args.data) / suite).iterdir()):
            name = f"{suite}/{directory.name}"
            if name in names or not (directory / "model.onnx").is_file():
                continue
            result = sweep.Result(name=name, suite=suite, path=directory / "model.onnx")
            try:
                model = onnx.load(str(result.path), load_external_data=False)
                sweep.walk_graph(model.graph, result.ops, result.dtypes)
            except Exception as error:
                others.append(Test(name, -1, directory, status="unsupported",
                                   message=f"unreadable model: {error}"))
                continue
            outside = sorted(op for op in result.ops if op not in supported)
            reason = (f"ops outside dsopt's set: {', '.join(outside)}" if outside
                      else "rejected at import (element type, opset or shapes; "
                           "see docs/onnx-node-sweep.md)")
            others.append(Test(name, -1, directory, status="unsupported", message=reason))
    return others


def write_markdown(path: Path, tests: List[Test]) -> None:
    counts = {}
    for test in tests:
        counts[test.status] = counts.get(test.status, 0) + 1
    with open(path, "w") as out:
        out.write("| status | tests |\n|---|---:|\n")
        for status in ("pass", "fail", "reference-bug", "unsupported"):
            out.write(f"| {status} | {counts.get(status, 0)} |\n")
        out.write("\n| test | status | note |\n|---|---|---|\n")
        for test in sorted(tests, key=lambda t: t.entry):
            note = test.message.replace("|", "\\|").replace("\n", " ")[:200]
            out.write(f"| {test.entry} | {test.status} | {note} |\n")


if __name__ == "__main__":
    sys.exit(main())
