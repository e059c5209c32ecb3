#!/bin/sh
# The bundled example: a small GPT-2-style training graph, exported from
# PyTorch at run time (nothing binary is stored in the repository). dsopt
# imports it, shows what it found, compiles it into an executable with a
# static memory plan, and runs it on the exported inputs.
set -eu
BUILD_DIR=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$BUILD_DIR/demo"
DSOPT="$BUILD_DIR/bin/dsopt"
rm -rf "$OUT"
mkdir -p "$OUT/inputs" "$OUT/outputs"

echo "== exporting the example training graph (PyTorch -> ONNX)"
/usr/bin/python3 "$ROOT/test/zoo/export_zoo.py" --out "$OUT" --only gpt2 >/dev/null
echo "   $OUT/gpt2.onnx"
echo
echo "== dsopt $OUT/gpt2.onnx --emit=summary"
"$DSOPT" "$OUT/gpt2.onnx" --emit=summary
echo
echo "== dsopt $OUT/gpt2.onnx --emit=mlir   (first 30 lines; full IR in $OUT/gpt2.mlir)"
"$DSOPT" "$OUT/gpt2.onnx" --emit=mlir -o "$OUT/gpt2.mlir"
head -n 30 "$OUT/gpt2.mlir" | cut -c1-160
echo
echo "== dsopt $OUT/gpt2.onnx -o $OUT/program"
"$DSOPT" "$OUT/gpt2.onnx" -o "$OUT/program"
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
