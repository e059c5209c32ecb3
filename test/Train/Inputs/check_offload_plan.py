"""Checks an offloaded plan against the same training without offload.

usage: check_offload_plan.py BASE.json OFFLOADED.json cpu|nvme

The optimizer states leave the device arena whole and become the host (cpu)
or file (nvme) space's persistent bytes; per step the host receives each
update's gradient and parameter shard (plus the learning rate and step)
and sends the updated parameter shard back; with nvme every state is read
from and written to its file once. Exits 1 naming the first difference.
"""
import json
import sys

F32, I64 = 4, 8


def fail(message):
    print("check_offload_plan: " + message)
    sys.exit(1)


def main():
    base_path, offloaded_path, device = sys.argv[1:4]
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
        if os_["device"]["persistent_bytes"] + moved != \
                bs["device"]["persistent_bytes"]:
            fail(f"rank {rank}: device persistent "
                 f"{os_['device']['persistent_bytes']} + {space} {moved} != "
                 f"{bs['device']['persistent_bytes']} without offload")
        if "offload" in b:
            fail(f"rank {rank}: the plan without offload moves bytes "
                 "between spaces")
        traffic = o["offload"]["bytes_per_step"]
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
