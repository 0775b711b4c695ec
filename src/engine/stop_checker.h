// StopChecker: stop strings matched on a completion's detokenized text, across token boundaries.
// Text that could still turn out to be the start of a stop string is held back, so a client never
// sees part of a stop string; when one matches, the output ends right before it (or after it,
// with include_stop_str_in_output). Used on the engine thread, one per completion.
#pragma once

#include <string>
#include <vector>

namespace qs {

class StopChecker {
public:
    StopChecker(std::vector<std::string> stops, bool include_stop) : stops_(std::move(stops)), include_(include_stop) {}

    // Adds newly decoded text; returns the text that is safe to emit now. After a match,
    // stopped() is true and matched() names the stop string; later calls return "". With
    // `match` false (before min_tokens) nothing is matched or held back.
    std::string add(const std::string& text, bool match = true);
    // End of generation for another reason: everything held back.
    std::string flush();

    bool stopped() const { return stopped_; }
    const std::string& matched() const { return matched_; }

private:
    std::vector<std::string> stops_;
    bool include_;
    std::string held_;
    bool stopped_ = false;
    std::string matched_;
};

}  // namespace qs
