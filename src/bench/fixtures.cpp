// Fixture generation and JSONL I/O (see fixtures.h). Randomness is a SplitMix64 stream with our
// own uniform and normal draws, so the bytes do not depend on the standard library's
// distributions. Text prompts open with a 6-digit request-unique number (6 tokens: Qwen splits
// digits) so prompts share no cached prefix, then common English words, each one token with its
// leading space in the Qwen3 BPE vocabulary: the Qwen3 tokenizer gives exactly `prompt_tokens`
// (tests/bench/fixtures_test.cpp checks it when the tokenizer is present).
#include "bench/fixtures.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

namespace qs::bench {

namespace {

class Rng {
   public:
    explicit Rng(uint64_t seed) : state_(seed) {}
    uint64_t next() {
        uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double unit() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
    int64_t uniform(int64_t lo, int64_t hi) {                                    // inclusive
        return lo + int64_t(next() % uint64_t(hi - lo + 1));
    }
    double normal() {  // Box-Muller
        double u1 = 1.0 - unit(), u2 = unit();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

   private:
    uint64_t state_;
};

const char* const kWords[] = {
    "the",   "of",    "and",    "to",    "in",    "is",    "that",  "for",   "it",     "as",
    "was",   "with",  "be",     "by",    "on",    "not",   "he",    "this",  "are",    "or",
    "his",   "from",  "at",     "which", "but",   "have",  "an",    "had",   "they",   "you",
    "were",  "their", "one",    "all",   "we",    "can",   "her",   "has",   "there",  "been",
    "if",    "more",  "when",   "will",  "would", "who",   "so",    "no",    "time",   "people",
    "water", "work",  "world",  "city",  "house", "light", "music", "story", "system", "number",
    "river", "table", "market", "paper"};
constexpr int64_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);
constexpr int64_t kPrefixTokens = 6;   // Qwen's pre-tokenizer splits digits one by one
constexpr int32_t kMinTokenId = 1000;  // token-id prompts draw ids from a plain-text range
constexpr int32_t kMaxTokenId = 50000;

Status validate(const FixtureOptions& o) {
    if (o.num_requests <= 0) return invalid_argument("--requests must be positive");
    if (o.min_prompt <= kPrefixTokens || o.max_prompt < o.min_prompt)
        return invalid_argument(fmt::format("prompt range [{}, {}] is empty or not positive",
                                            o.min_prompt, o.max_prompt));
    if (o.max_tokens <= 0) return invalid_argument("--max-tokens must be positive");
    if (o.max_prompt + 1 + kChatTemplateOverhead > o.context_len)
        return invalid_argument(
            fmt::format("--max-prompt {} leaves no room for a completion in a "
                        "{}-token context",
                        o.max_prompt, o.context_len));
    if (o.distribution != "uniform" && o.distribution != "normal")
        return invalid_argument("--distribution must be 'uniform' or 'normal', not '" +
                                o.distribution + "'");
    return Status::ok();
}

int64_t draw_length(Rng& rng, const FixtureOptions& o) {
    if (o.distribution == "uniform") return rng.uniform(o.min_prompt, o.max_prompt);
    double mid = 0.5 * double(o.min_prompt + o.max_prompt);
    double sd = double(o.max_prompt - o.min_prompt) / 6.0;
    int64_t n = int64_t(std::llround(mid + sd * rng.normal()));
    return std::clamp(n, o.min_prompt, o.max_prompt);
}

}  // namespace

Result<std::vector<FixtureRequest>> generate_fixture(const FixtureOptions& o) {
    QS_RETURN_IF_ERROR(validate(o));
    Rng rng(o.seed);
    std::vector<FixtureRequest> out;
    out.reserve(size_t(o.num_requests));
    for (int64_t i = 0; i < o.num_requests; ++i) {
        FixtureRequest r;
        r.prompt_tokens = draw_length(rng, o);
        int64_t max_tokens =
            std::min(o.max_tokens, o.context_len - r.prompt_tokens - kChatTemplateOverhead);
        nlohmann::json body = {{"model", o.model},
                               {"max_tokens", max_tokens},
                               {"temperature", o.temperature},
                               {"ignore_eos", o.ignore_eos}};
        if (o.token_ids) {
            r.endpoint = "/v1/completions";
            std::vector<int32_t> ids(size_t(r.prompt_tokens));
            for (auto& id : ids) id = int32_t(rng.uniform(kMinTokenId, kMaxTokenId));
            body["prompt"] = ids;
        } else {
            r.endpoint = "/v1/chat/completions";
            std::string text = fmt::format("{:06d}", rng.next() % 1000000);  // 6 digit tokens
            for (int64_t w = kPrefixTokens; w < r.prompt_tokens; ++w) {
                text += ' ';
                text += kWords[rng.uniform(0, kNumWords - 1)];
            }
            body["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", text}}});
            body["chat_template_kwargs"] = {{"enable_thinking", false}};
        }
        r.body = std::move(body);
        out.push_back(std::move(r));
    }
    return out;
}

std::string fixture_line(const FixtureRequest& r) {
    nlohmann::json j = {
        {"endpoint", r.endpoint}, {"prompt_tokens", r.prompt_tokens}, {"body", r.body}};
    return j.dump();
}

Status write_fixture(const std::string& path, const std::vector<FixtureRequest>& requests) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    if (!f) return io_error("cannot open '" + path + "' for writing");
    for (const auto& r : requests) f << fixture_line(r) << '\n';
    f.flush();
    if (!f) return io_error("writing '" + path + "' failed");
    return Status::ok();
}

Result<std::vector<FixtureRequest>> read_fixture(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return not_found("cannot open fixture '" + path + "'");
    std::vector<FixtureRequest> out;
    std::string line;
    for (int64_t n = 1; std::getline(f, line); ++n) {
        if (line.empty()) continue;
        auto where = [&](const std::string& what) {
            return corrupt_data(fmt::format("{}:{}: {}", path, n, what));
        };
        nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object()) return where("not a JSON object");
        FixtureRequest r;
        if (!j.contains("body") || !j["body"].is_object()) return where("missing object 'body'");
        r.body = j["body"];
        r.endpoint = j.value("endpoint", std::string("/v1/chat/completions"));
        if (r.endpoint != "/v1/chat/completions" && r.endpoint != "/v1/completions")
            return where("unknown endpoint '" + r.endpoint + "'");
        const char* need = r.endpoint == "/v1/completions" ? "prompt" : "messages";
        if (!r.body.contains(need)) return where(fmt::format("body has no '{}'", need));
        if (j.contains("prompt_tokens") && j["prompt_tokens"].is_number_integer())
            r.prompt_tokens = j["prompt_tokens"].get<int64_t>();
        out.push_back(std::move(r));
    }
    if (out.empty()) return invalid_argument("fixture '" + path + "' holds no requests");
    return out;
}

}  // namespace qs::bench
