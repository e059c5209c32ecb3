#!/usr/bin/env python3
"""path_without_llvm.py DIR [--skip-dir D ...]: fills DIR with links to the
executables on PATH (the first of each name), leaving out LLVM's, MLIR's
and dsopt's tools and the directories named, so that PATH=DIR is a machine
without LLVM/MLIR or dsopt (the GPU machine of scripts/gpu-check.sh
--device)."""
import argparse
import os
import re
from pathlib import Path

LEFT_OUT = re.compile(r"llvm|clang|mlir|lld|FileCheck|dsopt|tblgen")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--skip-dir", action="append", default=[])
    args = parser.parse_args()
    skip = {os.path.realpath(d) for d in args.skip_dir}
    args.out.mkdir(parents=True, exist_ok=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or os.path.realpath(directory) in skip or not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = args.out / entry.name
            if LEFT_OUT.search(entry.name) or link.exists() or link.is_symlink():
                continue
            if entry.is_file() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)


if __name__ == "__main__":
    main()
