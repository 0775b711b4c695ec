// `eval compare A.jsonl B.jsonl`: pairs two `eval code` result files by task_id and reports the
// paired table, the exact McNemar p, the difference in pass rates with its Agresti-Min interval
// (and, with a margin, the non-inferiority verdict: B is not worse than A by more than the
// margin when the interval's lower bound is above -margin), and token usage side by side
// (totals, means, medians of completion and reasoning tokens; latency). Pure; main thread.
#pragma once

#include <string>
#include <vector>

#include "eval/code_eval.h"
#include "eval/paired_stats.h"

namespace qs::eval {

struct UsageStats {
    int64_t n = 0;
    int64_t total_completion = 0, total_reasoning = 0;
    double median_completion = 0, median_reasoning = 0, mean_completion = 0;
    double median_latency_s = 0, total_latency_s = 0;
    int64_t num_passed = 0;
};

struct Comparison {
    PairedTable table;
    double p_value = 1;
    Interval difference;  // p_B - p_A, interval at 1 - alpha
    double alpha = 0.05;
    double margin = -1;  // < 0: no non-inferiority question
    bool non_inferior = false;
    UsageStats a, b;                                        // over the paired problems
    std::vector<std::string> only_in_a, only_in_b;          // task ids not paired
    std::vector<std::string> a_only_passed, b_only_passed;  // the discordant task ids
};

// Errors: a task_id twice in one file; no problem in common.
Result<Comparison> compare_results(const std::vector<ProblemResult>& a,
                                   const std::vector<ProblemResult>& b, double alpha,
                                   double margin);

// The report as text (Markdown tables).
std::string format_comparison(const Comparison& c, const std::string& name_a,
                              const std::string& name_b);

}  // namespace qs::eval
