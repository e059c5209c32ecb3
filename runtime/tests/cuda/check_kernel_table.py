#!/usr/bin/env python3
"""Checks that every backend defines every function of dsrt/kernels.h.

    check_kernel_table.py --header kernels.h --table kernel_table.cpp
                          --backend cpu=DIR[,FILE...] --backend cuda=DIR[,FILE...]

Collects the function names declared in the header (kernels and workspace
size functions), the names each backend defines at namespace scope in the
.cpp/.cu files of its directory plus the extra files given (the neutral
workspace.cpp), and the names listed in the cuda link test's table. Fails,
naming each, when a backend lacks a function, defines one the header does
not declare, or the table differs from the header. Kernels a backend
defines as a not-implemented error are listed (they are defined, and their
call throws a dsrt::Error saying so).
"""
import argparse
import re
import sys
from pathlib import Path

DECL = re.compile(r"^(?:void|int64_t)\s+(\w+)\s*\(", re.M)
# A definition at namespace scope: the return type starts the line, the
# body's brace ends the signature.
DEFN = re.compile(r"^(?:void|int64_t)\s+(\w+)\s*\(([^;{]*)\)\s*\{", re.M)
NOT_IMPLEMENTED = re.compile(r"not_implemented\(\"(\w+)\"\)")


def strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", text)


def declared(header: Path) -> set:
    return set(DECL.findall(strip_comments(header.read_text())))


def defined(spec: str):
    name, _, paths = spec.partition("=")
    if not paths:
        raise SystemExit(f"--backend {spec}: expected NAME=DIR[,FILE...]")
    first, *extra = paths.split(",")
    files = sorted(p for p in Path(first).glob("*") if p.suffix in (".cpp", ".cu"))
    files += [Path(f) for f in extra]
    names, stubs = set(), set()
    for f in files:
        text = strip_comments(f.read_text())
        # Helpers are collected too; only the header's names are compared.
        for fn, _ in DEFN.findall(text):
            names.add(fn)
        stubs.update(NOT_IMPLEMENTED.findall(text))
    return name, names, stubs, files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--header", required=True, type=Path)
    parser.add_argument("--table", type=Path)
    parser.add_argument("--backend", action="append", required=True)
    args = parser.parse_args()

    header = declared(args.header)
    if not header:
        print(f"check_kernel_table: no function declarations found in {args.header}")
        return 1
    problems = []
    for spec in args.backend:
        name, names, stubs, files = defined(spec)
        if not files:
            problems.append(f"backend {name}: no .cpp or .cu files in {spec}")
        for fn in sorted(header - names):
            problems.append(f"backend {name}: missing {fn} (declared in kernels.h)")
        stubbed = sorted(stubs & header)
        print(f"backend {name}: {len(header & names)} of {len(header)} functions defined"
              + (f"; not implemented (throw): {', '.join(stubbed)}" if stubbed else ""))
    if args.table:
        table = set(re.findall(r"^\s+DSRT_KERNEL\((\w+)\)", args.table.read_text(), re.M))
        for fn in sorted(header - table):
            problems.append(f"{args.table.name}: missing {fn}")
        for fn in sorted(table - header):
            problems.append(f"{args.table.name}: lists {fn}, which kernels.h does not declare")
    for p in problems:
        print(p)
    if problems:
        print(f"check_kernel_table: {len(problems)} problem(s)")
        return 1
    print("check_kernel_table: every backend defines every function of kernels.h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
