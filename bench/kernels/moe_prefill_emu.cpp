// CPU emulation test of the MoE prefill path's stages (src/backend/cuda/moe_prefill_stages.cu,
// MoeParams::prefill_version 1 and 2): the real kernel source compiled as host C++ with the
// emulation shim (moe_emu_shim.h: one fiber per CUDA thread, warp collectives and __syncwarp as
// real barriers). The CUTLASS GEMMs between the stages are not run; each stage gets random inputs.
//  sort    version 2 (histogram, scan, stable scatter) against a CPU stable counting sort, exactly
//          (expert_off and row_pos), and expert_off against the one-block sort (moe_route.cu);
//          uniform, skewed (every token on experts 0..k-1 or nearly) and small-E routings, chunks
//          of 256 pairs (many blocks, partial last block and sub-chunks) and of kPrefillSortChunk.
//  gather  v1 and v2 write bitwise the same a8 / sfa (fp8) or bf16 rows; fp8 codes are the
//          nearest e4m3 value of x / scale with scale = amax / 448, bf16 rows round to nearest even.
//  silu    v1 and v2 bitwise equal (h and scales), I != I_shared, I of 9 blocks (three v2
//          batches), odd block counts, a warp's rows across the routed / shared boundary and past
//          R, an all-zero block; dequantised h against silu(g)·u in double.
//  combine v1 and v2 bitwise equal, and against the weighted sum in double.
// Build (from the repository root; ASan catches out-of-bounds accesses):
//   g++ -O1 -g -std=c++20 -fsanitize=address -x c++ -Isrc -Ibench/kernels -I/usr/local/cuda/include \
//       bench/kernels/moe_prefill_emu.cpp -o build-gpu/moe_prefill_emu -lpthread
// Run: build-gpu/moe_prefill_emu [seed]   (prints PASS / FAIL per check and a final line)
#include "moe_emu_shim.h"

#include "backend/cuda/moe_prefill_stages.cu"
#include "backend/cuda/moe_route.cu"
#include "moe_ref.h"

#include <algorithm>
#include <cstring>
#include <string>

using namespace qs::cuda::moe;
using namespace moe_ref;

namespace {

int g_fail = 0;

void report(bool ok, const std::string& what) {
    std::printf("  %-72s %s\n", what.c_str(), ok ? "PASS" : "FAIL");
    if (!ok) ++g_fail;
}

enum class Ids { kUniform, kSkewed, kAllSame };

// Top-k ids, distinct per token (as the router's top-k gives).
std::vector<int> make_ids(int T, int E, int k, Ids kind, Rng& rng) {
    std::vector<int> ids(size_t(T) * k);
    for (int t = 0; t < T; ++t) {
        std::vector<int> perm(E);
        for (int e = 0; e < E; ++e) perm[e] = e;
        const bool fixed = kind == Ids::kAllSame || (kind == Ids::kSkewed && rng.uniform() < 0.8);
        if (!fixed)
            for (int j = 0; j < k; ++j) std::swap(perm[j], perm[j + int(rng.next() % uint64_t(E - j))]);
        else if (kind == Ids::kSkewed)  // experts 0..k-1 in a random order
            for (int j = 0; j < k; ++j) std::swap(perm[j], perm[j + int(rng.next() % uint64_t(k - j))]);
        for (int j = 0; j < k; ++j) ids[size_t(t) * k + j] = perm[j];
    }
    return ids;
}

void check_sort(int T, int E, int k, Ids kind, int chunk, Rng& rng) {
    const std::vector<int> ids = make_ids(T, E, k, kind, rng);
    const int n = T * k, R = T * (k + 1), nblk = prefill_sort_blocks(T, k, chunk);
    // CPU reference: stable counting sort of the pairs by expert, the shared expert's T rows last.
    std::vector<int> off_ref(E + 2, 0), pos_ref(R);
    for (int i = 0; i < n; ++i) ++off_ref[ids[i] + 1];
    for (int e = 0; e < E; ++e) off_ref[e + 1] += off_ref[e];
    off_ref[E + 1] = R;
    std::vector<int> cur(off_ref.begin(), off_ref.begin() + E);
    for (int i = 0; i < n; ++i) pos_ref[i] = cur[ids[i]]++;
    for (int t = 0; t < T; ++t) pos_ref[n + t] = n + t;

    std::vector<int> blk(size_t(nblk) * E, 0x5a5a5a5a), off(E + 2, -7), pos(R, -7);
    PrefillSortParams p{ids.data(), T, E, k, chunk, blk.data(), off.data(), pos.data()};
    emu_launch(dim3(nblk), kSortBlockThreads, 0, [&] { moe_prefill_hist_kernel(p); });
    emu_launch(dim3(1), kPrefillScanThreads, 0, [&] { moe_prefill_scan_kernel(p); });
    emu_launch(dim3(nblk), kSortBlockThreads, 0, [&] { moe_prefill_scatter_kernel(p); });

    // The one-block sort (version 1): the same expert_off.
    std::vector<int> off1(E + 2, -7), pos1(R, -7), row_token(R), row_dest(R), num_tiles(1);
    std::vector<int4> work(size_t(max_tiles_for(128, T, E, k)));
    SortParams sp{ids.data(), T, E, k, num_tiles.data(), work.data(), row_token.data(), row_dest.data(), off1.data(), pos1.data()};
    emu_launch(dim3(1), kSortThreads, 0, [&] { moe_sort_kernel<128>(sp); });

    const char* kname = kind == Ids::kUniform ? "uniform" : kind == Ids::kSkewed ? "skewed" : "all-same";
    char what[160];
    std::snprintf(what, sizeof what, "sort v2 T=%d E=%d k=%d %s chunk=%d (%d blocks): = stable CPU sort", T, E, k, kname,
                  chunk, nblk);
    report(off == off_ref && pos == pos_ref, what);
    std::snprintf(what, sizeof what, "sort v2 T=%d E=%d k=%d %s: expert_off = one-block sort's", T, E, k, kname);
    report(off == off1, what);
}

float e4m3_nearest_dist(float q) {
    float best = INFINITY;
    for (int c = 0; c < 256; ++c)
        if (std::isfinite(g_e4m3_lut[c])) best = std::min(best, std::fabs(g_e4m3_lut[c] - q));
    return best;
}

// Rows of the sorted operand (row_pos of a v2 sort over random ids).
std::vector<int> random_row_pos(int T, int E, int k, Rng& rng) {
    const std::vector<int> ids = make_ids(T, E, k, Ids::kUniform, rng);
    const int nblk = prefill_sort_blocks(T, k, 256);
    std::vector<int> blk(size_t(nblk) * E), off(E + 2), pos(size_t(T) * (k + 1));
    PrefillSortParams p{ids.data(), T, E, k, 256, blk.data(), off.data(), pos.data()};
    emu_launch(dim3(nblk), kSortBlockThreads, 0, [&] { moe_prefill_hist_kernel(p); });
    emu_launch(dim3(1), kPrefillScanThreads, 0, [&] { moe_prefill_scan_kernel(p); });
    emu_launch(dim3(nblk), kSortBlockThreads, 0, [&] { moe_prefill_scatter_kernel(p); });
    return pos;
}

template <bool FP8>
void check_gather(int T, int H, int E, int k, Rng& rng) {
    const int R = T * (k + 1), kb_n = H / 128;
    const std::vector<int> pos = random_row_pos(T, E, k, rng);
    std::vector<float> x(size_t(T) * H);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(rng.normal()) * (i % 97 == 0 ? 30.0f : 1.0f);
    for (int c = 0; c < 128; ++c) x[c] = 0.0f;  // an all-zero block: scale 1, codes 0
    const size_t bytes = size_t(R) * H * (FP8 ? 1 : 2);
    std::vector<uint8_t> a1(bytes, 0xA5), a2(bytes, 0xA5);
    std::vector<float> s1(size_t(R) * kb_n, -1.0f), s2(size_t(R) * kb_n, -1.0f);
    GatherQuantParams p1{x.data(), pos.data(), T, H, k, a1.data(), s1.data()}, p2 = p1;
    p2.a8 = a2.data();
    p2.sfa = s2.data();
    const dim3 grid((T + kPrefillWarps - 1) / kPrefillWarps);
    emu_launch(grid, kPrefillWarps * 32, 0, [&] { moe_gather_quant_kernel<FP8>(p1); });
    emu_launch(grid, kPrefillWarps * 32, 0, [&] { moe_gather_quant_v2_kernel<FP8>(p2); });
    char what[160];
    std::snprintf(what, sizeof what, "gather %s T=%d H=%d E=%d k=%d: v2 = v1 bitwise", FP8 ? "fp8" : "bf16",
                  T, H, E, k);
    report(a1 == a2 && (!FP8 || std::memcmp(s1.data(), s2.data(), s1.size() * 4) == 0), what);
    // Against the CPU: token t's row j holds x_t quantised.
    bool ok = true;
    for (int t = 0; t < T && ok; ++t)
        for (int j = 0; j <= k && ok; ++j) {
            const size_t r = size_t(j < k ? pos[size_t(t) * k + j] : pos[size_t(T) * k + t]);
            for (int kb = 0; kb < kb_n && ok; ++kb) {
                const float* xb = &x[size_t(t) * H + kb * 128];
                if (FP8) {
                    float amax = 0.0f;
                    for (int c = 0; c < 128; ++c) amax = std::max(amax, std::fabs(xb[c]));
                    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
                    ok = s2[r * kb_n + kb] == scale;
                    for (int c = 0; c < 128 && ok; ++c) {
                        const float q = xb[c] / scale;
                        ok = std::fabs(g_e4m3_lut[a2[r * H + kb * 128 + c]] - q) == e4m3_nearest_dist(q);
                    }
                } else {
                    for (int c = 0; c < 128 && ok; ++c) {
                        uint16_t b;
                        std::memcpy(&b, &a2[(r * H + kb * 128 + c) * 2], 2);
                        ok = b == f2bf(xb[c]);
                    }
                }
            }
        }
    std::snprintf(what, sizeof what, "gather %s T=%d H=%d: rows = x quantised (%s)", FP8 ? "fp8" : "bf16", T, H,
                  FP8 ? "amax/448 scales, nearest e4m3" : "bf16 RNE");
    report(ok, what);
}

template <bool FP8>
void check_silu(int T, int k, int I, int Is, Rng& rng) {
    const int R = T * (k + 1), routed = T * k, imax = std::max(I, Is);
    std::vector<uint16_t> gu(size_t(R) * 2 * imax);
    for (auto& v : gu) v = f2bf(float(rng.normal()) * 2.0f);
    for (int c = 0; c < 128; ++c) gu[c] = 0;  // row 0's first gate block: h = 0, scale 1, codes 0
    const size_t bytes = size_t(R) * imax * (FP8 ? 1 : 2);
    const size_t nsf = size_t(routed) * (I / 128) + size_t(T) * (Is / 128);
    std::vector<uint8_t> h1(bytes, 0xA5), h2(bytes, 0xA5);
    std::vector<float> s1(nsf, -1.0f), s2(nsf, -1.0f);
    SiluQuantParams p1{reinterpret_cast<const __nv_bfloat16*>(gu.data()), R, routed, I, Is, imax, h1.data(), s1.data()}, p2 = p1;
    p2.h8 = h2.data();
    p2.sfh = s2.data();
    const dim3 grid((R + kPrefillWarps - 1) / kPrefillWarps), grid2 = silu_v2_grid(p2);
    emu_launch(grid, kPrefillWarps * 32, 0, [&] { moe_silu_quant_kernel<FP8>(p1); });
    emu_launch(grid2, kPrefillWarps * 32, kSiluSmemBytes, [&] { moe_silu_quant_v2_kernel<FP8>(p2); });
    char what[160];
    std::snprintf(what, sizeof what, "silu %s T=%d k=%d I=%d I_shared=%d (R=%d, v2 grid %ux%u): v2 = v1 bitwise",
                  FP8 ? "fp8" : "bf16", T, k, I, Is, R, grid2.x, grid2.y);
    report(h1 == h2 && std::memcmp(s1.data(), s2.data(), nsf * 4) == 0, what);
    double num = 0.0, den = 0.0;
    for (int r = 0; r < R; ++r) {
        const bool sh = r >= routed;
        const int ie = sh ? Is : I;
        const float* sf = sh ? &s2[size_t(routed) * (I / 128) + size_t(r - routed) * (Is / 128)] : &s2[size_t(r) * (I / 128)];
        for (int i = 0; i < ie; ++i) {
            const double g = bf2f(gu[size_t(r) * 2 * imax + i]), u = bf2f(gu[size_t(r) * 2 * imax + imax + i]);
            const double ref = g / (1.0 + std::exp(-g)) * u;
            double got;
            if (FP8) {
                got = double(g_e4m3_lut[h2[size_t(r) * imax + i]]) * sf[i / 128];
            } else {
                uint16_t b;
                std::memcpy(&b, &h2[(size_t(r) * imax + i) * 2], 2);
                got = bf2f(b);
            }
            num += (got - ref) * (got - ref);
            den += ref * ref;
        }
    }
    const double nerr = std::sqrt(num / den);
    std::snprintf(what, sizeof what, "silu %s: h vs silu(g)*u in double, nerr %.2e (< %.0e)", FP8 ? "fp8" : "bf16", nerr,
                  FP8 ? 4e-2 : 4e-3);
    report(nerr < (FP8 ? 4e-2 : 4e-3), what);
}

void check_combine(int T, int H, int E, int k, Rng& rng) {
    const int R = T * (k + 1);
    const std::vector<int> pos = random_row_pos(T, E, k, rng);
    std::vector<uint16_t> eo(size_t(R) * H);
    for (auto& v : eo) v = f2bf(float(rng.normal()));
    std::vector<float> w(size_t(T) * k), sg(T);
    for (auto& v : w) v = float(rng.uniform());
    for (auto& v : sg) v = float(rng.normal()) * 3.0f;
    std::vector<float> y1(size_t(T) * H, NAN), y2(size_t(T) * H, NAN);
    CombineSortedParams p1{reinterpret_cast<const __nv_bfloat16*>(eo.data()), pos.data(), w.data(), sg.data(), T, H, k, y1.data()},
        p2 = p1;
    p2.y = y2.data();
    emu_launch(dim3(T), kCombineThreads, 0, [&] { moe_combine_sorted_kernel(p1); });
    emu_launch(dim3(T), kCombineThreads, 0, [&] { moe_combine_sorted_v2_kernel(p2); });
    char what[160];
    std::snprintf(what, sizeof what, "combine T=%d H=%d k=%d: v2 = v1 bitwise", T, H, k);
    report(std::memcmp(y1.data(), y2.data(), y1.size() * 4) == 0, what);
    double worst = 0.0;
    for (int t = 0; t < T; ++t)
        for (int c = 0; c < H; ++c) {
            double ref = 0.0, mag = 0.0;
            for (int j = 0; j <= k; ++j) {
                const double wj = j < k ? w[size_t(t) * k + j] : 1.0 / (1.0 + std::exp(-double(sg[t])));
                const int r = j < k ? pos[size_t(t) * k + j] : pos[size_t(T) * k + t];
                const double v = bf2f(eo[size_t(r) * H + c]);
                ref += wj * v;
                mag += std::fabs(wj * v);
            }
            worst = std::max(worst, std::fabs(y2[size_t(t) * H + c] - ref) / std::max(mag, 1e-30));
        }
    std::snprintf(what, sizeof what, "combine: y vs the weighted sum in double, worst %.1e of the terms' |sum| (< 1e-6)", worst);
    report(worst < 1e-6, what);
}

}  // namespace

int main(int argc, char** argv) {
    const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1;
    std::printf("moe_prefill_emu seed=%llu\n", (unsigned long long)seed);
    init_e4m3_lut();
    Rng rng(seed);
    check_sort(300, 256, 8, Ids::kUniform, 256, rng);
    check_sort(300, 256, 8, Ids::kSkewed, 256, rng);
    check_sort(97, 16, 4, Ids::kAllSame, 256, rng);
    check_sort(1000, 256, 8, Ids::kUniform, kPrefillSortChunk, rng);
    check_sort(45, 512, 3, Ids::kSkewed, 256, rng);
    check_sort(2, 16, 4, Ids::kUniform, 256, rng);
    check_gather<true>(13, 256, 16, 4, rng);
    check_gather<false>(13, 256, 16, 4, rng);
    check_gather<true>(5, 2176, 64, 8, rng);  // 17 blocks of 128: two batches of the v2 kernel
    check_gather<false>(5, 2176, 64, 8, rng);
    check_silu<true>(11, 4, 128, 256, rng);
    check_silu<false>(11, 4, 128, 256, rng);
    check_silu<true>(3, 8, 1152, 512, rng);  // 9 blocks of 128: three batches of the v2 kernel
    check_silu<false>(3, 8, 1152, 512, rng);
    // v2's edges: 15 routed rows (a warp's two rows on both sides of the shared boundary), R = 20
    // (a block of 16 rows, then a partial one), 3 and 5 blocks (quarter-warps with no block of their
    // own; I_shared in two batches, the second of one block).
    check_silu<true>(5, 3, 384, 640, rng);
    check_silu<false>(5, 3, 384, 640, rng);
    check_silu<true>(7, 2, 512, 512, rng);  // the model's I; R = 21: the last warp's second row past R
    check_silu<false>(7, 2, 512, 512, rng);
    check_combine(6, 256, 16, 4, rng);
    check_combine(3, 2048, 256, 8, rng);
    check_combine(2, 1024, 64, 20, rng);  // k + 1 = 21 rows: three batches of the v2 kernel
    std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
    return g_fail ? 1 : 0;
}
