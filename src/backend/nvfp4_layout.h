// The device layout of NVFP4 weights for the 4-bit kernels (issue 18 item 4; CudaOptions::
// nvfp4_kernels): what the CUDA kernels that read INT4 (backend/int4_layout.h) read for NVFP4 too,
// made on the host at upload from any kNvfp4 LinearWeight (ModelOpt or compressed-tensors), and
// its reference dequantisation. Layout:
//  - codes: u32 [out, in/8], the E2M1 code of input i in word i/8 at bits 4·(i%8) (lowest first):
//    the checkpoint's bytes unchanged (element 2j in the low nibble of byte j; little-endian words),
//    the same nibble order as the INT4 layout's;
//  - scales: the checkpoint's E4M3 block scale bytes [out, in/16], unchanged (one byte per 16
//    weights; the kernels widen a byte exactly by placing its bits, int4_unpack.cuh scale_f32 and
//    nvfp4_scale_folded, so the NaN bytes 0x7F / 0xFF are refused: such a weight keeps the BF16 path);
//  - global: one fp32 multiplier per matrix, the global scale (ModelOpt's weight_scale_2) or its
//    reciprocal (compressed-tensors' weight_global_scale divides), applied once per output.
// W[o][i] = e2m1(code) · scale · global: e2m1 × e4m3 is exact in bf16 (at most 2 + 4 = 6
// significant bits, exponents 2^−10 .. 2^11), so the kernels form it with no rounding and the only
// rounding against LinearWeight::row_to_f32 is where the global is applied (the library rounds
// e4m3·global first, then × e2m1; here e2m1·e4m3 is exact and × global rounds once): at most one
// fp32 ulp per weight with ModelOpt's multiplied global, two with compressed-tensors' divided one
// (its reciprocal rounds once more) (nvfp4_layout_test.cpp). Code 8 (−0) decodes as −0 here (+0 in ModelOpt's
// table): the same value in every sum. Rows are 16-byte aligned when in % 32 == 0.
// Host-only, no CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/linear_weight.h"

namespace qs {

struct Nvfp4DeviceLayout {
    int64_t out = 0, in = 0;
    std::vector<uint32_t> codes;   // [out, in/8]
    std::vector<uint8_t> scales;   // E4M3 bytes [out, in/16]
    float global = 1.0f;           // multiplier applied to every output
};

// Empty when w can take the device NVFP4 layout, else why not (the caller keeps the BF16 path):
// kNvfp4, in % 32 == 0, scales F8_E4M3 and none NaN, a finite nonzero global scale.
std::string nvfp4_layout_unsupported(const LinearWeight& w);

// Packs w (nvfp4_layout_unsupported(w) must be empty).
Nvfp4DeviceLayout nvfp4_device_layout(const LinearWeight& w);

// E2M1 code (0..15) times an E4M3 scale byte as a bf16 value: exact (nvfp4_layout_test checks all
// 16 × 256 pairs). What the kernels form in registers before the global.
float nvfp4_code_times_scale(uint8_t code, uint8_t scale_byte);

// Row `row` of W from the device layout, as float32 (the kernels' weight values).
void nvfp4_layout_row(const Nvfp4DeviceLayout& l, int64_t row, float* out);

}  // namespace qs
