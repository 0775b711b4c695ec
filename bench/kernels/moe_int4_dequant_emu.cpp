// CPU emulation test of the INT4 → BF16 scratch dequantisation (src/backend/cuda/moe_int4_dequant.cu,
// CudaOptions::moe_int4_scratch): compiles the real kernel source as host C++ with the emulation
// shim (moe_emu_shim.h) and runs it on small shapes (E = 3 routed experts, H = 96, I = 64, I_shared
// = 32, groups 8, 16 and 32; and H = 256, I = 160, I_shared = 96: several blocks), random codes and random bf16 scales (not powers of two, so the
// bf16 rounding of q · scale is exercised, ties included), against the host's value:
// f32_to_bf16(q · scale) with q the nibble's two's complement value (core/dtype.h, round to nearest even), which is the BF16 copy the
// upload makes (LinearWeight::row_to_f32 of the same weight, int4_layout.h). Every element must
// match bit for bit; with expert_off, an expert without rows must be left untouched. Both kernel
// versions (moe_int4_dequant.cu).
// NVFP4 (MoeExpertTable::nvfp4, group 16): random E2M1 codes, random E4M3 block-scale bytes (every
// normal and subnormal one, widened to bf16 as the device layout holds them) and a random fp32 global
// per matrix (not a power of two), against ModelOpt's dequantisation as LinearWeight::row_to_f32
// computes it: e2m1 · (e4m3 · global) in fp32, then bf16 (E2M1 and E4M3 decoded here by their
// definitions; code 8 is +0 there, −0 in the kernel: compared as values, ±0 equal). No GPU needed.
// Build (from the repository root):
//   g++ -O1 -g -std=c++20 -fsanitize=address -x c++ -Isrc -Ibench/kernels -I/usr/local/cuda/include \
//       bench/kernels/moe_int4_dequant_emu.cpp -o build/moe_int4_dequant_emu -lpthread
// Run: build/moe_int4_dequant_emu (prints PASS or the first mismatches; exit status 1 on failure).
#include "moe_emu_shim.h"

#include "backend/cuda/moe_int4_dequant.cu"
#include "core/dtype.h"

#include <cstdio>
#include <random>

using namespace qs::cuda;

namespace {

// E4M3 ("e4m3fn") by its definition: bias 7, subnormals m · 2^−9 (bytes 0x7F/0xFF, NaN, not drawn).
float e4m3_value(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    const float mag = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + float(m) / 8.0f, e - 7);
    return b & 0x80 ? -mag : mag;
}
// E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit; ModelOpt's table decodes code 8 as +0.
float e2m1_value(uint32_t c) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return c == 8 ? 0.0f : c & 8 ? -mag[c & 7] : mag[c & 7];
}

struct Matrix {
    int rows, cols;
    std::vector<uint32_t> codes;   // [rows, cols/8]
    std::vector<uint16_t> scales;  // INT4: bf16 [rows, cols/group]
    std::vector<uint16_t> out;     // the scratch's bf16 [rows, cols]
    std::vector<uint8_t> scale_bytes;  // NVFP4: the E4M3 bytes [rows, cols/16]
    float global = 1.0f;               // NVFP4: the matrix's global multiplier
};

// group 0: NVFP4 (group 16). version: the kernel (launch_moe_int4_dequant's).
int run_case(int H, int I, int Is, int group_or_nvfp4, bool with_off, std::mt19937& rng, int version) {
    const bool nvfp4 = group_or_nvfp4 == 0;
    const int group = nvfp4 ? 16 : group_or_nvfp4;
    const int E = 3;
    std::vector<Matrix> m;  // expert e's gate, up, down at 3e .. 3e+2
    for (int e = 0; e <= E; ++e) {
        const int Ie = e == E ? Is : I;
        for (int k = 0; k < 3; ++k) {
            Matrix x;
            x.rows = k == 2 ? H : Ie;
            x.cols = k == 2 ? Ie : H;
            x.codes.resize(size_t(x.rows) * x.cols / 8);
            for (uint32_t& w : x.codes) w = uint32_t(rng());
            x.scales.resize(size_t(x.rows) * (x.cols / group));
            std::uniform_real_distribution<float> mag(-12.0f, 2.0f);
            for (uint16_t& s : x.scales) {
                const float v = std::ldexp(1.0f + float(rng() % 1000) / 1000.0f, int(mag(rng)));
                s = qs::f32_to_bf16(rng() % 2 ? v : -v).bits;
            }
            if (nvfp4) {
                x.scale_bytes.resize(x.scales.size());
                for (size_t i = 0; i < x.scales.size(); ++i) {
                    uint8_t b = uint8_t(rng() % 0x7F);  // 0x00 .. 0x7E: zero, subnormals, normals
                    x.scale_bytes[i] = b;
                    x.scales[i] = qs::f32_to_bf16(e4m3_value(b)).bits;  // exact
                }
                x.global = std::ldexp(1.0f + float(rng() % 100000) / 100000.0f, -int(rng() % 12));
            }
            x.out.assign(size_t(x.rows) * x.cols, 0x7E57);  // sentinel
            m.push_back(std::move(x));
        }
    }
    std::vector<const uint32_t*> q[3];
    std::vector<const void*> qs[3];
    std::vector<const void*> w[3];
    std::vector<float> globals;  // NVFP4 [3 (E + 1)]
    for (int e = 0; e <= E; ++e)
        for (int k = 0; k < 3; ++k) {
            q[k].push_back(m[size_t(3 * e + k)].codes.data());
            const Matrix& x = m[size_t(3 * e + k)];  // the device layout's scales: bf16 or E4M3 bytes
            qs[k].push_back(nvfp4 ? static_cast<const void*>(x.scale_bytes.data()) : x.scales.data());
            w[k].push_back(m[size_t(3 * e + k)].out.data());
            globals.push_back(m[size_t(3 * e + k)].global);
        }
    MoeExpertTable t{};
    t.format = DeviceWeightFormat::kBF16;
    t.gate = w[0].data(), t.up = w[1].data(), t.down = w[2].data();
    t.gate_q = q[0].data(), t.up_q = q[1].data(), t.down_q = q[2].data();
    t.gate_qs = qs[0].data(), t.up_qs = qs[1].data(), t.down_qs = qs[2].data();
    t.int4_group = group;
    t.nvfp4 = nvfp4;
    t.nvfp4_global = nvfp4 ? globals.data() : nullptr;
    t.E = E, t.H = H, t.I = I, t.I_shared = Is;
    t.bf16_in_scratch = true;
    t.int4_scratch_bytes = moe_int4_scratch_bytes(E, H, I, Is);  // the tables' buffers hold the BF16 values
    // Expert 1 without rows (offsets of sorted rows: 5, 0, 7 routed rows, 4 shared).
    const std::vector<int> off = {0, 5, 5, 12, 16};
    const moe::DequantParams p = moe::dequant_params(t, with_off ? off.data() : nullptr);
    const int wpt = version == 1 ? moe::kDequantWords : moe::kDequantWords2;
    emu_launch(dim3(moe::dequant_blocks_x(t, wpt), unsigned(3 * (E + 1))), moe::kDequantThreads, 0, [&] {
        using w4::Code4;
        if (version == 1) {
            if (nvfp4) moe::moe_int4_dequant_kernel<Code4::kNvfp4>(p);
            else moe::moe_int4_dequant_kernel<Code4::kInt4>(p);
        } else {
            if (nvfp4) moe::moe_int4_dequant_v2_kernel<Code4::kNvfp4>(p);
            else moe::moe_int4_dequant_v2_kernel<Code4::kInt4>(p);
        }
    });
    int bad = 0;
    for (int e = 0; e <= E; ++e)
        for (int k = 0; k < 3; ++k) {
            const Matrix& x = m[size_t(3 * e + k)];
            const bool skipped = with_off && e == 1;
            for (int r = 0; r < x.rows; ++r)
                for (int c = 0; c < x.cols; ++c) {
                    const uint32_t u = (x.codes[size_t(r) * (x.cols / 8) + c / 8] >> (4 * (c % 8))) & 15u;
                    const float s = qs::bf16_to_f32(qs::bf16{x.scales[size_t(r) * (x.cols / group) + c / group]});
                    const float v = nvfp4 ? e2m1_value(u) * (e4m3_value(x.scale_bytes[size_t(r) * (x.cols / 16) + c / 16]) * x.global)
                                          : float(u < 8 ? int(u) : int(u) - 16) * s;  // two's complement
                    const uint16_t want = skipped ? uint16_t(0x7E57) : qs::f32_to_bf16(v).bits;
                    const uint16_t got = x.out[size_t(r) * x.cols + c];
                    const bool zeros = !skipped && (got & 0x7FFFu) == 0 && (want & 0x7FFFu) == 0;  // ±0
                    if (got != want && !zeros && bad++ < 5)
                        std::printf("v%d H %d group %d%s off %d expert %d matrix %d [%d, %d]: got %04x want %04x\n",
                                    version, H, group, nvfp4 ? " nvfp4" : "", int(with_off), e, k, r, c, got, want);
                }
        }
    return bad;
}

}  // namespace

int main() {
    std::mt19937 rng(7);
    int bad = 0;
    for (int version : {1, 2}) {
        for (int group : {8, 16, 32})
            for (bool with_off : {false, true}) bad += run_case(96, 64, 32, group, with_off, rng, version);
        // Several blocks per matrix, the last one partial (256 × 160 / 8 = 5,120 words: 5 blocks of
        // version 1's 1,024 words, 3 of version 2's 2,048).
        bad += run_case(256, 160, 96, 32, true, rng, version);
        // NVFP4 (group 16): one block per matrix and several.
        for (bool with_off : {false, true}) bad += run_case(96, 64, 32, 0, with_off, rng, version);
        bad += run_case(256, 160, 96, 0, true, rng, version);
    }
    // The real model's expert shapes (H 2,048, I = I_shared 512; 3 routed experts here), INT4 group 128
    // and NVFP4, version 2 (the grid over the largest matrix, 8 words a thread).
    bad += run_case(2048, 512, 512, 128, true, rng, 2);
    bad += run_case(2048, 512, 512, 0, false, rng, 2);
    std::printf("%s (%d mismatching elements)\n", bad ? "FAIL" : "PASS", bad);
    return bad ? 1 : 0;
}
