#!/usr/bin/python3
"""Deterministic training data for the zoo models (models.py).

For a model and a global batch G (micro batch * gradient accumulation steps)
this makes, for every graph input, an array of shape [n_batches, G, *sample]
with the dtype and per-sample shape of the model's example inputs
(ZooModel.inputs()) -- the layout `train --data DIR` reads, one
<input name>.npy per input:

  gpt2, llama, input_ids: random tokens; labels: the next token, with about
  llama_rope   15% of the positions set to -100 (ignored by the loss); the
               first position of every sample always has a target
  bert         input_ids: random tokens; attention_mask: 1, with a padded
               tail of 0..seq/2 positions per sample; labels: a random token
               at about 25% of the real positions (always position 0), -100
               elsewhere
  mlp, cnn,    x: standard normal features/images; y: random class labels
  mobilenet,
  bn_mixer,
  tv_* (classification)
  unet, tv_fcn, x: standard normal images; y: a random class per pixel
  tv_deeplabv3,
  tv_lraspp
  einsum       x: standard normal [seq, d_model] features; y: class labels

Every sample has at least one target, so no micro-batch has a loss of 0/0.
The same (model, n_batches, global batch, seed) gives the same bytes.

  make_train_data.py --model gpt2 --global-batch 6 --out DIR
  make_train_data.py --zoo ZOO --gas 3 --out DIR     # every model of a zoo, DIR/NAME/
"""
import argparse
import json
import sys
from pathlib import Path
from typing import Dict

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import ZOO, BertConfig, BNMixerConfig, CNNConfig, EinsumConfig, GPT2Config, LlamaConfig, MLPConfig, MobileNetConfig, UNetConfig, VisionConfig, ZooModel  # noqa: E402

IGNORE_INDEX = -100
LM_IGNORED_FRACTION = 0.15
BERT_TARGET_FRACTION = 0.25


def _lm(cfg, rng, lead) -> Dict[str, np.ndarray]:
    tokens = rng.integers(0, cfg.vocab_size, size=(*lead, cfg.seq + 1), dtype=np.int64)
    labels = tokens[..., 1:].copy()
    ignored = rng.random(labels.shape) < LM_IGNORED_FRACTION
    ignored[..., 0] = False
    labels[ignored] = IGNORE_INDEX
    return {"input_ids": np.ascontiguousarray(tokens[..., :-1]), "labels": labels}


def _bert(cfg, rng, lead) -> Dict[str, np.ndarray]:
    input_ids = rng.integers(0, cfg.vocab_size, size=(*lead, cfg.seq), dtype=np.int64)
    pad = rng.integers(0, cfg.seq // 2 + 1, size=lead)
    position = np.arange(cfg.seq)
    attention_mask = (position < (cfg.seq - pad)[..., None]).astype(np.int64)
    chosen = (rng.random(input_ids.shape) < BERT_TARGET_FRACTION) & attention_mask.astype(bool)
    chosen[..., 0] = True
    targets = rng.integers(0, cfg.vocab_size, size=input_ids.shape, dtype=np.int64)
    labels = np.where(chosen, targets, IGNORE_INDEX).astype(np.int64)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def _classifier(cfg, rng, lead, sample_shape) -> Dict[str, np.ndarray]:
    x = rng.standard_normal(size=(*lead, *sample_shape)).astype(np.float32)
    y = rng.integers(0, cfg.n_classes, size=lead, dtype=np.int64)
    return {"x": x, "y": y}


def make_train_data(model: ZooModel, n_batches: int, global_batch: int, seed: int = 0) -> Dict[str, np.ndarray]:
    """{input name: [n_batches, global_batch, *sample]} in the model's input order."""
    cfg = model.config
    rng = np.random.default_rng([seed, cfg.seed])
    lead = (n_batches, global_batch)
    if isinstance(cfg, (GPT2Config, LlamaConfig)):
        data = _lm(cfg, rng, lead)
    elif isinstance(cfg, BertConfig):
        data = _bert(cfg, rng, lead)
    elif isinstance(cfg, MLPConfig):
        data = _classifier(cfg, rng, lead, (cfg.in_dim,))
    elif isinstance(cfg, (CNNConfig, MobileNetConfig, BNMixerConfig)):
        data = _classifier(cfg, rng, lead, (cfg.in_channels, cfg.image_size, cfg.image_size))
    elif isinstance(cfg, EinsumConfig):
        data = _classifier(cfg, rng, lead, (cfg.seq, cfg.d_model))
    elif isinstance(cfg, (UNetConfig, VisionConfig)):
        data = _classifier(cfg, rng, lead, (cfg.in_channels, cfg.image_size, cfg.image_size))
        if isinstance(cfg, UNetConfig) or cfg.segmentation:  # a class per pixel
            data["y"] = rng.integers(0, cfg.n_classes, size=(*lead, cfg.image_size, cfg.image_size), dtype=np.int64)
    else:
        raise ValueError(f"no training data recipe for model {model.name}")

    example = model.inputs()
    if list(data) != list(example):
        raise AssertionError(f"{model.name}: data inputs {list(data)} differ from the model's {list(example)}")
    for name, value in example.items():
        want = (value.numpy().dtype, tuple(value.shape[1:]))
        got = (data[name].dtype, tuple(data[name].shape[2:]))
        if got != want:
            raise AssertionError(f"{model.name} input {name}: made {got}, the model takes {want} per sample")
    return data


def write_train_data(data: Dict[str, np.ndarray], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, array in data.items():
        # A '/' in an input name becomes '_' in the file name, as `run` reads it.
        np.save(out / (name.replace("/", "_") + ".npy"), array)


def describe(name: str, data: Dict[str, np.ndarray]) -> str:
    parts = []
    for key, array in data.items():
        text = f"{key} {array.dtype}{list(array.shape)}"
        if array.dtype == np.int64:
            ignored = int((array == IGNORE_INDEX).sum())
            kept = array[array != IGNORE_INDEX]
            text += f" in [{kept.min()}, {kept.max()}]" + (f" ({ignored} ignored)" if ignored else "")
        parts.append(text)
    return f"{name}: " + ", ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", choices=sorted(ZOO), help="one model; its files go straight into --out")
    which.add_argument("--zoo", type=Path, help="every model listed in ZOO/zoo.json, into --out/NAME/")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n-batches", type=int, default=4)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--global-batch", type=int, help="samples per batch (default: the model's batch * --gas)")
    size.add_argument("--gas", type=int, default=1, help="gradient accumulation steps (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.model:
        targets = [(ZOO[args.model], args.out)]
    else:
        with open(args.zoo / "zoo.json") as f:
            targets = [(ZOO[entry["name"]], args.out / entry["name"]) for entry in json.load(f)]
    for model, out in targets:
        global_batch = args.global_batch or model.config.batch * args.gas
        data = make_train_data(model, args.n_batches, global_batch, args.seed)
        write_train_data(data, out)
        print(describe(model.name, data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
