#!/usr/bin/env bash
# Builds the CUDA binaries here (nvcc, no GPU needed) with third-party libraries linked
# statically, and collects them in gpu-bundle/ (git-ignored) to be carried to the GPU machine,
# which has the CUDA runtime and cuBLAS but none of Debian's -dev libraries.
# Usage: bash scripts/build_gpu_bundle.sh [targets...]   (default: qwenserve, GPU tests, labs, benches)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${QS_JOBS:-2}"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DQS_CUDA=ON -DQS_STATIC_DEPS=ON -DQS_BUILD_KERNEL_LABS=ON > build-gpu.configure.log
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(qwenserve qs_gpu_tests)
  for lab in bench/kernels/*_lab.cu; do [ -e "$lab" ] && targets+=("$(basename "$lab" .cu)"); done
  targets+=(gpu_forward_bench gpu_vision_bench)
fi
ninja -C build-gpu -j"$jobs" "${targets[@]}"
rm -rf gpu-bundle && mkdir -p gpu-bundle
for t in "${targets[@]}"; do
  for f in build-gpu/$t build-gpu/tests/$t build-gpu/bench/$t; do
    [ -f "$f" ] && cp "$f" gpu-bundle/ && strip gpu-bundle/"$t" 2>/dev/null || true
  done
done
cp /usr/lib/x86_64-linux-gnu/libgomp.so.1 gpu-bundle/  # the GPU machine may lack it
ls -la gpu-bundle
du -sh gpu-bundle
# The device tool carries at most 64 MiB with the tree: ship the bundle compressed (~2 MB).
mkdir -p .carry
tar -C gpu-bundle -cJf .carry/gpu-bundle.tar.xz .
ls -la .carry/gpu-bundle.tar.xz
