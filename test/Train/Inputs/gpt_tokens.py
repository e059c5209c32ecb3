#!/usr/bin/python3
"""gpt_tokens.py --vocab V --seq T --global-batch G --n-batches N --out DIR:
random training data for a test/zoo/gen_gpt.py graph in the layout
`train --data DIR` reads: input_ids.npy and labels.npy (the next token), each
int64 [N, G, T]. The same arguments give the same bytes."""
import argparse
from pathlib import Path

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for flag in ("--vocab", "--seq", "--global-batch", "--n-batches"):
        parser.add_argument(flag, type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, args.vocab, size=(args.n_batches, args.global_batch, args.seq + 1),
                          dtype=np.int64)
    args.out.mkdir(parents=True, exist_ok=True)
    np.save(args.out / "input_ids.npy", tokens[..., :-1])
    np.save(args.out / "labels.npy", tokens[..., 1:])


if __name__ == "__main__":
    main()
