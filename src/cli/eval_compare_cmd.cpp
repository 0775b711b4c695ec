// `qwenserve eval compare A.jsonl B.jsonl [--alpha 0.05 --margin M]`: the paired table, exact
// McNemar p, the difference with its interval and token usage of two `eval code` result files;
// with --margin, exit 0 when B is shown not worse than A by more than M, 1 when it is not shown.
// `qwenserve eval power --difference D [--discordance P --alpha 0.05 --power 0.8 --pass-rate P
// --max-n N]`: paired problems needed to detect D, with the assumptions printed. Main thread.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/args.h"
#include "eval/compare.h"
#include "eval/power.h"

namespace qs::cli {

int run_eval_compare(int argc, char** argv) {
    constexpr const char* kCmd = "eval compare";
    int code = 0;
    auto args = parse_command(eval_compare_spec(), argc, argv, code);
    if (!args) return code;
    if (args->positional().size() != 2)
        return fail(kCmd, invalid_argument("usage: eval compare A.jsonl B.jsonl [--alpha 0.05] "
                                           "[--margin 0.05]"));
    auto alpha = args->get_double("alpha", 0.05);
    auto margin = args->get_double("margin", -1);
    if (!alpha.is_ok()) return fail(kCmd, alpha.status());
    if (!margin.is_ok()) return fail(kCmd, margin.status());
    if (args->has("margin") && !(*margin >= 0 && *margin < 1))
        return fail(kCmd, invalid_argument("--margin must be in [0, 1) (a fraction: 0.05 = 5 "
                                           "points)"));
    const std::string& pa = args->positional()[0];
    const std::string& pb = args->positional()[1];
    auto a = eval::read_results(pa);
    if (!a.is_ok()) return fail(kCmd, a.status());
    auto b = eval::read_results(pb);
    if (!b.is_ok()) return fail(kCmd, b.status());
    auto c = eval::compare_results(*a, *b, *alpha, *margin);
    if (!c.is_ok()) return fail(kCmd, c.status());
    std::fputs(eval::format_comparison(*c, pa, pb).c_str(), stdout);
    // With a margin the exit code is the verdict, as `campaign compare`'s is.
    return c->margin >= 0 && !c->non_inferior ? 1 : 0;
}

int run_eval_power(int argc, char** argv) {
    constexpr const char* kCmd = "eval power";
    int code = 0;
    auto args = parse_command(eval_power_spec(), argc, argv, code);
    if (!args) return code;
    eval::PowerQuestion q;
    auto d = args->get_double("difference", q.delta);
    auto psi = args->get_double("discordance", q.discordance);
    auto alpha = args->get_double("alpha", q.alpha);
    auto power = args->get_double("power", q.power);
    auto rate = args->get_double("pass-rate", -1);
    auto max_n = args->get_int("max-n", -1);
    for (const Status* s : {&d.status(), &psi.status(), &alpha.status(), &power.status(),
                            &rate.status(), &max_n.status()})
        if (!s->is_ok()) return fail(kCmd, *s);
    q.delta = *d;
    q.alpha = *alpha;
    q.power = *power;
    q.discordance = *psi;
    std::string psi_origin = args->has("discordance") ? "given" : "default";
    if (!args->has("discordance") && args->has("pass-rate")) {
        // Independent errors: A at p, B at p + delta disagree with probability
        // p (1 - p - delta) + (p + delta)(1 - p). Correlated configurations disagree less.
        const double p = *rate, pb = p + q.delta;
        if (!(p >= 0 && p <= 1 && pb >= 0 && pb <= 1))
            return fail(kCmd, invalid_argument("--pass-rate and --pass-rate + --difference must "
                                               "lie in [0, 1]"));
        q.discordance = p * (1 - pb) + pb * (1 - p);
        psi_origin = fmt::format("pass rates {:.2f} and {:.2f} with independent errors", p, pb);
    }
    Status v = eval::validate(q);
    if (!v.is_ok()) return fail(kCmd, v);
    const double ad = std::fabs(q.delta);
    const int64_t connor = eval::connor_sample_size(q);
    const int64_t bound = *max_n > 0 ? *max_n : std::max<int64_t>(2 * connor + 100, 400);
    auto exact = eval::exact_sample_size(q, bound);

    std::printf("Paired problems needed to detect a difference of %.1f points in pass rate\n",
                100 * ad);
    std::printf("\nAssumptions:\n");
    std::printf(
        "  - the same problems run under A and B (paired), outcomes independent across "
        "problems;\n");
    std::printf("  - the test is the two-sided exact McNemar test at alpha = %.3g;\n", q.alpha);
    std::printf("  - power %.0f%% to detect |p_B - p_A| = %.3f;\n", 100 * q.power, ad);
    std::printf(
        "  - discordance psi = P(A and B disagree on a problem) = %.4f (%s):\n"
        "    p10 = (psi + d)/2 = %.4f of problems pass only under the better, "
        "p01 = (psi - d)/2 = %.4f only under the other.\n"
        "    The answer grows with psi: measure it from a pilot (`eval compare` prints "
        "the discordant pairs).\n",
        q.discordance, psi_origin.c_str(), (q.discordance + ad) / 2, (q.discordance - ad) / 2);
    std::printf("\nConnor (1987) normal approximation: n = %lld\n", (long long)connor);
    if (exact.first > 0)
        std::printf(
            "exact (binomial enumeration): first n with power >= %.2f: %lld (power "
            "%.4f); every n >= %lld up to %lld has it\n",
            q.power, (long long)exact.first, eval::exact_mcnemar_power(q, exact.first),
            (long long)exact.stable, (long long)exact.bound);
    else
        std::printf(
            "exact (binomial enumeration): power %.2f not reached up to n = %lld "
            "(--max-n)\n",
            q.power, (long long)exact.bound);
    std::printf("\n| discordance psi | Connor n |\n|---:|---:|\n");
    for (double p : {ad, 0.15, 0.20, 0.25, 0.28, 0.30, 0.35, 0.40, 0.50}) {
        eval::PowerQuestion t = q;
        t.discordance = p;
        if (!eval::validate(t).is_ok()) continue;
        std::printf("| %.2f | %lld |\n", p, (long long)eval::connor_sample_size(t));
    }
    return 0;
}

}  // namespace qs::cli
