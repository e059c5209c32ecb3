#!/usr/bin/python3
"""Feeds dsopt broken DeepSpeed configs and checks that each is refused cleanly.

    fuzz_configs.py WORKDIR [--dsopt PATH]

Every config derived from a valid one by truncating it, giving a key a value
of the wrong type or range, or damaging its JSON must make
`dsopt --config FILE --print-config` exit with status 1 and a stderr that
starts with `dsopt: error:` (after any warnings), within a timeout. Seeded
random byte mutations may be accepted or refused, but never crash. Prints one
line per failure and a summary; exits 1 if anything failed.
"""
import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys

BASE = {
    "train_batch_size": 32,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 8,
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                             "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4,
                             "warmup_num_steps": 10, "total_num_steps": 100,
                             "warmup_type": "linear"}},
    "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 0},
    "fp16": {"enabled": False},
    "bf16": {"enabled": False},
    "steps_per_print": 10,
}

# Values that are wrong for keys of each kind (raw JSON text).
WRONG = {
    "count": ['"8"', "0", "-3", "2.5", "null", "[]", "{}", "true", "1e400",
              '"auto"', "18446744073709551616"],
    "number": ['"x"', "-1", "null", "[1]", "{}", "false", "-1e400",
               '"auto"'],
    "unit": ["1", "-0.1", "1e400", '"0.9"'],
    "bool": ["1", '"true"', "null", "[]"],
    "optimizer-type": ["3", "null", '"Lamb"', '"OneBitAdam"', '""', "[]"],
    "scheduler-type": ["3", '"OneCycle"', '"LRRangeTest"', '"StepLR"'],
    "section": ["3", '"x"', "[]", "null"],
    "stage": ["4", "-1", "1.5", '"2"'],
    "warmup-type": ['"cosine"', "1", "null"],
}
KEYS = [
    (("train_batch_size",), "count"),
    (("train_micro_batch_size_per_gpu",), "count"),
    (("gradient_accumulation_steps",), "count"),
    (("steps_per_print",), "count"),
    (("gradient_clipping",), "number"),
    (("optimizer",), "section"),
    (("optimizer", "type"), "optimizer-type"),
    (("optimizer", "params"), "section"),
    (("optimizer", "params", "lr"), "number"),
    (("optimizer", "params", "eps"), "number"),
    (("optimizer", "params", "weight_decay"), "number"),
    (("optimizer", "params", "betas"), "section"),
    (("optimizer", "params", "betas", 0), "unit"),
    (("scheduler",), "section"),
    (("scheduler", "type"), "scheduler-type"),
    (("scheduler", "params", "warmup_num_steps"), "count"),
    (("scheduler", "params", "total_num_steps"), "count"),
    (("scheduler", "params", "warmup_max_lr"), "number"),
    (("scheduler", "params", "warmup_type"), "warmup-type"),
    (("zero_optimization", "stage"), "stage"),
    (("fp16", "enabled"), "bool"),
    (("fp16",), "section"),
    (("bf16", "enabled"), "bool"),
]

MARK = "@@WRONG@@"


def with_value(path, raw):
    """BASE as JSON text with the value at `path` replaced by `raw`."""
    config = json.loads(json.dumps(BASE))
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = MARK
    return json.dumps(config, indent=2).replace(f'"{MARK}"', raw)


def must_fail_cases():
    text = json.dumps(BASE, indent=2)
    cases = []
    # Strict prefixes of an object are never valid JSON.
    for i in range(8):
        cases.append((f"truncated-{i}", text[: len(text) * i // 8]))
    # Two wrong values per key, taken in turn from its kind's list so that
    # the keys of one kind together try every value.
    used = {}
    for path, kind in KEYS:
        values = WRONG[kind]
        for _ in range(2):
            raw = values[used.get(kind, 0) % len(values)]
            used[kind] = used.get(kind, 0) + 1
            name = ".".join(str(p) for p in path)
            cases.append((f"{name}={raw}", with_value(path, raw)))
    damaged = [
        ("colon", text.replace(":", ";", 1)),
        ("no-closing-brace", text[:-1] + " "),
        ("double-comma", text.replace(",", ",,", 1)),
        ("unterminated-string", text.replace('"AdamW"', '"AdamW', 1)),
        ("single-quotes", text.replace('"', "'")),
        ("latin1", text.replace("AdamW", "Adam\xe9").encode("latin-1")),
        ("nul", text.replace("AdamW", "Adam\0W")),
        ("deep", '{"a": ' + "[" * 5000 + "]" * 5000 + "}"),
        ("deep-unclosed", "{" * 100000),
        ("top-array", "[" + text + "]"),
        ("top-number", "42"),
        ("top-null", "null"),
        ("duplicate", text.replace('"steps_per_print": 10',
                                   '"steps_per_print": 10, "steps_per_print": 1')),
        ("sgd-no-lr", with_value(("optimizer",), '{"type": "SGD"}')),
        ("decay-no-total", with_value(("scheduler", "params"), "{}")),
        ("batch-contradiction", with_value(("gradient_accumulation_steps",), "7")),
        ("whitespace", "  \n\t "),
        ("bom-only", "\ufeff"),
    ]
    cases.extend(damaged)
    return cases


def random_cases(seed, count):
    rng = random.Random(seed)
    text = json.dumps(BASE).encode()
    cases = []
    for i in range(count):
        data = bytearray(text)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            pos = rng.randrange(len(data))
            if op == 0:
                data[pos] = rng.randrange(256)
            elif op == 1:
                del data[pos]
            else:
                data.insert(pos, rng.choice(b'{}[]",:0-e.\\ \x00\xff'))
        cases.append((f"random-{i}", bytes(data)))
    return cases


def run(dsopt, workdir, index, name, content, must_fail):
    path = os.path.join(workdir, f"case-{index}.json")
    with open(path, "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode())
    try:
        result = subprocess.run([dsopt, "--config", path, "--print-config"],
                                capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:
        return f"{name}: TIMEOUT"
    stderr = result.stderr.decode("utf-8", "replace")
    for marker in ("Stack dump", "Assertion", "LLVM ERROR", "Segmentation"):
        if marker in stderr:
            return f"{name}: '{marker}' in stderr"
    if result.returncode < 0:
        return f"{name}: killed by signal {-result.returncode}"
    if result.returncode not in (0, 1) or (must_fail and result.returncode != 1):
        return f"{name}: exit status {result.returncode}"
    if result.returncode == 1:
        first = next((line for line in stderr.splitlines()
                      if not line.startswith("dsopt: warning: ")), "")
        if not first.startswith("dsopt: error: "):
            return f"{name}: stderr does not start with 'dsopt: error:': {stderr[:200]!r}"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir")
    parser.add_argument("--dsopt", default="dsopt")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--random", type=int, default=12)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)

    # The base config itself must be accepted, or every case fails for it.
    base_failure = run(args.dsopt, args.workdir, "base", "base",
                       json.dumps(BASE), must_fail=False)
    base_ok = subprocess.run(
        [args.dsopt, "--config", os.path.join(args.workdir, "case-base.json"),
         "--print-config"], capture_output=True).returncode == 0
    if base_failure or not base_ok:
        print(f"fuzz: the base config is not accepted: {base_failure}")
        return 1

    cases = [(name, text, True) for name, text in must_fail_cases()]
    cases += [(name, text, False) for name, text in random_cases(args.seed, args.random)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        failures = [f for f in pool.map(
            lambda item: run(args.dsopt, args.workdir, item[0], *item[1]),
            enumerate(cases)) if f]
    for failure in failures:
        print(f"fuzz: FAIL {failure}")
    must = sum(1 for c in cases if c[2])
    print(f"fuzz: {len(cases)} configs ({must} must be refused), "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
