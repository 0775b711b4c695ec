// Paired comparison of two result files (see compare.h).
#include "eval/compare.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace qs::eval {

namespace {

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

UsageStats usage(const std::vector<const ProblemResult*>& rs) {
    UsageStats u;
    std::vector<double> comp, reas, lat;
    for (const auto* r : rs) {
        ++u.n;
        u.total_completion += r->completion_tokens;
        u.total_reasoning += r->reasoning_tokens;
        u.total_latency_s += r->latency_s;
        u.num_passed += r->passed ? 1 : 0;
        comp.push_back(double(r->completion_tokens));
        reas.push_back(double(r->reasoning_tokens));
        lat.push_back(r->latency_s);
    }
    u.median_completion = median(comp);
    u.median_reasoning = median(reas);
    u.median_latency_s = median(lat);
    u.mean_completion = u.n ? double(u.total_completion) / double(u.n) : 0;
    return u;
}

Result<std::map<std::string, const ProblemResult*>> index(const std::vector<ProblemResult>& v,
                                                          const char* which) {
    std::map<std::string, const ProblemResult*> m;
    for (const auto& r : v)
        if (!m.emplace(r.task_id, &r).second)
            return corrupt_data(fmt::format("task_id '{}' appears twice in {}", r.task_id, which));
    return m;
}

}  // namespace

Result<Comparison> compare_results(const std::vector<ProblemResult>& a,
                                   const std::vector<ProblemResult>& b, double alpha,
                                   double margin) {
    if (!(alpha > 0 && alpha < 1)) return invalid_argument("--alpha must be in (0, 1)");
    auto ia = index(a, "A");
    if (!ia.is_ok()) return ia.status();
    auto ib = index(b, "B");
    if (!ib.is_ok()) return ib.status();
    Comparison c;
    c.alpha = alpha;
    c.margin = margin;
    std::vector<const ProblemResult*> pa, pb;
    for (const auto& r : a) {  // A's order
        auto it = ib->find(r.task_id);
        if (it == ib->end()) {
            c.only_in_a.push_back(r.task_id);
            continue;
        }
        const ProblemResult& rb = *it->second;
        pa.push_back(&r);
        pb.push_back(&rb);
        if (r.passed && rb.passed)
            ++c.table.both_pass;
        else if (r.passed) {
            ++c.table.only_a;
            c.a_only_passed.push_back(r.task_id);
        } else if (rb.passed) {
            ++c.table.only_b;
            c.b_only_passed.push_back(r.task_id);
        } else
            ++c.table.both_fail;
    }
    for (const auto& r : b)
        if (!ia->count(r.task_id)) c.only_in_b.push_back(r.task_id);
    if (c.table.total() == 0) return invalid_argument("the two result files share no task_id");
    c.p_value = mcnemar_exact_p(c.table.only_a, c.table.only_b);
    c.difference = paired_difference_interval(c.table, alpha);
    c.non_inferior = margin >= 0 && c.difference.low > -margin;
    c.a = usage(pa);
    c.b = usage(pb);
    return c;
}

std::string format_comparison(const Comparison& c, const std::string& na, const std::string& nb) {
    const PairedTable& t = c.table;
    const int64_t n = t.total();
    std::string s = fmt::format("A = {}\nB = {}\n{} paired problems", na, nb, n);
    if (!c.only_in_a.empty() || !c.only_in_b.empty())
        s += fmt::format(" ({} only in A and {} only in B, left out)", c.only_in_a.size(),
                         c.only_in_b.size());
    s += "\n\n";
    s += fmt::format(
        "|          | B pass | B fail |\n|---|---:|---:|\n| A pass | {} | {} |\n"
        "| A fail | {} | {} |\n\n",
        t.both_pass, t.only_a, t.only_b, t.both_fail);
    s += fmt::format("both pass {}, only A {}, only B {}, both fail {}\n", t.both_pass, t.only_a,
                     t.only_b, t.both_fail);
    s += fmt::format("pass rate A {:.1f}% ({}/{}), B {:.1f}% ({}/{})\n", 100.0 * c.a.num_passed / n,
                     c.a.num_passed, n, 100.0 * c.b.num_passed / n, c.b.num_passed, n);
    s += fmt::format(
        "exact McNemar (two-sided, binomial on the {} discordant pairs, {} vs {}): "
        "p = {:.4g}\n",
        t.discordant(), t.only_a, t.only_b, c.p_value);
    s += fmt::format(
        "difference B - A = {:+.1f} points, {:.0f}% interval [{:+.1f}, {:+.1f}] "
        "(Agresti-Min)\n",
        100 * c.difference.estimate, 100 * (1 - c.alpha), 100 * c.difference.low,
        100 * c.difference.high);
    if (c.margin >= 0)
        s += fmt::format(
            "non-inferiority at margin {:.1f} points: {} (lower bound {:+.1f} {} "
            "{:+.1f})\n",
            100 * c.margin, c.non_inferior ? "B IS NOT WORSE" : "NOT SHOWN", 100 * c.difference.low,
            c.non_inferior ? ">" : "<=", -100 * c.margin);
    s += "\n| tokens (paired problems) | A | B | B / A |\n|---|---:|---:|---:|\n";
    auto ratio = [](double x, double y) {
        return y > 0 ? fmt::format("{:.2f}", x / y) : std::string("-");
    };
    s += fmt::format("| completion tokens, total | {} | {} | {} |\n", c.a.total_completion,
                     c.b.total_completion,
                     ratio(double(c.b.total_completion), double(c.a.total_completion)));
    s +=
        fmt::format("| completion tokens, median | {:.0f} | {:.0f} | {} |\n", c.a.median_completion,
                    c.b.median_completion, ratio(c.b.median_completion, c.a.median_completion));
    s += fmt::format("| completion tokens, mean | {:.1f} | {:.1f} | {} |\n", c.a.mean_completion,
                     c.b.mean_completion, ratio(c.b.mean_completion, c.a.mean_completion));
    s += fmt::format("| reasoning tokens, total | {} | {} | {} |\n", c.a.total_reasoning,
                     c.b.total_reasoning,
                     ratio(double(c.b.total_reasoning), double(c.a.total_reasoning)));
    s += fmt::format("| reasoning tokens, median | {:.0f} | {:.0f} | {} |\n", c.a.median_reasoning,
                     c.b.median_reasoning, ratio(c.b.median_reasoning, c.a.median_reasoning));
    s += fmt::format("| latency s, median | {:.2f} | {:.2f} | {} |\n", c.a.median_latency_s,
                     c.b.median_latency_s, ratio(c.b.median_latency_s, c.a.median_latency_s));
    auto list = [](const std::vector<std::string>& v) {
        std::string r;
        for (const auto& x : v) r += (r.empty() ? "" : ", ") + x;
        return r.empty() ? std::string("-") : r;
    };
    s += fmt::format("\nonly A passed: {}\nonly B passed: {}\n", list(c.a_only_passed),
                     list(c.b_only_passed));
    return s;
}

}  // namespace qs::eval
