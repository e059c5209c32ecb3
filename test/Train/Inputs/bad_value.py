#!/usr/bin/python3
"""bad_value.py SRC NAME BATCH INDEX VALUE OUT: copies SRC's ids.npy and
labels.npy to the directory OUT with element INDEX of global batch BATCH of
NAME.npy set to VALUE (an out-of-range index for the runner to find)."""
import shutil
import sys
from pathlib import Path

import numpy as np

src, name, batch, index, value, out = sys.argv[1:]
out = Path(out)
out.mkdir(parents=True, exist_ok=True)
for f in ("ids.npy", "labels.npy"):
    shutil.copy(Path(src) / f, out / f)
a = np.load(out / f"{name}.npy")
a[int(batch), int(index)] = int(value)
np.save(out / f"{name}.npy", a)
