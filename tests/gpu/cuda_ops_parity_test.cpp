// Every CudaOps op against the CPU specification (CpuOps) on fresh random inputs, at the tiny
// test model's shapes and the real Qwen3.6-35B-A3B shapes (experts cut to 32 to keep the test
// small; every per-expert dimension is real). GPU activations are poisoned with NaN at alloc so
// an unwritten output fails. Errors are ‖gpu − cpu‖ / ‖cpu‖; bounds per path: fp32 math 1e-4,
// bf16-rounded GEMM inputs 1e-2 (bf16 has 8 mantissa bits: 2^-9 ≈ 2e-3 per element).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_cache.h"
#include "backend/cuda/moe_cutlass.h"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_prefill.h"
#include "config/model_config.h"
#include "gpu_test_util.h"
#include "model/weights.h"

using namespace qs;
using gpu_test::real_shapes;
using gpu_test::normalised_error;

namespace {

constexpr double kFp32Bound = 1e-4;
constexpr double kBf16Bound = 1e-2;

struct Case {
    std::string name;
    ModelConfig config;
};
// gtest prints a parameter in failure messages and test listings; without this, a byte dump.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() { return {{"tiny", tiny_model_config()}, {"real", real_shapes()}}; }

struct OwnedBatch;

// One side of a bitwise comparison of two GDN kernel versions: a CudaOps, its cache, its name.
struct GdnSide {
    cuda::CudaOps* gpu;
    ModelCache* cache;
    std::string name;
};

class CudaOpsParity : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override {
        QS_REQUIRE_GPU();
        config_ = GetParam().config;
        weights_ = std::make_unique<ModelWeights>(make_dummy_weights(config_, 77, /*with_mtp=*/false));
        cuda::CudaOptions o;
        o.poison = true;
        gpu_test::apply_test_router_env(o);  // QS_TEST_MOE_ROUTER_KERNEL
        gpu_ = std::make_unique<cuda::CudaOps>(o);
        gpu_->prepare_weights(weight_set(*weights_));
    }
    const DecoderLayerWeights& layer(LayerType t) const {
        for (const auto& l : weights_->layers)
            if (l.type == t) return l;
        throw std::runtime_error("no layer of that type");
    }
    // GDN prefill versions va and vb give the same bits (defined below, beside its tests).
    void expect_gdn_prefill_versions_equal(int va, int vb);
    // Prefill batches for those comparisons: chunk boundaries +-1, continued sequences, 16 at once.
    std::vector<OwnedBatch> gdn_prefill_batches();
    std::vector<OwnedBatch> gdn_serving_batches();
    // Both sides against the CPU specification and against each other, batch by batch: bit for bit
    // (sides_bound < 0), or within sides_bound of each other (defined below, before its first use).
    void expect_gdn_sides_equal(const std::vector<OwnedBatch>& batches, const GdnSide& a, const GdnSide& b,
                                ModelCache& cpu_cache, bool ssm_bf16, double bound, double sides_bound = -1);
    // The same for two CudaOps made from options a and b (their ssm_bf16 alike), each with its own
    // cache of `slots` state slots (bf16 K/V), beside a CPU cache of the same geometry.
    void expect_gdn_options_equal(const std::vector<OwnedBatch>& batches, int slots, const cuda::CudaOptions& a,
                                  const std::string& a_name, const cuda::CudaOptions& b, const std::string& b_name,
                                  double bound, double sides_bound = -1);
    // Bit for bit, fp32 and bf16 state (each at its bound against the CPU), 20 slots: the poisoned
    // defaults changed by set_a against the same changed by set_b.
    void expect_gdn_variants_equal(const std::vector<OwnedBatch>& batches,
                                   const std::function<void(cuda::CudaOptions&)>& set_a, const std::string& a_name,
                                   const std::function<void(cuda::CudaOptions&)>& set_b, const std::string& b_name);
    // A small-T MoE option that must not change y: for small-T versions 1 and 2, BF16 and FP8 experts
    // (dummy weights of `seed`) and each T, one call with the options `off` gets (set(off, on) sets
    // both) and one with `on`'s, bitwise equal; taken(on) must grow by one a call where the shapes
    // take the small-T path (the tiny ones the grouped kernels do not tile run the fp32 kernels).
    void expect_small_moe_option_bitwise(const std::function<void(cuda::CudaOptions& off, cuda::CudaOptions& on)>& set,
                                         const std::function<int64_t(const cuda::CudaOps&)>& taken,
                                         const std::vector<int64_t>& Ts, uint64_t seed, const std::string& option);

    ModelConfig config_;
    std::unique_ptr<ModelWeights> weights_;
    CpuOps cpu_;
    std::unique_ptr<cuda::CudaOps> gpu_;
    std::mt19937 rng_{std::random_device{}()};
};

// A batch and the page tables its spans view (moving it keeps the tables' storage).
struct OwnedBatch {
    ForwardBatch batch;
    std::vector<std::vector<int32_t>> tables;
};

// A batch of sequences: (start_pos, num_tokens, slot) each; pages handed out shuffled.
OwnedBatch make_batch(const std::vector<std::array<int, 3>>& seqs, int block_size, int pages_per_seq,
                      std::mt19937& rng, int vocab) {
    OwnedBatch owned;
    ForwardBatch& b = owned.batch;
    owned.tables.resize(seqs.size());
    std::vector<int32_t> pages(seqs.size() * size_t(pages_per_seq));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), std::mt19937(1234));  // same tables in every batch
    for (size_t s = 0; s < seqs.size(); ++s) {
        SeqSpan span;
        span.row_begin = int32_t(b.token_ids.size());
        span.start_pos = seqs[s][0];
        span.num_tokens = seqs[s][1];
        span.state_slot = seqs[s][2];
        owned.tables[s].assign(pages.begin() + int64_t(s) * pages_per_seq, pages.begin() + int64_t(s + 1) * pages_per_seq);
        span.block_table = owned.tables[s];
        for (int i = 0; i < span.num_tokens; ++i) b.token_ids.push_back(int32_t(rng() % uint32_t(vocab)));
        b.seqs.push_back(span);
    }
    (void)block_size;
    return owned;
}

}  // namespace

TEST_P(CudaOpsParity, RowOps) {
    const int64_t T = 37, H = config_.hidden_size;
    const auto x = gpu_test::random_floats(size_t(T * H), rng_);
    const auto y = gpu_test::random_floats(size_t(T * H), rng_);
    const ParamVector& w = weights_->layers[0].input_layernorm;

    std::vector<float> ref(size_t(T * H));
    cpu_.rms_norm_zc(x.data(), w, T, H, config_.rms_norm_eps, ref.data());
    float* dx = gpu_test::to_device(*gpu_, x);
    float* dy = gpu_->alloc(T * H);
    gpu_->rms_norm_zc(dx, w, T, H, config_.rms_norm_eps, dy);
    EXPECT_LT(normalised_error(gpu_test::to_host(*gpu_, dy, ref.size()), ref), kFp32Bound) << "rms_norm_zc";
    gpu_->rms_norm_zc(dx, w, T, H, config_.rms_norm_eps, dx);  // in place, as the final norm runs
    EXPECT_LT(normalised_error(gpu_test::to_host(*gpu_, dx, ref.size()), ref), kFp32Bound) << "rms_norm_zc in place";

    std::vector<float> sum = x;
    cpu_.add(sum.data(), y.data(), T * H);
    float* da = gpu_test::to_device(*gpu_, x);
    gpu_->add(da, gpu_test::to_device(*gpu_, y), T * H);
    EXPECT_EQ(gpu_test::to_host(*gpu_, da, sum.size()), sum) << "add";

    // The residual add fused into the next norm: x holds the sum (bitwise the add's), out the
    // normalised sum, against the CPU's add then norm, and bitwise equal to the GPU's own add then
    // rms_norm_zc (the same fp32 sum, the same order of the sum of squares); in place (the final
    // norm) out alone is wanted.
    std::vector<float> sum_norm(size_t(T * H));
    cpu_.rms_norm_zc(sum.data(), w, T, H, config_.rms_norm_eps, sum_norm.data());
    float* dxs = gpu_test::to_device(*gpu_, x);
    float* dys = gpu_test::to_device(*gpu_, y);
    float* dout = gpu_->alloc(T * H);
    gpu_->add_rms_norm_zc(dxs, dys, w, T, H, config_.rms_norm_eps, dout);
    EXPECT_EQ(gpu_test::to_host(*gpu_, dxs, sum.size()), sum) << "add_rms_norm_zc: the sum";
    const std::vector<float> fused = gpu_test::to_host(*gpu_, dout, sum_norm.size());
    EXPECT_LT(normalised_error(fused, sum_norm), kFp32Bound) << "add_rms_norm_zc";
    float* dsep = gpu_->alloc(T * H);
    gpu_->rms_norm_zc(da, w, T, H, config_.rms_norm_eps, dsep);  // da holds the GPU add's sum
    EXPECT_EQ(fused, gpu_test::to_host(*gpu_, dsep, sum_norm.size())) << "add_rms_norm_zc against add + rms_norm_zc";
    float* dxi = gpu_test::to_device(*gpu_, x);
    gpu_->add_rms_norm_zc(dxi, dys, w, T, H, config_.rms_norm_eps, dxi);
    EXPECT_EQ(gpu_test::to_host(*gpu_, dxi, sum_norm.size()), fused) << "add_rms_norm_zc in place";

    const std::vector<int32_t> rows = {36, 0, 5, 5, 17};
    std::vector<float> gathered(rows.size() * size_t(H));
    cpu_.gather_rows(x.data(), rows.data(), int64_t(rows.size()), H, gathered.data());
    float* dg = gpu_->alloc(int64_t(gathered.size()));
    gpu_->gather_rows(gpu_test::to_device(*gpu_, x), rows.data(), int64_t(rows.size()), H, dg);
    EXPECT_EQ(gpu_test::to_host(*gpu_, dg, gathered.size()), gathered) << "gather_rows";

    std::vector<float> cat(size_t(2 * T * H));
    cpu_.concat_columns(x.data(), y.data(), T, H, cat.data());
    float* dc = gpu_->alloc(2 * T * H);
    gpu_->concat_columns(gpu_test::to_device(*gpu_, x), gpu_test::to_device(*gpu_, y), T, H, dc);
    EXPECT_EQ(gpu_test::to_host(*gpu_, dc, cat.size()), cat) << "concat_columns";

    // argmax over vocabulary-sized rows, with a tie planted in row 1 (the first index must win).
    const int64_t V = config_.vocab_size, R = 5;
    std::vector<float> logits = gpu_test::random_floats(size_t(R * V), rng_);
    logits[size_t(V + 7)] = logits[size_t(V + V - 3)] = 100.0f;
    std::vector<int32_t> want(R), got(R);
    cpu_.argmax_rows(logits.data(), R, V, want.data());
    gpu_->argmax_rows(gpu_test::to_device(*gpu_, logits), R, V, got.data());
    EXPECT_EQ(got, want) << "argmax_rows";
    EXPECT_EQ(got[1], 7);

    const OwnedBatch owned = make_batch({{{0, int(T), 0}}}, 16, 4, rng_, int(config_.vocab_size));
    const ForwardBatch& b = owned.batch;
    const auto pos = b.positions();
    std::vector<float> emb(size_t(T * H));
    cpu_.embed(weights_->embed_tokens, b.token_ids.data(), T, emb.data());
    gpu_->begin_forward(b, pos.data());
    float* de = gpu_->alloc(T * H);
    gpu_->embed(weights_->embed_tokens, b.token_ids.data(), T, de);
    EXPECT_EQ(gpu_test::to_host(*gpu_, de, emb.size()), emb) << "embed";
    gpu_->free_all();
}

TEST_P(CudaOpsParity, Linear) {
    const DecoderLayerWeights& gdn = layer(LayerType::kLinearAttention);
    struct L {
        const char* name;
        const LinearWeight* w;
        double bound;
    };
    // bf16 weights: x is rounded to bf16 on the GPU (by cuBLASLt's path, or inside the small-rows
    // kernel for 1-2 rows); f32-kept linears (router, a/b) are exact fp32.
    const std::vector<L> linears = {{"in_proj_qkv", &gdn.gdn.in_proj_qkv, kBf16Bound},
                                    {"out_proj", &gdn.gdn.out_proj, kBf16Bound},
                                    {"in_proj_a (f32)", &gdn.gdn.in_proj_a, kFp32Bound},
                                    {"router (f32)", &gdn.moe.router, kFp32Bound},
                                    {"lm_head", &weights_->lm_head, kBf16Bound}};
    for (int64_t T : {1, 2, 3, 7, 300}) {
        for (const L& l : linears) {
            const int64_t small_before = gpu_->gemm().small_rows_calls();
            const auto x = gpu_test::random_floats(size_t(T * l.w->in_features), rng_);
            std::vector<float> ref(size_t(T * l.w->out_features));
            cpu_.linear(x.data(), T, *l.w, ref.data());
            float* dy = gpu_->alloc(T * l.w->out_features);
            gpu_->linear(gpu_test::to_device(*gpu_, x), T, *l.w, dy);
            const double err = normalised_error(gpu_test::to_host(*gpu_, dy, ref.size()), ref);
            const bool small = gpu_->gemm().small_rows_calls() > small_before;
            // bf16 weights with `in` a multiple of 256 must take the small-rows kernel up to 2 rows.
            if (l.bound == kBf16Bound && l.w->in_features % 256 == 0) {
                EXPECT_EQ(small, T <= 2) << l.name << " T=" << T;
            }
            EXPECT_LT(err, l.bound) << l.name << " T=" << T << (small ? " (small rows)" : "");
            gpu_->free_all();
        }
    }
}

// FP8 128×128-block linears (Qwen's official FP8 format) against CpuOps::linear on the dequantised
// weights. Where out and in are multiples of 128 (every real shape) the block-scaled cuBLASLt path
// must run on sm_90 with cuBLASLt >= 12.9 (a silent fallback fails here); it quantises x to e4m3
// per row and 128-column group, and e4m3's 3 mantissa bits (round-to-nearest relative error up
// to 2^-4, ~2.4e-2 rms for Gaussian values) pass through the dot products as ~2.5e-2 normalised
// error (simulated; bench/kernels/fp8_gemm_lab.cu measures it): bound 4e-2. Other shapes (the
// tiny model) take the dequant path: W and x rounded to bf16, kBf16Bound.
TEST_P(CudaOpsParity, Fp8BlockLinear) {
    constexpr double kFp8ActBound = 4e-2;
    ModelWeights w8 = make_dummy_weights(config_, 78, /*with_mtp=*/false, WeightFormat::kFP8Block);
    cuda::CudaOptions o;
    o.poison = true;
    cuda::CudaOps gpu(o);
    gpu.prepare_weights(weight_set(w8));
    const bool expected = cuda::Gemm::fp8_block_scaling_expected(o.device);
    const DecoderLayerWeights *attn = nullptr, *gdn = nullptr;
    for (const auto& l : w8.layers) (l.type == LayerType::kFullAttention ? attn : gdn) = &l;
    ASSERT_TRUE(attn && gdn);
    const std::vector<std::pair<const char*, const LinearWeight*>> linears = {
        {"q_proj", &attn->attn.q_proj},         {"k_proj", &attn->attn.k_proj},
        {"o_proj", &attn->attn.o_proj},         {"in_proj_qkv", &gdn->gdn.in_proj_qkv},
        {"in_proj_z", &gdn->gdn.in_proj_z},     {"out_proj", &gdn->gdn.out_proj}};
    for (int64_t T : {1, 2, 3, 7, 64, 300}) {
        for (const auto& [name, w] : linears) {
            ASSERT_EQ(w->format, WeightFormat::kFP8Block) << name;
            const auto x = gpu_test::random_floats(size_t(T * w->in_features), rng_);
            std::vector<float> ref(size_t(T * w->out_features));
            cpu_.linear(x.data(), T, *w, ref.data());
            float* dy = gpu.alloc(T * w->out_features);
            gpu.linear(gpu_test::to_device(gpu, x), T, *w, dy);
            const double err = normalised_error(gpu_test::to_host(gpu, dy, ref.size()), ref);
            const cuda::Fp8Path path = gpu.gemm().last_fp8_path();
            const bool block_shape = w->out_features % 128 == 0 && w->in_features % 128 == 0;
            // Up to CudaOptions::fp8_small_rows rows (version 2; one row without it): the small-rows
            // kernel, x quantised as the block-scaled path does it.
            const bool small_shape = T <= std::max(1, o.fp8_small_rows) && w->in_features % 512 == 0;
            if (small_shape) {
                EXPECT_EQ(path, cuda::Fp8Path::kSmallRows) << name << " T=" << T;
            } else if (!block_shape) {
                EXPECT_EQ(path, cuda::Fp8Path::kDequant) << name << " T=" << T;
            } else if (expected) {
                EXPECT_EQ(path, cuda::Fp8Path::kBlockScaled)
                    << name << " T=" << T << ": fell back to the dequant path on a GPU that supports block scaling";
            }
            const double bound =
                path == cuda::Fp8Path::kSmallRows || path == cuda::Fp8Path::kBlockScaled ? kFp8ActBound : kBf16Bound;
            EXPECT_LT(err, bound) << name << " T=" << T << " path " << int(path);
            gpu.free_all();
        }
    }
}

TEST_P(CudaOpsParity, MoE) {
    const MoeWeights& m = weights_->layers[0].moe;
    for (int64_t T : {1, 5, 64, 300}) {
        const auto x = gpu_test::random_floats(size_t(T * config_.hidden_size), rng_);
        std::vector<float> ref(x.size());
        cpu_.moe(x.data(), T, m, config_.num_experts_per_tok, config_.norm_topk_prob, ref.data());
        float* dy = gpu_->alloc(int64_t(ref.size()));
        gpu_->moe(gpu_test::to_device(*gpu_, x), T, m, config_.num_experts_per_tok, config_.norm_topk_prob, dy);
        EXPECT_LT(normalised_error(gpu_test::to_host(*gpu_, dy, ref.size()), ref), kBf16Bound) << "T=" << T;
        gpu_->free_all();
    }
}

// BF16 and FP8 experts (Qwen's official FP8 format) against CpuOps::moe on the (dequantised)
// weights, on every path: the small-T kernels (T <= kMoeSmallTMax: T = 1, 3, 8; moe_small.cu; x and
// h rounded to bf16 as in the mma.sync kernels, kBf16Bound), the mma.sync grouped GEMMs (T = 64;
// decode sizes: x and h rounded to bf16, kBf16Bound) and, from prefill_min_rows_per_expert routed rows per expert, the CUTLASS wgmma/TMA
// prefill path: bf16 activations for BF16 experts (kBf16Bound); for FP8 experts x and
// h = silu(g)·u quantised to e4m3 per row and 128 columns, two roundings of ~2.5e-2 normalised
// error each (see Fp8BlockLinear; bench/kernels/moe_lab.cu measures them): bound 6e-2, and above
// 8e-3 (the mma.sync path's error is ~3e-3), so a silent fallback fails. Real shapes with 32
// experts: T = 1024 gives 256 rows per expert, so the prefill path must run there when CUTLASS
// is compiled in (all shapes are multiples of 128); the tiny model's shapes are not.
TEST_P(CudaOpsParity, MoeBothGroupedGemmPaths) {
    constexpr double kFp8ActBound = 6e-2;
    const int64_t E = config_.num_experts, k = config_.num_experts_per_tok, H = config_.hidden_size;
    const int64_t I = config_.moe_intermediate_size, Is = config_.shared_expert_intermediate_size;
    const bool tiles128 = H % 128 == 0 && I % 128 == 0 && Is % 128 == 0;
    for (WeightFormat format : {WeightFormat::kDense, WeightFormat::kFP8Block}) {
        const bool fp8 = format == WeightFormat::kFP8Block;
        // BF16: the fixture's weights and backend; FP8: a quantised copy of the model.
        std::unique_ptr<ModelWeights> w8;
        std::unique_ptr<cuda::CudaOps> gpu8;
        if (fp8) {
            w8 = std::make_unique<ModelWeights>(make_dummy_weights(config_, 79, /*with_mtp=*/false, format));
            cuda::CudaOptions o;
            o.poison = true;
            gpu_test::apply_test_router_env(o);
            gpu8 = std::make_unique<cuda::CudaOps>(o);
            gpu8->prepare_weights(weight_set(*w8));
        }
        cuda::CudaOps& gpu = fp8 ? *gpu8 : *gpu_;
        const MoeWeights& m = (fp8 ? *w8 : *weights_).layers[0].moe;
        ASSERT_EQ(m.experts[0].gate_proj.format, format);
        for (int64_t T : {1, 3, 8, 64, 1024}) {
            const auto x = gpu_test::random_floats(size_t(T * H), rng_);
            std::vector<float> ref(x.size());
            cpu_.moe(x.data(), T, m, k, config_.norm_topk_prob, ref.data());
            float* dy = gpu.alloc(int64_t(ref.size()));
            gpu.moe(gpu_test::to_device(gpu, x), T, m, k, config_.norm_topk_prob, dy);
            const double err = normalised_error(gpu_test::to_host(gpu, dy, ref.size()), ref);
            const bool prefill = tiles128 && double(T) * k / E >= cuda::moe::prefill_min_rows_per_expert(fp8);
            if (prefill && GetParam().name == "real") {
                EXPECT_TRUE(cuda::moe::cutlass_grouped_gemm_compiled())
                    << "the CUTLASS grouped GEMM is not compiled in (run scripts/setup_cutlass.sh)";
            }
            const bool cutlass = prefill && cuda::moe::cutlass_grouped_gemm_compiled();
            const std::string what = std::string(fp8 ? "fp8" : "bf16") + " T=" + std::to_string(T) +
                                     (cutlass                         ? " (CUTLASS path)"
                                      : T <= cuda::kMoeSmallTMax ? " (small-T path)"
                                                                       : " (mma.sync)");
            EXPECT_LT(err, cutlass && fp8 ? kFp8ActBound : kBf16Bound) << what;
            if (cutlass && fp8) {
                EXPECT_GT(err, 8e-3) << what << ": no e4m3 rounding visible: did the prefill path run?";
            }
            gpu.free_all();
        }
    }
}

// The small-T path's version 2 (CudaOptions::moe_small_version = 2: the router GEMV and the
// shared-expert-gate logit inside the MoE kernels, top-k in the GEMV's last block, programmatic
// dependent launch) against CpuOps::moe, BF16 and FP8 experts, every T bucket (T = 9: above the
// threshold, the router linears run as before); each call twice (the block counter must be back
// at 0: bitwise equal), and against version 1 on the same input (the same routing unless a
// near-tie flips: the error bound, not equality).
TEST_P(CudaOpsParity, MoeSmallVersion2) {
    const int64_t k = config_.num_experts_per_tok, H = config_.hidden_size;
    for (WeightFormat format : {WeightFormat::kDense, WeightFormat::kFP8Block}) {
        const bool fp8 = format == WeightFormat::kFP8Block;
        std::unique_ptr<ModelWeights> w8;
        if (fp8) w8 = std::make_unique<ModelWeights>(make_dummy_weights(config_, 79, /*with_mtp=*/false, format));
        ModelWeights& wts = fp8 ? *w8 : *weights_;
        cuda::CudaOptions o1, o2;
        o1.poison = o2.poison = true;
        gpu_test::apply_test_router_env(o1), gpu_test::apply_test_router_env(o2);
        o1.moe_small_version = 1;
        o2.moe_small_version = 2;
        cuda::CudaOps g1(o1), g2(o2);
        g1.prepare_weights(weight_set(wts));
        g2.prepare_weights(weight_set(wts));
        const MoeWeights& m = wts.layers[0].moe;
        for (int64_t T : {1, 2, 3, 4, 5, 8, 9}) {
            const auto x = gpu_test::random_floats(size_t(T * H), rng_);
            std::vector<float> ref(x.size());
            cpu_.moe(x.data(), T, m, k, config_.norm_topk_prob, ref.data());
            const std::string what = std::string(fp8 ? "fp8" : "bf16") + " T=" + std::to_string(T);
            float* dx = gpu_test::to_device(g2, x);
            float* dy = g2.alloc(int64_t(ref.size()));
            g2.moe(dx, T, m, k, config_.norm_topk_prob, dy);
            const std::vector<float> y2 = gpu_test::to_host(g2, dy, ref.size());
            g2.moe(dx, T, m, k, config_.norm_topk_prob, dy);
            const std::vector<float> y2b = gpu_test::to_host(g2, dy, ref.size());
            EXPECT_LT(normalised_error(y2, ref), kBf16Bound) << what;
            EXPECT_TRUE(y2 == y2b) << what << ": a second call differs";
            float* dy1 = g1.alloc(int64_t(ref.size()));
            g1.moe(gpu_test::to_device(g1, x), T, m, k, config_.norm_topk_prob, dy1);
            EXPECT_LT(normalised_error(y2, gpu_test::to_host(g1, dy1, ref.size())), kBf16Bound) << what << " vs v1";
            g1.free_all();
            g2.free_all();
        }
    }
}

// gate_up's L2 prefetch of the down matrices (CudaOptions::moe_small_prefetch_down) on the small-T
// path, versions 1 and 2, BF16 and FP8 experts: y bitwise equal to the same call without it. Shapes
// the grouped kernels do not tile (the tiny ones) take the fp32 kernels, never the small-T path:
// there the option must change nothing.
void CudaOpsParity::expect_small_moe_option_bitwise(
    const std::function<void(cuda::CudaOptions& off, cuda::CudaOptions& on)>& set,
    const std::function<int64_t(const cuda::CudaOps&)>& taken, const std::vector<int64_t>& Ts, uint64_t seed,
    const std::string& option) {
    const int64_t k = config_.num_experts_per_tok, H = config_.hidden_size;
    const int64_t small_expected =
        cuda::moe_grouped_gemm_tiles(config_.num_experts, H, config_.moe_intermediate_size,
                                     config_.shared_expert_intermediate_size, k) ? 1 : 0;
    for (WeightFormat format : {WeightFormat::kDense, WeightFormat::kFP8Block}) {
        const bool fp8 = format == WeightFormat::kFP8Block;
        std::unique_ptr<ModelWeights> w8;
        if (fp8) w8 = std::make_unique<ModelWeights>(make_dummy_weights(config_, seed, /*with_mtp=*/false, format));
        ModelWeights& wts = fp8 ? *w8 : *weights_;
        for (const int version : {1, 2}) {
            cuda::CudaOptions off, on;
            off.poison = on.poison = true;
            gpu_test::apply_test_router_env(off), gpu_test::apply_test_router_env(on);
            off.moe_small_version = on.moe_small_version = version;
            set(off, on);
            cuda::CudaOps g_off(off), g_on(on);
            g_off.prepare_weights(weight_set(wts));
            g_on.prepare_weights(weight_set(wts));
            const MoeWeights& m = wts.layers[0].moe;
            for (int64_t T : Ts) {
                const auto x = gpu_test::random_floats(size_t(T * H), rng_);
                const std::string what = option + ", " + (fp8 ? "fp8" : "bf16") + " v" + std::to_string(version) +
                                         " T=" + std::to_string(T);
                auto run = [&](cuda::CudaOps& g) { return gpu_test::moe_y(g, x, T, m, k, config_.norm_topk_prob); };
                const int64_t taken_before = taken(g_on);
                const std::vector<float> a = run(g_off), b = run(g_on);
                ASSERT_EQ(a.size(), b.size());
                EXPECT_EQ(taken(g_on), taken_before + small_expected) << what << ": calls that took the option's kernels";
                EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << what << ": y differs";
            }
        }
    }
}

// gate_up's L2 prefetch of the down matrices (CudaOptions::moe_small_prefetch_down) on the small-T
// path: y bitwise equal to the same call without it; it lives in the small-T kernels only, so the
// call must have taken them where the shapes allow.
TEST_P(CudaOpsParity, MoeSmallPrefetchDown) {
    expect_small_moe_option_bitwise([](cuda::CudaOptions&, cuda::CudaOptions& on) { on.moe_small_prefetch_down = 1; },
                                    [](const cuda::CudaOps& g) { return g.moe_small_calls(); }, {1, 2, 8}, 81,
                                    "prefetch down");
}

// The small-T down + combine by expert slots (CudaOptions::moe_small_down_version 2,
// moe_small_down_slots.cu) against version 1 (a block per token): y bitwise equal, and the call must
// have run it where the shapes take the small-T path; version 1 never runs it.
TEST_P(CudaOpsParity, MoeSmallDownSlots) {
    expect_small_moe_option_bitwise(
        [](cuda::CudaOptions& off, cuda::CudaOptions& on) {
            off.moe_small_down_version = 1;
            on.moe_small_down_version = 2;
        },
        [](const cuda::CudaOps& g) { return g.moe_small_down_slots_calls(); }, {1, 2, 3, 5, 8}, 85, "down by slots");
    cuda::CudaOptions o;
    o.moe_small_down_version = 1;
    cuda::CudaOps g(o);
    g.prepare_weights(weight_set(*weights_));
    const int64_t T = 2, H = config_.hidden_size;
    float* dy = g.alloc(T * H);
    g.moe(gpu_test::to_device(g, gpu_test::random_floats(size_t(T * H), rng_)), T, weights_->layers[0].moe,
          config_.num_experts_per_tok, config_.norm_topk_prob, dy);
    EXPECT_EQ(g.moe_small_down_slots_calls(), 0);
}

// The decode grouped GEMMs' version 2 (CudaOptions::moe_decode_version = 2, moe_decode_gemm.cu:
// weights as the MMA's 16-row operand, tokens in 8-row groups) against CpuOps::moe, BF16 and FP8
// experts, on the mma.sync path at every T (moe_gemm_path = 0, so T = 200 does not take the
// prefill path): 1-4 token groups per tile, experts over several 32-row tiles; each call twice
// (bitwise equal) and against version 1 on the same input; version 2 with its down GEMM launched
// with programmatic dependent launch and without (CudaOptions::moe_decode_pdl) must give the same
// bits; with its expert outputs in bf16 (moe_decode_eout_bf16) y must meet the same bound.
TEST_P(CudaOpsParity, MoeDecodeVersion2) {
    const int64_t k = config_.num_experts_per_tok, H = config_.hidden_size;
    for (WeightFormat format : {WeightFormat::kDense, WeightFormat::kFP8Block}) {
        const bool fp8 = format == WeightFormat::kFP8Block;
        std::unique_ptr<ModelWeights> w8;
        if (fp8) w8 = std::make_unique<ModelWeights>(make_dummy_weights(config_, 83, /*with_mtp=*/false, format));
        ModelWeights& wts = fp8 ? *w8 : *weights_;
        cuda::CudaOptions o1, o2;
        o1.poison = o2.poison = true;
        gpu_test::apply_test_router_env(o1), gpu_test::apply_test_router_env(o2);
        o1.moe_gemm_path = o2.moe_gemm_path = 0;
        o1.moe_decode_version = 1;
        o2.moe_decode_version = 2;
        o2.moe_decode_eout_bf16 = 0;  // whatever QS_TEST_MOE_DECODE_EOUT_BF16 says: the fp32 baseline
        const bool grouped = cuda::moe_grouped_gemm_tiles(config_.num_experts, H, config_.moe_intermediate_size,
                                                          config_.shared_expert_intermediate_size, k);
        cuda::CudaOptions o2p = o2, o2e = o2;
        o2.moe_decode_pdl = 0;
        o2p.moe_decode_pdl = 1;
        o2e.moe_decode_eout_bf16 = 1;
        cuda::CudaOps g1(o1), g2(o2), g2p(o2p), g2e(o2e);
        g1.prepare_weights(weight_set(wts));
        g2.prepare_weights(weight_set(wts));
        g2p.prepare_weights(weight_set(wts));
        g2e.prepare_weights(weight_set(wts));
        const MoeWeights& m = wts.layers[0].moe;
        for (int64_t T : {9, 17, 40, 200}) {
            const auto x = gpu_test::random_floats(size_t(T * H), rng_);
            std::vector<float> ref(x.size());
            cpu_.moe(x.data(), T, m, k, config_.norm_topk_prob, ref.data());
            const std::string what = std::string(fp8 ? "fp8" : "bf16") + " T=" + std::to_string(T);
            float* dx = gpu_test::to_device(g2, x);
            float* dy = g2.alloc(int64_t(ref.size()));
            g2.moe(dx, T, m, k, config_.norm_topk_prob, dy);
            const std::vector<float> y2 = gpu_test::to_host(g2, dy, ref.size());
            g2.moe(dx, T, m, k, config_.norm_topk_prob, dy);
            const std::vector<float> y2b = gpu_test::to_host(g2, dy, ref.size());
            EXPECT_LT(normalised_error(y2, ref), kBf16Bound) << what;
            EXPECT_TRUE(y2 == y2b) << what << ": a second call differs";
            float* dy1 = g1.alloc(int64_t(ref.size()));
            g1.moe(gpu_test::to_device(g1, x), T, m, k, config_.norm_topk_prob, dy1);
            EXPECT_LT(normalised_error(y2, gpu_test::to_host(g1, dy1, ref.size())), kBf16Bound) << what << " vs v1";
            float* dyp = g2p.alloc(int64_t(ref.size()));
            g2p.moe(gpu_test::to_device(g2p, x), T, m, k, config_.norm_topk_prob, dyp);
            EXPECT_TRUE(gpu_test::to_host(g2p, dyp, ref.size()) == y2) << what << ": down with PDL differs";
            g2p.free_all();
            // bf16 expert outputs: other bits, the same bound against the CPU.
            float* dye = g2e.alloc(int64_t(ref.size()));
            g2e.moe(gpu_test::to_device(g2e, x), T, m, k, config_.norm_topk_prob, dye);
            const std::vector<float> ye = gpu_test::to_host(g2e, dye, ref.size());
            EXPECT_LT(normalised_error(ye, ref), kBf16Bound) << what << " with bf16 expert outputs";
            // Shapes off the grouped GEMMs' tiles (the tiny config) run the fp32 reference kernels,
            // which have no expert-output buffer to round: the same bits there.
            if (grouped)
                EXPECT_FALSE(ye == y2) << what << ": bf16 expert outputs gave fp32's bits (option not taken?)";
            else
                EXPECT_TRUE(ye == y2) << what << ": the reference kernels' bits changed with the option";
            g2e.free_all();
            g1.free_all();
            g2.free_all();
        }
    }
}

// The prefill path's version 2 stages (CudaOptions::moe_prefill_version = 2, moe_prefill_stages.cu:
// multi-block stable sort, batched-load gather / SiLU / combine) against CpuOps::moe and against
// version 1, BF16 and FP8 experts, the CUTLASS path forced at every T (moe_gemm_path = 1) where
// the shapes allow it: T = 64 (one sort block), 1,024 and 2,500 (several, the last one partial).
// Every row goes through the same arithmetic in both versions, so y must be bitwise equal; each
// version 2 call twice (bitwise equal).
TEST_P(CudaOpsParity, MoePrefillVersion2) {
    constexpr double kFp8ActBound = 6e-2;
    const int64_t k = config_.num_experts_per_tok, H = config_.hidden_size;
    const bool tiles128 = H % 128 == 0 && config_.moe_intermediate_size % 128 == 0 &&
                          config_.shared_expert_intermediate_size % 128 == 0;
    if (GetParam().name == "real") {
        EXPECT_TRUE(cuda::moe::cutlass_grouped_gemm_compiled())
            << "the CUTLASS grouped GEMM is not compiled in (run scripts/setup_cutlass.sh)";
    }
    // Elsewhere (shapes off the 128 grid, or no CUTLASS) version 2 must still leave y unchanged.
    const bool cutlass = tiles128 && cuda::moe::cutlass_grouped_gemm_compiled();
    for (WeightFormat format : {WeightFormat::kDense, WeightFormat::kFP8Block}) {
        const bool fp8 = format == WeightFormat::kFP8Block;
        std::unique_ptr<ModelWeights> w8;
        if (fp8) w8 = std::make_unique<ModelWeights>(make_dummy_weights(config_, 89, /*with_mtp=*/false, format));
        ModelWeights& wts = fp8 ? *w8 : *weights_;
        cuda::CudaOptions o1, o2;
        o1.poison = o2.poison = true;
        gpu_test::apply_test_router_env(o1), gpu_test::apply_test_router_env(o2);
        o1.moe_gemm_path = o2.moe_gemm_path = cutlass ? 1 : -1;
        o1.moe_prefill_version = 1;
        o2.moe_prefill_version = 2;
        cuda::CudaOps g1(o1), g2(o2);
        g1.prepare_weights(weight_set(wts));
        g2.prepare_weights(weight_set(wts));
        const MoeWeights& m = wts.layers[0].moe;
        for (int64_t T : {64, 1024, 2500}) {
            const auto x = gpu_test::random_floats(size_t(T * H), rng_);
            std::vector<float> ref(x.size());
            cpu_.moe(x.data(), T, m, k, config_.norm_topk_prob, ref.data());
            const std::string what = std::string(fp8 ? "fp8" : "bf16") + " T=" + std::to_string(T) +
                                     (cutlass ? " (CUTLASS path)" : " (auto path)");
            float* dx = gpu_test::to_device(g2, x);
            float* dy = g2.alloc(int64_t(ref.size()));
            g2.moe(dx, T, m, k, config_.norm_topk_prob, dy);
            const std::vector<float> y2 = gpu_test::to_host(g2, dy, ref.size());
            g2.moe(dx, T, m, k, config_.norm_topk_prob, dy);
            const std::vector<float> y2b = gpu_test::to_host(g2, dy, ref.size());
            const double err = normalised_error(y2, ref);
            EXPECT_LT(err, cutlass && fp8 ? kFp8ActBound : kBf16Bound) << what;
            if (cutlass && fp8) {
                EXPECT_GT(err, 8e-3) << what << ": no e4m3 rounding visible: did the prefill path run?";
            }
            EXPECT_TRUE(y2 == y2b) << what << ": a second call differs";
            float* dy1 = g1.alloc(int64_t(ref.size()));
            g1.moe(gpu_test::to_device(g1, x), T, m, k, config_.norm_topk_prob, dy1);
            const std::vector<float> y1 = gpu_test::to_host(g1, dy1, ref.size());
            EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y2.size() * 4), 0) << what << ": version 2 differs from version 1";
            g1.free_all();
            g2.free_all();
        }
    }
}

TEST_P(CudaOpsParity, GatedAttentionWithPagedCache) {
    const DecoderLayerWeights& l = layer(LayerType::kFullAttention);
    const ModelConfig& c = config_;
    const AttentionDims d{c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rotary_dim(), c.rope_theta,
                          c.rms_norm_eps};
    for (KvCacheDtype kv : {KvCacheDtype::kBF16, KvCacheDtype::kFP8E4M3}) {
        const int bs = 16, pages = 8;
        const CacheGeometry g = CacheGeometry::for_model(c, 3 * pages, bs, 3, false, kv);
        ModelCache cpu_cache(g);
        auto gpu_cache = gpu_->make_cache(g);
        // A prefill batch, then a mixed one: a decode row, a chunk continuing a prompt, a fresh prompt.
        // Built in place: a copy of an OwnedBatch would leave its spans on the original tables.
        std::vector<OwnedBatch> batches;
        batches.push_back(make_batch({{{0, 40, 0}, {0, 17, 1}}}, bs, pages, rng_, int(c.vocab_size)));
        batches.push_back(make_batch({{{40, 1, 0}, {17, 9, 1}, {0, 25, 2}}}, bs, pages, rng_, int(c.vocab_size)));
        for (size_t bi = 0; bi < batches.size(); ++bi) {
            const ForwardBatch& b = batches[bi].batch;
            const int64_t T = b.num_tokens();
            const auto pos = b.positions();
            const auto qg = gpu_test::random_floats(size_t(T * d.num_heads * 2 * d.head_dim), rng_);
            const auto k = gpu_test::random_floats(size_t(T * d.num_kv_heads * d.head_dim), rng_);
            const auto v = gpu_test::random_floats(size_t(T * d.num_kv_heads * d.head_dim), rng_);
            std::vector<float> k_cpu = k, ref(size_t(T * d.num_heads * d.head_dim));
            cpu_.begin_forward(b, pos.data());
            cpu_.gated_attention(qg.data(), k_cpu.data(), v.data(), l.attn.q_norm, l.attn.k_norm, d, b, pos.data(),
                                 cpu_cache, 0, ref.data());
            gpu_->begin_forward(b, pos.data());
            float* out = gpu_->alloc(int64_t(ref.size()));
            gpu_->gated_attention(gpu_test::to_device(*gpu_, qg), gpu_test::to_device(*gpu_, k),
                                  gpu_test::to_device(*gpu_, v), l.attn.q_norm, l.attn.k_norm, d, b, pos.data(),
                                  *gpu_cache, 0, out);
            const std::string what = std::string(kv == KvCacheDtype::kBF16 ? "bf16" : "fp8") + " batch " +
                                     std::to_string(bi);
            // The kernel feeds q and the softmax weights to bf16 tensor-core products (measured
            // 1.4e-3 against this fp32 reference on the H200); fp8 K/V: a 1-ulp rounding flip
            // (1/16 relative) moves scores more than bf16's 1/256.
            const double bound = kv == KvCacheDtype::kBF16 ? 5e-3 : 2e-2;
            EXPECT_LT(normalised_error(gpu_test::to_host(*gpu_, out, ref.size()), ref), bound) << "out " << what;
            auto* st = gpu_->storage(gpu_cache.get());
            const size_t n = size_t(g.num_blocks * bs * g.num_kv_heads * g.head_dim);
            const int elem = kv == KvCacheDtype::kBF16 ? 2 : 1;
            const std::vector<float> k_ref(cpu_cache.k(0), cpu_cache.k(0) + n), v_ref(cpu_cache.v(0), cpu_cache.v(0) + n);
            EXPECT_LT(normalised_error(gpu_test::read_device(st->k(0), n, elem), k_ref), kv == KvCacheDtype::kBF16 ? 1e-3 : 2e-2)
                << "K cache " << what;
            EXPECT_LT(normalised_error(gpu_test::read_device(st->v(0), n, elem), v_ref), 1e-6) << "V cache " << what;
            gpu_->free_all();
        }
    }
}

// Decode attention versions (CudaOptions::attention_decode_version): each against the CPU with
// GatedAttentionWithPagedCache's bounds, per sequence (a wrong row or head of one short sequence
// cannot hide in the total), and version 2 against version 1. Sequences of 1..4 rows on the
// decode kernel (attention_decode_rows 4: an MTP verify beside plain decode rows), contexts up to
// 600 keys (split-K partials and the combine), single rows of 12 sequences (one row per
// sequence, > 8 sequences), every sequence's pages shuffled. The tiny config's head_dim 32 runs
// version 2 padded to 64; the real one at 256. Version 2 also with the split-K combine's version 2
// (CudaOptions::attention_combine_version: its loads hoisted): bitwise equal to version 1's.
TEST_P(CudaOpsParity, GatedAttentionDecodeVersions) {
    const DecoderLayerWeights& l = layer(LayerType::kFullAttention);
    const ModelConfig& c = config_;
    const AttentionDims d{c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rotary_dim(), c.rope_theta,
                          c.rms_norm_eps};
    const int bs = 16, pages = 40, nseq = 12;
    for (KvCacheDtype kv : {KvCacheDtype::kBF16, KvCacheDtype::kFP8E4M3}) {
        const CacheGeometry g = CacheGeometry::for_model(c, nseq * pages, bs, nseq, false, kv);
        ModelCache cpu_cache(g);
        std::unique_ptr<cuda::CudaOps> gpu[3];  // decode versions 1, 2, then 2 with combine version 2
        std::unique_ptr<ModelCache> cache[3];
        for (int v = 0; v < 3; ++v) {
            cuda::CudaOptions o;
            o.poison = true;
            o.attention_decode_rows = 4;
            o.attention_decode_version = v == 0 ? 1 : 2;
            if (v == 2) o.attention_combine_version = 2;
            gpu[v] = std::make_unique<cuda::CudaOps>(o);
            gpu[v]->prepare_weights(weight_set(*weights_));
            cache[v] = gpu[v]->make_cache(g);
        }
        std::vector<OwnedBatch> batches;
        std::vector<std::array<int, 3>> fill, single;
        const int ctx[nseq] = {600, 300, 451, 200, 50, 17, 1, 599, 129, 64, 333, 5};
        for (int s = 0; s < nseq; ++s) fill.push_back({0, ctx[s], s});
        batches.push_back(make_batch(fill, bs, pages, rng_, int(c.vocab_size)));
        // The verify-like step: 1..4 rows per sequence (<= 8 sequences: the decode kernel).
        batches.push_back(make_batch({{{600, 2, 0}, {300, 1, 1}, {451, 3, 2}, {200, 4, 3}, {50, 1, 4}, {1, 4, 6}}},
                                     bs, pages, rng_, int(c.vocab_size)));
        const int after[nseq] = {602, 301, 454, 204, 51, 17, 5, 599, 129, 64, 333, 5};
        for (int s = 0; s < nseq; ++s) single.push_back({after[s], 1, s});
        batches.push_back(make_batch(single, bs, pages, rng_, int(c.vocab_size)));
        for (size_t bi = 0; bi < batches.size(); ++bi) {
            const ForwardBatch& b = batches[bi].batch;
            const int64_t T = b.num_tokens();
            const auto pos = b.positions();
            const auto qg = gpu_test::random_floats(size_t(T * d.num_heads * 2 * d.head_dim), rng_);
            const auto k = gpu_test::random_floats(size_t(T * d.num_kv_heads * d.head_dim), rng_);
            const auto vv = gpu_test::random_floats(size_t(T * d.num_kv_heads * d.head_dim), rng_);
            std::vector<float> k_cpu = k, ref(size_t(T * d.num_heads * d.head_dim));
            cpu_.begin_forward(b, pos.data());
            cpu_.gated_attention(qg.data(), k_cpu.data(), vv.data(), l.attn.q_norm, l.attn.k_norm, d, b, pos.data(),
                                 cpu_cache, 0, ref.data());
            std::vector<float> y[3];
            for (int v = 0; v < 3; ++v) {
                cuda::CudaOps& o = *gpu[v];
                o.begin_forward(b, pos.data());
                float* out = o.alloc(int64_t(ref.size()));
                o.gated_attention(gpu_test::to_device(o, qg), gpu_test::to_device(o, k), gpu_test::to_device(o, vv),
                                  l.attn.q_norm, l.attn.k_norm, d, b, pos.data(), *cache[v], 0, out);
                y[v] = gpu_test::to_host(o, out, ref.size());
                o.free_all();
            }
            const std::string what = std::string(kv == KvCacheDtype::kBF16 ? "bf16" : "fp8") + " batch " +
                                     std::to_string(bi);
            const double bound = kv == KvCacheDtype::kBF16 ? 5e-3 : 2e-2;  // as GatedAttentionWithPagedCache
            for (int v = 0; v < 2; ++v)
                EXPECT_LT(normalised_error(y[v], ref), bound) << "version " << v + 1 << " vs CPU, " << what;
            EXPECT_TRUE(y[2] == y[1]) << "combine version 2 against 1 (bitwise), " << what;
            for (const SeqSpan& s : b.seqs) {
                const size_t n = size_t(d.num_heads * d.head_dim), r0 = size_t(s.row_begin) * n;
                const size_t len = size_t(s.num_tokens) * n;
                auto part = [&](const std::vector<float>& x) {
                    return std::vector<float>(x.begin() + int64_t(r0), x.begin() + int64_t(r0 + len));
                };
                const std::string seq = what + ", sequence at " + std::to_string(s.start_pos) + " of " +
                                        std::to_string(s.num_tokens) + " rows";
                EXPECT_LT(normalised_error(part(y[1]), part(ref)), bound) << "version 2 vs CPU, " << seq;
                EXPECT_LT(normalised_error(part(y[1]), part(y[0])), bound) << "version 2 vs version 1, " << seq;
            }
        }
    }
}

TEST(CudaOptionsChoice, AttentionDecodeVersionValidated) {
    QS_REQUIRE_GPU();
    EXPECT_EQ(cuda::CudaOptions{}.attention_decode_version, 2);  // the default since the H200 run
    // As CudaAttentionV2Option.RejectsUnknownVersion: threadsafe death tests (the child
    // re-executes the binary instead of forking a process that holds a CUDA context).
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    cuda::CudaOptions o;
    o.attention_decode_version = 3;
    EXPECT_DEATH(cuda::CudaOps ops(o), "attention_decode_version must be 1 or 2");
}

TEST(CudaOptionsChoice, MoeGemmPathAndGdnChunkMapValidated) {
    QS_REQUIRE_GPU();
    EXPECT_EQ(cuda::CudaOptions{}.moe_gemm_path, -1);  // by shape
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    cuda::CudaOptions o;
    o.moe_gemm_path = 3;
    EXPECT_DEATH(cuda::CudaOps ops(o), "moe_gemm_path must be -1 \\(by shape\\), 0, 1 or 2");
    cuda::CudaOptions m;
    EXPECT_EQ(m.gdn_chunk_map, 1);  // the chunk map by default
    m.gdn_chunk_map = 2;
    EXPECT_DEATH(cuda::CudaOps ops(m), "gdn_chunk_map must be 0 or 1");
    cuda::CudaOptions s;
    EXPECT_EQ(s.gdn_side_stream, 1);  // the side stream by default
    s.gdn_side_stream = 2;
    EXPECT_DEATH(cuda::CudaOps ops(s), "gdn_side_stream must be 0 or 1");
    cuda::CudaOptions b;
    b.gdn_side_blocks = -1;
    EXPECT_DEATH(cuda::CudaOps ops(b), "gdn_side_blocks must be in \\[0, 65535\\]");
    cuda::CudaOptions pd;
    EXPECT_EQ(pd.moe_decode_pdl, 1);  // on by default
    pd.moe_decode_pdl = 2;
    EXPECT_DEATH(cuda::CudaOps ops(pd), "moe_decode_pdl must be 0 or 1");
    cuda::CudaOptions eb;
    EXPECT_EQ(eb.moe_decode_eout_bf16, 0);  // off by default
    eb.moe_decode_eout_bf16 = 2;
    EXPECT_DEATH(cuda::CudaOps ops(eb), "moe_decode_eout_bf16 must be 0 or 1");
}

// Session 27's options: the fused norms' row limits (defaults where the H200 showed a gain), the
// combine version and the MoE down prefetch (opt-in), each rejected out of range by name.
TEST(CudaOptionsChoice, FusedNormRowsCombineAndPrefetchValidated) {
    QS_REQUIRE_GPU();
    const cuda::CudaOptions d;
    EXPECT_EQ(d.fused_input_norm, 0);  // since version 3 of the small-rows kernel is the default
    EXPECT_EQ(d.fused_output_norm, 2);
    EXPECT_EQ(d.attention_combine_version, 1);
    EXPECT_EQ(d.moe_small_prefetch_down, 0);
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    cuda::CudaOptions o = d;
    o.fused_input_norm = 5;
    EXPECT_DEATH(cuda::CudaOps ops(o), "fused_input_norm must be in \\[0, 4\\]");
    o = d;
    o.fused_output_norm = -1;
    EXPECT_DEATH(cuda::CudaOps ops(o), "fused_output_norm must be in \\[0, 4\\]");
    o = d;
    o.attention_combine_version = 3;
    EXPECT_DEATH(cuda::CudaOps ops(o), "attention_combine_version must be 1 or 2");
    o = d;
    o.moe_small_prefetch_down = 2;
    EXPECT_DEATH(cuda::CudaOps ops(o), "moe_small_prefetch_down must be 0 or 1");
    EXPECT_EQ(d.moe_small_down_version, 2);  // the default since session 31's H200 run
    o = d;
    o.moe_small_down_version = 3;
    EXPECT_DEATH(cuda::CudaOps ops(o), "moe_small_down_version must be -1, 1 or 2");
    // Session 28's small-rows version, the default since session 30's H100 run.
    EXPECT_EQ(d.fp8_small_version, 3);
    o = d;
    o.fp8_small_version = 4;
    EXPECT_DEATH(cuda::CudaOps ops(o), "fp8_small_version must be 2 or 3");
    EXPECT_EQ(d.fp8_small_v3_blocks_per_sm, 0);
    o = d;
    o.fp8_small_v3_blocks_per_sm = 5;
    EXPECT_DEATH(cuda::CudaOps ops(o), "fp8_small_v3_blocks_per_sm must be in \\[0, 4\\]");
    o.fp8_small_v3_blocks_per_sm = -1;
    EXPECT_DEATH(cuda::CudaOps ops(o), "fp8_small_v3_blocks_per_sm must be in \\[0, 4\\]");
}

// The auto choice of the GDN prefill version (CudaOptions::gdn_prefill_version 0, the default):
// fp16 operands (version 6: version 4's arithmetic, bit for bit) only where the state is stored in
// bf16, whose rounding (8 bits per call) is the op's error budget; fp32 storage keeps version 1's
// fp32-class math. With the default options GatedDeltaNetWithStateSlots below therefore checks
// version 1 on fp32 state against 1e-4 and version 6 on bf16 state against the bf16 bound.
TEST(CudaOptionsChoice, GdnPrefillVersionFollowsStateStorage) {
    EXPECT_EQ(cuda::CudaOptions{}.gdn_prefill_version, 0);
    EXPECT_EQ(cuda::gdn_prefill_version_for(0, true), 6);
    EXPECT_EQ(cuda::gdn_prefill_version_for(0, false), 1);
    for (int v = 1; v <= 6; ++v) {
        EXPECT_EQ(cuda::gdn_prefill_version_for(v, true), v);
        EXPECT_EQ(cuda::gdn_prefill_version_for(v, false), v);
    }
}

TEST_P(CudaOpsParity, GatedDeltaNetWithStateSlots) {
    const DecoderLayerWeights& l = layer(LayerType::kLinearAttention);
    const ModelConfig& c = config_;
    const GdnDims d{c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
                    c.linear_conv_kernel_dim, c.rms_norm_eps};
    for (bool ssm_bf16 : {false, true}) {
        cuda::CudaOptions o;
        o.poison = true;
        o.ssm_bf16 = ssm_bf16;
        gpu_test::apply_test_env(o);  // QS_TEST_GDN_PREFILL_VERSION (scripts/gpu_run.sh gdn_acc)
        cuda::CudaOps gpu(o);
        gpu.prepare_weights(weight_set(*weights_));
        const CacheGeometry g = CacheGeometry::for_model(c, 4, 16, 4, false, KvCacheDtype::kBF16);
        ModelCache cpu_cache(g);
        auto gpu_cache = gpu.make_cache(g);
        // Slots out of order; sequences of 1 and 2 tokens (shorter than the conv window) too.
        // Built in place: a copy of an OwnedBatch would leave its spans on the original tables.
        std::vector<OwnedBatch> batches;
        batches.push_back(make_batch({{{0, 70, 2}, {0, 2, 0}, {0, 13, 3}}}, 16, 1, rng_, int(c.vocab_size)));
        batches.push_back(make_batch({{{70, 1, 2}, {2, 1, 0}, {13, 150, 3}, {0, 5, 1}}}, 16, 1, rng_, int(c.vocab_size)));
        // The chunk-parallel prefill path (gdn_cp_*.cu, chosen by shape for few long sequences: here
        // ceil(T / max) = 2 long sequences): a long sequence among decode rows and short ones, chunk
        // boundaries +-1, every slot starting from the non-zero state left above.
        batches.push_back(make_batch({{{71, 1, 2}, {3, 900, 0}, {163, 65, 3}, {5, 63, 1}}}, 16, 1, rng_,
                                     int(c.vocab_size)));
        batches.push_back(make_batch({{{963, 2000, 0}}}, 16, 1, rng_, int(c.vocab_size)));  // one long prompt
        // Decode-only batches (by shape: gdn_decode_slices.cu at the real shape with bf16 state, else the
        // streaming kernel, gdn_decode.cu): one token per sequence, slots out of order; then 1-3 tokens
        // per sequence (MTP-verification-like: the streaming kernel).
        batches.push_back(make_batch({{{228, 1, 3}, {2963, 1, 0}, {72, 1, 2}, {68, 1, 1}}}, 16, 1, rng_,
                                     int(c.vocab_size)));
        batches.push_back(make_batch({{{229, 2, 3}, {73, 3, 2}, {2964, 1, 0}}}, 16, 1, rng_, int(c.vocab_size)));
        for (size_t bi = 0; bi < batches.size(); ++bi) {
            const ForwardBatch& b = batches[bi].batch;
            const int64_t T = b.num_tokens();
            const auto pos = b.positions();
            const auto qkv = gpu_test::random_floats(size_t(T * d.conv_dim()), rng_);
            const auto z = gpu_test::random_floats(size_t(T * d.value_dim()), rng_);
            const auto bb = gpu_test::random_floats(size_t(T * d.num_value_heads), rng_);
            const auto a = gpu_test::random_floats(size_t(T * d.num_value_heads), rng_);
            std::vector<float> ref(size_t(T * d.value_dim()));
            cpu_.gated_delta_net(qkv.data(), z.data(), bb.data(), a.data(), l.gdn, d, b, cpu_cache, 0, ref.data());
            gpu.begin_forward(b, pos.data());
            float* out = gpu.alloc(int64_t(ref.size()));
            gpu.gated_delta_net(gpu_test::to_device(gpu, qkv), gpu_test::to_device(gpu, z),
                                gpu_test::to_device(gpu, bb), gpu_test::to_device(gpu, a), l.gdn, d, b, *gpu_cache, 0, out);
            const std::string what = std::string(ssm_bf16 ? "bf16 state" : "fp32 state") + " batch " + std::to_string(bi);
            // bf16 state storage rounds the state once per call (math stays fp32).
            const double bound = ssm_bf16 ? 1e-2 : kFp32Bound;
            EXPECT_LT(normalised_error(gpu_test::to_host(gpu, out, ref.size()), ref), bound) << "out " << what;
            auto* st = gpu.storage(gpu_cache.get());
            const size_t nc = size_t(g.num_state_slots * g.conv_window * g.conv_dim);
            const size_t ns = size_t(g.num_state_slots * g.num_value_heads * g.key_head_dim * g.value_head_dim);
            EXPECT_LT(normalised_error(gpu_test::read_device(st->conv(0), nc, 4),
                                       std::vector<float>(cpu_cache.conv(0), cpu_cache.conv(0) + nc)),
                      1e-6)
                << "conv state " << what;
            EXPECT_LT(normalised_error(gpu_test::read_device(st->ssm(0), ns, ssm_bf16 ? 2 : 4),
                                       std::vector<float>(cpu_cache.ssm(0), cpu_cache.ssm(0) + ns)),
                      bound)
                << "recurrent state " << what;
            gpu.free_all();
        }
    }
}

// Each batch through the CPU specification and through both sides on the same random inputs: each
// side against the CPU (out and recurrent state within `bound`, the conv window within 1e-6), then
// the two sides' outputs and recurrent states bit for bit (the versions compared do the same
// arithmetic in the same order), or, with sides_bound >= 0 (kernels that sum in other orders),
// within sides_bound of each other. The batches run in order, so later ones continue from the
// states the earlier ones left.
void CudaOpsParity::expect_gdn_sides_equal(const std::vector<OwnedBatch>& batches, const GdnSide& a,
                                           const GdnSide& b, ModelCache& cpu_cache, bool ssm_bf16, double bound,
                                           double sides_bound) {
    const DecoderLayerWeights& l = layer(LayerType::kLinearAttention);
    const ModelConfig& c = config_;
    const GdnDims d{c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
                    c.linear_conv_kernel_dim, c.rms_norm_eps};
    const CacheGeometry& g = cpu_cache.geometry();
    const size_t nc = size_t(g.num_state_slots * g.conv_window * g.conv_dim);
    const size_t ns = size_t(g.num_state_slots * g.num_value_heads * g.key_head_dim * g.value_head_dim);
    const std::string storage = ssm_bf16 ? " bf16 state" : " fp32 state";
    for (size_t bi = 0; bi < batches.size(); ++bi) {
        const ForwardBatch& fb = batches[bi].batch;
        const int64_t T = fb.num_tokens();
        const auto pos = fb.positions();
        const auto qkv = gpu_test::random_floats(size_t(T * d.conv_dim()), rng_);
        const auto z = gpu_test::random_floats(size_t(T * d.value_dim()), rng_);
        const auto bb = gpu_test::random_floats(size_t(T * d.num_value_heads), rng_);
        const auto ga = gpu_test::random_floats(size_t(T * d.num_value_heads), rng_);
        std::vector<float> ref(size_t(T * d.value_dim()));
        cpu_.gated_delta_net(qkv.data(), z.data(), bb.data(), ga.data(), l.gdn, d, fb, cpu_cache, 0, ref.data());
        const std::vector<float> ref_state(cpu_cache.ssm(0), cpu_cache.ssm(0) + ns);
        const std::vector<float> ref_conv(cpu_cache.conv(0), cpu_cache.conv(0) + nc);
        std::vector<float> outs[2], states[2];
        int k = 0;
        for (const GdnSide* side : {&a, &b}) {
            cuda::CudaOps& gpu = *side->gpu;
            gpu.begin_forward(fb, pos.data());
            float* out = gpu.alloc(int64_t(ref.size()));
            gpu.gated_delta_net(gpu_test::to_device(gpu, qkv), gpu_test::to_device(gpu, z),
                                gpu_test::to_device(gpu, bb), gpu_test::to_device(gpu, ga), l.gdn, d, fb, *side->cache,
                                0, out);
            outs[k] = gpu_test::to_host(gpu, out, ref.size());
            auto* st = gpu.storage(side->cache);
            states[k] = gpu_test::read_device(st->ssm(0), ns, ssm_bf16 ? 2 : 4);
            const std::string what = side->name + storage + " batch " + std::to_string(bi);
            EXPECT_LT(normalised_error(outs[k], ref), bound) << "out " << what;
            EXPECT_LT(normalised_error(gpu_test::read_device(st->conv(0), nc, 4), ref_conv), 1e-6) << "conv state " << what;
            EXPECT_LT(normalised_error(states[k], ref_state), bound) << "recurrent state " << what;
            gpu.free_all();
            ++k;
        }
        const std::string which = a.name + " against " + b.name + "," + storage + ", batch " + std::to_string(bi);
        if (sides_bound >= 0) {
            EXPECT_LT(normalised_error(outs[0], outs[1]), sides_bound) << "out, " << which;
            EXPECT_LT(normalised_error(states[0], states[1]), sides_bound) << "state, " << which;
            continue;
        }
        EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)), 0) << "out bits, " << which;
        EXPECT_EQ(std::memcmp(states[0].data(), states[1].data(), states[0].size() * sizeof(float)), 0)
            << "state bits, " << which;
    }
}

void CudaOpsParity::expect_gdn_options_equal(const std::vector<OwnedBatch>& batches, int slots,
                                             const cuda::CudaOptions& a, const std::string& a_name,
                                             const cuda::CudaOptions& b, const std::string& b_name, double bound,
                                             double sides_bound) {
    ASSERT_EQ(a.ssm_bf16, b.ssm_bf16);
    cuda::CudaOps gpua(a), gpub(b);
    gpua.prepare_weights(weight_set(*weights_));
    gpub.prepare_weights(weight_set(*weights_));
    const CacheGeometry g = CacheGeometry::for_model(config_, slots, 16, slots, false, KvCacheDtype::kBF16);
    ModelCache cpu_cache(g);
    auto cachea = gpua.make_cache(g);
    auto cacheb = gpub.make_cache(g);
    expect_gdn_sides_equal(batches, {&gpua, cachea.get(), a_name}, {&gpub, cacheb.get(), b_name}, cpu_cache, a.ssm_bf16,
                           bound, sides_bound);
}

// The streaming decode kernel's version 2 (CudaOptions::gdn_decode_version = 2; gdn_decode.cu,
// bench/kernels/NOTES.md "GDN decode v2") against the CPU specification, bf16 state (decode_kernel 1
// forces the streaming kernel, which by shape now serves only MTP spans): prompts leave non-zero states, then
// decode-only batches (one token per sequence, slots out of order) and MTP-verification-like spans
// of 1-3 tokens. Version 2 does version 1's arithmetic in the same order, so a second CudaOps on
// version 1 fed the same inputs must give the same out and state bits.
TEST_P(CudaOpsParity, GatedDeltaNetDecodeVersion2) {
    const ModelConfig& c = config_;
    cuda::CudaOptions o1;
    o1.poison = true;
    o1.ssm_bf16 = true;
    o1.gdn_decode_version = 1;
    o1.gdn_decode_kernel = 1;  // the streaming kernel also for one-token rows (by shape: warp slices)
    cuda::CudaOptions o2 = o1;
    o2.gdn_decode_version = 2;
    std::vector<OwnedBatch> batches;  // built in place (spans point into the owned tables)
    batches.push_back(make_batch({{{0, 70, 2}, {0, 2, 0}, {0, 13, 5}, {0, 5, 1}, {0, 9, 4}}}, 16, 1, rng_,
                                 int(c.vocab_size)));
    batches.push_back(make_batch({{{70, 1, 2}, {2, 1, 0}, {13, 1, 5}, {5, 1, 1}, {9, 1, 4}}}, 16, 1, rng_,
                                 int(c.vocab_size)));
    batches.push_back(make_batch({{{14, 1, 5}, {71, 1, 2}, {10, 1, 4}}}, 16, 1, rng_, int(c.vocab_size)));
    batches.push_back(make_batch({{{72, 2, 2}, {3, 3, 0}, {15, 1, 5}, {6, 2, 1}}}, 16, 1, rng_, int(c.vocab_size)));
    batches.push_back(make_batch({{{74, 1, 2}, {6, 1, 0}, {16, 1, 5}, {8, 1, 1}, {11, 1, 4}}}, 16, 1, rng_,
                                 int(c.vocab_size)));
    expect_gdn_options_equal(batches, 6, o1, "version 1", o2, "version 2", kBf16Bound);
}

// The warp-slice kernel for one-token sequences (CudaOptions::gdn_decode_kernel = 2;
// gdn_decode_slices.cu, bench/kernels/NOTES.md "GDN decode v5: warp slices"; bf16 state, Dk = Dv =
// 64 or 128, so at the real shape; the tiny shape's 16-wide heads take the other kernels) against
// the CPU specification and against the one-block-per-head kernel (decode_kernel 0): prompts, then
// decode-only batches (slots out of order), a mixed batch where it serves the one-token rows beside
// gdn_serial.cu (2-3 tokens) and the chunked kernel, and spans of 1-3 tokens (by shape: the other
// kernels). The two sum in different orders, so the sides are compared within 1e-4, not bitwise.
TEST_P(CudaOpsParity, GatedDeltaNetDecodeSlices) {
    const ModelConfig& c = config_;
    cuda::CudaOptions o0;
    o0.poison = true;
    o0.ssm_bf16 = true;
    o0.gdn_decode_kernel = 0;
    cuda::CudaOptions o2 = o0;
    o2.gdn_decode_kernel = 2;
    std::vector<OwnedBatch> batches;  // built in place (spans point into the owned tables)
    batches.push_back(make_batch({{{0, 70, 2}, {0, 2, 0}, {0, 13, 5}, {0, 5, 1}, {0, 9, 4}, {0, 3, 6}}}, 16, 1, rng_,
                                 int(c.vocab_size)));
    batches.push_back(make_batch({{{70, 1, 2}, {2, 1, 0}, {13, 1, 5}, {5, 1, 1}, {9, 1, 4}}}, 16, 1, rng_,
                                 int(c.vocab_size)));
    batches.push_back(make_batch({{{14, 1, 5}, {71, 1, 2}, {10, 1, 4}, {3, 1, 6}}}, 16, 1, rng_, int(c.vocab_size)));
    batches.push_back(make_batch({{{72, 1, 2}, {3, 3, 0}, {15, 1, 5}, {6, 80, 1}, {4, 2, 6}}}, 16, 1, rng_,
                                 int(c.vocab_size)));
    batches.push_back(make_batch({{{73, 2, 2}, {6, 3, 0}, {16, 1, 5}, {86, 2, 1}}}, 16, 1, rng_, int(c.vocab_size)));
    batches.push_back(make_batch({{{75, 1, 2}, {9, 1, 0}, {17, 1, 5}, {88, 1, 1}, {11, 1, 4}, {6, 1, 6}}}, 16, 1,
                                 rng_, int(c.vocab_size)));
    expect_gdn_options_equal(batches, 7, o0, "one block per head", o2, "warp slices", kBf16Bound, /*sides_bound=*/1e-4);
    // Its versions (lane-private state copies; whole rows into a block-shared ring, the default; that
    // with the stores by whole rows too) do the same arithmetic: bit for bit.
    cuda::CudaOptions o2v1 = o2, o2v2 = o2, o2v3 = o2;
    o2v1.gdn_slices_version = 1;
    o2v2.gdn_slices_version = 2;
    o2v3.gdn_slices_version = 3;
    expect_gdn_options_equal(batches, 7, o2v1, "warp slices v1", o2v2, "warp slices v2", kBf16Bound);
    expect_gdn_options_equal(batches, 7, o2v2, "warp slices v2", o2v3, "warp slices v3", kBf16Bound);
}

// Prefill version 2 (CudaOptions::gdn_prefill_version = 2: the chunked sequences on bf16 tensor
// cores, gdn_tc_*.cu) against the CPU specification, fp32 and bf16 state: prompts with chunk
// boundaries +-1, continuations from the non-zero states left by earlier batches, a long prompt
// among decode rows and short ones, one 2,000-token prompt, and a 16-sequence batch (at the real
// shape its state pass takes 32 value columns by shape, the other batches 16). bf16 operands:
// kBf16Bound. Version 3 (the same with every bf16 operand split into hi + lo, ~16-bit operands,
// predicted ~5e-6: bench/kernels/NOTES.md "v5 accuracy") on the same batches: the fp32 paths'
// kFp32Bound with fp32 state, kBf16Bound with bf16 state (its storage rounds the state once per call).
// Version 4 (version 2 on fp16 operands: 11-bit significands) with fp32 state: kF16OperandBound,
// from the rounding model (bench/kernels/gdn_tc_rounding.py, every point fp16: 3.6e-4 / 4.1e-4 out /
// state at D = 128, 5.1e-4 / 4.5e-4 at D = 16; NOTES.md "v4: fp16 operands") with ~3x room; version
// 2's errors here (2.5e-3 and up) are above it, so the bound tells fp16 from bf16 operands.
constexpr double kF16OperandBound = 2e-3;
TEST_P(CudaOpsParity, GatedDeltaNetPrefillVersion2) {
    const DecoderLayerWeights& l = layer(LayerType::kLinearAttention);
    const ModelConfig& c = config_;
    const GdnDims d{c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
                    c.linear_conv_kernel_dim, c.rms_norm_eps};
    for (int vs = 0; vs < 6; ++vs) {  // (version, state): (2, fp32), (2, bf16), (3, fp32), (3, bf16), (4, ...)
        const int version = 2 + vs / 2;
        const bool ssm_bf16 = vs % 2 == 1;
        const double bound = ssm_bf16 ? kBf16Bound : version == 3 ? kFp32Bound : version == 4 ? kF16OperandBound : kBf16Bound;
        cuda::CudaOptions o;
        o.poison = true;
        o.ssm_bf16 = ssm_bf16;
        o.gdn_prefill_version = version;
        cuda::CudaOps gpu(o);
        gpu.prepare_weights(weight_set(*weights_));
        const CacheGeometry g = CacheGeometry::for_model(c, 20, 16, 20, false, KvCacheDtype::kBF16);
        ModelCache cpu_cache(g);
        auto gpu_cache = gpu.make_cache(g);
        std::vector<OwnedBatch> batches;
        batches.push_back(make_batch({{{0, 64, 2}, {0, 2, 0}, {0, 65, 3}, {0, 130, 1}}}, 16, 1, rng_, int(c.vocab_size)));
        batches.push_back(make_batch({{{64, 1, 2}, {2, 63, 0}, {65, 150, 3}, {130, 5, 1}}}, 16, 1, rng_, int(c.vocab_size)));
        batches.push_back(make_batch({{{65, 1, 2}, {65, 900, 0}, {215, 65, 3}, {135, 63, 1}}}, 16, 1, rng_,
                                     int(c.vocab_size)));
        batches.push_back(make_batch({{{965, 2000, 0}}}, 16, 1, rng_, int(c.vocab_size)));
        std::vector<std::array<int, 3>> many;
        for (int s = 0; s < 16; ++s) many.push_back({0, 200 + 7 * s, 4 + s});
        batches.push_back(make_batch(many, 16, 1, rng_, int(c.vocab_size)));
        for (size_t bi = 0; bi < batches.size(); ++bi) {
            const ForwardBatch& b = batches[bi].batch;
            const int64_t T = b.num_tokens();
            const auto pos = b.positions();
            const auto qkv = gpu_test::random_floats(size_t(T * d.conv_dim()), rng_);
            const auto z = gpu_test::random_floats(size_t(T * d.value_dim()), rng_);
            const auto bb = gpu_test::random_floats(size_t(T * d.num_value_heads), rng_);
            const auto a = gpu_test::random_floats(size_t(T * d.num_value_heads), rng_);
            std::vector<float> ref(size_t(T * d.value_dim()));
            cpu_.gated_delta_net(qkv.data(), z.data(), bb.data(), a.data(), l.gdn, d, b, cpu_cache, 0, ref.data());
            gpu.begin_forward(b, pos.data());
            float* out = gpu.alloc(int64_t(ref.size()));
            gpu.gated_delta_net(gpu_test::to_device(gpu, qkv), gpu_test::to_device(gpu, z),
                                gpu_test::to_device(gpu, bb), gpu_test::to_device(gpu, a), l.gdn, d, b, *gpu_cache, 0, out);
            const std::string what = "version " + std::to_string(version) + (ssm_bf16 ? " bf16 state" : " fp32 state") +
                                     " batch " + std::to_string(bi);
            EXPECT_LT(normalised_error(gpu_test::to_host(gpu, out, ref.size()), ref), bound) << "out " << what;
            auto* st = gpu.storage(gpu_cache.get());
            const size_t nc = size_t(g.num_state_slots * g.conv_window * g.conv_dim);
            const size_t ns = size_t(g.num_state_slots * g.num_value_heads * g.key_head_dim * g.value_head_dim);
            EXPECT_LT(normalised_error(gpu_test::read_device(st->conv(0), nc, 4),
                                       std::vector<float>(cpu_cache.conv(0), cpu_cache.conv(0) + nc)),
                      1e-6)
                << "conv state " << what;
            EXPECT_LT(normalised_error(gpu_test::read_device(st->ssm(0), ns, ssm_bf16 ? 2 : 4),
                                       std::vector<float>(cpu_cache.ssm(0), cpu_cache.ssm(0) + ns)),
                      bound)
                << "recurrent state " << what;
            gpu.free_all();
        }
    }
}

// Prefill versions that must give the same bits (same operands, arithmetic and order; only where
// loads sit or how the work is split over blocks differs): outputs and states of va and vb compared
// with memcmp, fp32 and bf16 state, on GatedDeltaNetPrefillVersion2's batches (chunk boundaries +-1,
// continuations from non-zero states, a long prompt among decode rows, a 2,000-token prompt, a
// 16-sequence batch and its continuation); both are also checked against the CPU specification
// (kF16OperandBound with fp32 state, kBf16Bound with bf16).
void CudaOpsParity::expect_gdn_variants_equal(const std::vector<OwnedBatch>& batches,
                                              const std::function<void(cuda::CudaOptions&)>& set_a,
                                              const std::string& a_name,
                                              const std::function<void(cuda::CudaOptions&)>& set_b,
                                              const std::string& b_name) {
    for (bool ssm_bf16 : {false, true}) {
        cuda::CudaOptions a;
        a.poison = true;
        a.ssm_bf16 = ssm_bf16;
        cuda::CudaOptions b = a;
        set_a(a);
        set_b(b);
        expect_gdn_options_equal(batches, 20, a, a_name, b, b_name, ssm_bf16 ? kBf16Bound : kF16OperandBound);
    }
}

void CudaOpsParity::expect_gdn_prefill_versions_equal(int va, int vb) {
    expect_gdn_variants_equal(
        gdn_prefill_batches(), [va](cuda::CudaOptions& o) { o.gdn_prefill_version = va; },
        "version " + std::to_string(va), [vb](cuda::CudaOptions& o) { o.gdn_prefill_version = vb; },
        "version " + std::to_string(vb));
}

std::vector<OwnedBatch> CudaOpsParity::gdn_prefill_batches() {
    std::vector<OwnedBatch> batches;  // built in place (spans point into the owned tables)
    const int vocab = int(config_.vocab_size);
    batches.push_back(make_batch({{{0, 64, 2}, {0, 2, 0}, {0, 65, 3}, {0, 130, 1}}}, 16, 1, rng_, vocab));
    batches.push_back(make_batch({{{64, 1, 2}, {2, 63, 0}, {65, 150, 3}, {130, 5, 1}}}, 16, 1, rng_, vocab));
    batches.push_back(make_batch({{{65, 1, 2}, {65, 900, 0}, {215, 65, 3}, {135, 63, 1}}}, 16, 1, rng_, vocab));
    batches.push_back(make_batch({{{965, 2000, 0}}}, 16, 1, rng_, vocab));
    // 16 sequences, then each continued from its state by 70-85 tokens: at the real shape enough
    // (sequence, head) pairs for version 6's 64-column state blocks by shape (448 and 480 pairs).
    std::vector<std::array<int, 3>> many, more;
    for (int s = 0; s < 16; ++s) many.push_back({0, 200 + 7 * s, 4 + s});
    for (int s = 0; s < 16; ++s) more.push_back({200 + 7 * s, 70 + s, 4 + s});
    batches.push_back(make_batch(many, 16, 1, rng_, vocab));
    batches.push_back(make_batch(more, 16, 1, rng_, vocab));
    return batches;
}

// gdn_prefill_batches and a serving step's shape: prompts of 300 and 129 rows among one-row
// sequences (decodes, slots 0-3), a 17- and a 2-row sequence (token-serial, not chunked).
std::vector<OwnedBatch> CudaOpsParity::gdn_serving_batches() {
    std::vector<OwnedBatch> batches = gdn_prefill_batches();
    batches.push_back(make_batch({{{0, 1, 0}, {0, 300, 4}, {0, 1, 1}, {0, 1, 2}, {0, 129, 5}, {0, 1, 3}, {0, 17, 6},
                                   {0, 2, 7}}},
                                 16, 1, rng_, int(config_.vocab_size)));
    return batches;
}

// The chunked kernels' blocks from the per-batch chunk map (CudaOptions::gdn_chunk_map 1, the
// default; gdn_chunk_map.h) against a block per key searching the sequences (0): the same chunks,
// so the same outputs and states bit for bit, fp32 and bf16 state (each with its default prefill
// version), on gdn_serving_batches (with bf16 state at the real shape a serving step's one-row
// sequences take the warp slices and the short ones the serial kernel, over the batch's
// short-sequence list with the map).
TEST_P(CudaOpsParity, GatedDeltaNetChunkMapEqualsSearch) {
    expect_gdn_variants_equal(
        gdn_serving_batches(), [](cuda::CudaOptions& o) { o.gdn_chunk_map = 0; }, "search",
        [](cuda::CudaOptions& o) { o.gdn_chunk_map = 1; }, "map");
}

// The token-serial kernels on a side stream beside the chunk kernels (CudaOptions::gdn_side_stream 1,
// the default, at the default slice grid and at one block) against one stream (0): disjoint rows,
// slots and workspace, so the same outputs and states bit for bit, on gdn_serving_batches, fp32 and
// bf16 state. Only the real shape with bf16 state takes the warp slices (the side stream's path); the
// tiny shape's heads and fp32 state run one stream on both sides, so those comparisons hold trivially.
TEST_P(CudaOpsParity, GatedDeltaNetSideStreamSameBits) {
    const std::vector<OwnedBatch> batches = gdn_serving_batches();
    const auto one = [](cuda::CudaOptions& o) { o.gdn_side_stream = 0; };
    expect_gdn_variants_equal(batches, one, "one stream", [](cuda::CudaOptions& o) { o.gdn_side_stream = 1; },
                              "side stream");
    expect_gdn_variants_equal(
        batches, one, "one stream",
        [](cuda::CudaOptions& o) {
            o.gdn_side_stream = 1;
            o.gdn_side_blocks = 1;
        },
        "side stream, 1 slice block");
}

// Prefill version 5 (version 4's kernels with the prep's row loads and the output kernel's gate
// loads issued ahead of their use; bench/kernels/NOTES.md "GDN prep and output toward their byte
// floors"): the same arithmetic in the same order, so its outputs and states equal version 4's.
TEST_P(CudaOpsParity, GatedDeltaNetPrefillVersion5EqualsVersion4) { expect_gdn_prefill_versions_equal(4, 5); }

// Prefill version 6 (version 5 with the state pass at 64 value columns per 8-warp block by shape;
// NOTES.md "GDN state pass toward its byte floor"): each state accumulator sees the same products in
// the same order, so outputs and states equal version 5's. By shape, 64 columns run at the real
// shape's two 16-sequence batches; the other batches and the tiny shape take version 5's 16 / 32
// (the emulator, run_emu.sh --quick-tc --ver 6, forces 64 on small shapes).
TEST_P(CudaOpsParity, GatedDeltaNetPrefillVersion6EqualsVersion5) { expect_gdn_prefill_versions_equal(5, 6); }

// MTP verification's deferred GDN state against the CPU specification: a verify batch of
// 1 + k rows per sequence (SeqSpan::defer_state) writes the state and conv window after each
// span's first row only (outputs of every row), then gdn_commit runs the accepted drafts (rows
// 1..a, packed; a sequence that accepted none has no commit span) into the slots. Outputs,
// windows and states are compared after each, fp32 and bf16 state.
TEST_P(CudaOpsParity, GatedDeltaNetDeferredVerifyAndCommit) {
    const DecoderLayerWeights& l = layer(LayerType::kLinearAttention);
    const ModelConfig& c = config_;
    const GdnDims d{c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
                    c.linear_conv_kernel_dim, c.rms_norm_eps};
    for (bool ssm_bf16 : {false, true}) {
        cuda::CudaOptions o;
        o.poison = true;
        o.ssm_bf16 = ssm_bf16;
        cuda::CudaOps gpu(o);
        gpu.prepare_weights(weight_set(*weights_));
        const CacheGeometry g = CacheGeometry::for_model(c, 4, 16, 4, false, KvCacheDtype::kBF16);
        ModelCache cpu_cache(g);
        auto gpu_cache = gpu.make_cache(g);
        CpuOps cpu;  // its own stash
        const std::string kind = ssm_bf16 ? "bf16 state" : "fp32 state";
        const double bound = ssm_bf16 ? 1e-2 : kFp32Bound;
        auto compare_states = [&](const std::string& what) {
            auto* st = gpu.storage(gpu_cache.get());
            const size_t nc = size_t(g.num_state_slots * g.conv_window * g.conv_dim);
            const size_t ns = size_t(g.num_state_slots * g.num_value_heads * g.key_head_dim * g.value_head_dim);
            EXPECT_LT(normalised_error(gpu_test::read_device(st->conv(0), nc, 4),
                                       std::vector<float>(cpu_cache.conv(0), cpu_cache.conv(0) + nc)),
                      1e-6)
                << "conv state " << what;
            EXPECT_LT(normalised_error(gpu_test::read_device(st->ssm(0), ns, ssm_bf16 ? 2 : 4),
                                       std::vector<float>(cpu_cache.ssm(0), cpu_cache.ssm(0) + ns)),
                      bound)
                << "recurrent state " << what;
        };
        // Runs one GDN call over batch b on both backends (random inputs) and compares.
        auto run = [&](const ForwardBatch& b, const std::string& what) {
            const int64_t T = b.num_tokens();
            const auto pos = b.positions();
            const auto qkv = gpu_test::random_floats(size_t(T * d.conv_dim()), rng_);
            const auto z = gpu_test::random_floats(size_t(T * d.value_dim()), rng_);
            const auto bb = gpu_test::random_floats(size_t(T * d.num_value_heads), rng_);
            const auto a = gpu_test::random_floats(size_t(T * d.num_value_heads), rng_);
            std::vector<float> ref(size_t(T * d.value_dim()));
            cpu.gated_delta_net(qkv.data(), z.data(), bb.data(), a.data(), l.gdn, d, b, cpu_cache, 0, ref.data());
            gpu.begin_forward(b, pos.data());
            float* out = gpu.alloc(int64_t(ref.size()));
            gpu.gated_delta_net(gpu_test::to_device(gpu, qkv), gpu_test::to_device(gpu, z),
                                gpu_test::to_device(gpu, bb), gpu_test::to_device(gpu, a), l.gdn, d, b, *gpu_cache, 0, out);
            EXPECT_LT(normalised_error(gpu_test::to_host(gpu, out, ref.size()), ref), bound) << "out " << what;
            compare_states(what);
            gpu.free_all();
        };
        std::vector<OwnedBatch> batches;
        batches.push_back(make_batch({{{0, 9, 2}, {0, 2, 0}, {0, 13, 3}, {0, 5, 1}}}, 16, 1, rng_, int(c.vocab_size)));
        run(batches.back().batch, kind + " prefill");
        std::vector<int32_t> length = {2, 5, 9, 13};  // by slot
        for (int step = 0; step < 4; ++step) {
            // Spans of 4, 3, 2 and 1 rows (slots out of order), shifted each step.
            std::vector<std::array<int, 3>> spans;
            for (int i = 0; i < 4; ++i) {
                const int slot = (i + step) % 4;
                spans.push_back({length[size_t(slot)], 4 - i, slot});
            }
            batches.push_back(make_batch(spans, 16, 1, rng_, int(c.vocab_size)));
            ForwardBatch& verify = batches.back().batch;
            for (SeqSpan& sp : verify.seqs) sp.defer_state = true;
            const std::string what = kind + " step " + std::to_string(step);
            run(verify, what + " verify");
            // Accepted drafts: 0..q-1, varied over the steps; packed commit spans.
            ForwardBatch commit;
            std::vector<int32_t> deferred_rows;
            for (const SeqSpan& sp : verify.seqs) {
                const int32_t accepted = (sp.state_slot + step) % sp.num_tokens;
                length[size_t(sp.state_slot)] += accepted + 1;
                if (accepted == 0) continue;
                SeqSpan r = sp;
                r.defer_state = false;
                r.row_begin = int32_t(commit.token_ids.size());
                r.num_tokens = accepted;
                r.start_pos = sp.start_pos + 1;
                commit.seqs.push_back(r);
                commit.token_ids.resize(commit.token_ids.size() + size_t(accepted), 0);
                deferred_rows.push_back(sp.row_begin);
            }
            cpu.gdn_commit(l.gdn, d, commit, deferred_rows, cpu_cache, 0);
            const auto pos = commit.positions();
            gpu.begin_forward(commit, pos.data());
            gpu.gdn_commit(l.gdn, d, commit, deferred_rows, *gpu_cache, 0);
            compare_states(what + " commit");
            gpu.free_all();
        }
    }
}

// Spare-slot mode (SeqSpan::spare_slot): the verify also writes the state and conv window after
// its last row into the spare slot, as the CPU does (the slot itself keeps row 0's), for fp32
// state (gdn_serial.cu) and bf16 state (the streaming kernel, gdn_decode.cu); spans of 1..4 rows,
// some without a spare (-1). Every slot is compared, the spares included; between steps a full
// acceptance swaps the sequence's slot with its spare, as the engine does.
TEST_P(CudaOpsParity, GatedDeltaNetVerifyWritesSpareSlot) {
    const DecoderLayerWeights& l = layer(LayerType::kLinearAttention);
    const ModelConfig& c = config_;
    const GdnDims d{c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim,
                    c.linear_conv_kernel_dim, c.rms_norm_eps};
    for (bool ssm_bf16 : {false, true}) {
        cuda::CudaOptions o;
        o.poison = true;
        o.ssm_bf16 = ssm_bf16;
        cuda::CudaOps gpu(o);
        gpu.prepare_weights(weight_set(*weights_));
        const CacheGeometry g = CacheGeometry::for_model(c, 4, 16, 8, false, KvCacheDtype::kBF16);  // 4 + 4 spares
        ModelCache cpu_cache(g);
        auto gpu_cache = gpu.make_cache(g);
        CpuOps cpu;
        const std::string kind = ssm_bf16 ? "bf16 state" : "fp32 state";
        const double bound = ssm_bf16 ? 1e-2 : kFp32Bound;
        auto compare_states = [&](const std::string& what) {
            auto* st = gpu.storage(gpu_cache.get());
            const size_t nc = size_t(g.num_state_slots * g.conv_window * g.conv_dim);
            const size_t ns = size_t(g.num_state_slots * g.num_value_heads * g.key_head_dim * g.value_head_dim);
            EXPECT_LT(normalised_error(gpu_test::read_device(st->conv(0), nc, 4),
                                       std::vector<float>(cpu_cache.conv(0), cpu_cache.conv(0) + nc)),
                      1e-6)
                << "conv state " << what;
            EXPECT_LT(normalised_error(gpu_test::read_device(st->ssm(0), ns, ssm_bf16 ? 2 : 4),
                                       std::vector<float>(cpu_cache.ssm(0), cpu_cache.ssm(0) + ns)),
                      bound)
                << "recurrent state " << what;
        };
        auto run = [&](const ForwardBatch& b, const std::string& what) {
            const int64_t T = b.num_tokens();
            const auto pos = b.positions();
            const auto qkv = gpu_test::random_floats(size_t(T * d.conv_dim()), rng_);
            const auto z = gpu_test::random_floats(size_t(T * d.value_dim()), rng_);
            const auto bb = gpu_test::random_floats(size_t(T * d.num_value_heads), rng_);
            const auto a = gpu_test::random_floats(size_t(T * d.num_value_heads), rng_);
            std::vector<float> ref(size_t(T * d.value_dim()));
            cpu.gated_delta_net(qkv.data(), z.data(), bb.data(), a.data(), l.gdn, d, b, cpu_cache, 0, ref.data());
            gpu.begin_forward(b, pos.data());
            float* out = gpu.alloc(int64_t(ref.size()));
            gpu.gated_delta_net(gpu_test::to_device(gpu, qkv), gpu_test::to_device(gpu, z),
                                gpu_test::to_device(gpu, bb), gpu_test::to_device(gpu, a), l.gdn, d, b, *gpu_cache, 0, out);
            EXPECT_LT(normalised_error(gpu_test::to_host(gpu, out, ref.size()), ref), bound) << "out " << what;
            compare_states(what);
            gpu.free_all();
        };
        std::vector<OwnedBatch> batches;
        batches.push_back(make_batch({{{0, 9, 2}, {0, 2, 0}, {0, 13, 3}, {0, 5, 1}}}, 16, 1, rng_, int(c.vocab_size)));
        run(batches.back().batch, kind + " prefill");
        std::vector<int32_t> length = {2, 5, 9, 13};  // by sequence
        std::vector<int32_t> slot_of = {0, 1, 2, 3}, spare_of = {4, 5, 6, 7};
        for (int step = 0; step < 4; ++step) {
            std::vector<std::array<int, 3>> spans;
            for (int i = 0; i < 4; ++i) {
                const int seq = (i + step) % 4;
                spans.push_back({length[size_t(seq)], 4 - i, slot_of[size_t(seq)]});
            }
            batches.push_back(make_batch(spans, 16, 1, rng_, int(c.vocab_size)));
            ForwardBatch& verify = batches.back().batch;
            for (int i = 0; i < 4; ++i) {
                const int seq = (i + step) % 4;
                SeqSpan& sp = verify.seqs[size_t(i)];
                sp.defer_state = true;
                sp.spare_slot = (seq + step) % 4 == 3 ? -1 : spare_of[size_t(seq)];  // one without a spare
            }
            run(verify, kind + " step " + std::to_string(step) + " verify");
            // Every draft accepted where there was a spare: swap (no commit); elsewhere nothing
            // accepted (no commit either). The next step verifies from the swapped slots.
            for (int i = 0; i < 4; ++i) {
                const int seq = (i + step) % 4;
                const SeqSpan& sp = verify.seqs[size_t(i)];
                if (sp.spare_slot >= 0) {
                    std::swap(slot_of[size_t(seq)], spare_of[size_t(seq)]);
                    length[size_t(seq)] += sp.num_tokens;
                } else {
                    length[size_t(seq)] += 1;
                }
            }
        }
    }
}

TEST_P(CudaOpsParity, CacheSlotAndPageCopies) {
    const CacheGeometry g = CacheGeometry::for_model(config_, 6, 16, 3, false, KvCacheDtype::kBF16);
    auto cache = gpu_->make_cache(g);
    auto* st = gpu_->storage(cache.get());
    const size_t slot = size_t(g.num_value_heads * g.key_head_dim * g.value_head_dim);
    const auto values = gpu_test::random_floats(slot, rng_);
    QS_CUDA_CHECK(cudaMemcpy(static_cast<float*>(st->ssm(0)) + slot, values.data(), slot * 4, cudaMemcpyHostToDevice));
    cache->copy_slot(1, 2);
    EXPECT_EQ(gpu_test::read_device(static_cast<float*>(st->ssm(0)) + 2 * slot, slot, 4), values);
    cache->reset_slot(1);
    EXPECT_EQ(gpu_test::read_device(static_cast<float*>(st->ssm(0)) + slot, slot, 4), std::vector<float>(slot, 0.0f));
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaOpsParity, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// argmax_rows splits few long rows over several blocks (basic_kernels.cu): against the CPU at the
// real vocabulary (248,320) for 1, 2 and 3 rows (split) and 300 rows (one block each), with ties
// across chunk boundaries (the first index wins), NaNs (never win), an all-NaN row and an
// all -inf row (index 0), and the maximum in the last column.
TEST(CudaArgmaxRows, SplitRowsEqualCpu) {
    QS_REQUIRE_GPU();
    cuda::CudaOps gpu;
    CpuOps cpu;
    std::mt19937 rng(41);
    for (int64_t R : {1, 2, 3, 300}) {
        const int64_t n = R >= 300 ? 1000 : 248320;
        std::vector<float> x = gpu_test::random_floats(size_t(R * n), rng);
        auto at = [&](int64_t r, int64_t i) -> float& { return x[size_t(r * n + i)]; };
        // A tie across the first chunk boundary (4096 columns or more per chunk): the first wins.
        const int64_t tie = n > 4096 ? 4095 : n / 2;
        at(0, tie) = 9.0f;
        at(0, n - 3) = 9.0f;
        at(0, 17) = std::nanf("");
        if (R >= 2) {
            for (int64_t i = 3; i < n; i += 7) at(1, i) = std::nanf("");  // (NaN at 0: the CPU keeps it)
            at(1, n - 1) = 20.0f;  // the last column
        }
        if (R >= 3)
            for (int64_t i = 0; i < n; ++i) at(2, i) = std::nanf("");
        if (R >= 4)
            for (int64_t i = 0; i < n; ++i) at(R - 1, i) = -INFINITY;
        std::vector<int32_t> want(static_cast<size_t>(R)), got(static_cast<size_t>(R), -1);
        cpu.argmax_rows(x.data(), R, n, want.data());
        gpu.argmax_rows(gpu_test::to_device(gpu, x), R, n, got.data());
        EXPECT_EQ(got, want) << R << " rows";
        EXPECT_EQ(got[0], tie) << R << " rows";
        gpu.free_all();
    }
}
