// StopChecker (see stop_checker.h).
#include "engine/stop_checker.h"

#include <algorithm>

namespace qs {

std::string StopChecker::add(const std::string& text, bool match) {
    if (stopped_) return "";
    held_ += text;
    if (stops_.empty() || !match) {
        std::string out;
        out.swap(held_);
        return out;
    }
    // The earliest match of any stop string wins (ties: the longer string).
    size_t best = std::string::npos;
    const std::string* best_stop = nullptr;
    for (const auto& s : stops_) {
        const size_t pos = held_.find(s);
        if (pos != std::string::npos &&
            (pos < best || (pos == best && s.size() > best_stop->size()))) {
            best = pos;
            best_stop = &s;
        }
    }
    if (best_stop) {
        stopped_ = true;
        matched_ = *best_stop;
        std::string out = held_.substr(0, best + (include_ ? best_stop->size() : 0));
        held_.clear();
        return out;
    }
    // Hold back the longest suffix that is a proper prefix of some stop string.
    size_t keep = 0;
    for (const auto& s : stops_) {
        const size_t max_len = std::min(s.size() - 1, held_.size());
        for (size_t len = max_len; len > keep; --len)
            if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
                keep = len;
                break;
            }
    }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopChecker::flush() {
    std::string out;
    out.swap(held_);
    return out;
}

}  // namespace qs
