#!/usr/bin/env bash
# Every zoo model's cuda training program under the CUDA emulation
# (docs/runtime.md, "The CUDA emulation"), against the same model's cpu
# program: fp32 (loss rel 1e-4) and bf16 (rel 2e-2, the GPU check's
# bounds); gpt2 in fp16 and with its optimizer offloaded; and the
# multi-rank programs under mpirun with NCCL over MPI: mlp's dp-2 ZeRO-3
# and 2-stage pipeline, gpt2's dp-2 ZeRO-3 (fp32, bf16), dp-2 ZeRO-2 fp16
# and dp-2 x pp-2 ZeRO-1 bf16 (4 ranks), llama's tp-2 and dp-2 x tp-2
# ZeRO-1 (4 ranks), bert's dp-2 ZeRO-2 bf16, cnn's dp 2. No GPU needed;
# 42 cases of about 10 s of CPU each (test/Compile/cuda-emu-run.test and
# cuda-ranks.test run a cheap part of it in `check`).
#
# Usage: scripts/cuda-emu-sweep.sh [--build DIR] [--steps N] [--models M,...] WORK
#   --build   dsopt's build (default build/), with libdsrt_cuda_emu.a built
#   --steps   training steps (default 3)
#   --models  zoo models (default: gpt2,llama,bert,mlp,cnn,mobilenet,bn_mixer
#             and the torchvision ones tv_vit,tv_swin,tv_convnext,tv_densenet,
#             tv_shufflenet_v2,tv_mobilenet_v3,tv_squeezenet,tv_resnet)
# Prints one line per case (ok or FAILED, with its log under WORK) and
# exits 1 when any case failed.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=build
steps=3
models=gpt2,llama,bert,mlp,cnn,mobilenet,bn_mixer,tv_vit,tv_swin,tv_convnext,tv_densenet
models+=,tv_shufflenet_v2,tv_mobilenet_v3,tv_squeezenet,tv_resnet
while [ $# -gt 1 ]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    *) echo "error: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $# -eq 1 ] || { sed -n 2,19p "$0"; exit 2; }
work=$(mkdir -p "$1" && cd "$1" && pwd)
build=$(cd "$build" && pwd)
py=/usr/bin/python3
emu_lib=$build/lib/libdsrt_cuda_emu.a
[ -f "$emu_lib" ] || { echo "error: $emu_lib not built (ninja -C $build dsrt_cuda_emu)" >&2; exit 2; }

"$py" "$root/test/oracles/export_zoo.py" --out "$work/zoo" --only "$models" > "$work/export.log" 2>&1 ||
  { echo "error: the zoo export failed (see $work/export.log)" >&2; exit 2; }

# The model's batch (its first input's axis 0) from the export's index.
batch() {
  "$py" -c 'import json, sys
e = {e["name"]: e for e in json.load(open(sys.argv[1]))}[sys.argv[2]]
print(e["inputs"][e["input_names"][0]][1][0])' "$work/zoo/zoo.json" "$1"
}

failed=0
# case NAME MODEL GLOBAL_BATCH RTOL RANKS [dsopt flags...]
case_() {
  local name=$1 model=$2 global=$3 rtol=$4 ranks=$5
  shift 5
  local data=$work/data/$model-$global flags=()
  [ -d "$data" ] || "$py" "$root/test/oracles/make_train_data.py" --model "$model" \
    --global-batch "$global" --out "$data" > /dev/null
  for f in "$@"; do flags+=("--dsopt-flag=$f"); done
  if "$py" "$root/test/oracles/check_cuda_emu.py" --dsopt "$build/bin/dsopt" --emu-lib "$emu_lib" \
      --model "$work/zoo/$model.onnx" --data "$data" --work "$work/$name" --steps "$steps" \
      --rtol "$rtol" --ranks "$ranks" "${flags[@]}" > "$work/$name.log" 2>&1; then
    echo "ok      $name"
  else
    echo "FAILED  $name ($work/$name.log)"
    failed=1
  fi
}

IFS=, read -r -a list <<< "$models"
for m in "${list[@]}"; do
  b=$(batch "$m")
  case_ "$m-fp32" "$m" "$b" 1e-4 1
  case_ "$m-bf16" "$m" "$b" 2e-2 1 --precision=bf16
done
for m in "${list[@]}"; do
  b=$(batch "$m")
  case "$m" in
    mlp)
      case_ mlp-dp2-zero3 mlp $((2 * b)) 1e-4 2 --dp=2 --zero=3
      case_ mlp-pp2 mlp "$b" 1e-4 2 --pp=2 ;;
    gpt2)
      case_ gpt2-fp16 gpt2 "$b" 2e-2 1 --precision=fp16
      case_ gpt2-offload gpt2 "$b" 1e-4 1 --offload-optimizer=cpu
      case_ gpt2-dp2-zero3 gpt2 $((2 * b)) 1e-4 2 --dp=2 --zero=3
      case_ gpt2-dp2-zero3-bf16 gpt2 $((2 * b)) 2e-2 2 --dp=2 --zero=3 --precision=bf16
      case_ gpt2-dp2-zero2-fp16 gpt2 $((2 * b)) 2e-2 2 --dp=2 --zero=2 --precision=fp16
      case_ gpt2-dp2-pp2-zero1-bf16 gpt2 $((2 * b)) 2e-2 4 --dp=2 --pp=2 --zero=1 \
        --precision=bf16 ;;
    llama)
      case_ llama-tp2 llama "$b" 1e-4 2 --tp=2
      case_ llama-dp2-tp2-zero1 llama $((2 * b)) 1e-4 4 --dp=2 --tp=2 --zero=1 ;;
    bert)
      case_ bert-dp2-zero2-bf16 bert $((2 * b)) 2e-2 2 --dp=2 --zero=2 --precision=bf16 ;;
    cnn)
      case_ cnn-dp2 cnn $((2 * b)) 1e-4 2 --dp=2 ;;
  esac
done
exit $failed
