// Host emulation of the fp16 helpers used by the kernels (see cuda_runtime.h beside this file):
// conversions through the compiler's _Float16 (IEEE binary16, round to nearest even, subnormals,
// overflow to infinity, as the GPU's cvt.rn.f16.f32).
#pragma once
#include "cuda_runtime.h"
struct __half { uint16_t x; };
struct __half2 { __half x, y; };
inline __half emu_f2h(float f) {
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t u;
    std::memcpy(&u, &h, 2);
    return __half{u};
}
inline float emu_h2f(uint16_t u) {
    _Float16 h;
    std::memcpy(&h, &u, 2);
    return static_cast<float>(h);
}
inline __half2 __floats2half2_rn(float a, float b) { return __half2{emu_f2h(a), emu_f2h(b)}; }
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline float __half2float(__half h) { return emu_h2f(h.x); }
