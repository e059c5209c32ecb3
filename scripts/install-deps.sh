#!/bin/sh
# Installs every Debian package dsopt needs to build, test and run.
# Idempotent: does nothing (not even `apt-get update`) when all are present.
set -eu

PACKAGES="
  build-essential cmake ninja-build pkg-config
  llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
  libonnx-dev libprotobuf-dev protobuf-compiler
  python3 python3-torch python3-onnx python3-numpy libonnx-testdata
  libopenmpi-dev openmpi-bin libopenblas-dev libgtest-dev
  time clang-22 libclang-rt-22-dev
  liburing-dev
  python3-torchvision
  ccache
"

missing=""
for p in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done

if [ -z "$missing" ]; then
  echo "install-deps: all packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages:$missing" >&2
  echo "install-deps: run as root (or: sudo $0) to install them" >&2
  exit 1
fi

echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing
