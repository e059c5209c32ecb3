#!/usr/bin/env python3
"""Runs a command that must fail: exit status RC and TEXT in its output.

    expect_failure.py RC TEXT -- COMMAND...

Exit 0 when it does, 1 when it does not, 77 (skipped) when the command
exits 77 itself (it found nothing to check).
"""
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    rc, text, command = int(sys.argv[1]), sys.argv[2], sys.argv[4:]
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    print(proc.stdout, end="")
    if proc.returncode == 77:
        return 77
    ok = True
    if proc.returncode != rc:
        print(f"expect_failure: exit status {proc.returncode}, expected {rc}")
        ok = False
    if text not in proc.stdout:
        print(f"expect_failure: the output lacks {text!r}")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
