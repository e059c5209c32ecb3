#!/usr/bin/python3
"""Reproduce Table 1 of the ZeRO paper from dsopt's plans.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models" (SC 2020), Table 1: per-device memory of model states in
GB for mixed-precision Adam training (2 bytes of fp16 parameters, 2 of
gradients, K = 12 of fp32 master weights, momentum and variance per
parameter) under P_os (stage 1: 4Psi + 12Psi/N), P_os+g (stage 2:
2Psi + 14Psi/N) and P_os+g+p (stage 3: 16Psi/N).

For each Psi the script generates a GPT graph of that many parameters
(within 0.3%; weights never written: gen_gpt.py's sparse external data) and
plans it with `dsopt --precision bf16 --dp N --zero S --emit=plan` (stage-3
persistence threshold 0, as the paper shards everything). The plan's model
states of rank 0 (param + grad + optimizer bytes) must be within 1% of the
paper's formula at the paper's Psi; the formula is first checked against the
cells as printed in the paper (which round or truncate to the digits shown).
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Table 1 as printed: Psi -> N -> (P_os, P_os+g, P_os+g+p), GB.
PAPER = {
    7.5e9: {1: ("120", "120", "120"), 4: ("52.5", "41.3", "30"),
            16: ("35.6", "21.6", "7.5"), 64: ("31.4", "16.6", "1.88"),
            256: ("30.4", "15.4", "0.47"), 1024: ("30.1", "15.1", "0.12")},
    128e9: {1: ("2048", "2048", "2048"), 4: ("896", "704", "512"),
            16: ("608", "368", "128"), 64: ("536", "284", "32"),
            256: ("518", "263", "8"), 1024: ("513", "257", "2")},
    1e12: {1: ("16000", "16000", "16000"), 4: ("7000", "5500", "4000"),
           16: ("4750", "2875", "1000"), 64: ("4187", "2218", "250"),
           256: ("4046", "2054", "62.5"), 1024: ("4011", "2013", "15.6")},
}

# GPT shapes (layers, d_model, heads; vocab 50257, 2048 positions) whose
# parameter counts are within 0.3% of each Psi.
SHAPES = {7.5e9: (32, 4352, 34), 128e9: (36, 17152, 134), 1e12: (64, 36096, 282)}
VOCAB, SEQ = 50257, 2048


def gpt_params(layers, d):
    return layers * (12 * d * d + 13 * d) + VOCAB * d + SEQ * d + 2 * d


def formula(psi, n, stage):
    return {1: 4 * psi + 12 * psi / n, 2: 2 * psi + 14 * psi / n,
            3: 16 * psi / n}[stage] / 1e9


def printed_unit(cell):
    return 10.0 ** -(len(cell.split(".")[1])) if "." in cell else 1.0


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsopt", default="dsopt")
    parser.add_argument("--work", required=True, type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    failures = []
    print("| Psi | N | stage | plan (GB) | paper | formula | rel. diff |")
    print("|---|---|---|---|---|---|---|")
    for psi, rows in PAPER.items():
        layers, d, heads = SHAPES[psi]
        actual = gpt_params(layers, d)
        if abs(actual - psi) / psi > 0.003:
            failures.append(f"GPT shape for {psi:g}: {actual} parameters")
        model = args.work / f"gpt_{int(psi)}.onnx"
        subprocess.run([sys.executable, str(HERE / "gen_gpt.py"), "--layers",
                        str(layers), "--d-model", str(d), "--heads", str(heads),
                        "--vocab", str(VOCAB), "--seq", str(SEQ), "--out",
                        str(model)], check=True, stdout=subprocess.DEVNULL)
        for n, cells in rows.items():
            for stage, cell in zip((1, 2, 3), cells):
                expect = formula(psi, n, stage)
                # The transcription: the formula gives the printed cell.
                if abs(expect - float(cell)) > printed_unit(cell) + 1e-9:
                    failures.append(f"Psi {psi:g} N {n} stage {stage}: the "
                                    f"formula gives {expect}, the paper {cell}")
                config = args.work / f"zero{stage}.json"
                config.write_text(json.dumps({
                    "bf16": {"enabled": True},
                    "zero_optimization": {
                        "stage": stage,
                        "stage3_param_persistence_threshold": 0}}))
                plan_file = args.work / "plan.json"
                subprocess.run([args.dsopt, str(model), "--config", str(config),
                                "--dp", str(n), "--emit=plan", "-o",
                                str(plan_file)], check=True,
                               stderr=subprocess.DEVNULL)
                rank = json.loads(plan_file.read_text())["ranks"][0]
                states = (rank["param_bytes"] + rank["grad_bytes"] +
                          rank["optimizer_bytes"]) / 1e9
                diff = (states - expect) / expect
                print(f"| {psi:g} | {n} | {stage} | {states:.4g} | {cell} | "
                      f"{expect:.4g} | {diff:+.3%} |")
                if abs(diff) > 0.01:
                    failures.append(f"Psi {psi:g} N {n} stage {stage}: plan "
                                    f"{states} GB, paper {expect} GB")
    for failure in failures:
        print("FAIL:", failure)
    if failures:
        return 1
    print("OK: all 54 cells of Table 1 within 1%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
