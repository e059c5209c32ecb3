#!/bin/sh
# The bundled example: a small GPT-2-style training graph, exported from
# PyTorch at run time (nothing binary is stored in the repository). dsopt
# imports it, shows what it found, compiles it into a forward executable and
# a training executable (DeepSpeed config: AdamW, warmup, clipping, gradient
# accumulation) with static memory plans, runs the forward pass on the
# exported inputs, and trains it for a few dozen steps, in fp32 and in bf16
# (16-bit working copies, fp32 master weights). Then it compiles the
# same model for 4 ranks, `--zero=3 --pp=2 --dp=2` (two pipeline stages, each
# ZeRO-3 sharded over two data-parallel ranks), trains it under mpirun and
# writes the measured schedule as a Chrome trace; and for 4 ranks as
# `--tp=2 --pp=2` (two pipeline stages, each tensor-parallel over two ranks).
set -eu
BUILD_DIR=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$BUILD_DIR/demo"
DSOPT="$BUILD_DIR/bin/dsopt"
rm -rf "$OUT"
mkdir -p "$OUT/inputs" "$OUT/outputs"

echo "== exporting the example training graph (PyTorch -> ONNX)"
/usr/bin/python3 "$ROOT/test/oracles/export_zoo.py" --out "$OUT" --only gpt2 >/dev/null
echo "   $OUT/gpt2.onnx"
echo
echo "== dsopt $OUT/gpt2.onnx --emit=summary"
"$DSOPT" "$OUT/gpt2.onnx" --emit=summary
echo
echo "== dsopt $OUT/gpt2.onnx --emit=mlir   (first 30 lines; full IR in $OUT/gpt2.mlir)"
"$DSOPT" "$OUT/gpt2.onnx" --emit=mlir -o "$OUT/gpt2.mlir"
head -n 30 "$OUT/gpt2.mlir" | cut -c1-160
echo
cat > "$OUT/ds_config.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.98], "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR",
                "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-3, "warmup_num_steps": 8, "warmup_type": "linear"}},
  "gradient_clipping": 1.0,
  "steps_per_print": 4
}
JSON
echo "== dsopt $OUT/gpt2.onnx --config $OUT/ds_config.json -o $OUT/program"
cat "$OUT/ds_config.json"
"$DSOPT" "$OUT/gpt2.onnx" --config "$OUT/ds_config.json" -o "$OUT/program"
cat "$OUT/program/plan.txt"
echo
echo "== $OUT/program/run --inputs $OUT/inputs --outputs $OUT/outputs"
/usr/bin/python3 - "$OUT" <<'PY'
import sys, numpy as np
out = sys.argv[1]
for name, value in np.load(f"{out}/gpt2.inputs.npz").items():
    np.save(f"{out}/inputs/{name}.npy", value)
PY
"$OUT/program/run" --inputs "$OUT/inputs" --outputs "$OUT/outputs"
/usr/bin/python3 - "$OUT" <<'PY'
import sys, numpy as np
out = sys.argv[1]
torch_loss = float(np.load(f"{out}/gpt2.outputs.npz")["loss"])
loss = float(np.load(f"{out}/outputs/loss.npy"))
print(f"loss: dsopt {loss:.7f}, PyTorch {torch_loss:.7f}")
PY
echo
echo "== $OUT/program/train --data $OUT/data --steps 40 --save-onnx $OUT/trained/gpt2.onnx"
/usr/bin/python3 "$ROOT/test/oracles/make_train_data.py" --model gpt2 --gas 2 --n-batches 4 --out "$OUT/data" >/dev/null
mkdir -p "$OUT/trained"
"$OUT/program/train" --data "$OUT/data" --steps 40 --log-json "$OUT/train.jsonl" \
  --save-onnx "$OUT/trained/gpt2.onnx"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
import onnx
out = sys.argv[1]
log = [json.loads(line) for line in open(f"{out}/train.jsonl")]
first, last = log[0]["loss"], sum(entry["loss"] for entry in log[-4:]) / 4
onnx.checker.check_model(onnx.load(f"{out}/trained/gpt2.onnx"))
print(f"loss: step 1 {first:.4f}, last 4 steps {last:.4f}; trained model {out}/trained/gpt2.onnx loads")
if not last < 0.9 * first:
    sys.exit("the loss did not go down")
PY
echo
echo "== dsopt $OUT/gpt2.onnx --config $OUT/ds_config.json --precision bf16 -o $OUT/program-bf16"
echo "   (bf16 working copies and activations, fp32 master weights and optimizer states)"
"$DSOPT" "$OUT/gpt2.onnx" --config "$OUT/ds_config.json" --precision bf16 -o "$OUT/program-bf16"
sed -n '/^training program/,/^    activation /p' "$OUT/program-bf16/plan.txt"
echo
echo "== $OUT/program-bf16/train --data $OUT/data --steps 40 --save-onnx $OUT/trained/gpt2-bf16.onnx"
"$OUT/program-bf16/train" --data "$OUT/data" --steps 40 --log-json "$OUT/train-bf16.jsonl" \
  --save-onnx "$OUT/trained/gpt2-bf16.onnx"
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
import onnx
out = sys.argv[1]
fp32 = [json.loads(line) for line in open(f"{out}/train.jsonl")]
bf16 = [json.loads(line) for line in open(f"{out}/train-bf16.jsonl")]
# The losses fall ~100x here; differences are measured against step 1's.
worst = max(abs(a["loss"] - b["loss"]) for a, b in zip(bf16, fp32)) / fp32[0]["loss"]
saved = onnx.load(f"{out}/trained/gpt2-bf16.onnx")
onnx.checker.check_model(saved)
types = {t.data_type for t in saved.graph.initializer}
print(f"loss: bf16 step 1 {bf16[0]['loss']:.4f}, step 40 {bf16[-1]['loss']:.4f}; fp32 step 40 "
      f"{fp32[-1]['loss']:.4f}; largest difference {worst:.1e} of the step-1 loss; the saved model holds "
      f"the fp32 master weights (ONNX data types {sorted(types)})")
if worst > 5e-2:
    sys.exit("the bf16 run does not follow the fp32 one")
PY
echo
cat > "$OUT/ds_config_pp.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.98], "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR",
                "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-3, "warmup_num_steps": 8, "warmup_type": "linear"}},
  "gradient_clipping": 1.0,
  "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
  "steps_per_print": 4
}
JSON
echo "== dsopt $OUT/gpt2.onnx --config $OUT/ds_config_pp.json --zero=3 --pp=2 --dp=2 -o $OUT/pipeline"
echo "   (4 ranks: 2 pipeline stages x 2 data-parallel ranks, ZeRO-3 along dp, 1F1B over 4 micro-batches)"
"$DSOPT" "$OUT/gpt2.onnx" --config "$OUT/ds_config_pp.json" --zero=3 --pp=2 --dp=2 -o "$OUT/pipeline"
sed -n '/^  pipeline /,/^$/p' "$OUT/pipeline/plan.txt"
echo
# Checks a multi-rank pipelined run: the loss fell, every rank's arena and
# collective bytes (tp all-reduces, ZeRO's collectives, stage transfers)
# equal the plan, and the saved model loads.
cat > "$OUT/check_pipeline_run.py" <<'PY'
import json, sys
import onnx
log_path, program, trained = sys.argv[1:4]
records = [json.loads(line) for line in open(log_path)]
log = [r for r in records if not r.get("summary")]
summary = next(r for r in records if r.get("summary"))
plan = json.load(open(f"{program}/plan.json"))
first, last = log[0]["loss"], sum(entry["loss"] for entry in log[-4:]) / 4
onnx.checker.check_model(onnx.load(trained))
measured = {r["rank"]: r for r in summary["ranks"]}
peaks = {r: m["arena_peak_bytes"] for r, m in measured.items()}
steps = len(log)
exact = all(measured[r["rank"]]["arena_peak_bytes"] == r["arena_peak_bytes"] and
            all(measured[r["rank"]]["collective_bytes"].get(kind, {}).get("sent", 0) ==
                steps * planned["sent"]
                for kind, planned in r["collective_bytes"].items())
            for r in plan["ranks"])
print(f"loss: step 1 {first:.4f}, last 4 steps {last:.4f}; arena per rank {sorted(peaks.items())}; "
      f"memory and bytes sent {'equal to' if exact else 'DIFFERENT FROM'} the plan")
print(f"bubble: simulated {plan['pipeline']['bubble_fraction']:.3f}, "
      f"measured {summary['pipeline']['bubble_measured']:.3f} (Chrome trace: {program}/trace.json, "
      f"open in ui.perfetto.dev)")
if not last < 0.9 * first or not exact:
    sys.exit("the pipelined run did not train, or its memory or traffic differs from the plan")
PY
# Trains the 4-rank program NAME (in $OUT/NAME) for 40 steps on its own data
# (GAS micro-batches a step), with a trace and the trained model saved as
# SAVED, then checks the run.
train_4_ranks() {
  name=$1 data=$2 gas=$3 saved=$4
  echo "== mpirun -np 4 $OUT/$name/train --data $OUT/$data --steps 40 --trace $OUT/$name/trace.json"
  /usr/bin/python3 "$ROOT/test/oracles/make_train_data.py" --model gpt2 --gas "$gas" --n-batches 4 \
    --out "$OUT/$data" >/dev/null
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 "$OUT/$name/train" \
    --data "$OUT/$data" --steps 40 --threads 1 --log-json "$OUT/$name.jsonl" \
    --trace "$OUT/$name/trace.json" --save-onnx "$OUT/trained/$saved"
  /usr/bin/python3 "$OUT/check_pipeline_run.py" "$OUT/$name.jsonl" "$OUT/$name" "$OUT/trained/$saved"
}
train_4_ranks pipeline data-pp 8 gpt2-pp.onnx
echo
echo "== dsopt $OUT/gpt2.onnx --config $OUT/ds_config_pp.json --zero=1 --tp=2 --pp=2 -o $OUT/tp-pipeline"
echo "   (4 ranks: 2 pipeline stages x 2 tensor-parallel ranks, Megatron's column/row layout"
echo "    found in the graph, 1F1B over 4 micro-batches; grid (pp, dp, tp), tp fastest)"
"$DSOPT" "$OUT/gpt2.onnx" --config "$OUT/ds_config_pp.json" --zero=1 --tp=2 --pp=2 \
  -o "$OUT/tp-pipeline" 2>"$OUT/tp-pipeline.log" || { cat "$OUT/tp-pipeline.log"; exit 1; }
grep -v "stays replicated" "$OUT/tp-pipeline.log" || true
sed -n '/^  pipeline /,/^$/p' "$OUT/tp-pipeline/plan.txt"
echo
train_4_ranks tp-pipeline data-tp 4 gpt2-tp-pp.onnx
