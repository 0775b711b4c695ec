// Sampling-parameter validation and finish-reason names.
#include "engine/request.h"

#include <fmt/format.h>

#include <cmath>
#include <unordered_set>

namespace qs {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kNone: return "";
        case FinishReason::kStop: return "stop";
        case FinishReason::kLength: return "length";
        case FinishReason::kAbort: return "abort";
        case FinishReason::kError: return "error";
    }
    return "";
}

Status SamplingParams::validate() const {
    auto bad = [](const char* name, const std::string& why) { return invalid_argument(fmt::format("{} {}", name, why)); };
    if (!std::isfinite(temperature) || temperature < 0) return bad("temperature", fmt::format("must be >= 0, got {}", temperature));
    if (!(top_p > 0 && top_p <= 1)) return bad("top_p", fmt::format("must be in (0, 1], got {}", top_p));
    if (top_k < 0) return bad("top_k", fmt::format("must be >= 0 (0 disables it), got {}", top_k));
    if (!(min_p >= 0 && min_p <= 1)) return bad("min_p", fmt::format("must be in [0, 1], got {}", min_p));
    if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
        return bad("repetition_penalty", fmt::format("must be > 0, got {}", repetition_penalty));
    if (!(presence_penalty >= -2 && presence_penalty <= 2))
        return bad("presence_penalty", fmt::format("must be in [-2, 2], got {}", presence_penalty));
    if (!(frequency_penalty >= -2 && frequency_penalty <= 2))
        return bad("frequency_penalty", fmt::format("must be in [-2, 2], got {}", frequency_penalty));
    if (max_tokens < 1) return bad("max_tokens", fmt::format("must be >= 1, got {}", max_tokens));
    if (logprobs < -1 || logprobs > 20) return bad("logprobs", fmt::format("must be in [0, 20], got {}", logprobs));
    if (n < 1 || n > 64) return bad("n", fmt::format("must be in [1, 64], got {}", n));
    for (const auto& s : stop)
        if (s.empty()) return bad("stop", "strings must not be empty");
    if (logit_bias.size() > kMaxLogitBias)
        return bad("logit_bias", fmt::format("takes at most {} entries, got {}", kMaxLogitBias, logit_bias.size()));
    std::unordered_set<int32_t> biased;
    for (const TokenBias& b : logit_bias) {
        if (b.token < 0) return bad("logit_bias", fmt::format("token ids must be >= 0, got {}", b.token));
        if (!std::isfinite(b.bias) || b.bias < -100 || b.bias > 100)
            return bad("logit_bias", fmt::format("values must be in [-100, 100], got {} for token {}", b.bias, b.token));
        if (!biased.insert(b.token).second) return bad("logit_bias", fmt::format("token {} appears twice", b.token));
    }
    if (min_tokens < 0) return bad("min_tokens", fmt::format("must be >= 0, got {}", min_tokens));
    if (min_tokens > max_tokens)
        return bad("min_tokens", fmt::format("must be <= max_tokens ({}), got {}", max_tokens, min_tokens));
    return Status::ok();
}

}  // namespace qs
