// The max_num_batched_tokens fit (see batched_tokens_fit.h).
#include "backend/batched_tokens_fit.h"

#include <fmt/format.h>

#include <algorithm>

namespace qs {

namespace {

constexpr double kMargin = 1.10;                    // over the linear prediction
constexpr double kChunkSlack = double(256 << 20);   // one arena chunk: a block that does not fit the last chunk
constexpr double kGiB = double(1 << 30);

// New device bytes a warm-up of `tokens` needs, predicted from the two probes.
double predicted_bytes(const BatchedTokensFitInput& in, double slope, double tokens) {
    const double arena = double(in.large.arena_bytes) + slope * (tokens - double(in.large.tokens));
    const double arena_new = std::max(0.0, arena * kMargin - double(in.arena_reserved_bytes));
    const double cache = double(in.warm_cache_fixed_bytes) + double(in.warm_cache_bytes_per_token) * (tokens + 1);
    return arena_new + cache + kChunkSlack;
}

}  // namespace

BatchedTokensFit fit_batched_tokens(const BatchedTokensFitInput& in) {
    BatchedTokensFit f;
    const double dt = double(std::max<int64_t>(1, in.large.tokens - in.small.tokens));
    const double slope =
        std::max(0.0, (double(in.large.arena_bytes) - double(in.small.arena_bytes)) / dt);
    f.bytes_per_token = size_t(slope * kMargin) + in.warm_cache_bytes_per_token;
    const double used = double(in.total_bytes) - double(in.free_bytes);
    const double available = double(in.total_bytes) * in.utilization - used - double(in.keep_bytes);
    f.available_bytes = size_t(std::max(0.0, available));
    f.needed_bytes = size_t(predicted_bytes(in, slope, double(in.wanted_tokens)));
    f.fits = available > 0 && double(f.needed_bytes) <= available;
    // The largest step that fits: the prediction is increasing in tokens, so bisect.
    int64_t lo = 0, hi = std::max<int64_t>(in.wanted_tokens, 1);
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (predicted_bytes(in, slope, double(mid)) <= available) lo = mid;
        else hi = mid - 1;
    }
    const int64_t step = lo >= 256 ? 256 : 16;
    f.max_fitting_tokens = lo / step * step;
    return f;
}

std::string batched_tokens_oom_message(const BatchedTokensFitInput& in, const BatchedTokensFit& fit) {
    const std::string what = fmt::format(
        "--max-num-batched-tokens {} does not fit in GPU memory: a warm-up step of that many tokens needs about "
        "{:.1f} GiB more ({:.2f} MiB per token, measured by warm-up steps of {} and {} tokens), and "
        "--gpu-memory-utilization {} leaves {:.1f} GiB after the weights ({:.1f} of {:.1f} GiB in use, {:.0f} MiB "
        "kept for the cache)",
        in.wanted_tokens, double(fit.needed_bytes) / kGiB, double(fit.bytes_per_token) / double(1 << 20),
        in.small.tokens, in.large.tokens, in.utilization, double(fit.available_bytes) / kGiB,
        double(in.total_bytes - in.free_bytes) / kGiB, double(in.total_bytes) / kGiB,
        double(in.keep_bytes) / double(1 << 20));
    if (fit.max_fitting_tokens > 0)
        return what + fmt::format("; use --max-num-batched-tokens {} or less (or raise --gpu-memory-utilization)",
                                  fit.max_fitting_tokens);
    return what + "; not even a small step fits: free GPU memory, or raise --gpu-memory-utilization";
}

}  // namespace qs
