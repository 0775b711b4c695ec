// The request log line (see request_log.h).
#include "server/request_log.h"

namespace qs {

std::vector<LogField> request_log_fields(const RequestLogRecord& r) {
    std::string finish;
    for (const auto& f : r.finish_reasons) finish += (finish.empty() ? "" : ",") + f;
    std::vector<LogField> fields = {
        log_field("id", r.id),
        log_field("api", r.api),
        log_field("stream", r.stream ? "true" : "false"),
        log_field_int("prompt_tokens", r.prompt_tokens),
        log_field_int("cached_prompt_tokens", r.cached_prompt_tokens),
        log_field_int("completion_tokens", r.completion_tokens),
    };
    if (r.ttft_s >= 0) fields.push_back(log_field_real("ttft_s", r.ttft_s));
    fields.push_back(log_field_real("e2e_s", r.e2e_s));
    if (r.queue_s >= 0) fields.push_back(log_field_real("queue_s", r.queue_s));
    if (r.prefill_s >= 0) fields.push_back(log_field_real("prefill_s", r.prefill_s));
    if (r.decode_s >= 0) fields.push_back(log_field_real("decode_s", r.decode_s));
    const int64_t n = int64_t(r.finish_reasons.empty() ? 1 : r.finish_reasons.size());
    const double decode_s = r.e2e_s - (r.ttft_s >= 0 ? r.ttft_s : r.e2e_s);
    if (r.completion_tokens > n && decode_s > 0)
        fields.push_back(log_field_real("decode_tokens_per_s", double(r.completion_tokens - n) / decode_s));
    fields.push_back(log_field("finish_reason", finish));
    if (!r.prompt.empty()) fields.push_back(log_field("prompt", r.prompt));
    return fields;
}

void log_request(const RequestLogRecord& r) { log_fields(LogLevel::kInfo, "request", request_log_fields(r)); }

}  // namespace qs
