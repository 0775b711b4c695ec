// The device layout of INT4 W4A16 weights (issue 18 item 4): what the CUDA INT4 kernels
// (backend/cuda/int4_linear_kernels.h) read, made on the host at upload from any symmetric 4-bit
// grouped-integer LinearWeight without g_idx, and its reference dequantisation. Layout:
//  - codes: u32 [out, in/8], the code of input i in word i/8 at bits 4·(i%8) (lowest first),
//    stored as q's 4-bit two's complement (q in [−8, 7]; CUTLASS's int4b_t, which its
//    mixed-input GEMMs read in place: moe_int4_mixed.h). The checkpoints' unsigned code u = q + 8
//    (compressed-tensors' pack-quantized words, GPTQ/AutoRound's qweight transposed from [in/8, out])
//    is u ^ 8 in that form: every word is XORed with 0x88888888 at packing. The kernels' unpacking
//    (cuda/int4_unpack.cuh) costs the same either way (one lop3 makes 128 + u from either);
//  - scales: bf16 [out, in/group], W[o][i] = q · scale[o][i/group], the product in fp32
//    (exact: a bf16 scale times a 4-bit integer has at most 12 significant bits), which is
//    LinearWeight::row_to_f32's value bit for bit.
// Rows are 16-byte aligned when in % 32 == 0 (a 16-byte load = 32 codes, 4 words).
// Host-only, no CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/linear_weight.h"

namespace qs {

struct Int4DeviceLayout {
    int64_t out = 0, in = 0, group = 0;
    std::vector<uint32_t> codes;   // [out, in/8]
    std::vector<uint16_t> scales;  // bf16 bits [out, in/group]
};

// Empty when w can take the device INT4 layout, else why not (the caller keeps the BF16 path):
// kIntGroup, 4 bits, symmetric (no zeros, or every effective zero 8), no g_idx, in % 32 == 0, group % 8 == 0 dividing in,
// scales BF16 (or F16/F32 values that bf16 holds exactly).
std::string int4_layout_unsupported(const LinearWeight& w);

// Packs w (int4_layout_unsupported(w) must be empty).
Int4DeviceLayout int4_device_layout(const LinearWeight& w);

// Row `row` of W from the device layout, as float32 (the kernels' weight values).
void int4_layout_row(const Int4DeviceLayout& l, int64_t row, float* out);

}  // namespace qs
