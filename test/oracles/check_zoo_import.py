#!/usr/bin/python3
"""Imports every model of an exported zoo and checks the IR against the model.

For each file listed in zoo.json (constant-folded, unfolded, and the
dynamic-batch export with --batch), it checks that:
  * dsopt imports it, and the printed IR parses back with dsopt-opt and
    prints identically (round trip);
  * the graph inputs and outputs have the names, element types and shapes
    PyTorch exported;
  * the parameters hold exactly the initializer elements of the file (each
    initializer once), and a tied weight is one parameter used by two or more
    ops.
Prints one line per file and a final count; exits non-zero on any mismatch.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

DTYPES = {"float32": "f32", "float16": "f16", "int64": "i64", "int32": "i32",
          "bool": "i1"}
ARG = re.compile(r"%(arg\d+): tensor<([0-9x]*)x?([a-z0-9]+)> \{ds\.(input|param) = "
                 r"(?:\"([^\"]*)\"|#ds\.param<name = \"([^\"]*)\")")
RESULT = re.compile(r"tensor<([0-9x]*)x?([a-z0-9]+)> \{ds\.output = \"([^\"]*)\"\}")


def shape_of(text):
    return [int(d) for d in text.split("x") if d] if text else []


def run(command):
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def check_file(args, model, path, flags, batch, failures):
    label = os.path.basename(path) + (" " + " ".join(flags) if flags else "")
    imported = run([args.dsopt, path, "--emit=mlir", *flags])
    if imported.returncode != 0:
        failures.append(f"{label}: import failed: {imported.stderr.strip()}")
        return
    ir = imported.stdout
    with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
        f.write(ir)
    reparsed = run([args.dsopt_opt, f.name])
    os.unlink(f.name)
    if reparsed.returncode != 0:
        failures.append(f"{label}: IR does not parse back: {reparsed.stderr.strip()}")
        return
    if reparsed.stdout.strip() != ir.strip():
        failures.append(f"{label}: IR changes when printed again")

    signature = ir[ir.index("func.func @main("):]
    signature = signature[:signature.index("{\n")]
    inputs, params = {}, {}
    for arg, dims, elem, kind, input_name, param_name in ARG.findall(signature):
        if kind == "input":
            inputs[input_name] = (elem, shape_of(dims))
        else:
            params[param_name] = (arg, shape_of(dims))
    for name, (dtype, shape) in model["inputs"].items():
        if batch is not None:
            shape = [batch] + shape[1:]
        expected = (DTYPES[dtype], shape)
        if inputs.get(name) != expected:
            failures.append(f"{label}: input {name} is {inputs.get(name)}, expected {expected}")
    outputs = {name: (elem, shape_of(dims)) for dims, elem, name in RESULT.findall(signature)}
    for output in model["outputs"]:
        shape = output["shape"]
        if batch is not None and shape:
            shape = [batch] + shape[1:]
        expected = (DTYPES[output["dtype"]], shape)
        if outputs.get(output["name"]) != expected:
            failures.append(f"{label}: output {output['name']} is "
                            f"{outputs.get(output['name'])}, expected {expected}")

    body = ir[ir.index("{\n", ir.index("func.func @main(")):]
    elements = 0
    for name, (arg, shape) in params.items():
        count = 1
        for d in shape:
            count *= d
        elements += count
    info = next(v for v in model["files"].values() if v["file"] == os.path.basename(path)) \
        if batch is None else model["files"]["folded"]
    if elements != info["initializer_numel"]:
        failures.append(f"{label}: parameters hold {elements} elements, the file's "
                        f"initializers {info['initializer_numel']}")
    for tied in info.get("tied", {}):
        if tied not in params:
            failures.append(f"{label}: tied weight {tied} is not a parameter")
            continue
        uses = len(re.findall(r"%" + params[tied][0] + r"\b", body))
        if uses < 2:
            failures.append(f"{label}: tied weight {tied} is used {uses} times")
    print(f"{label}: {len(inputs)} inputs, {len(params)} parameters "
          f"({elements} elements), {len(outputs)} outputs")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", required=True, help="directory written by export_zoo.py")
    parser.add_argument("--dsopt", default="dsopt")
    parser.add_argument("--dsopt-opt", dest="dsopt_opt", default="dsopt-opt")
    parser.add_argument("--batch", type=int, default=3,
                        help="batch for the dynamic-batch exports")
    args = parser.parse_args()
    with open(os.path.join(args.zoo, "zoo.json")) as f:
        zoo = json.load(f)
    failures, checked = [], 0
    for model in zoo:
        for key in ("file", "nofold_file"):
            check_file(args, model, os.path.join(args.zoo, model[key]), [], None, failures)
            checked += 1
        if model.get("dynbatch_file"):
            check_file(args, model, os.path.join(args.zoo, model["dynbatch_file"]),
                       ["--batch", str(args.batch)], args.batch, failures)
            checked += 1
    for failure in failures:
        print("FAIL", failure)
    print(f"zoo: {checked} files checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
