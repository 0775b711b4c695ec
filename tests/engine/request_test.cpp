// SamplingParams::validate for logit_bias and min_tokens: each bound, and messages that begin
// with the parameter's name (the server reports that word as the error's param).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/request.h"

using namespace qs;

namespace {
std::string message_of(void (*mutate)(SamplingParams&)) {
    SamplingParams p;
    p.max_tokens = 10;
    mutate(p);
    const Status st = p.validate();
    return st.is_ok() ? std::string("ok") : st.message();
}
bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
}  // namespace

TEST(SamplingParamsValidate, LogitBias) {
    EXPECT_EQ(message_of([](SamplingParams& p) { p.logit_bias = {{0, -100.f}, {5, 100.f}, {7, 0.f}}; }), "ok");
    EXPECT_TRUE(starts_with(message_of([](SamplingParams& p) { p.logit_bias = {{-1, 1.f}}; }), "logit_bias "));
    EXPECT_TRUE(starts_with(message_of([](SamplingParams& p) { p.logit_bias = {{1, 100.5f}}; }), "logit_bias "));
    EXPECT_TRUE(starts_with(message_of([](SamplingParams& p) { p.logit_bias = {{1, -101.f}}; }), "logit_bias "));
    EXPECT_TRUE(starts_with(message_of([](SamplingParams& p) { p.logit_bias = {{1, std::nanf("")}}; }), "logit_bias "));
    EXPECT_TRUE(starts_with(message_of([](SamplingParams& p) { p.logit_bias = {{1, INFINITY}}; }), "logit_bias "));
    const std::string dup = message_of([](SamplingParams& p) { p.logit_bias = {{3, 1.f}, {4, 1.f}, {3, -1.f}}; });
    EXPECT_TRUE(starts_with(dup, "logit_bias ")) << dup;
    EXPECT_NE(dup.find("token 3"), std::string::npos) << dup;
    EXPECT_EQ(message_of([](SamplingParams& p) {
                  for (int32_t i = 0; i < int32_t(kMaxLogitBias); ++i) p.logit_bias.push_back({i, 1.f});
              }),
              "ok");
    EXPECT_TRUE(starts_with(message_of([](SamplingParams& p) {
                                for (int32_t i = 0; i <= int32_t(kMaxLogitBias); ++i) p.logit_bias.push_back({i, 1.f});
                            }),
                            "logit_bias "));
}

TEST(SamplingParamsValidate, MinTokens) {
    EXPECT_EQ(message_of([](SamplingParams& p) { p.min_tokens = 0; }), "ok");
    EXPECT_EQ(message_of([](SamplingParams& p) { p.min_tokens = 10; }), "ok");  // == max_tokens
    EXPECT_TRUE(starts_with(message_of([](SamplingParams& p) { p.min_tokens = 11; }), "min_tokens "));
    EXPECT_TRUE(starts_with(message_of([](SamplingParams& p) { p.min_tokens = -1; }), "min_tokens "));
}
