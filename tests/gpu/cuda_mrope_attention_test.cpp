// M-RoPE (image positions, issue 21) in the CUDA gated attention against CpuOps::gated_attention:
// batches laid out as the engine lays them (model/mrope_positions for prompts with images,
// model/prompt_images place_prompt_images for the streams and each span's rope_delta): a prefill
// whose first chunk ends inside an image, the chunk after it next to a fresh prompt with an image
// and a text decode row, and a decode-only batch whose rows rotate by position + delta. At the
// tiny model's shapes (head_dim 32, rotary 8, section [2, 1, 1]) and the real ones (head_dim 256,
// rotary 64, [11, 11, 10]): the tensor-core prefill and split-K decode kernels (the fp32 fallback
// for head dims not a multiple of 32 runs in cuda_images_test.cpp's model test). Bounds as
// GatedAttentionWithPagedCache (cuda_ops_parity_test.cpp). The test can fail: the same batches
// rotated by the 1-D positions give outputs well outside the bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_cache.h"
#include "config/model_config.h"
#include "gpu_test_util.h"
#include "model/prompt_images.h"
#include "model/weights.h"

using namespace qs;
using gpu_test::real_shapes;
using gpu_test::normalised_error;

namespace {

// A prompt of n tokens with images: each (first token, grid) puts grid.h/2 · grid.w/2 pads there.
PromptImages prompt_with_images(int n, const std::vector<std::pair<int, ImageGrid>>& images) {
    std::vector<bool> is_image(size_t(n), false);
    std::vector<ImageGrid> grids;
    for (const auto& [first, g] : images) {
        for (int i = 0; i < g.t * (g.h / 2) * (g.w / 2); ++i) is_image[size_t(first + i)] = true;
        grids.push_back(g);
    }
    auto pos = mrope_positions(is_image, grids, 2);
    EXPECT_TRUE(pos.is_ok()) << pos.status().message();
    PromptImages p;
    p.embed_index.assign(size_t(n), -1);  // no embedding rows: only the positions matter here
    p.positions = std::move(pos).value();
    return p;
}

struct Span {
    int seq, start, n;
};

class CudaMrope : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(CudaMrope, GatedAttentionEqualsCpu) {
    QS_REQUIRE_GPU();
    const ModelConfig c = GetParam() == "tiny" ? tiny_model_config() : real_shapes();
    ModelWeights weights = make_dummy_weights(c, 77, /*with_mtp=*/false);
    cuda::CudaOptions o;
    o.poison = true;
    cuda::CudaOps gpu(o);
    gpu.prepare_weights(weight_set(weights));
    CpuOps cpu;
    const DecoderLayerWeights* layer = nullptr;
    for (const auto& l : weights.layers)
        if (l.type == LayerType::kFullAttention) layer = &l;
    ASSERT_NE(layer, nullptr);
    AttentionDims d{c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.rotary_dim(), c.rope_theta,
                    c.rms_norm_eps};
    // Every stream rotates some frequencies (the section of the config, or {2, 1, 1} scaled).
    const int64_t half = d.rotary_dim / 2;
    d.mrope_section = {half - 2 * (half / 4), half / 4, half / 4};
    if (c.mrope_section.size() == 3) d.mrope_section = {c.mrope_section[0], c.mrope_section[1], c.mrope_section[2]};

    // Three sequences: A (40 prompt tokens, two images), B (text, 17 tokens), C (25 tokens, one
    // image). A's prompt is chunked at 20, inside its first image.
    const PromptImages img_a = prompt_with_images(40, {{4, {1, 8, 8}}, {26, {1, 4, 8}}});
    const PromptImages img_c = prompt_with_images(25, {{3, {1, 6, 4}}});
    ASSERT_NE(img_a.positions.delta, 0);
    const std::vector<const PromptImages*> images = {&img_a, nullptr, &img_c};
    const std::vector<std::vector<Span>> steps = {
        {{0, 0, 20}, {1, 0, 17}},               // prefill: A's first chunk, B's prompt
        {{0, 20, 20}, {1, 17, 1}, {2, 0, 25}},  // A's second chunk, B decodes, C's prompt
        {{0, 40, 1}, {1, 18, 1}, {2, 25, 1}},   // decode: A and C rotate by position + delta
    };
    const int bs = 16, pages = 4;
    std::vector<std::vector<int32_t>> tables(3);
    std::vector<int32_t> pool(3 * pages);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), std::mt19937(1234));
    for (int s = 0; s < 3; ++s) tables[size_t(s)].assign(pool.begin() + s * pages, pool.begin() + (s + 1) * pages);

    std::mt19937 rng(5);
    for (KvCacheDtype kv : {KvCacheDtype::kBF16, KvCacheDtype::kFP8E4M3}) {
        const CacheGeometry g = CacheGeometry::for_model(c, 3 * pages, bs, 3, false, kv);
        ModelCache cpu_cache(g), cpu_plain_cache(g);
        auto gpu_cache = gpu.make_cache(g);
        for (size_t step = 0; step < steps.size(); ++step) {
            ForwardBatch b;
            std::vector<const PromptImages*> imgs;
            for (const Span& sp : steps[step]) {
                SeqSpan span;
                span.row_begin = int32_t(b.token_ids.size());
                span.start_pos = sp.start;
                span.num_tokens = sp.n;
                span.state_slot = sp.seq;
                span.block_table = tables[size_t(sp.seq)];
                for (int i = 0; i < sp.n; ++i) b.token_ids.push_back(1);
                b.seqs.push_back(span);
                imgs.push_back(images[size_t(sp.seq)]);
            }
            place_prompt_images(b, imgs);
            ASSERT_TRUE(b.has_mrope());
            const int64_t T = b.num_tokens();
            const auto pos = b.positions();
            const auto qg = gpu_test::random_floats(size_t(T * d.num_heads * 2 * d.head_dim), rng);
            const auto k = gpu_test::random_floats(size_t(T * d.num_kv_heads * d.head_dim), rng);
            const auto v = gpu_test::random_floats(size_t(T * d.num_kv_heads * d.head_dim), rng);
            std::vector<float> k_cpu = k, ref(size_t(T * d.num_heads * d.head_dim));
            cpu.begin_forward(b, pos.data());
            cpu.gated_attention(qg.data(), k_cpu.data(), v.data(), layer->attn.q_norm, layer->attn.k_norm, d, b,
                                pos.data(), cpu_cache, 0, ref.data());
            // The same batch rotated by the 1-D positions (what the kernels did before M-RoPE).
            ForwardBatch plain = b;
            plain.mrope_positions.clear();
            for (SeqSpan& s : plain.seqs) s.rope_delta = 0;
            std::vector<float> k_plain = k, ref_plain(ref.size());
            cpu.begin_forward(plain, pos.data());
            cpu.gated_attention(qg.data(), k_plain.data(), v.data(), layer->attn.q_norm, layer->attn.k_norm, d, plain,
                                pos.data(), cpu_plain_cache, 0, ref_plain.data());

            gpu.begin_forward(b, pos.data());
            float* out = gpu.alloc(int64_t(ref.size()));
            gpu.gated_attention(gpu_test::to_device(gpu, qg), gpu_test::to_device(gpu, k), gpu_test::to_device(gpu, v),
                                layer->attn.q_norm, layer->attn.k_norm, d, b, pos.data(), *gpu_cache, 0, out);
            const std::string what = GetParam() + (kv == KvCacheDtype::kBF16 ? " bf16" : " fp8") + " step " +
                                     std::to_string(step);
            const double bound = kv == KvCacheDtype::kBF16 ? 5e-3 : 2e-2;
            const std::vector<float> got = gpu_test::to_host(gpu, out, ref.size());
            const double err = normalised_error(got, ref);
            std::printf("%s: out err %.2e (without M-RoPE the reference moves by %.2e)\n", what.c_str(), err,
                        normalised_error(ref_plain, ref));
            EXPECT_LT(err, bound) << "out " << what;
            EXPECT_GT(normalised_error(ref_plain, ref), std::max(bound, 5 * err)) << "M-RoPE changes nothing in " << what;
            auto* st = gpu.storage(gpu_cache.get());
            const size_t n = size_t(g.num_blocks * bs * g.num_kv_heads * g.head_dim);
            const int elem = kv == KvCacheDtype::kBF16 ? 2 : 1;
            const std::vector<float> k_ref(cpu_cache.k(0), cpu_cache.k(0) + n);
            EXPECT_LT(normalised_error(gpu_test::read_device(st->k(0), n, elem), k_ref),
                      kv == KvCacheDtype::kBF16 ? 1e-3 : 2e-2)
                << "K cache " << what;
            gpu.free_all();
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaMrope, ::testing::Values("tiny", "real"),
                         [](const auto& info) { return info.param; });
