#!/usr/bin/env python3
"""Keeps libdsrt's backend-neutral sources off program memory.

Every copy, fill or sum of arena memory in the backend-neutral runtime must be
a backend operation on a stream (dsrt/backend.h), so that a cuda backend, whose
arenas the host cannot touch, runs the same runner code. This checks every .cpp
and .h under the source directory except the files that work on host memory by
design (listed below, each with its reason), and fails naming each offending
line.

    check_backend_neutral.py runtime/src
"""
import re
import sys
from pathlib import Path

# Relative paths (a trailing / for a directory) and why each may touch memory.
HOST_MEMORY_FILES = {
    "cpu/": "the cpu backend itself",
    "internal.h": "the cpu backend's internals",
    "mpi_ring.cpp": "the MPI ring: a transport of host buffers (NCCL is the device one)",
    "mpi_ring.h": "the MPI ring's internals",
    "mpi_ring_collectives.cpp": "the MPI ring's reductions, on host buffers",
    "mpi_ring_groups.cpp": "the MPI ring's point-to-point transfers, on host buffers",
    "mpi_ring_transport.cpp": "the MPI ring behind the transport interface",
    "tensor.cpp": "load_float/store_float: element access for tests and glue",
    "backend_ops.cpp": "reads the host copy that the backend made",
    "npy.cpp": "the .npy format, on host buffers",
    "onnx_save.cpp": "the ONNX format, on host buffers",
    "checkpoint.cpp": "the checkpoint format, on host buffers",
    "tp_pieces.cpp": "tensor-parallel pieces cut from and put into host buffers",
    "file_io.cpp": "pread/pwrite on the I/O thread",
    "nccl/nccl_transport.cpp": "the NCCL transport (cuda backend): copies only its unique id, host bytes",
}

# Byte and element access that bypasses the backend; begin_kernel would mean
# running the cpu backend's kernel prologue in neutral code.
FORBIDDEN = re.compile(
    r"\b(memcpy|memmove|memset|std::copy|std::fill|store_float|store_int|load_float|load_int|"
    r"begin_kernel)\b")


def exempt(relative: str) -> bool:
    return any(relative.startswith(entry) if entry.endswith("/") else relative == entry
               for entry in HOST_MEMORY_FILES)


def code_of(line: str) -> str:
    """The line without its // comment (string literals are not parsed:
    neutral code has no reason to spell these names in a string)."""
    return line.split("//", 1)[0]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(sys.argv[1])
    sources = sorted(p for p in root.rglob("*") if p.suffix in (".cpp", ".h"))
    checked = 0
    violations = []
    for path in sources:
        relative = path.relative_to(root).as_posix()
        if exempt(relative):
            continue
        checked += 1
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = FORBIDDEN.search(code_of(line))
            if match:
                violations.append(f"  {relative}:{number}: {match.group(1)}: {line.strip()}")
    if checked == 0:
        print(f"check_backend_neutral: no sources under {root}", file=sys.stderr)
        return 1
    if violations:
        print("backend-neutral runtime code touches memory directly; use a backend operation "
              "on a stream instead (dsrt/backend.h: copy, fill_async, add_async, read_to_host, "
              "read_scalar, write_scalar):\n" + "\n".join(violations), file=sys.stderr)
        return 1
    print(f"check_backend_neutral: {checked} backend-neutral sources use the backend for memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
