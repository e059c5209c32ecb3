#!/usr/bin/python3
"""Runs a command and checks its exact exit status.

    expect_exit.py STATUS [--timeout S] [--cwd DIR] -- COMMAND...

Prints the command's stderr, then its stdout, on stdout (for FileCheck), and
exits 0 only if COMMAND exited normally with STATUS. `not` would accept any
non-zero status, including an abort or a crash by signal, which is exactly
what bad input must never cause. With STATUS 1, stderr must also start with
a `dsopt: error:` diagnostic (after any `dsopt: warning:` lines; for another
dsopt tool such as dsopt-pipeline, with that tool's name), so an error
printed by something other than the driver's error path (an assertion,
LLVM's fatal handler) fails too.
"""
import argparse
import os
import signal
import subprocess
import sys


def starts_with_error(stderr, tool="dsopt"):
    for line in stderr.splitlines():
        if not line.startswith(f"{tool}: warning: "):
            return line.startswith(f"{tool}: error: ")
    return False


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="%(prog)s STATUS [--timeout S] [--cwd DIR] -- COMMAND...")
    parser.add_argument("status", type=int)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--cwd")
    # The command's own options must not reach this parser.
    argv = sys.argv[1:]
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        parser.error("give the command after '--'")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    try:
        result = subprocess.run(command, capture_output=True, cwd=args.cwd,
                                timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"expect_exit: TIMEOUT after {args.timeout} s: {command}")
        return 1
    stderr = result.stderr.decode("utf-8", "replace")
    stdout = result.stdout.decode("utf-8", "replace")
    sys.stdout.write(stderr)
    sys.stdout.write(stdout)
    status = result.returncode
    if status < 0:
        name = signal.Signals(-status).name
        print(f"expect_exit: KILLED by {name}, expected exit status "
              f"{args.status}")
        return 1
    if status != args.status:
        print(f"expect_exit: exit status {status}, expected {args.status}")
        return 1
    tool = os.path.basename(command[0])
    if not tool.startswith("dsopt"):
        tool = "dsopt"
    if args.status == 1 and not starts_with_error(stderr, tool):
        print(f"expect_exit: stderr does not start with '{tool}: error: '")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
