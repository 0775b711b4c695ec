// The output screen: looks at what each request of a pass returned (its RequestRecord, with the
// completion text tail kept by the load generator) and flags outputs no healthy server should
// produce under load. Verdicts, checked in this order:
//   unscreened  the request failed in transport (connect, write, read, http_<status>): there is
//               no response to judge; the campaign's clean check counts these, the screen does not
//   malformed   a response arrived but broke the stream contract: an invalid JSON data line, an
//               error event, no "data: [DONE]" (incomplete), or [DONE] without a usage chunk
//   blank       well-formed, but the text is empty or ASCII whitespace only
//   loop        well-formed, but the text ends in a repetition loop (rule below)
//   ok          none of the above
// Loop rule (on characters, since the stream carries text, not token ids): the text ends with
// k consecutive copies of one unit of p characters (the last copy may be cut short, as a
// max_tokens cut leaves it), with 1 <= p <= kLoopMaxPeriod, k >= kLoopMinRepeats and
// k * p >= kLoopMinChars. "ha ha ha " (9 chars) is fine; 64 x "-" or 4 x the same 40-character
// sentence at the end is a loop. The smallest such p is reported, with the unit as it first
// appears where the periodic end begins.
// Pure functions, called on the campaign's main thread after a pass.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/metrics.h"

namespace qs::bench {

inline constexpr int64_t kLoopMaxPeriod = 512;  // 4 copies fit in kTextTailBytes
inline constexpr int64_t kLoopMinRepeats = 4;
inline constexpr int64_t kLoopMinChars = 64;

enum class Verdict { kOk, kBlank, kLoop, kMalformed, kUnscreened };
const char* verdict_name(Verdict v);  // "ok", "blank", "loop", "malformed", "unscreened"

struct LoopMatch {
    int64_t period = 0;   // p (0: no loop)
    int64_t repeats = 0;  // k, full copies
    int64_t length = 0;   // characters of the p-periodic end (>= k * p); the loop starts there
};
// The loop rule on one text; period 0 when the text does not end in a loop.
LoopMatch find_end_loop(std::string_view text);

struct ScreenVerdict {
    Verdict verdict = Verdict::kOk;
    std::string why;  // empty for ok; else what was wrong ("no [DONE]", "'ab ' x 30 at the end")
};
ScreenVerdict screen_record(const RequestRecord& r);

struct ScreenReport {
    struct Example {
        int64_t index = 0;  // request index in the pass
        Verdict verdict = Verdict::kOk;
        std::string why;
        std::string tail;  // the last few characters of the text, escaped to one line
    };
    int64_t num_requests = 0;
    int64_t num_ok = 0, num_blank = 0, num_loop = 0, num_malformed = 0, num_unscreened = 0;
    std::vector<Example> examples;  // up to kMaxExamples per failing verdict, in request order

    static constexpr int kMaxExamples = 3;
    // judge_content false: only the stream contract gates (malformed); blank and loop verdicts
    // are still counted and described. For servers whose text carries no meaning (dummy
    // weights), where a run of one sampled token is not a fault (docs/RELIABILITY.md).
    bool passed(bool judge_content = true) const {
        return num_malformed == 0 && (!judge_content || (num_blank == 0 && num_loop == 0));
    }
    // One line of counts, then one line per example.
    std::string describe() const;
};
ScreenReport screen_records(const std::vector<RequestRecord>& records);

// Text made printable on one line: \n, \r, \t and other control bytes escaped, at most
// max_bytes from the end (never starting inside a UTF-8 sequence), "..." in front if cut.
std::string escaped_tail(std::string_view text, size_t max_bytes);

}  // namespace qs::bench
