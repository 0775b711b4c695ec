// SSE parsing for the load generator (see sse_reader.h). A content chunk is a data event whose
// first choice carries non-empty delta.content or delta.reasoning_content (chat) or text
// (completions), as vllm's benchmark counts them: TTFT is the first, ITL the gaps between them.
// Completion tokens come only from the usage object (stream_options.include_usage).
#include "bench/sse_reader.h"

#include <nlohmann/json.hpp>

namespace qs::bench {

namespace {
bool non_empty_string(const nlohmann::json& o, const char* key) {
    auto it = o.find(key);
    return it != o.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}
}  // namespace

void SseReader::feed(std::string_view bytes, double now_s) {
    pending_.append(bytes);
    size_t begin = 0;
    for (size_t nl; (nl = pending_.find('\n', begin)) != std::string::npos; begin = nl + 1) {
        std::string_view line(pending_.data() + begin, nl - begin);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.substr(0, 5) != "data:") continue;  // blank separators, comments, event names
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        on_data(line, now_s);
    }
    pending_.erase(0, begin);
}

void SseReader::on_data(std::string_view payload, double now_s) {
    if (payload == "[DONE]") {
        record_->done = true;
        return;
    }
    nlohmann::json j = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
        if (record_->error.empty()) record_->error = "bad_chunk";
        return;
    }
    if (j.contains("error")) {
        if (record_->error.empty()) record_->error = "stream_error";
        return;
    }
    auto usage = j.find("usage");
    if (usage != j.end() && usage->is_object()) {
        saw_usage_ = true;
        record_->completion_tokens = usage->value("completion_tokens", int64_t(0));
        record_->prompt_tokens = usage->value("prompt_tokens", int64_t(0));
    }
    auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->empty()) return;
    const auto& c = (*choices)[0];
    bool content = non_empty_string(c, "text");
    if (auto d = c.find("delta"); d != c.end() && d->is_object())
        content =
            content || non_empty_string(*d, "content") || non_empty_string(*d, "reasoning_content");
    if (content) {
        double rel = now_s - record_->start_s;
        if (num_chunks_ == 0)
            record_->ttft_s = rel;
        else
            record_->itl_s.push_back(now_s - last_chunk_s_);
        last_chunk_s_ = now_s;
        ++num_chunks_;
    }
    if (auto f = c.find("finish_reason"); f != c.end() && f->is_string())
        record_->finish_reason = f->get<std::string>();
}

void SseReader::finish(double now_s) {
    record_->latency_s = now_s - record_->start_s;
    if (record_->done && !saw_usage_ && record_->error.empty()) record_->error = "no_usage";
}

}  // namespace qs::bench
