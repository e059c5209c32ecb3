"""Checks an offloaded plan against the same training without offload.

usage: check_offload_plan.py BASE.json OFFLOADED.json cpu|nvme [bf16]

The optimizer states leave the device arena whole and become the host (cpu)
or file (nvme) space's persistent bytes; per step the host receives each
update's gradient and parameter shard (plus the learning rate and step)
and sends the updated parameter shard back; with nvme every state is read
from and written to its file once. With bf16 the fp32 master weights are
among the states (three per parameter with Adam), so no parameter goes to
the host; the gradient shard goes in 16 bits (the accumulators' type), and
what comes back is the updated master's 16-bit copy made on the host: 2
bytes a parameter, not 4. Exits 1 naming the first difference.
"""
import json
import sys

F32, I64, BF16 = 4, 8, 2
BLOCK = 4096  # the file space's block (direct I/O)


def align(n, to):
    return (n + to - 1) // to * to


def fail(message):
    print("check_offload_plan: " + message)
    sys.exit(1)


def main():
    base_path, offloaded_path, device = sys.argv[1:4]
    bf16 = sys.argv[4:] == ["bf16"]
    base = json.load(open(base_path))
    offloaded = json.load(open(offloaded_path))
    space = {"cpu": "host", "nvme": "file"}[device]
    for b, o in zip(base["ranks"], offloaded["ranks"]):
        rank = o["rank"]
        bs, os_ = b["memory_spaces"], o["memory_spaces"]
        moved = os_[space]["persistent_bytes"]
        if moved <= 0 or moved < o["optimizer_bytes"]:
            fail(f"rank {rank}: {space} holds {moved} persistent bytes, "
                 f"the optimizer states are {o['optimizer_bytes']}")
        # The device holds what it held less the states; the host holds
        # them in the same slots, the file in whole 4096-byte blocks, each
        # starting on one (so direct I/O needs no bounce buffer).
        # (plan.json's train section lays out the ranks it lists; the
        # others have the same layout as its first.)
        layouts = offloaded["train"]["ranks"]
        layout = next((t for t in layouts if t["rank"] == rank), layouts[0])
        states = [st for st in layout["states"]
                  if not st["name"].startswith("grad:")]
        dropped = bs["device"]["persistent_bytes"] - \
            os_["device"]["persistent_bytes"]
        if device == "cpu" and dropped != moved:
            fail(f"rank {rank}: device persistent "
                 f"{os_['device']['persistent_bytes']} + {space} {moved} != "
                 f"{bs['device']['persistent_bytes']} without offload")
        if device == "nvme":
            if dropped != sum(align(st["bytes"], 64) for st in states):
                fail(f"rank {rank}: the device dropped {dropped} persistent "
                     "bytes, not its optimizer states' slots")
            if moved != sum(align(st["bytes"], BLOCK) for st in states):
                fail(f"rank {rank}: file persistent bytes {moved} are not "
                     "the states in whole 4096-byte blocks")
            for st in states:
                if st["offset"] % BLOCK:
                    fail(f"rank {rank}: file slot of {st['name']} at "
                         f"{st['offset']}, not on a 4096-byte block")
        if "offload" in b:
            fail(f"rank {rank}: the plan without offload moves bytes "
                 "between spaces")
        traffic = o["offload"]["bytes_per_step"]
        if bf16:
            # Master, m and v: three f32 states of each shard's size.
            elements = o["optimizer_bytes"] // (3 * F32)
            expected = {"device_to_host": BF16 * elements + F32 + I64,
                        "host_to_device": BF16 * elements}
        else:
            # Adam keeps two states of each parameter shard's size.
            shards = o["optimizer_bytes"] // 2
            expected = {"device_to_host": 2 * shards + F32 + I64,
                        "host_to_device": shards}
        if device == "nvme":
            expected["file_to_host"] = o["optimizer_bytes"]
            expected["host_to_file"] = o["optimizer_bytes"]
        if traffic != expected:
            fail(f"rank {rank}: bytes moved per step {traffic}, "
                 f"expected {expected}")
        bandwidth = o["offload"]["bandwidth_bytes_per_s"]
        seconds = sum(n / bandwidth["file_host" if "file" in k
                                    else "host_device"]
                      for k, n in traffic.items())
        if abs(o["offload"]["transfer_seconds_per_step"] - seconds) > \
                1e-9 * seconds:
            fail(f"rank {rank}: transfer time "
                 f"{o['offload']['transfer_seconds_per_step']}, expected "
                 f"{seconds}")
        print(f"rank {rank}: {space} {moved} bytes, moved {traffic}")


main()
