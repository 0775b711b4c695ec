// The request log: one line per finished generation request (serve's --disable-log-requests
// turns it off), through core/log_format so it is a JSON object under --log-format json. Fields:
// id, api (chat/completions), stream, prompt/cached/completion tokens, TTFT, end-to-end time,
// the engine's queue, prefill and decode times (RequestTiming; left out when the request never
// got that far), decode tokens/s, finish reason(s); the prompt text only with --log-prompts (it
// may be private). Written on the connection's strand when the request ends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/log_format.h"

namespace qs {

struct RequestLogRecord {
    std::string id;
    std::string api;  // "chat" or "completions"
    bool stream = false;
    int64_t prompt_tokens = 0;
    int64_t cached_prompt_tokens = 0;
    int64_t completion_tokens = 0;       // all choices
    double ttft_s = -1;                  // < 0: no token was produced
    double e2e_s = 0;
    double queue_s = -1;                 // < 0: never scheduled
    double prefill_s = -1, decode_s = -1;  // < 0: no token was produced
    std::vector<std::string> finish_reasons;  // one per choice
    std::string prompt;                  // logged only when not empty (--log-prompts)
};

// The line's fields, in order (tests read them).
std::vector<LogField> request_log_fields(const RequestLogRecord& r);
void log_request(const RequestLogRecord& r);

}  // namespace qs
