#!/usr/bin/python3
"""Imports ONNX models written in ONNX's textual syntax through dsopt.

Importer tests hold one or more models in ONNX text form, separated by
`// -----` lines; lines starting with `//` (RUN and CHECK lines) are not part
of a model. Each model is assembled into a binary .onnx with onnx.parser and
imported with `dsopt --emit=mlir --no-canonicalize`; the outputs are printed
in order, separated by `// -----`, for FileCheck.

A model without a `<...>` header gets `<ir_version: 8, opset_import: ["" :
OPSET]>`, OPSET from --opset (default 17).

With --expect-error every model must be rejected with exit status 1 and its
diagnostics are printed; an accepted model or a crash fails the test.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import onnx
import onnx.parser

SEPARATOR = "// -----"


def split_models(text):
    chunks, current = [], []
    for line in text.splitlines():
        if line.strip() == SEPARATOR:
            chunks.append(current)
            current = []
        elif not line.lstrip().startswith("//"):
            current.append(line)
    chunks.append(current)
    return ["\n".join(chunk).strip() for chunk in chunks]


def assemble(source, opset, path):
    if not source.startswith("<"):
        source = f'<ir_version: 8, opset_import: ["" : {opset}]>\n' + source
    model = onnx.parser.parse_model(source)
    onnx.save(model, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("test_file")
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--expect-error", action="store_true")
    parser.add_argument("--dsopt", default="dsopt")
    parser.add_argument("--write", metavar="FILE",
                        help="only assemble the (single) model into FILE")
    parser.add_argument("dsopt_args", nargs="*",
                        help="extra dsopt arguments (after --)")
    args = parser.parse_args()

    with open(args.test_file) as f:
        models = split_models(f.read())
    if args.write:
        assemble(models[0], args.opset, args.write)
        return 0
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        for index, source in enumerate(models):
            if index:
                print(SEPARATOR)
            if not source:
                print(f"onnx_import.py: model {index} is empty", file=sys.stderr)
                return 1
            path = os.path.join(tmp, "test.onnx")
            try:
                assemble(source, args.opset, path)
            except Exception as error:  # the test file itself is wrong
                print(f"onnx_import.py: model {index} does not parse: {error}",
                      file=sys.stderr)
                return 1
            command = [args.dsopt, "test.onnx", "--emit=mlir", "--no-canonicalize",
                       *args.dsopt_args]
            result = subprocess.run(command, capture_output=True, text=True,
                                    cwd=tmp, timeout=120)
            # Paths vary between runs; tests match the file name only.
            stderr = result.stderr.replace(tmp + os.sep, "")
            if args.expect_error:
                if result.returncode == 1:
                    sys.stdout.write(stderr)
                elif result.returncode == 0:
                    print(f"UNEXPECTED SUCCESS for model {index}")
                    status = 1
                else:
                    print(f"CRASH (exit {result.returncode}) for model {index}:\n"
                          f"{stderr}")
                    status = 1
            else:
                if result.returncode != 0:
                    sys.stdout.write(stderr)
                    print(f"dsopt failed on model {index} "
                          f"(exit {result.returncode})")
                    status = 1
                else:
                    sys.stdout.write(stderr)
                    sys.stdout.write(result.stdout)
    return status


if __name__ == "__main__":
    sys.exit(main())
