// The small-T paths of an MTP verify step (issue 13), each against the CPU specification and
// today's path, at the real model's shapes.
// CudaSmallRowsV2: the FP8 small-rows kernel's version 2 (CudaOptions::fp8_small_rows;
// small_linear_fp8.cu) at the FP8 dense shapes, 1-4 rows (an MTP verify is k + 1 rows):
//  - against CpuOps::linear on the dequantised weights (the independent specification): < 4e-2,
//    the activations' e4m3 rounding (see CudaOpsParity.Fp8BlockLinear);
//  - against today's path on the same inputs (version 1 at one row, block-scaled cuBLASLt above):
//    the same x quantisation, so only the summation order differs: < 1e-5 against version 1
//    (both fp32 sums), < 2e-3 against cuBLASLt (its FP8 accumulation; the bound of
//    bench/kernels/fp8_gemm_lab.cu's block-scaled check), where a wrong scale or row gives O(1);
//  - every row of a T-row call bitwise equal to a one-row call on that row (rows never mix, so
//    a sequence's logits do not depend on the width of the verify it is in);
//  - the path taken: version 2 wherever it applies (in % 512 == 0), today's path with the option off.
// CudaSmallRowsF32: the fp32 small-rows kernel (small_linear_f32.cu) on the model's fp32 weights
// (GDN in_proj_b/a [32, 2048]; the router [256, 2048] with the shared-expert gate [1, 2048]), as
// Gemm::linears groups them, 1-8 rows, and above 8 rows the tiled fp32 kernel (f32_linear_tiles.cu:
// 9, 64 and 513 rows, where T·out <= kF32LinearTilesMaxOutputs: not the router at 513; with
// CudaOptions::f32_tiles_max_rows 0, cuBLAS there):
//  - against a float64 product of the same x and weights (max |y − ref| / max |ref| < 1e-5: fp32
//    sums of 2,048 products; a dropped chunk or a wrong row gives O(1e-2) or more);
//  - against cuBLAS's fp32 GEMM (LinearPolicy::kNoSmallRows) within the same bound;
//  - every row of a T-row call bitwise equal to a one-row call on that row (the tiled kernel's rows
//    too: it reproduces the small-rows kernel's sums), and every output of a grouped call bitwise
//    equal to its own linear();
//  - the path taken: the small-rows kernel for every weight up to 8 rows, the tiled one above within
//    its output budget, one launch per group; cuBLAS otherwise and with the tiles off.
// CudaAttentionDecodeRows: sequences of 1-4 rows on the split-K decode attention kernel
// (CudaOptions::attention_decode_rows = 4) beside a 9-row chunk that stays on the prefill kernel,
// after prompts of 50-600 tokens (many splits, each row masked at its own position), bf16 and fp8
// K/V: the output against CpuOps::gated_attention (bounds of CudaOpsParity.
// GatedAttentionWithPagedCache) and against today's path (prefill kernel for >= 2 rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_cache.h"
#include "backend/cuda/small_linear_kernels.h"
#include "config/model_config.h"
#include "gpu_test_util.h"
#include "model/weights.h"

using namespace qs;
using gpu_test::real_shapes;
using gpu_test::normalised_error;

namespace {

using NamedLinears = std::vector<std::pair<const char*, const LinearWeight*>>;

// The FP8 dense linears of one full-attention and one GDN layer (every dense shape of the model);
// empty when the weights lack either layer type.
NamedLinears fp8_dense_linears(const ModelWeights& w) {
    const DecoderLayerWeights *attn = nullptr, *gdn = nullptr;
    for (const auto& l : w.layers) (l.type == LayerType::kFullAttention ? attn : gdn) = &l;
    if (!attn || !gdn) return {};
    return {{"q_proj", &attn->attn.q_proj},     {"k_proj", &attn->attn.k_proj},
            {"o_proj", &attn->attn.o_proj},     {"in_proj_qkv", &gdn->gdn.in_proj_qkv},
            {"in_proj_z", &gdn->gdn.in_proj_z}, {"out_proj", &gdn->gdn.out_proj}};
}

// Rows never mix: each row t of the T-row output y (of x = dx on the device) equals, bit for bit,
// a one-row call on row t. Returns the number of linear() calls made.
int64_t expect_rows_match_one_row_calls(cuda::CudaOps& ops, const float* dx, int64_t T, const LinearWeight& w,
                                        const std::vector<float>& y, const std::string& what) {
    const int64_t in = w.in_features, out = w.out_features;
    for (int64_t t = 0; t < T; ++t) {
        float* d1 = ops.alloc(out);
        ops.linear(dx + t * in, 1, w, d1);
        const std::vector<float> y1 = gpu_test::to_host(ops, d1, size_t(out));
        EXPECT_EQ(std::memcmp(y1.data(), y.data() + t * out, size_t(out) * 4), 0)
            << what << ": row " << t << " differs from a one-row call";
    }
    return T;
}

TEST(CudaSmallRowsV2, Fp8LinearsMatchCpuAndTodaysPath) {
    QS_REQUIRE_GPU();
    const ModelConfig config = real_shapes(8);
    ModelWeights w8 = make_dummy_weights(config, 81, /*with_mtp=*/false, WeightFormat::kFP8Block);
    cuda::CudaOptions o_today, o_v2;
    o_today.fp8_small_rows = 0;  // the path before version 2 (the default is now 4)
    o_today.poison = o_v2.poison = true;
    o_v2.fp8_small_rows = 4;
    o_today.fp8_small_version = o_v2.fp8_small_version = 2;  // the default is now version 3
    cuda::CudaOps today(o_today), v2(o_v2);
    today.prepare_weights(weight_set(w8));
    v2.prepare_weights(weight_set(w8));
    const bool block_expected = cuda::Gemm::fp8_block_scaling_expected(o_today.device);
    const auto linears = fp8_dense_linears(w8);
    ASSERT_EQ(linears.size(), 6u);
    CpuOps cpu;
    std::mt19937 rng{12345};
    int64_t v2_calls_expected = 0;
    for (int64_t T = 1; T <= 4; ++T) {
        for (const auto& [name, w] : linears) {
            ASSERT_EQ(w->format, WeightFormat::kFP8Block) << name;
            ASSERT_EQ(w->in_features % 512, 0) << name << ": every real FP8 dense shape takes version 2";
            const std::string what = std::string(name) + " T=" + std::to_string(T);
            const int64_t in = w->in_features, out = w->out_features;
            const auto x = gpu_test::random_floats(size_t(T * in), rng);
            std::vector<float> ref(size_t(T * out));
            cpu.linear(x.data(), T, *w, ref.data());

            float* dy0 = today.alloc(T * out);
            today.linear(gpu_test::to_device(today, x), T, *w, dy0);
            const std::vector<float> y0 = gpu_test::to_host(today, dy0, ref.size());
            const cuda::Fp8Path p0 = today.gemm().last_fp8_path();
            if (T == 1) {
                EXPECT_EQ(p0, cuda::Fp8Path::kSmallRows) << what;
            } else if (block_expected) {
                EXPECT_EQ(p0, cuda::Fp8Path::kBlockScaled) << what;
            }
            today.free_all();

            const int64_t before = v2.gemm().fp8_counts().small_rows_v2;
            float* dx = gpu_test::to_device(v2, x);
            float* dy = v2.alloc(T * out);
            v2.linear(dx, T, *w, dy);
            const std::vector<float> y = gpu_test::to_host(v2, dy, ref.size());
            EXPECT_EQ(v2.gemm().fp8_counts().small_rows_v2, before + 1) << what << ": version 2 not taken";
            ++v2_calls_expected;

            EXPECT_LT(normalised_error(y, ref), 4e-2) << what << " against the CPU";
            const double against_today = normalised_error(y, y0);
            if (p0 == cuda::Fp8Path::kSmallRows) {
                EXPECT_LT(against_today, 1e-5) << what << " against version 1";
            } else {
                EXPECT_LT(against_today, 2e-3) << what << " against today's path " << int(p0);
            }
            v2_calls_expected += expect_rows_match_one_row_calls(v2, dx, T, *w, y, what);
            v2.free_all();
        }
    }
    EXPECT_EQ(v2.gemm().fp8_counts().small_rows_v2, v2_calls_expected);
    EXPECT_EQ(today.gemm().fp8_counts().small_rows_v2, 0) << "the option's default must keep today's path";
}

// Version 3 (CudaOptions::fp8_small_version 3: the products on tensor cores, small_linear_fp8_mma.cu)
// at the same shapes and rows, through Gemm as the model calls it: taken for every launch (one
// launch each), < 4e-2 against the CPU, < 1e-5 against version 2 (the same exact products, fp32
// sums in another order; a wrong fragment register or scale gives O(1)), each row bitwise its
// one-row call; with the grid capped (fp8_small_v3_blocks_per_sm 3: blocks loop over feature
// groups) the same bits as a block per group.
TEST(CudaSmallRowsV3, Fp8LinearsMatchCpuAndVersion2) {
    QS_REQUIRE_GPU();
    const ModelConfig config = real_shapes(8);
    ModelWeights w8 = make_dummy_weights(config, 82, /*with_mtp=*/false, WeightFormat::kFP8Block);
    cuda::CudaOptions o_v2, o_v3, o_capped;
    o_v2.poison = o_v3.poison = o_capped.poison = true;
    o_v2.fp8_small_version = 2;
    o_v3.fp8_small_version = o_capped.fp8_small_version = 3;
    o_capped.fp8_small_v3_blocks_per_sm = 3;
    cuda::CudaOps v2(o_v2), v3(o_v3), capped(o_capped);
    v2.prepare_weights(weight_set(w8));
    v3.prepare_weights(weight_set(w8));
    capped.prepare_weights(weight_set(w8));
    const auto linears = fp8_dense_linears(w8);
    ASSERT_EQ(linears.size(), 6u);
    CpuOps cpu;
    std::mt19937 rng{2468};
    int64_t v3_launches = 0;
    for (int64_t T = 1; T <= 4; ++T) {
        for (const auto& [name, w] : linears) {
            const std::string what = std::string(name) + " T=" + std::to_string(T);
            const int64_t in = w->in_features, out = w->out_features;
            ASSERT_EQ(out % 16, 0) << what << ": version 3 takes groups of 16 features";
            const auto x = gpu_test::random_floats(size_t(T * in), rng);
            std::vector<float> ref(size_t(T * out));
            cpu.linear(x.data(), T, *w, ref.data());
            float* dy2 = v2.alloc(T * out);
            v2.linear(gpu_test::to_device(v2, x), T, *w, dy2);
            const std::vector<float> y2 = gpu_test::to_host(v2, dy2, ref.size());
            v2.free_all();

            const int64_t before = v3.gemm().fp8_counts().small_rows_v3_launches;
            float* dx = gpu_test::to_device(v3, x);
            float* dy = v3.alloc(T * out);
            v3.linear(dx, T, *w, dy);
            const std::vector<float> y = gpu_test::to_host(v3, dy, ref.size());
            EXPECT_EQ(v3.gemm().fp8_counts().small_rows_v3_launches, before + 1) << what << ": version 3 not taken";
            ++v3_launches;
            EXPECT_LT(normalised_error(y, ref), 4e-2) << what << " against the CPU";
            EXPECT_LT(normalised_error(y, y2), 1e-5) << what << " against version 2";
            v3_launches += expect_rows_match_one_row_calls(v3, dx, T, *w, y, what);
            v3.free_all();

            const int64_t capped_before = capped.gemm().fp8_counts().small_rows_v3_launches;
            float* dyc = capped.alloc(T * out);
            capped.linear(gpu_test::to_device(capped, x), T, *w, dyc);
            const std::vector<float> yc = gpu_test::to_host(capped, dyc, ref.size());
            EXPECT_EQ(std::memcmp(yc.data(), y.data(), y.size() * 4), 0) << what << ": 3 blocks per SM against a block per group";
            EXPECT_EQ(capped.gemm().fp8_counts().small_rows_v3_launches, capped_before + 1) << what << ": capped, version 3 not taken";
            capped.free_all();
        }
    }
    EXPECT_EQ(v3.gemm().fp8_counts().small_rows_v3_launches, v3_launches);
    EXPECT_EQ(v2.gemm().fp8_counts().small_rows_v3_launches, 0) << "version 2 set, version 3 taken";
}

// A batch of sequences {start_pos, num_tokens, slot}, pages_per_seq pages each (shuffled, the same
// tables in every batch); its spans view `tables`.
struct OwnedBatch {
    ForwardBatch batch;
    std::vector<std::vector<int32_t>> tables;
};
OwnedBatch make_batch(const std::vector<std::array<int, 3>>& seqs, int pages_per_seq, std::mt19937& rng, int vocab) {
    OwnedBatch owned;
    owned.tables.resize(seqs.size());
    std::vector<int32_t> pages(seqs.size() * size_t(pages_per_seq));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(99));
    for (size_t s = 0; s < seqs.size(); ++s) {
        SeqSpan span;
        span.row_begin = int32_t(owned.batch.token_ids.size());
        span.start_pos = seqs[s][0];
        span.num_tokens = seqs[s][1];
        span.state_slot = seqs[s][2];
        owned.tables[s].assign(pages.begin() + int64_t(s) * pages_per_seq,
                               pages.begin() + int64_t(s + 1) * pages_per_seq);
        span.block_table = owned.tables[s];
        for (int i = 0; i < span.num_tokens; ++i) owned.batch.token_ids.push_back(int32_t(rng() % uint32_t(vocab)));
        owned.batch.seqs.push_back(span);
    }
    return owned;
}

double max_relative_error(const std::vector<float>& got, const std::vector<double>& ref) {
    double e = 0, r = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        e = std::max(e, std::abs(double(got[i]) - ref[i]));
        r = std::max(r, std::abs(ref[i]));
    }
    return e / std::max(r, 1e-30);
}

static void small_rows_f32_case(int tiles_max_rows) {
    const ModelConfig config = real_shapes(8);
    ModelWeights w = make_dummy_weights(config, 83, /*with_mtp=*/false, WeightFormat::kFP8Block);
    cuda::CudaOptions o;
    o.poison = true;
    o.f32_tiles_max_rows = tiles_max_rows;
    cuda::CudaOps ops(o);
    ops.prepare_weights(weight_set(w));
    const DecoderLayerWeights* gdn = nullptr;
    for (const auto& l : w.layers)
        if (l.type == LayerType::kLinearAttention) gdn = &l;
    ASSERT_TRUE(gdn);
    const std::vector<std::pair<const char*, std::vector<const LinearWeight*>>> groups = {
        {"gdn b/a", {&gdn->gdn.in_proj_b, &gdn->gdn.in_proj_a}},
        {"router + shared gate", {&w.layers[0].moe.router, &w.layers[0].moe.shared_expert_gate}}};
    std::mt19937 rng{777};
    for (const auto& [name, ws] : groups) {
        const int64_t H = ws[0]->in_features;
        std::vector<std::vector<float>> wf;
        for (const LinearWeight* l : ws) {
            ASSERT_EQ(ops.weights().linear(*l).dtype, cuda::DeviceLinear::Dtype::kF32) << name;
            std::vector<float> rows(size_t(l->out_features * H));
            for (int64_t r = 0; r < l->out_features; ++r) l->row_to_f32(r, rows.data() + r * H);
            wf.push_back(std::move(rows));
        }
        for (const int64_t T : {1, 2, 3, 4, 5, 8, 9, 64, 513}) {
            if (tiles_max_rows == 0 && T > 9) continue;
            const std::string what =
                std::string(name) + " T=" + std::to_string(T) + " tiles up to " + std::to_string(tiles_max_rows);
            const auto x = gpu_test::random_floats(size_t(T * H), rng);
            float* dx = gpu_test::to_device(ops, x);
            std::vector<float*> grouped, cublas;
            for (const LinearWeight* l : ws) {
                grouped.push_back(ops.alloc(T * l->out_features));
                cublas.push_back(ops.alloc(T * l->out_features));
            }
            const int64_t before = ops.gemm().small_rows_f32_weights();
            const int64_t launches_before = ops.gemm().small_rows_f32_launches();
            const int64_t tiles_before = ops.gemm().f32_tiles_weights();
            const int64_t tile_launches_before = ops.gemm().f32_tiles_launches();
            ops.linears(dx, T, {{*ws[0], grouped[0]}, {*ws[1], grouped[1]}});
            const bool small = T <= 8;
            // The tiled kernel per weight where T·out is within its budget (the router at 513 rows not).
            std::vector<bool> tiled;
            int64_t n_tiled = 0;
            for (const LinearWeight* l : ws) {
                tiled.push_back(!small && T <= tiles_max_rows && T * l->out_features <= cuda::kF32LinearTilesMaxOutputs);
                n_tiled += tiled.back();
            }
            EXPECT_EQ(ops.gemm().small_rows_f32_weights() - before, small ? 2 : 0) << what;
            EXPECT_EQ(ops.gemm().small_rows_f32_launches() - launches_before, small ? 1 : 0) << what
                                                                                             << ": one launch a group";
            EXPECT_EQ(ops.gemm().f32_tiles_weights() - tiles_before, n_tiled) << what;
            EXPECT_EQ(ops.gemm().f32_tiles_launches() - tile_launches_before, n_tiled > 0 ? 1 : 0)
                << what << ": one launch a group";
            ops.gemm().set_policy(cuda::LinearPolicy::kNoSmallRows);
            for (size_t i = 0; i < ws.size(); ++i) ops.linear(dx, T, *ws[i], cublas[i]);
            ops.gemm().set_policy(cuda::LinearPolicy::kAuto);
            for (size_t i = 0; i < ws.size(); ++i) {
                const int64_t out = ws[i]->out_features;
                const std::vector<float> got = gpu_test::to_host(ops, grouped[i], size_t(T * out));
                const std::vector<float> cub = gpu_test::to_host(ops, cublas[i], size_t(T * out));
                std::vector<double> ref(size_t(T * out));
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t r = 0; r < out; ++r) {
                        double acc = 0;
                        for (int64_t k = 0; k < H; ++k)
                            acc += double(x[size_t(t * H + k)]) * double(wf[i][size_t(r * H + k)]);
                        ref[size_t(t * out + r)] = acc;
                    }
                EXPECT_LT(max_relative_error(got, ref), 1e-5) << what << ", output " << i << " against float64";
                EXPECT_LT(max_relative_error(cub, ref), 1e-5) << what << ", output " << i << ": cuBLAS against float64";
                std::vector<double> cub_d(cub.begin(), cub.end());
                EXPECT_LT(max_relative_error(got, cub_d), 1e-5) << what << ", output " << i << " against cuBLAS";
                // Alone, and one row at a time: bitwise the grouped call's rows.
                float* alone = ops.alloc(T * out);
                ops.linear(dx, T, *ws[i], alone);
                EXPECT_EQ(gpu_test::to_host(ops, alone, size_t(T * out)), got) << what << ", output " << i
                                                                                << ": grouped differs from alone";
                if (!small && !tiled[i]) continue;
                for (int64_t t = 0; t < T; t += T > 64 ? 37 : 1) {
                    float* one = ops.alloc(out);
                    ops.linear(dx + t * H, 1, *ws[i], one);
                    const std::vector<float> row = gpu_test::to_host(ops, one, size_t(out));
                    EXPECT_EQ(std::memcmp(row.data(), got.data() + t * out, size_t(out) * 4), 0)
                        << what << ", output " << i << ", row " << t << " differs from a one-row call";
                }
            }
            ops.free_all();
        }
    }
}

TEST(CudaSmallRowsF32, MatchesFloat64AndCublasRowsIndependent) {
    QS_REQUIRE_GPU();
    small_rows_f32_case(int(cuda::kF32LinearTilesMaxRows));
}

TEST(CudaSmallRowsF32, TilesOffTakesCublasAbove8Rows) {
    QS_REQUIRE_GPU();
    small_rows_f32_case(0);
}

TEST(CudaAttentionDecodeRows, VerifyRowsMatchCpuAndPrefillKernel) {
    QS_REQUIRE_GPU();
    const ModelConfig c = real_shapes(8);
    ModelWeights w = make_dummy_weights(c, 83, /*with_mtp=*/false);
    const DecoderLayerWeights* attn = nullptr;
    for (const auto& l : w.layers)
        if (l.type == LayerType::kFullAttention) attn = &l;
    ASSERT_TRUE(attn);
    const AttentionDims d{c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rotary_dim(), c.rope_theta,
                          c.rms_norm_eps};
    cuda::CudaOptions o_today, o_new;
    o_today.attention_decode_rows = 1;  // the path before (the default is now 4)
    o_new.attention_decode_rows = 4;
    cuda::CudaOps today(o_today), rows(o_new);
    today.prepare_weights(weight_set(w));
    rows.prepare_weights(weight_set(w));
    CpuOps cpu;
    std::mt19937 rng{4242};
    const int bs = 16, pages = 40, nseq = 5;
    for (KvCacheDtype kv : {KvCacheDtype::kBF16, KvCacheDtype::kFP8E4M3}) {
        const CacheGeometry g = CacheGeometry::for_model(c, nseq * pages, bs, nseq, false, kv);
        ModelCache cpu_cache(g);
        auto today_cache = today.make_cache(g);
        auto rows_cache = rows.make_cache(g);
        std::vector<OwnedBatch> batches;
        batches.push_back(make_batch({{{0, 600, 0}, {0, 300, 1}, {0, 451, 2}, {0, 200, 3}, {0, 50, 4}}}, pages, rng,
                                     int(c.vocab_size)));
        // The verify-like step: 2, 1, 3 and 4 rows (decode kernel with the option), 9 rows (prefill).
        batches.push_back(make_batch({{{600, 2, 0}, {300, 1, 1}, {451, 3, 2}, {200, 4, 3}, {50, 9, 4}}}, pages, rng,
                                     int(c.vocab_size)));
        // An MTP k = 1 verify: 2 rows each (the decode kernel alone, 8 heads x 2 rows per block).
        batches.push_back(make_batch({{{602, 2, 0}, {301, 2, 1}, {454, 2, 2}, {204, 2, 3}, {59, 2, 4}}}, pages, rng,
                                     int(c.vocab_size)));
        for (size_t bi = 0; bi < batches.size(); ++bi) {
            const ForwardBatch& b = batches[bi].batch;
            const int64_t T = b.num_tokens();
            const auto pos = b.positions();
            const auto qg = gpu_test::random_floats(size_t(T * d.num_heads * 2 * d.head_dim), rng);
            const auto k = gpu_test::random_floats(size_t(T * d.num_kv_heads * d.head_dim), rng);
            const auto v = gpu_test::random_floats(size_t(T * d.num_kv_heads * d.head_dim), rng);
            std::vector<float> k_cpu = k, ref(size_t(T * d.num_heads * d.head_dim));
            cpu.begin_forward(b, pos.data());
            cpu.gated_attention(qg.data(), k_cpu.data(), v.data(), attn->attn.q_norm, attn->attn.k_norm, d, b,
                                pos.data(), cpu_cache, 0, ref.data());
            auto run = [&](cuda::CudaOps& gpu, ModelCache& cache) {
                gpu.begin_forward(b, pos.data());
                float* out = gpu.alloc(int64_t(ref.size()));
                gpu.gated_attention(gpu_test::to_device(gpu, qg), gpu_test::to_device(gpu, k),
                                    gpu_test::to_device(gpu, v), attn->attn.q_norm, attn->attn.k_norm, d, b,
                                    pos.data(), cache, 0, out);
                std::vector<float> host = gpu_test::to_host(gpu, out, ref.size());
                gpu.free_all();
                return host;
            };
            const std::vector<float> y_today = run(today, *today_cache), y_rows = run(rows, *rows_cache);
            const std::string what = std::string(kv == KvCacheDtype::kBF16 ? "bf16" : "fp8") + " batch " +
                                     std::to_string(bi);
            const double bound = kv == KvCacheDtype::kBF16 ? 5e-3 : 2e-2;
            EXPECT_LT(normalised_error(y_rows, ref), bound) << "decode rows vs CPU, " << what;
            EXPECT_LT(normalised_error(y_today, ref), bound) << "today's path vs CPU, " << what;
            // Per sequence, so a wrong row or head of one short sequence cannot hide in the total.
            for (const SeqSpan& s : b.seqs) {
                const size_t n = size_t(d.num_heads * d.head_dim), r0 = size_t(s.row_begin) * n;
                const size_t len = size_t(s.num_tokens) * n;
                const std::vector<float> a(y_rows.begin() + int64_t(r0), y_rows.begin() + int64_t(r0 + len));
                const std::vector<float> t(y_today.begin() + int64_t(r0), y_today.begin() + int64_t(r0 + len));
                const std::vector<float> r(ref.begin() + int64_t(r0), ref.begin() + int64_t(r0 + len));
                EXPECT_LT(normalised_error(a, r), bound) << what << " sequence of " << s.num_tokens << " rows vs CPU";
                EXPECT_LT(normalised_error(a, t), bound) << what << " sequence of " << s.num_tokens
                                                          << " rows vs today's path";
            }
        }
    }
}

}  // namespace
