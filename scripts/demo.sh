#!/bin/sh
# The bundled example: a small GPT-2-style training graph, exported from
# PyTorch at run time (nothing binary is stored in the repository), imported
# by dsopt. Shows the model summary and the ds IR.
set -eu
BUILD_DIR=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$BUILD_DIR/demo"
mkdir -p "$OUT"

echo "== exporting the example training graph (PyTorch -> ONNX)"
/usr/bin/python3 "$ROOT/test/zoo/export_zoo.py" --out "$OUT" --only gpt2 >/dev/null
echo "   $OUT/gpt2.onnx"
echo
echo "== dsopt $OUT/gpt2.onnx --emit=summary"
"$BUILD_DIR/bin/dsopt" "$OUT/gpt2.onnx" --emit=summary
echo
echo "== dsopt $OUT/gpt2.onnx --emit=mlir   (first 40 lines; full IR in $OUT/gpt2.mlir)"
"$BUILD_DIR/bin/dsopt" "$OUT/gpt2.onnx" --emit=mlir -o "$OUT/gpt2.mlir"
head -n 40 "$OUT/gpt2.mlir"
