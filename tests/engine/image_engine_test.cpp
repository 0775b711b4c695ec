// Images through the engine (tiny model with a vision tower, tests/data/vision_parity; its logits
// are checked against transformers in tests/model/vision_parity_test.cpp): greedy output equals
// the single-sequence reference with the same images, with chunked prefill (chunk boundaries
// inside the pad runs), with MTP, and with the prefix cache, which must key pages by the images'
// pixels: the same token ids with another image get their own output, the same image a hit.
// Requests with images to a model without a tower, or with a wrong image layout, are refused.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../common/test_files.h"
#include "engine/image_cache_key.h"
#include "engine_test_util.h"
#include "image/image_decode.h"
#include "io/npy.h"

using namespace qs;
using namespace qs::test;

namespace {

const std::string kDir = std::string(QS_SOURCE_DIR) + "/tests/data/vision_parity";

std::shared_ptr<const ImagePatches> load_image(const std::string& name) {
    auto img = decode_image(qs::test::read_fixture(std::string(QS_SOURCE_DIR) + "/tests/data/image/" + name));
    EXPECT_TRUE(img.is_ok()) << name;
    auto proc = load_image_processor_config(kDir);
    EXPECT_TRUE(proc.is_ok());
    auto p = preprocess_image(img.value(), proc.value());
    EXPECT_TRUE(p.is_ok());
    return std::make_shared<const ImagePatches>(std::move(p).value());
}

std::vector<int32_t> case_ids(const std::string& name) {
    auto r = read_npy_int(kDir + "/" + name + "/ids.npy");
    EXPECT_TRUE(r.is_ok());
    return std::vector<int32_t>(r->data.begin(), r->data.end());
}

// Greedy continuation computed alone with SingleSequence and the request's images (the engine's
// default BF16 KV cache).
std::vector<int32_t> reference(const ModelWeights& w, const GenerationRequest& r) {
    if (r.images.empty()) {
        CpuOps ops;
        Qwen36Model model(w, ops);
        return greedy_reference(model, r.prompt_ids, int(r.params.max_tokens), KvCacheDtype::kBF16);
    }
    CpuOps ops;
    Qwen36Model model(w, ops);
    std::vector<const ImagePatches*> ptrs;
    for (const auto& p : r.images) ptrs.push_back(p.get());
    auto images = prepare_prompt_images(*w.visual, r.prompt_ids, w.config.image_token_id, ptrs);
    EXPECT_TRUE(images.is_ok()) << images.status().message();
    SingleSequence seq(model, int64_t(r.prompt_ids.size()) + r.params.max_tokens + 1, KvCacheDtype::kBF16);
    seq.set_images(&images.value());
    std::vector<float> logits = seq.feed(r.prompt_ids, false);
    std::vector<int32_t> out;
    for (int64_t i = 0; i < r.params.max_tokens; ++i) {
        const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        out.push_back(next);
        if (i + 1 < r.params.max_tokens) logits = seq.feed({next}, false);
    }
    return out;
}

GenerationRequest image_request(const std::string& id, const std::string& case_name,
                                const std::vector<std::string>& images) {
    GenerationRequest r = greedy_request(id, case_ids(case_name), 12);
    r.params.ignore_eos = true;
    for (const auto& n : images) r.images.push_back(load_image(n));
    return r;
}

class ImageEngine : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        auto w = load_model_dir(kDir);
        ASSERT_TRUE(w.is_ok()) << w.status().message();
        weights_ = new ModelWeights(std::move(w).value());
    }
    static void TearDownTestSuite() {
        delete weights_;
        weights_ = nullptr;
    }
    static ModelWeights* weights_;
};
ModelWeights* ImageEngine::weights_ = nullptr;

}  // namespace

TEST_F(ImageEngine, GreedyEqualsReferenceChunkedAndWithMtp) {
    const std::vector<GenerationRequest> reqs = {
        image_request("one", "one_image", {"noise_50x130.png"}),
        image_request("two", "two_images", {"rgb_97x61.png", "gray_64x64.jpg"}),
        image_request("three", "three_images", {"rgb_97x61.png", "noise_50x130.png", "gray_64x64.jpg"}),
        greedy_request("text", case_ids("two_images"), 12),  // no images: the pads are plain tokens
    };
    std::map<std::string, std::vector<int32_t>> want;
    for (const auto& r : reqs) want[r.id] = reference(*weights_, r);
    EXPECT_NE(want["two"], want["text"]);  // the images matter
    for (int spec : {0, 2}) {
        for (int64_t budget : {int64_t(7), int64_t(512)}) {  // 7: chunks end inside pad runs
            CpuOps ops;
            EngineConfig cfg;
            cfg.num_speculative_tokens = spec;
            cfg.max_num_seqs = 8;
            cfg.cache_memory_mb = 16;
            cfg.max_num_batched_tokens = budget;
            auto engine = Engine::create(*weights_, ops, cfg, nullptr);
            ASSERT_TRUE(engine.is_ok()) << engine.status().message();
            Collector col;
            for (const auto& r : reqs) ASSERT_TRUE((*engine)->submit(r, col.sink_for(r.id)).is_ok());
            (*engine)->run_until_idle();
            for (const auto& r : reqs)
                EXPECT_EQ(col.got[r.id][0].tokens, want[r.id]) << r.id << " spec " << spec << " budget " << budget;
        }
    }
}

TEST_F(ImageEngine, PrefixCacheKeysPagesByPixels) {
    // Same token ids (both first images are 4x6 patches), different first image.
    const GenerationRequest a = image_request("a", "two_images", {"rgb_97x61.png", "gray_64x64.jpg"});
    const GenerationRequest b = image_request("b", "two_images", {"exact_64x96.png", "gray_64x64.jpg"});
    ASSERT_EQ(a.prompt_ids, b.prompt_ids);
    EXPECT_NE(image_cache_key(a.prompt_ids, weights_->config.image_token_id, a.images),
              image_cache_key(b.prompt_ids, weights_->config.image_token_id, b.images));
    const std::vector<int32_t> want_a = reference(*weights_, a), want_b = reference(*weights_, b);
    ASSERT_NE(want_a, want_b);
    CpuOps ops;
    EngineConfig cfg;
    cfg.max_num_seqs = 4;
    cfg.cache_memory_mb = 16;
    cfg.kv_block_size = 4;
    cfg.enable_prefix_caching = true;
    auto engine = Engine::create(*weights_, ops, cfg, nullptr);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    std::map<std::string, int64_t> cached;
    auto run = [&](GenerationRequest r, const std::string& id) {
        r.id = id;
        Collector col;
        int64_t hit = 0;
        OutputSink inner = col.sink_for(id);
        EXPECT_TRUE((*engine)->submit(r, [&](RequestOutput&& o) {
                                  hit = std::max(hit, o.num_cached_prompt_tokens);
                                  inner(std::move(o));
                              }).is_ok());
        (*engine)->run_until_idle();
        cached[id] = hit;
        return col.got[id][0].tokens;
    };
    EXPECT_EQ(run(a, "a1"), want_a);
    EXPECT_EQ(run(b, "b1"), want_b);  // not a's pages: another image
    EXPECT_EQ(run(a, "a2"), want_a);  // a's own pages: a hit
    const int64_t first_pad = std::find(a.prompt_ids.begin(), a.prompt_ids.end(), int32_t(weights_->config.image_token_id)) -
                              a.prompt_ids.begin();
    EXPECT_LE(cached["b1"], first_pad / 4 * 4);  // at most the text pages before the first image
    EXPECT_GT(cached["a2"], first_pad);          // pages covering a's image pads were reused
}

TEST_F(ImageEngine, BadImageRequestsAreRefused) {
    CpuOps ops;
    EngineConfig cfg;
    cfg.cache_memory_mb = 16;
    auto engine = Engine::create(*weights_, ops, cfg, nullptr);
    ASSERT_TRUE(engine.is_ok());
    // Two pad runs, one image.
    GenerationRequest r = image_request("r", "two_images", {"rgb_97x61.png"});
    Status s = (*engine)->submit(r, [](RequestOutput&&) {});
    EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument) << s.message();
    // A text-only model (flat config, no model.visual.*).
    auto w = load_model_dir(std::string(QS_SOURCE_DIR) + "/tests/data/parity/a_h32_l5_gqa2_v2k_p025__text_sharded");
    ASSERT_TRUE(w.is_ok());
    auto text_engine = Engine::create(*w, ops, cfg, nullptr);
    ASSERT_TRUE(text_engine.is_ok());
    GenerationRequest t = greedy_request("t", {1, 2, 3}, 4);
    t.params.ignore_eos = true;
    t.images.push_back(load_image("gray_64x64.jpg"));
    s = (*text_engine)->submit(t, [](RequestOutput&&) {});
    EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(s.message().find("no vision tower"), std::string::npos) << s.message();
}
