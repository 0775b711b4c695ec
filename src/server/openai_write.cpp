// Builders of OpenAI response objects (see openai_write.h).
#include "server/openai_write.h"

namespace qs {

using J = nlohmann::json;

std::string dump(const J& j) { return j.dump(-1, ' ', false, J::error_handler_t::replace); }

std::string sse_event(const J& j) { return "data: " + dump(j) + "\n\n"; }

J usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
    J u = {{"prompt_tokens", prompt_tokens},
           {"completion_tokens", completion_tokens},
           {"total_tokens", prompt_tokens + completion_tokens}};
    if (cached_tokens > 0) u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
    return u;
}

J chat_chunk(const ResponseHeader& h, J choices, bool usage_null) {
    J c = {{"id", h.id}, {"object", "chat.completion.chunk"}, {"created", h.created},
           {"model", h.model}, {"choices", std::move(choices)}};
    if (usage_null) c["usage"] = nullptr;
    return c;
}

J completion_chunk(const ResponseHeader& h, J choices, bool usage_null) {
    J c = {{"id", h.id}, {"object", "text_completion"}, {"created", h.created},
           {"model", h.model}, {"choices", std::move(choices)}};
    if (usage_null) c["usage"] = nullptr;
    return c;
}

namespace {
J bytes_of(const std::string& s) {
    J b = J::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
}
}  // namespace

void append_chat_logprobs(const RequestOutput& out, const TextPipeline& text, J& content) {
    for (size_t i = 0; i < out.logprobs.size(); ++i) {
        const std::string tok = text.token_text(out.logprobs[i].token_id);
        J entry = {{"token", tok}, {"logprob", out.logprobs[i].logprob}, {"bytes", bytes_of(tok)}};
        J top = J::array();
        if (i < out.top_logprobs.size())
            for (const auto& t : out.top_logprobs[i]) {
                const std::string s = text.token_text(t.token_id);
                top.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", bytes_of(s)}});
            }
        entry["top_logprobs"] = std::move(top);
        content.push_back(std::move(entry));
    }
}

J empty_completion_logprobs() {
    return {{"tokens", J::array()}, {"token_logprobs", J::array()}, {"top_logprobs", J::array()},
            {"text_offset", J::array()}};
}

void append_completion_logprobs(const RequestOutput& out, const TextPipeline& text, size_t& text_offset, J& lp) {
    for (size_t i = 0; i < out.logprobs.size(); ++i) {
        const std::string tok = text.token_text(out.logprobs[i].token_id);
        lp["tokens"].push_back(tok);
        lp["token_logprobs"].push_back(out.logprobs[i].logprob);
        J top = J::object();
        if (i < out.top_logprobs.size())
            for (const auto& t : out.top_logprobs[i]) top[text.token_text(t.token_id)] = t.logprob;
        lp["top_logprobs"].push_back(std::move(top));
        lp["text_offset"].push_back(text_offset);
        text_offset += tok.size();
    }
}

J tool_calls_json(const std::vector<ToolCall>& calls, size_t first_index, bool with_index) {
    J arr = J::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        J c = {{"id", calls[i].id}, {"type", "function"},
               {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
        if (with_index) c["index"] = first_index + i;
        arr.push_back(std::move(c));
    }
    return arr;
}

}  // namespace qs
