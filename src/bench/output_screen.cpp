// The output screen's rules (see output_screen.h).
#include "bench/output_screen.h"

#include <algorithm>

#include <fmt/format.h>

namespace qs::bench {

const char* verdict_name(Verdict v) {
    switch (v) {
        case Verdict::kOk:
            return "ok";
        case Verdict::kBlank:
            return "blank";
        case Verdict::kLoop:
            return "loop";
        case Verdict::kMalformed:
            return "malformed";
        case Verdict::kUnscreened:
            return "unscreened";
    }
    return "?";
}

LoopMatch find_end_loop(std::string_view text) {
    const int64_t n = int64_t(text.size());
    if (n < kLoopMinChars) return {};
    const int64_t max_p = std::min(kLoopMaxPeriod, n / kLoopMinRepeats);
    for (int64_t p = 1; p <= max_p; ++p) {
        // m: how many characters, counted back from the end, equal the one p before them. The
        // last m + p characters are then p-periodic: (m + p) / p full copies of one unit.
        int64_t m = 0;
        while (m + p < n && text[size_t(n - 1 - m)] == text[size_t(n - 1 - m - p)]) ++m;
        const int64_t k = (m + p) / p;
        if (k >= kLoopMinRepeats && k * p >= kLoopMinChars) return {p, k, m + p};
    }
    return {};
}

namespace {

// Transport failures: no response to judge. Everything else the SseReader can record
// (bad_chunk, stream_error, no_usage, bad_response) is a malformed response.
bool transport_error(const std::string& e) {
    return e == "connect" || e == "write" || e == "read" || e.rfind("http_", 0) == 0;
}

}  // namespace

ScreenVerdict screen_record(const RequestRecord& r) {
    if (transport_error(r.error)) return {Verdict::kUnscreened, "request failed: " + r.error};
    if (r.num_bad_chunks > 0)
        return {Verdict::kMalformed, fmt::format("{} invalid JSON data line(s)", r.num_bad_chunks)};
    if (r.num_error_events > 0 || r.error == "stream_error")
        return {Verdict::kMalformed, "error event in the stream"};
    if (r.error == "bad_response") return {Verdict::kMalformed, "unreadable response head"};
    if (!r.done) return {Verdict::kMalformed, "stream ended without [DONE]"};
    if (!r.saw_usage) return {Verdict::kMalformed, "no usage chunk"};
    if (!r.text_nonblank)
        return {Verdict::kBlank, r.text_bytes == 0
                                     ? std::string("no text")
                                     : fmt::format("{} bytes of whitespace only", r.text_bytes)};
    if (LoopMatch m = find_end_loop(r.text_tail); m.period > 0) {
        std::string_view t(r.text_tail);
        std::string_view first = t.substr(t.size() - size_t(m.length), size_t(m.period));
        std::string unit = escaped_tail(first, 40);
        return {Verdict::kLoop,
                fmt::format("'{}' ({} chars) x {} at the end", unit, m.period, m.repeats)};
    }
    return {};
}

ScreenReport screen_records(const std::vector<RequestRecord>& records) {
    ScreenReport rep;
    rep.num_requests = int64_t(records.size());
    int shown[5] = {0, 0, 0, 0, 0};
    for (size_t i = 0; i < records.size(); ++i) {
        ScreenVerdict v = screen_record(records[i]);
        switch (v.verdict) {
            case Verdict::kOk:
                ++rep.num_ok;
                continue;
            case Verdict::kUnscreened:
                ++rep.num_unscreened;
                continue;
            case Verdict::kBlank:
                ++rep.num_blank;
                break;
            case Verdict::kLoop:
                ++rep.num_loop;
                break;
            case Verdict::kMalformed:
                ++rep.num_malformed;
                break;
        }
        if (shown[int(v.verdict)]++ < ScreenReport::kMaxExamples)
            rep.examples.push_back(
                {int64_t(i), v.verdict, v.why, escaped_tail(records[i].text_tail, 60)});
    }
    return rep;
}

std::string ScreenReport::describe() const {
    std::string out =
        fmt::format("{} blank, {} loop, {} malformed of {} ({} ok, {} unscreened)", num_blank,
                    num_loop, num_malformed, num_requests, num_ok, num_unscreened);
    for (const auto& e : examples)
        out += fmt::format("\n    #{} {}: {}; ends \"{}\"", e.index, verdict_name(e.verdict), e.why,
                           e.tail);
    return out;
}

std::string escaped_tail(std::string_view text, size_t max_bytes) {
    size_t begin = text.size() > max_bytes ? text.size() - max_bytes : 0;
    while (begin < text.size() && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) ++begin;
    std::string out = begin > 0 ? "..." : "";
    for (char c : text.substr(begin)) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '\n')
            out += "\\n";
        else if (c == '\r')
            out += "\\r";
        else if (c == '\t')
            out += "\\t";
        else if (c == '\\' || c == '"')
            out += std::string("\\") + c;
        else if (u < 0x20 || u == 0x7F)
            out += fmt::format("\\x{:02x}", u);
        else
            out += c;
    }
    return out;
}

}  // namespace qs::bench
