"""Compiles one generated C++ source into an executable against libdsrt, with
the flags `dsopt --print-build-flags` reports (what dsopt itself uses).

    build_cpp.py DSOPT SOURCE.cpp EXECUTABLE
"""
import shlex
import subprocess
import sys


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    dsopt, source, executable = sys.argv[1:]
    flags = {}
    for line in subprocess.run([dsopt, "--print-build-flags"], check=True, capture_output=True,
                               text=True).stdout.splitlines():
        key, _, value = line.partition(":")
        flags[key.strip()] = shlex.split(value)
    if "cxxflags" not in flags or "libs" not in flags:
        print(f"build_cpp.py: {dsopt} --print-build-flags gave no cxxflags or libs", file=sys.stderr)
        return 1
    # -O0: the test checks the runtime's memory, not the kernels' speed.
    command = ["c++", *flags["cxxflags"], "-O0", source, "-o", executable, *flags["libs"]]
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main())
