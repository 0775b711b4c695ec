// SSE parsing for the load generator (see sse_reader.h). A content chunk is a data event whose
// first choice carries non-empty delta.content or delta.reasoning_content (chat) or text
// (completions), as vllm's benchmark counts them: TTFT is the first, ITL the gaps between them.
// Completion tokens come only from the usage object (stream_options.include_usage).
#include "bench/sse_reader.h"

#include <nlohmann/json.hpp>

namespace qs::bench {

namespace {
// The string at o[key] if it is a non-empty string, else nullptr.
const std::string* non_empty_string(const nlohmann::json& o, const char* key) {
    auto it = o.find(key);
    if (it == o.end() || !it->is_string() || it->get_ref<const std::string&>().empty())
        return nullptr;
    return &it->get_ref<const std::string&>();
}

bool is_utf8_continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }
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
        ++record_->num_bad_chunks;
        if (record_->error.empty()) record_->error = "bad_chunk";
        return;
    }
    if (j.contains("error")) {
        ++record_->num_error_events;
        if (record_->error.empty()) record_->error = "stream_error";
        return;
    }
    auto usage = j.find("usage");
    if (usage != j.end() && usage->is_object()) {
        record_->saw_usage = true;
        record_->completion_tokens = usage->value("completion_tokens", int64_t(0));
        record_->prompt_tokens = usage->value("prompt_tokens", int64_t(0));
        auto details = usage->find("completion_tokens_details");
        if (details != usage->end() && details->is_object()) {
            auto rt = details->find("reasoning_tokens");
            if (rt != details->end() && rt->is_number_integer())
                record_->reasoning_tokens = rt->get<int64_t>();
        }
    }
    auto choices = j.find("choices");
    if (choices == j.end() || !choices->is_array() || choices->empty()) return;
    const auto& c = (*choices)[0];
    const std::string* pieces[3] = {non_empty_string(c, "text"), nullptr, nullptr};
    if (auto d = c.find("delta"); d != c.end() && d->is_object()) {
        pieces[1] = non_empty_string(*d, "reasoning_content");
        pieces[2] = non_empty_string(*d, "content");
    }
    bool content = pieces[0] || pieces[1] || pieces[2];
    if (content && keep_text_)
        for (const std::string* p : pieces)
            if (p) keep(*p);
    if (pieces[1]) ++record_->num_reasoning_chunks;
    if (keep_full_text_) {
        if (pieces[0]) record_->content += *pieces[0];
        if (pieces[1]) record_->reasoning += *pieces[1];
        if (pieces[2]) record_->content += *pieces[2];
    }
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

void SseReader::keep(const std::string& text) {
    RequestRecord& r = *record_;
    r.text_bytes += int64_t(text.size());
    if (!r.text_nonblank)
        for (char ch : text)
            if (ch != ' ' && ch != '\n' && ch != '\t' && ch != '\r' && ch != '\f' && ch != '\v') {
                r.text_nonblank = true;
                break;
            }
    r.text_tail += text;
    // Trim when twice the bound is reached (amortised O(1) per byte); finish() trims to the bound.
    if (r.text_tail.size() >= 2 * kTextTailBytes) trim_tail();
}

// Keeps the last kTextTailBytes, never cutting inside a UTF-8 sequence, so the tail stays valid
// UTF-8 (the screen prints it and writes it as JSON).
void SseReader::trim_tail() {
    std::string& t = record_->text_tail;
    if (t.size() <= kTextTailBytes) return;
    size_t cut = t.size() - kTextTailBytes;
    while (cut < t.size() && is_utf8_continuation(t[cut])) ++cut;
    t.erase(0, cut);
}

void SseReader::finish(double now_s) {
    record_->latency_s = now_s - record_->start_s;
    if (keep_text_) trim_tail();
    if (record_->done && !record_->saw_usage && record_->error.empty()) record_->error = "no_usage";
}

}  // namespace qs::bench
