// Client side of an OpenAI streaming response: splits the decoded HTTP body into SSE `data:` lines
// and interprets each (content chunk, finish reason, usage, "[DONE]"), filling a RequestRecord.
// No sockets here (bench/loadgen feeds it), so the parsing is tested on its own. One reader per
// request; used on the load generator's I/O thread that owns the request.
#pragma once

#include <string>
#include <string_view>

#include "bench/metrics.h"

namespace qs::bench {

class SseReader {
   public:
    // record->start_s must be set; times passed to feed() are on the same clock. keep_text:
    // append the completion text to record->text_tail (the output screen needs it).
    // keep_full_text: keep all of it in record->content and record->reasoning (the evals).
    explicit SseReader(RequestRecord* record, bool keep_text = false, bool keep_full_text = false)
        : record_(record), keep_text_(keep_text), keep_full_text_(keep_full_text) {}

    // Bytes of the (de-chunked) body that arrived at time now_s.
    void feed(std::string_view bytes, double now_s);
    // The body ended at now_s (connection closed or last chunk): sets latency and checks usage.
    void finish(double now_s);

    bool done() const { return record_->done; }
    int64_t num_content_chunks() const { return num_chunks_; }

   private:
    void on_data(std::string_view payload, double now_s);
    void keep(const std::string& text);
    void trim_tail();

    RequestRecord* record_;
    bool keep_text_ = false;
    bool keep_full_text_ = false;
    std::string pending_;  // bytes after the last newline
    double last_chunk_s_ = -1.0;
    int64_t num_chunks_ = 0;
};

}  // namespace qs::bench
