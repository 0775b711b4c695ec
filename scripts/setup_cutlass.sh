#!/usr/bin/env bash
# Installs CUTLASS's C++ headers (cutlass/, cute/; header-only) from the nvidia-cutlass wheel on
# PyPI into .deps/cutlass-4.2.0/include (git-ignored). The CUDA build compiles the MoE prefill
# grouped GEMM (src/backend/cuda/moe_cutlass_gemm.cu) against them; without them CMake compiles a
# stub and the MoE block keeps its mma.sync kernels. Skipped when the headers are there.
# Called by setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=4.2.0.0
SHA256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
PREFIX="$PWD/.deps/cutlass-4.2.0"
if [ -f "$PREFIX/include/cutlass/cutlass.h" ] && [ -f "$PREFIX/include/cute/tensor.hpp" ]; then
  echo "setup_cutlass: $PREFIX is installed"
  exit 0
fi
work="$PWD/.deps/src"
mkdir -p "$work"
wheel="$work/nvidia_cutlass-$VERSION-py3-none-any.whl"
if [ ! -f "$wheel" ] || ! echo "$SHA256  $wheel" | sha256sum -c --quiet - 2>/dev/null; then
  echo "setup_cutlass: fetching nvidia-cutlass==$VERSION from PyPI"
  pip=pip
  [ -x .venv/bin/pip ] && pip=.venv/bin/pip
  "$pip" download --quiet --no-deps --only-binary=:all: "nvidia-cutlass==$VERSION" -d "$work"
fi
echo "$SHA256  $wheel" | sha256sum -c --quiet -
rm -rf "$work/cutlass-$VERSION" "$PREFIX.part"
mkdir -p "$work/cutlass-$VERSION" "$PREFIX.part"
python3 -m zipfile -e "$wheel" "$work/cutlass-$VERSION"
cp -r "$work/cutlass-$VERSION/cutlass_library/source/include" "$PREFIX.part/include"
cp "$work/cutlass-$VERSION/nvidia_cutlass-$VERSION.dist-info/licenses/LICENSE.txt" "$PREFIX.part/LICENSE" 2>/dev/null ||
  find "$work/cutlass-$VERSION" -name 'LICENSE*' -exec cp {} "$PREFIX.part/LICENSE" \; -quit
rm -rf "$PREFIX" && mv "$PREFIX.part" "$PREFIX"
rm -rf "$work/cutlass-$VERSION"
echo "setup_cutlass: headers in $PREFIX/include"
