// CPU emulation test of the mixed-input GEMMs' operands (src/backend/cuda/moe_int4_mixed_prep.cu,
// moe_int4_mixed.h; MoeParams::int4_prefill_version 2): compiles the real kernel source as host
// C++ with the emulation shim (moe_emu_shim.h) and runs it on small shapes (E = 3 routed experts;
// H 128 / 256, I 128 / 384, I_shared 128 / 256; groups 64 and 128) and the real expert shapes
// (H 2,048, I = I_shared 512, group 128), random scales, against the definitions:
//  - the codes: the GEMM reads each expert's device codes in place (int4_mixed_operands' tables are
//    the experts' own; that their nibbles are CUTLASS's int4b_t is tests/model/int4_layout_test.cpp's);
//  - the scales MN-major: scales(e, m)[kg · rows + n] = the packed [n][kg];
//  - experts without routed rows (expert_off) left untouched (sentinel bytes);
//  - every matrix's scales inside the BF16 scratch's bytes (moe_int4_scratch_bytes), none
//    overlapping, 16-byte aligned.
// Build (from the repository root):
//   g++ -O1 -g -std=c++20 -fsanitize=address -x c++ -Isrc -Ibench/kernels -I/usr/local/cuda/include \
//       bench/kernels/moe_int4_mixed_prep_emu.cpp -o build/moe_int4_mixed_prep_emu -lpthread
// Run: build/moe_int4_mixed_prep_emu (prints PASS or the first mismatches; exit status 1 on failure).
#include "moe_emu_shim.h"

#include "backend/cuda/moe_int4_mixed_prep.cu"
#include "backend/cuda/moe_int4_dequant.cu"  // moe_int4_scratch_bytes

#include <cstdio>
#include <random>

namespace qs::cuda::moe {
bool cutlass_grouped_gemm_compiled() { return true; }  // moe_cutlass_gemm.cu's; the emulation has "it"
}  // namespace qs::cuda::moe

using namespace qs::cuda;

namespace {

constexpr unsigned char kSentinel = 0xA5;

struct Matrix {
    int rows, cols;
    std::vector<uint32_t> codes;   // [rows, cols/8]
    std::vector<uint16_t> scales;  // [rows, cols/group]
};

int run_case(int H, int I, int Is, int group, bool with_off, std::mt19937& rng) {
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
            for (uint16_t& s : x.scales) s = uint16_t(rng());
            m.push_back(std::move(x));
        }
    }
    std::vector<const uint32_t*> q[3];
    std::vector<const void*> qs[3];
    for (int e = 0; e <= E; ++e)
        for (int k = 0; k < 3; ++k) {
            q[k].push_back(m[size_t(3 * e + k)].codes.data());
            qs[k].push_back(m[size_t(3 * e + k)].scales.data());
        }
    // The scratch as the upload sizes it (bf16 experts), filled with a sentinel; 16-byte aligned.
    const size_t scratch_bytes = moe_int4_scratch_bytes(E, H, I, Is);
    std::vector<uint4> scratch_words((scratch_bytes + 15) / 16);
    auto* scratch = reinterpret_cast<unsigned char*>(scratch_words.data());
    std::fill(scratch, scratch + scratch_bytes, kSentinel);

    MoeExpertTable t{};
    t.format = DeviceWeightFormat::kBF16;
    t.gate_q = q[0].data(), t.up_q = q[1].data(), t.down_q = q[2].data();
    t.gate_qs = qs[0].data(), t.up_qs = qs[1].data(), t.down_qs = qs[2].data();
    t.int4_group = group;
    t.E = E, t.H = H, t.I = I, t.I_shared = Is;
    t.bf16_in_scratch = true;
    t.int4_scratch = scratch;
    // A scratch one byte short of the scales: not supported (the capacity the upload recorded).
    t.int4_scratch_bytes = moe_int4_mixed_scratch_bytes(E, H, I, Is, group) - 1;
    if (moe_int4_mixed_supported(t)) {
        std::printf("H %d I %d Is %d group %d: supported with a scratch too small for the scales\n", H, I, Is, group);
        return 1;
    }
    t.int4_scratch_bytes = scratch_bytes;
    if (!moe_int4_mixed_supported(t)) {
        std::printf("H %d I %d Is %d group %d: not supported\n", H, I, Is, group);
        return 1;
    }
    const Int4MixedOperands s = int4_mixed_operands(t);
    int bad = 0;
    if (s.bytes() > scratch_bytes) {
        std::printf("mixed scales %zu bytes > the BF16 scratch's %zu\n", s.bytes(), scratch_bytes);
        return 1;
    }
    for (int k = 0; k < 3; ++k)
        if (s.codes[k] != q[k].data()) {
            std::printf("matrix %d: the operands' code table is not the experts'\n", k);
            return 1;
        }
    // Expert 1 without rows (offsets of sorted rows: 5, 0, 7 routed rows, 4 shared).
    const std::vector<int> off = {0, 5, 5, 12, 16};
    const moe::MixedPrepParams p = moe::mixed_prep_params(t, with_off ? off.data() : nullptr);
    emu_launch(dim3(moe::mixed_prep_blocks_x(t), unsigned(3 * (E + 1))), moe::kMixedPrepThreads, 0,
               [&] { moe::moe_int4_mixed_prep_kernel(p); });

    std::vector<char> owned(scratch_bytes, 0);  // bytes some matrix owns: no overlaps
    for (int e = 0; e <= E; ++e)
        for (int k = 0; k < 3; ++k) {
            const Matrix& x = m[size_t(3 * e + k)];
            const bool skipped = with_off && e == 1;
            const auto* scales = reinterpret_cast<const unsigned char*>(s.scales(e, k));
            const size_t scale_bytes = size_t(x.rows) * (x.cols / group) * 2;
            const size_t o = size_t(scales - scratch);
            if (o + scale_bytes > scratch_bytes || (o % 16) != 0) {
                std::printf("expert %d matrix %d: region [%zu, +%zu) outside the scratch or not 16-byte aligned\n", e, k, o,
                            scale_bytes);
                return bad + 1;
            }
            for (size_t i = 0; i < scale_bytes; ++i)
                if (owned[o + i]++ && bad++ < 5) std::printf("expert %d matrix %d: byte %zu overlaps\n", e, k, o + i);
            const int gpr = x.cols / group;
            const auto* sc = reinterpret_cast<const uint16_t*>(scales);
            for (int kg = 0; kg < gpr; ++kg)
                for (int n = 0; n < x.rows; ++n) {
                    uint16_t want = x.scales[size_t(n) * gpr + kg];
                    if (skipped) want = uint16_t(kSentinel | kSentinel << 8);
                    const uint16_t got = sc[size_t(kg) * x.rows + n];
                    if (got != want && bad++ < 5)
                        std::printf("group %d expert %d matrix %d scale [%d][%d]: %04x, want %04x\n", group, e, k, kg, n,
                                    got, want);
                }
        }
    return bad;
}

}  // namespace

int main() {
    std::mt19937 rng(11);
    int bad = 0;
    for (int group : {64, 128})
        for (bool with_off : {false, true}) bad += run_case(128, 128, 128, group, with_off, rng);
    bad += run_case(256, 384, 256, 128, true, rng);  // I != I_shared, several blocks per matrix
    bad += run_case(2048, 512, 512, 128, true, rng);  // the real model's expert shapes
    std::printf("%s (%d mismatches)\n", bad ? "FAIL" : "PASS", bad);
    return bad ? 1 : 0;
}
