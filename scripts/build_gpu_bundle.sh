#!/usr/bin/env bash
# Builds the CUDA binaries here (nvcc, no GPU needed) with third-party libraries linked
# statically, and collects them in gpu-bundle/ (git-ignored) to be carried to the GPU machine,
# which has the CUDA runtime and cuBLAS but none of Debian's -dev libraries.
# Usage: bash scripts/build_gpu_bundle.sh [targets...]   (default: qwenserve, GPU tests, labs, benches;
# add qs_kernel_trace for gpu_run.sh's trace_step)
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
  # Executables land in build-gpu/, tests/ or bench/; the one library, qs_kernel_trace, in build-gpu/.
  for f in build-gpu/$t build-gpu/tests/$t build-gpu/bench/$t build-gpu/lib$t.so; do
    [ -f "$f" ] && cp "$f" gpu-bundle/ && strip "gpu-bundle/$(basename "$f")" 2>/dev/null || true
  done
done
# The kernel tracer needs libcupti. The GPU machine's CUDA layout and CUPTI version are unknown here,
# so the one it was linked against travels beside it (~1 MB of the archive; gpu_run.sh puts the bundle
# first on LD_LIBRARY_PATH). QS_BUNDLE_CUPTI=0 leaves it out: gpu_run.sh then looks for the machine's.
if [ -f gpu-bundle/libqs_kernel_trace.so ] && [ "${QS_BUNDLE_CUPTI:-1}" != 0 ]; then
  cupti=$(ldd build-gpu/libqs_kernel_trace.so | awk '/libcupti/ {print $3}')
  if [ -f "$cupti" ]; then cp -L "$cupti" gpu-bundle/; else echo "libcupti not found for libqs_kernel_trace.so" >&2; fi
fi
cp /usr/lib/x86_64-linux-gnu/libgomp.so.1 gpu-bundle/  # the GPU machine may lack it
ls -la gpu-bundle
du -sh gpu-bundle
# The device tool carries at most 64 MiB with the tree: ship the bundle compressed (~2 MB).
mkdir -p .carry
tar -C gpu-bundle -cJf .carry/gpu-bundle.tar.xz .
ls -la .carry/gpu-bundle.tar.xz
