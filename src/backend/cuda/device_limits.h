// What launch code asks of the current device: its multiprocessor count and the dynamic
// shared-memory opt-in of a kernel. Both belong to a device, not to the process: tensor-parallel
// rank threads each launch on their own device, so each is cached per device ordinal. Host calls
// with no stream work (safe inside a graph capture). Header-only so that the CPU emulations of the
// kernel files (bench/kernels/emu, moe_emu) get it with their stand-ins for the runtime calls.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace qs::cuda {

inline constexpr int kMaxDevices = 64;  // ordinals the per-device caches hold

// The calling thread's current device.
inline int current_device() {
    int dev = 0;
    QS_CUDA_CHECK(cudaGetDevice(&dev));
    QS_CHECK_MSG(dev >= 0 && dev < kMaxDevices, "CUDA device ordinal out of range");
    return dev;
}

// Multiprocessors of the current device.
inline int sm_count() {
    static std::array<std::atomic<int>, kMaxDevices> counts{};
    const int dev = current_device();
    int n = counts[size_t(dev)].load(std::memory_order_relaxed);
    if (n > 0) return n;
    QS_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    counts[size_t(dev)].store(n, std::memory_order_relaxed);
    return n;
}

// Lets launches of Kernel on the current device take up to `bytes` of dynamic shared memory.
// Above the default 48 KiB that is an opt-in per kernel and device: raised where a launch first
// needs more than the last raise on that device, a no-op otherwise.
template <auto Kernel>
void allow_dynamic_smem(size_t bytes) {
    constexpr size_t kDefault = 48 * 1024;
    static std::array<std::atomic<size_t>, kMaxDevices> allowed{};
    static std::mutex raising;  // the limit only grows, whichever threads raise it
    if (bytes <= kDefault) return;
    std::atomic<size_t>& dev_allowed = allowed[size_t(current_device())];
    if (dev_allowed.load(std::memory_order_acquire) >= bytes) return;
    std::lock_guard<std::mutex> lock(raising);
    if (dev_allowed.load(std::memory_order_relaxed) >= bytes) return;
    QS_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    dev_allowed.store(bytes, std::memory_order_release);
}

}  // namespace qs::cuda
