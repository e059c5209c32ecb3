#!/usr/bin/python3
"""timed.py SECONDS COMMAND...: runs COMMAND (its output passes through),
then prints "timed: exited with status N within SECONDS s", or, when it is
still running after SECONDS, kills its process group and prints "timed:
still running after SECONDS s". Exits 0 either way: the test checks the line.
"""
import os
import signal
import subprocess
import sys

limit = float(sys.argv[1])
job = subprocess.Popen(sys.argv[2:], start_new_session=True)
try:
    status = job.wait(timeout=limit)
    print(f"timed: exited with status {status} within {sys.argv[1]} s", flush=True)
except subprocess.TimeoutExpired:
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    print(f"timed: still running after {sys.argv[1]} s", flush=True)
