// Emulated stand-in for src/backend/cuda/ptx_helpers.cuh in the GDN harness (cuda_runtime.h two
// folders up; it shadows the real header through the -I order of run_emu.sh): the dynamic
// shared-memory base, mma.sync m16n8k16 bf16 / fp16 and cp.async (16 and 4 bytes, commit, wait_group), landing at issue or at
// the wait as that block's schedule says. Only what the gdn_*.cu kernels use.
#pragma once

#include <cstdint>

#include "cuda_runtime.h"

namespace qs::cuda::ptx {

inline uint8_t* dynamic_smem() { return static_cast<uint8_t*>(::emu::dyn_smem()); }

// A shared-memory address is its byte offset in the block's dynamic shared memory here.
inline uint32_t smem_u32(const void* p) {
    const auto* b = static_cast<const uint8_t*>(p);
    const auto* base = dynamic_smem();
    if (b < base) {
        std::fprintf(stderr, "emu: smem_u32 of a pointer outside dynamic shared memory\n");
        std::abort();
    }
    return uint32_t(b - base);
}

inline void cp_async16(uint32_t dst, const void* src, int src_bytes) { ::emu::cp_async(dst, src, src_bytes, 16); }
inline void cp_async4(uint32_t dst, const void* src) { ::emu::cp_async(dst, src, 4, 4); }
inline void cp_async_commit() { ::emu::cp_commit(); }
template <int N>
inline void cp_async_wait() {
    ::emu::cp_wait(size_t(N));
}

// D = A (16x16, row) * B (16x8, col) + C, bf16 operands, fp32 accumulators in place.
inline void mma_16816_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    ::emu::mma_m16n8k16_bf16(c, a, b0, b1);
}
// The same with fp16 operands.
inline void mma_16816_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    ::emu::mma_m16n8k16_f16(c, a, b0, b1);
}

}  // namespace qs::cuda::ptx
