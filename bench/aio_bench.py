#!/usr/bin/python3
"""The file space's I/O engine against the disk, knob by knob.

For each configuration of the `aio` block (block_size, queue_depth,
intra_op_parallelism, single_submit; the default first, then one knob
changed at a time), in the same run and the same directory:

  1. fio's sequential O_DIRECT write and read speed (io_uring, the
     configuration's block size and queue depth, numjobs =
     intra_op_parallelism) over a file of --bytes, the best of --repeats:
     the disk's own speed;
  2. bin/dsrt_aio_bench: dsrt's FileStore writing and reading a file of
     --bytes through the engine with those knobs, timed over the time the
     engine is busy (first submit to last completion of each transfer
     window: one pass over the file in operations of --op-bytes), the best
     of --repeats;

and prints a table of bytes per second and the ratio engine / fio per
direction (target >= 0.7), with the 1-minute load average before and
after each configuration (other processes share the CPUs and the disk).
The files are removed after each measurement; the disk holds at most one
file of --bytes at a time.

  bench/aio_bench.py --dir /work/aio-bench            # 2 GiB files
  bench/aio_bench.py --dir /tmp/aio --bytes 268435456 --repeats 1  # quick
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20

DEFAULT = {"block_size": MIB, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": False}
SWEEP = [
    {},
    {"block_size": 256 << 10},
    {"block_size": 4 * MIB},
    {"queue_depth": 32},
    {"intra_op_parallelism": 2},
    {"single_submit": True},
]


def fio(path: Path, rw: str, size: int, aio: dict) -> float:
    """fio's sequential O_DIRECT bytes per second of `rw` over `path`."""
    jobs = aio["intra_op_parallelism"]
    command = ["fio", "--name=seq", f"--filename={path}", f"--rw={rw}", "--direct=1",
               "--ioengine=io_uring", f"--bs={aio['block_size']}", f"--iodepth={aio['queue_depth']}",
               f"--size={size // jobs}", f"--numjobs={jobs}", "--offset_increment="
               f"{size // jobs}", "--group_reporting", "--output-format=json"]
    if aio["single_submit"]:
        command.append("--iodepth_batch_submit=1")
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out)["jobs"][0]["read" if rw == "read" else "write"]["bw_bytes"])


def engine(harness: Path, path: Path, size: int, aio: dict, op_bytes: int, repeats: int) -> dict:
    command = [str(harness), str(path), str(size), "--block-size", str(aio["block_size"]),
               "--queue-depth", str(aio["queue_depth"]),
               "--intra-op", str(aio["intra_op_parallelism"]),
               "--op-bytes", str(op_bytes), "--repeats", str(repeats)]
    if aio["single_submit"]:
        command.append("--single-submit")
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"aio_bench: {' '.join(command)} failed: {result.stderr.strip()}")
    return json.loads(result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True,
                        help="directory on the disk to measure (created; removed at the end)")
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--bytes", type=int, default=2 << 30, help="file size (default 2 GiB)")
    parser.add_argument("--op-bytes", type=int, default=64 * MIB,
                        help="bytes of one engine operation (default 64 MiB)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    harness = args.build / "bin" / "dsrt_aio_bench"
    if not harness.exists():
        sys.exit(f"aio_bench: {harness} does not exist (ninja -C {args.build} dsrt_aio_bench)")
    if not shutil.which("fio"):
        sys.exit("aio_bench: fio is not installed (apt-get install fio)")
    created = not args.dir.exists()
    args.dir.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(args.dir).free
    if free < 2 * args.bytes:
        sys.exit(f"aio_bench: {args.dir} has {free} bytes free; the bench needs {2 * args.bytes}")
    rows = []
    try:
        for change in SWEEP:
            aio = dict(DEFAULT, **change)
            load_before = os.getloadavg()[0]
            path = args.dir / "aio-bench.bin"
            disk_w = max(fio(path, "write", args.bytes, aio) for _ in range(args.repeats))
            disk_r = max(fio(path, "read", args.bytes, aio) for _ in range(args.repeats))
            path.unlink(missing_ok=True)
            measured = engine(harness, path, args.bytes, aio, args.op_bytes, args.repeats)
            path.unlink(missing_ok=True)
            rows.append({**aio, "engine": measured["engine"],
                         "fio_write": disk_w, "fio_read": disk_r,
                         "engine_write": measured["write_bytes_per_s"]["best"],
                         "engine_read": measured["read_bytes_per_s"]["best"],
                         "engine_write_median": measured["write_bytes_per_s"]["median"],
                         "engine_read_median": measured["read_bytes_per_s"]["median"],
                         "load": [round(load_before, 2), round(os.getloadavg()[0], 2)]})
    finally:
        (args.dir / "aio-bench.bin").unlink(missing_ok=True)
        if created:
            shutil.rmtree(args.dir, ignore_errors=True)
    print(f"file {args.bytes / (1 << 30):g} GiB, engine operations of {args.op_bytes // MIB} MiB, "
          f"fio and engine each the best of {args.repeats}; engine: {rows[0]['engine']}")
    print("| block_size | queue_depth | intra_op | single_submit | fio write MB/s | engine write MB/s "
          "| write ratio | fio read MB/s | engine read MB/s | read ratio | load avg (before, after) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['block_size'] >> 10} KiB | {r['queue_depth']} | {r['intra_op_parallelism']} "
              f"| {str(r['single_submit']).lower()} | {r['fio_write'] / 1e6:.0f} "
              f"| {r['engine_write'] / 1e6:.0f} | {r['engine_write'] / r['fio_write']:.2f} "
              f"| {r['fio_read'] / 1e6:.0f} | {r['engine_read'] / 1e6:.0f} "
              f"| {r['engine_read'] / r['fio_read']:.2f} | {r['load'][0]}, {r['load'][1]} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
