// vLLM's mm_processor_kwargs: the supported keys parse and apply to copies of the processor
// configs; other keys, wrong types and ranges are refused naming the key.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "server/mm_processor_kwargs.h"

namespace qs {
namespace {

TEST(MmProcessorKwargs, ParsesAndApplies) {
    auto k = parse_mm_processor_kwargs(nlohmann::json::parse(
        R"({"fps": 0.5, "do_sample_frames": false, "min_pixels": 1024, "max_pixels": 4096})"));
    ASSERT_TRUE(k.is_ok()) << k.status().message();
    EXPECT_EQ(k->fps, 0.5);
    EXPECT_FALSE(k->num_frames);
    ImageProcessorConfig ic;
    auto applied = apply_media_kwargs(k.value(), ic);
    ASSERT_TRUE(applied.is_ok());
    EXPECT_EQ(applied->min_pixels, 1024);
    EXPECT_EQ(applied->max_pixels, 4096);
    VideoProcessorConfig vc;
    EXPECT_TRUE(vc.do_sample_frames);
    EXPECT_FALSE(apply_media_kwargs(k.value(), vc).do_sample_frames);
    auto none = parse_mm_processor_kwargs(nlohmann::json());
    ASSERT_TRUE(none.is_ok());
    EXPECT_EQ(none.value(), MediaKwargs{});
    // min above the config's max.
    MediaKwargs high;
    high.min_pixels = ic.max_pixels + 1;
    EXPECT_FALSE(apply_media_kwargs(high, ic).is_ok());
}

TEST(MmProcessorKwargs, RefusesOtherKeysAndValues) {
    for (const char* bad : {R"({"size": {"shortest_edge": 4}})", R"({"fps": 0})", R"({"fps": "2"})",
                            R"({"num_frames": 0})", R"({"num_frames": 2.5})", R"({"do_sample_frames": 1})",
                            R"({"fps": 2, "num_frames": 4})", R"([1])", R"({"max_pixels": -3})"}) {
        auto r = parse_mm_processor_kwargs(nlohmann::json::parse(bad));
        ASSERT_FALSE(r.is_ok()) << bad;
        EXPECT_EQ(r.status().kind(), std::string(bad).find("size") != std::string::npos ? ErrorKind::kUnsupported
                                                                                         : ErrorKind::kInvalidArgument);
        EXPECT_NE(r.status().message().find("mm_processor_kwargs"), std::string::npos) << r.status().message();
    }
}

}  // namespace
}  // namespace qs
