// Images on the CUDA backend (issue 21): its attention kernels rotate by 1-D positions only, so
// the engine must refuse a request with images there (a 400-kind error naming image input on this
// device) instead of answering with text computed from wrong positions. Skipped without a GPU.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "engine/engine.h"
#include "gpu_test_util.h"
#include "image/image_decode.h"

using namespace qs;

TEST(CudaImages, EngineRefusesImageRequests) {
    QS_REQUIRE_GPU();
    const std::string dir = gpu_test::source_path("tests/data/vision_parity");
    auto weights = load_model_dir(dir);
    ASSERT_TRUE(weights.is_ok()) << weights.status().message();
    ASSERT_TRUE(weights->visual != nullptr);
    cuda::CudaOps ops(cuda::CudaOptions{});
    EXPECT_FALSE(ops.supports_mrope());
    ops.prepare_weights(weight_set(*weights));
    EngineConfig cfg;
    cfg.cache_memory_mb = 64;
    auto engine = Engine::create(*weights, ops, cfg, nullptr);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    std::ifstream f(gpu_test::source_path("tests/data/image/gray_64x64.jpg"), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    auto rgb = decode_image(ss.str());
    ASSERT_TRUE(rgb.is_ok());
    auto proc = load_image_processor_config(dir);
    ASSERT_TRUE(proc.is_ok());
    auto patches = preprocess_image(rgb.value(), proc.value());
    ASSERT_TRUE(patches.is_ok());
    GenerationRequest r;
    r.id = "img";
    r.params.temperature = 0.0;
    r.params.max_tokens = 4;
    const int32_t pad = int32_t(weights->config.image_token_id);
    r.prompt_ids = {1, 2, int32_t(weights->config.vision_start_token_id), pad, pad, pad, pad,
                    int32_t(weights->config.vision_end_token_id), 3};
    r.images.push_back(std::make_shared<const ImagePatches>(std::move(patches).value()));
    Status s = (*engine)->submit(r, [](RequestOutput&&) {});
    EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(s.message().find("not supported on this device"), std::string::npos) << s.message();
}
