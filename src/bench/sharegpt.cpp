// ShareGPT datasets to bench requests (see sharegpt.h).
#include "bench/sharegpt.h"
#include "core/read_file.h"

#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace qs::bench {

namespace {

using J = nlohmann::json;

bool is_human(const std::string& from) { return from == "human" || from == "user"; }
bool is_gpt(const std::string& from) { return from == "gpt" || from == "chatgpt" || from == "assistant"; }

struct Pair {
    std::string prompt, answer;
};

// The first human turn and the gpt turn right after it; false when there is none. Malformed
// turns are errors (naming the entry).
Result<bool> first_exchange(const J& entry, size_t index, const std::string& name, Pair& out) {
    auto bad = [&](const std::string& what) { return corrupt_data(fmt::format("{}: entry {}: {}", name, index, what)); };
    if (!entry.is_object()) return bad("not a JSON object");
    auto it = entry.find("conversations");
    if (it == entry.end()) return bad("no 'conversations'");
    if (!it->is_array()) return bad("'conversations' is not a list");
    const J& turns = *it;
    for (size_t t = 0; t < turns.size(); ++t) {
        const J& turn = turns[t];
        if (!turn.is_object() || !turn.contains("from") || !turn["from"].is_string() || !turn.contains("value") ||
            !turn["value"].is_string())
            return bad(fmt::format("conversations[{}] needs string fields 'from' and 'value'", t));
        if (!is_human(turn["from"].get<std::string>())) continue;
        if (t + 1 >= turns.size()) return false;
        const J& next = turns[t + 1];
        if (!next.is_object() || !next.contains("from") || !next["from"].is_string() || !next.contains("value") ||
            !next["value"].is_string())
            return bad(fmt::format("conversations[{}] needs string fields 'from' and 'value'", t + 1));
        if (!is_gpt(next["from"].get<std::string>())) return false;
        out.prompt = turn["value"].get<std::string>();
        out.answer = next["value"].get<std::string>();
        return true;
    }
    return false;
}

}  // namespace

Result<std::vector<FixtureRequest>> parse_sharegpt(const std::string& text, const std::string& name,
                                                   const ShareGptOptions& o, const TokenCounter& count_tokens) {
    if (o.num_requests <= 0) return invalid_argument("the number of requests must be positive");
    J root = J::parse(text, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) return corrupt_data(name + ": not JSON");
    if (!root.is_array()) return corrupt_data(name + ": not a JSON list of conversations (ShareGPT format)");
    // Shuffle the entry order with the seed (Fisher-Yates over mt19937_64: the same on every
    // platform), then take entries in that order.
    std::vector<size_t> order(root.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::mt19937_64 rng(o.seed);
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[size_t(rng() % i)]);
    std::vector<FixtureRequest> out;
    for (size_t idx : order) {
        if (int64_t(out.size()) >= o.num_requests) break;
        Pair p;
        auto found = first_exchange(root[idx], idx, name, p);
        if (!found.is_ok()) return found.status();
        if (!*found) continue;
        const int64_t prompt_len = count_tokens(p.prompt);
        const int64_t answer_len = o.output_len > 0 ? o.output_len : count_tokens(p.answer);
        if (prompt_len < o.min_tokens || (o.output_len <= 0 && answer_len < o.min_tokens)) continue;
        if (prompt_len > o.max_prompt_tokens || prompt_len + answer_len > o.max_total_tokens) continue;
        FixtureRequest r;
        r.endpoint = "/v1/chat/completions";
        r.prompt_tokens = prompt_len;
        r.body = {{"model", o.model},
                  {"messages", J::array({{{"role", "user"}, {"content", p.prompt}}})},
                  {"max_tokens", answer_len},
                  {"temperature", o.temperature},
                  {"ignore_eos", o.ignore_eos},
                  {"chat_template_kwargs", {{"enable_thinking", false}}}};
        out.push_back(std::move(r));
    }
    if (out.empty()) return invalid_argument(name + ": no conversation passed the length filter");
    return out;
}

Result<std::vector<FixtureRequest>> load_sharegpt(const std::string& path, const ShareGptOptions& o,
                                                  const TokenCounter& count_tokens) {
    auto text = read_file(path);
    if (!text.is_ok()) return text.status().with_context("ShareGPT file");
    return parse_sharegpt(text.value(), path, o, count_tokens);
}

}  // namespace qs::bench
