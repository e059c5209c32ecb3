"""Checks that every host buffer a file-space transfer reads or writes
starts on a 4096-byte block (the plan's ds.buffers offsets), so that direct
I/O moves whole tensors with no bounce buffer.

usage: check_file_blocks.py TRAIN.mlir   (dsopt --emit=train-mlir)

Prints how many host ends it checked; exits 1 naming the first one off a
block.
"""
import re
import sys

BLOCK = 4096

text = open(sys.argv[1]).read()
offset = {}  # SSA name -> its buffer's offset
op = re.compile(r"^\s*(%[\w, %#]+?) = [\w.]+ .*?ds\.buffers = array<i64: ([-\d, ]+)>",
                re.M)
for names, offsets in op.findall(text):
    for name, o in zip((n.strip() for n in names.split(",")),
                       offsets.split(",")):
        offset[name] = int(o)
transfer = re.compile(r"^\s*(%\w+) = ds\.transfer (%\w+) \{[^}]*from = "
                      r"#ds\.space<(\w+)>, to = #ds\.space<(\w+)>", re.M)
checked = 0
for result, source, src, dst in transfer.findall(text):
    if "file" not in (src, dst):
        continue
    host = result if dst == "host" else source
    if offset.get(host, -1) % BLOCK:
        print(f"check_file_blocks: {host} ({src} to {dst}) is at "
              f"{offset.get(host)}, not on a {BLOCK}-byte block")
        sys.exit(1)
    checked += 1
print(f"file transfers: {checked} host ends, all on {BLOCK}-byte blocks")
