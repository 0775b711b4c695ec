// A float's bits and back, in device code and in the CPU emulators of bench/kernels/emu (which
// compile kernel sources with g++, where __float_as_uint / __uint_as_float do not exist).
#pragma once

#include <cstdint>
#include <cstring>

namespace qs::cuda {

__device__ __forceinline__ uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
#endif
}

__device__ __forceinline__ float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    std::memcpy(&f, &u, 4);
    return f;
#endif
}

}  // namespace qs::cuda
