// The max_num_batched_tokens fit (backend/batched_tokens_fit) with made-up device sizes: whether
// a step fits, the largest that does (checked against the closed-form solution of the linear
// model, worked out here independently of the bisection), and the message that names the knob.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/batched_tokens_fit.h"

namespace qs {
namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kGiB = size_t(1) << 30;

// An H200-like device: 140 GiB, 36 GiB of weights; the arena grows 0.5 MiB per token above 64 MiB.
BatchedTokensFitInput h200(int64_t wanted) {
    BatchedTokensFitInput in;
    in.small = {256, 64 * kMiB + 256 * kMiB / 2};
    in.large = {512, 64 * kMiB + 512 * kMiB / 2};
    in.arena_reserved_bytes = 512 * kMiB;
    in.warm_cache_bytes_per_token = 20 * 1024;
    in.warm_cache_fixed_bytes = 30 * kMiB;
    in.total_bytes = 140 * kGiB;
    in.free_bytes = in.total_bytes - 36 * kGiB - in.arena_reserved_bytes;
    in.utilization = 0.9;
    in.keep_bytes = 64 * kMiB;
    in.wanted_tokens = wanted;
    return in;
}

// The largest T with need(T) <= available, solved directly (arena part above the reserve).
double closed_form_max(const BatchedTokensFitInput& in) {
    const double s = (double(in.large.arena_bytes) - double(in.small.arena_bytes)) /
                     double(in.large.tokens - in.small.tokens);
    const double available = double(in.total_bytes) * in.utilization -
                             (double(in.total_bytes) - double(in.free_bytes)) - double(in.keep_bytes);
    const double c = double(in.warm_cache_bytes_per_token);
    const double slack = double(256 * kMiB);
    // 1.1 (L + s (T - Tl)) - R + F + c (T + 1) + slack <= A
    const double num = available - slack - double(in.warm_cache_fixed_bytes) - c + double(in.arena_reserved_bytes) -
                       1.1 * (double(in.large.arena_bytes) - s * double(in.large.tokens));
    return std::floor(num / (1.1 * s + c));
}

TEST(BatchedTokensFit, TheDefaultFitsAndAHugeStepDoesNot) {
    const BatchedTokensFit ok = fit_batched_tokens(h200(16384));
    EXPECT_TRUE(ok.fits);
    const BatchedTokensFit bad = fit_batched_tokens(h200(4'000'000));
    EXPECT_FALSE(bad.fits);
    EXPECT_GT(bad.needed_bytes, bad.available_bytes);
    EXPECT_EQ(bad.bytes_per_token, size_t(0.5 * 1.1 * double(kMiB)) + 20 * 1024);
}

TEST(BatchedTokensFit, TheLargestFittingStepMatchesTheClosedForm) {
    const BatchedTokensFitInput in = h200(4'000'000);
    const BatchedTokensFit fit = fit_batched_tokens(in);
    const double exact = closed_form_max(in);
    ASSERT_GT(exact, 10000.0);
    EXPECT_EQ(fit.max_fitting_tokens, int64_t(exact) / 256 * 256);
    EXPECT_EQ(fit.max_fitting_tokens % 256, 0);
    // The suggestion fits, the next multiple does not (when the exact bound is below it).
    EXPECT_TRUE(fit_batched_tokens(h200(fit.max_fitting_tokens)).fits);
    EXPECT_FALSE(fit_batched_tokens(h200(int64_t(exact) + 1)).fits);
}

TEST(BatchedTokensFit, LowerUtilizationFitsFewerTokens) {
    BatchedTokensFitInput in = h200(4'000'000);
    const int64_t at_90 = fit_batched_tokens(in).max_fitting_tokens;
    in.utilization = 0.5;
    const int64_t at_50 = fit_batched_tokens(in).max_fitting_tokens;
    EXPECT_LT(at_50, at_90);
    EXPECT_EQ(at_50, int64_t(closed_form_max(in)) / 256 * 256);
}

TEST(BatchedTokensFit, TheMessageNamesTheKnobAndAValueThatFits) {
    const BatchedTokensFitInput in = h200(4'000'000);
    const BatchedTokensFit fit = fit_batched_tokens(in);
    const std::string m = batched_tokens_oom_message(in, fit);
    EXPECT_EQ(m.rfind("--max-num-batched-tokens 4000000 does not fit in GPU memory", 0), 0u) << m;
    EXPECT_NE(m.find("use --max-num-batched-tokens " + std::to_string(fit.max_fitting_tokens) + " or less"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("--gpu-memory-utilization 0.9"), std::string::npos) << m;
}

TEST(BatchedTokensFit, NothingFitsWhenTheWeightsFillTheDevice) {
    BatchedTokensFitInput in = h200(2048);
    in.free_bytes = 2 * kGiB;  // 138 GiB in use: above 90 % already
    const BatchedTokensFit fit = fit_batched_tokens(in);
    EXPECT_FALSE(fit.fits);
    EXPECT_EQ(fit.max_fitting_tokens, 0);
    EXPECT_NE(batched_tokens_oom_message(in, fit).find("not even a small step fits"), std::string::npos);
}

// An arena that does not grow between the probes (a flat slope) still has the warm-up cache's
// per-token bytes: the answer stays finite.
TEST(BatchedTokensFit, AFlatArenaStillCountsTheWarmUpCache) {
    BatchedTokensFitInput in = h200(1'000'000'000);
    in.large.arena_bytes = in.small.arena_bytes;
    const BatchedTokensFit fit = fit_batched_tokens(in);
    EXPECT_FALSE(fit.fits);
    EXPECT_GT(fit.max_fitting_tokens, 1'000'000);
    EXPECT_LT(fit.max_fitting_tokens, 1'000'000'000);
}

}  // namespace
}  // namespace qs
