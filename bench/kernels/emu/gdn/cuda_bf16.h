// Host emulation of the bf16 helpers used by the kernels (see cuda_runtime.h beside this file).
#pragma once
#include "cuda_runtime.h"
struct __nv_bfloat16 { uint16_t x; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
inline __nv_bfloat16 emu_f2bf(float f) {
    uint32_t u = __float_as_uint(f);
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{uint16_t(u >> 16)};
}
inline float emu_bf2f(__nv_bfloat16 h) { return __uint_as_float(uint32_t(h.x) << 16); }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return float2{emu_bf2f(v.x), emu_bf2f(v.y)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{emu_f2bf(a), emu_f2bf(b)}; }
