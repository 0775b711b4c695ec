// Grammar mask fill per step: the masks of `rows` constrained sequences over a real tokenizer's
// vocabulary, filled (a) one after the other from the grammar as xgrammar's own entry point
// compiles it (GrammarCompiler::compile_reference: CompileJSONSchema / CompileRegex, the engine
// before the rewrites of grammar_compiler.cpp and repetition_automaton.cpp), (b) one after the other from GrammarCompiler::compile's grammar, and
// (c) by grammar::BitmaskFiller on T threads (what the engine does). Each row is a matcher
// advanced by its own random walk of allowed tokens (so rows sit in different states: inside
// strings, numbers, between keys), as a batch of independent requests would; a reference
// matcher walks the same tokens. The bench fails unless every mask of compile()'s grammar, at
// every walk step and after the fills, equals the reference's, and the parallel fill equals the
// serial one. Prints rows × best-of-reps milliseconds. A benchmark, never a test.
// With --steps S, then S engine steps at the largest row count (step_bench below): the host's
// grammar work per step the old way (each drawn token accepted on the engine thread, one row
// after the other, then the masks filled on T threads) against the new (the accepts deferred
// into the parallel fill: GrammarMatcher::accept_later), every mask of the two compared; and the
// host passes over the step's bitmask that the engine and the CUDA sampler no longer make.
// Usage: build/bench/grammar_mask_bench [--tokenizer DIR] [--threads T] [--reps 10] [--walk 24]
//            [--schema S]  (another JSON schema, as JSON text, instead of the built-in one)
//            [--regex R]   (a regex grammar instead of the JSON schema, e.g. "[a-z ]+")
//            [--ebnf G]    (an xgrammar EBNF grammar instead, e.g. 'root ::= [a-z ]+')
//            [--rows 1,8,32,128,512] [--steps 0] [--seed 1]
//            [--compile-threads 2]  (xgrammar's threads for the compile; the server uses 2)
// "gain" is (a) over (c).
#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backend/sampling.h"
#include "core/args.h"
#include "core/timer.h"
#include "grammar/bitmask_filler.h"
#include "grammar/grammar_compiler.h"
#include "grammar/grammar_vocab.h"
#include "tokenizer/tokenizer.h"

using namespace qs;

namespace {

constexpr const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string", "minLength": 1, "maxLength": 40},
  "age": {"type": "integer", "minimum": 0, "maximum": 150},
  "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"},
  "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 4},
  "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
              "required": ["city", "zip"]}},
  "required": ["name", "age", "email", "tags", "address"]})";

double best_ms(int reps, const std::function<void()>& fn) {
    double best = 1e300;
    for (int r = 0; r < reps; ++r) {
        Timer t;
        fn();
        best = std::min(best, t.elapsed_s() * 1e3);
    }
    return best;
}

// The pick-th allowed token of a mask, or -1.
int32_t nth_allowed(const uint32_t* words, int64_t W, int64_t pick) {
    for (int64_t w = 0; w < W; ++w) {
        const int c = std::popcount(words[w]);
        if (pick >= c) {
            pick -= c;
            continue;
        }
        for (int b = 0; b < 32; ++b)
            if (((words[w] >> b) & 1u) && pick-- == 0) return int32_t(w * 32 + b);
    }
    return -1;
}

// `steps` decode steps of `rows` sequences of one grammar, as the engine runs them. Each step
// draws for every row a random allowed token that is not a stop token (a row whose grammar
// allows only stop tokens starts over, as a new request), then: old, the engine thread accepts
// the rows' tokens one after the other, then the next masks are filled on the pool; new, each
// row's token is deferred (accept_later) and the fill accepts it on the pool beside the row's
// mask. The masks of the two must be equal at every step (returns false when not). Prints the
// mean ms per step of each part, then the host passes over the step's bitmask rows that the
// engine and the CUDA sampler made before (zeroing the rows on resize, counting each row for
// min_tokens, packing them into the upload buffer: a zeroing resize and a copy).
bool step_bench(const std::shared_ptr<const grammar::CompiledGrammar>& g, const std::vector<int32_t>& stops,
                int64_t rows, int steps, int threads, uint32_t seed) {
    const int64_t W = bitmask_words(g->vocab_size());
    std::mt19937 rng(seed);
    std::vector<std::unique_ptr<grammar::GrammarMatcher>> old_m, new_m;
    for (int64_t r = 0; r < rows; ++r) {
        old_m.push_back(std::make_unique<grammar::GrammarMatcher>(g, stops));
        new_m.push_back(std::make_unique<grammar::GrammarMatcher>(g, stops));
    }
    std::vector<uint32_t> old_words(size_t(rows * W)), new_words(old_words.size());
    std::vector<grammar::MaskJob> old_jobs, new_jobs;
    auto jobs_of = [&](std::vector<std::unique_ptr<grammar::GrammarMatcher>>& m, std::vector<uint32_t>& words,
                       std::vector<grammar::MaskJob>& jobs) {
        jobs.clear();
        for (int64_t r = 0; r < rows; ++r) jobs.push_back({m[size_t(r)].get(), words.data() + r * W, 0});
    };
    grammar::BitmaskFiller pool(threads);
    jobs_of(old_m, old_words, old_jobs);
    jobs_of(new_m, new_words, new_jobs);
    pool.fill(old_jobs);
    pool.fill(new_jobs);
    double accept_ms = 0, old_fill_ms = 0, new_fill_ms = 0;
    int64_t restarts = 0, accepted = 0;
    std::vector<int32_t> tokens(static_cast<size_t>(rows), -1);
    for (int step = 0; step < steps; ++step) {
        if (old_words != new_words) {
            std::fprintf(stderr, "grammar_mask_bench: step %d: the deferred accepts' masks differ\n", step);
            return false;
        }
        for (int64_t r = 0; r < rows; ++r) {
            // A random allowed token other than a stop token (the rows keep going, as min_tokens does).
            const uint32_t* m = old_words.data() + r * W;
            std::vector<int32_t> allowed;
            for (int64_t w = 0; w < W; ++w)
                for (uint32_t bits = m[w]; bits; bits &= bits - 1) {
                    const int32_t t = int32_t(w * 32 + std::countr_zero(bits));
                    if (std::find(stops.begin(), stops.end(), t) == stops.end()) allowed.push_back(t);
                }
            tokens[size_t(r)] = allowed.empty() ? -1 : allowed[rng() % allowed.size()];
        }
        Timer ta;
        for (int64_t r = 0; r < rows; ++r)
            if (tokens[size_t(r)] >= 0 && !old_m[size_t(r)]->accept(tokens[size_t(r)])) {
                std::fprintf(stderr, "grammar_mask_bench: the matcher refused a token its mask allowed\n");
                return false;
            }
        accept_ms += ta.elapsed_s() * 1e3;
        for (int64_t r = 0; r < rows; ++r) {
            if (tokens[size_t(r)] >= 0) {
                new_m[size_t(r)]->accept_later(tokens[size_t(r)]);
                ++accepted;
                continue;
            }
            old_m[size_t(r)] = std::make_unique<grammar::GrammarMatcher>(g, stops);  // only stops left
            new_m[size_t(r)] = std::make_unique<grammar::GrammarMatcher>(g, stops);
            ++restarts;
        }
        jobs_of(old_m, old_words, old_jobs);
        jobs_of(new_m, new_words, new_jobs);
        Timer tf;
        pool.fill(old_jobs);
        old_fill_ms += tf.elapsed_s() * 1e3;
        Timer tn;
        pool.fill(new_jobs);
        new_fill_ms += tn.elapsed_s() * 1e3;
        for (size_t r = 0; r < new_jobs.size(); ++r)
            if (new_jobs[r].num_allowed != old_jobs[r].num_allowed || new_jobs[r].num_allowed == 0) {
                std::fprintf(stderr, "grammar_mask_bench: step %d row %zu: counts %lld / %lld\n", step, r,
                             (long long)old_jobs[r].num_allowed, (long long)new_jobs[r].num_allowed);
                return false;
            }
    }
    if (old_words != new_words) {
        std::fprintf(stderr, "grammar_mask_bench: the deferred accepts' last masks differ\n");
        return false;
    }
    const double n = double(steps);
    std::printf("\nsteps: %d steps of %lld rows, %d threads (%lld tokens accepted, %lld rows started over); "
                "ms per step, masks of both routes equal at every step\n",
                steps, (long long)rows, threads, (long long)accepted, (long long)restarts);
    std::printf("| route | accepts on the engine thread | fill on %d threads | host grammar work per step |\n"
                "|---|---|---|---|\n", threads);
    std::printf("| old: accept serially, then fill | %.3f | %.3f | %.3f |\n", accept_ms / n, old_fill_ms / n,
                (accept_ms + old_fill_ms) / n);
    std::printf("| new: accept_later, accept + fill on the pool | 0 | %.3f | %.3f |\n", new_fill_ms / n, new_fill_ms / n);
    // The passes over the step's rows x W words that the old code made on the engine thread.
    std::vector<uint32_t> grow;
    std::vector<char> pack;
    const size_t bytes = old_words.size() * sizeof(uint32_t);
    grow.reserve(old_words.size());
    pack.reserve(bytes);
    const double zero_ms = best_ms(5, [&] {
        grow.clear();
        for (int64_t r = 0; r < rows; ++r) grow.resize(grow.size() + size_t(W));  // value-initialised: zeroed
    });
    int64_t total = 0;
    const double count_ms = best_ms(5, [&] {
        for (uint32_t w : old_words) total += std::popcount(w);
    });
    const double pack_ms = best_ms(5, [&] {
        pack.clear();
        pack.resize(bytes);  // zeroed
        std::memcpy(pack.data(), old_words.data(), bytes);
    });
    std::printf("removed host passes over the step's %.1f MB of masks (engine thread, best of 5): zeroing resize "
                "%.3f ms, min_tokens counts %.3f ms, packing for the upload %.3f ms (sum %.3f; %lld bits)\n",
                double(bytes) / 1e6, zero_ms, count_ms, pack_ms, zero_ms + count_ms + pack_ms, (long long)(total / 5));
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    auto args = Args::parse(argc, argv, {}, {"tokenizer", "threads", "reps", "walk", "schema", "regex", "ebnf", "rows", "steps", "seed", "compile-threads"});
    if (!args.is_ok()) {
        std::fprintf(stderr, "%s\n", args.status().message().c_str());
        return 2;
    }
    const std::string path = args->get_or("tokenizer", "../shared/data/tokenizers/qwen3");
    auto threads_arg = args->get_int("threads", int64_t(std::min(16u, std::max(1u, std::thread::hardware_concurrency()))));
    auto reps_arg = args->get_int("reps", 10), walk_arg = args->get_int("walk", 24);
    auto steps_arg = args->get_int("steps", 0), seed_arg = args->get_int("seed", 1);
    auto compile_threads_arg = args->get_int("compile-threads", grammar::GrammarCompiler::kDefaultCompileThreads);
    if (!threads_arg.is_ok() || !reps_arg.is_ok() || !walk_arg.is_ok() || !steps_arg.is_ok() || !seed_arg.is_ok() ||
        !compile_threads_arg.is_ok() || *threads_arg < 1 || *reps_arg < 1 || *walk_arg < 0 || *steps_arg < 0 ||
        *seed_arg < 0 || *compile_threads_arg < 1) {
        std::fprintf(stderr, "grammar_mask_bench: --threads, --reps, --compile-threads take positive integers, "
                             "--walk, --steps and --seed integers >= 0\n");
        return 2;
    }
    auto tokenizer = tok::Tokenizer::from_path(path);
    if (!tokenizer.is_ok()) {
        std::fprintf(stderr, "grammar_mask_bench: %s\n", tokenizer.status().message().c_str());
        return 1;
    }
    const int32_t V = (*tokenizer)->vocab_size();
    std::vector<int32_t> stops;
    if (auto e = (*tokenizer)->eos_token_id()) stops.push_back(*e);
    grammar::GrammarCompiler compiler(grammar::grammar_vocab_from_tokenizer(**tokenizer, V, stops, true),
                                      int(*compile_threads_arg));
    grammar::GrammarSpec spec;
    spec.kind = args->has("regex") ? grammar::GrammarSpec::Kind::kRegex : grammar::GrammarSpec::Kind::kJsonSchema;
    spec.text = args->has("regex") ? args->get_or("regex", "") : args->get_or("schema", kSchema);
    if (args->has("ebnf")) {
        spec.kind = grammar::GrammarSpec::Kind::kGrammar;
        spec.text = args->get_or("ebnf", "");
    }
    Timer tc;
    auto compiled = compiler.compile(spec);
    if (!compiled.is_ok()) {
        std::fprintf(stderr, "grammar_mask_bench: %s\n", compiled.status().message().c_str());
        return 1;
    }
    const double compile_ms = tc.elapsed_s() * 1e3;
    // What every later request with the same spec pays on a server worker (under the compiler's
    // lock): xgrammar's cache answers, but after the spec's conversion.
    const double again_ms = best_ms(5, [&] {
        if (!compiler.compile(spec).is_ok()) std::abort();
    });
    auto reference = compiler.compile_reference(spec);
    if (!reference.is_ok()) {
        std::fprintf(stderr, "grammar_mask_bench: reference: %s\n", reference.status().message().c_str());
        return 1;
    }
    std::vector<int64_t> row_counts;
    {
        std::stringstream in(args->get_or("rows", "1,8,32,128,512"));
        for (std::string item; std::getline(in, item, ',');) {
            const int64_t n = std::atoll(item.c_str());
            if (n < 1) {
                std::fprintf(stderr, "grammar_mask_bench: --rows takes positive integers, comma-separated\n");
                return 2;
            }
            row_counts.push_back(n);
        }
    }
    const std::string label = args->has("ebnf")    ? "EBNF " + spec.text
                              : args->has("regex") ? "regex " + spec.text
                              : args->has("schema") ? std::string("JSON schema (--schema)")
                                                    : std::string("JSON schema (built-in, 5 properties)");
    const int64_t W = bitmask_words(V);
    const int threads = int(*threads_arg), reps = int(*reps_arg);
    std::printf("grammar_mask_bench: tokenizer %s (%d ids), %s compiled in %.1f ms on %d threads (again, cached: "
                "%.3f ms), %d threads (hardware %u), walk %lld tokens, best of %d\n",
                path.c_str(), V, label.c_str(), compile_ms, int(*compile_threads_arg), again_ms, threads,
                std::thread::hardware_concurrency(),
                (long long)*walk_arg, reps);
    std::printf("| rows | xgrammar route serial ms | serial ms | %d threads ms | gain | serial us/row |\n"
                "|---|---|---|---|---|---|\n",
                threads);
    grammar::BitmaskFiller serial(1), pool(threads);
    std::vector<uint32_t> ref_words(static_cast<size_t>(W));
    int64_t compared = 0;
    const auto same_as_reference = [&](grammar::GrammarMatcher& ref, const uint32_t* words) {
        ref.fill_next_bitmask(ref_words.data());
        ++compared;
        return std::equal(ref_words.begin(), ref_words.end(), words);
    };
    for (int64_t rows : row_counts) {
        std::mt19937 rng(static_cast<uint32_t>(rows));
        std::vector<std::unique_ptr<grammar::GrammarMatcher>> matchers, refs;
        std::vector<uint32_t> words(size_t(rows * W));
        std::vector<uint32_t> scratch(static_cast<size_t>(W));
        for (int64_t r = 0; r < rows; ++r) {
            auto m = std::make_unique<grammar::GrammarMatcher>(compiled.value(), stops);
            auto ref = std::make_unique<grammar::GrammarMatcher>(reference.value(), stops);
            const int64_t steps = int64_t(rng() % uint32_t(*walk_arg + 1));
            for (int64_t k = 0; k < steps; ++k) {
                const int64_t n = m->fill_next_bitmask(scratch.data());
                if (!same_as_reference(*ref, scratch.data())) {
                    std::fprintf(stderr, "grammar_mask_bench: row %lld step %lld: the mask differs from the reference\n",
                                 (long long)r, (long long)k);
                    return 1;
                }
                if (n == 0) break;
                const int32_t token = nth_allowed(scratch.data(), W, int64_t(rng() % uint64_t(n)));
                if (token < 0 || std::find(stops.begin(), stops.end(), token) != stops.end()) break;
                m->accept(token);
                ref->accept(token);
            }
            matchers.push_back(std::move(m));
            refs.push_back(std::move(ref));
        }
        std::vector<grammar::MaskJob> jobs;
        for (int64_t r = 0; r < rows; ++r) jobs.push_back({matchers[size_t(r)].get(), words.data() + r * W, 0});
        std::vector<grammar::MaskJob> ref_jobs;
        std::vector<uint32_t> ref_rows(words.size());
        for (int64_t r = 0; r < rows; ++r) ref_jobs.push_back({refs[size_t(r)].get(), ref_rows.data() + r * W, 0});
        const double ms_reference = best_ms(reps, [&] { serial.fill(ref_jobs); });
        const double ms_serial = best_ms(reps, [&] { serial.fill(jobs); });
        if (words != ref_rows) {
            std::fprintf(stderr, "grammar_mask_bench: the masks differ from the reference's\n");
            return 1;
        }
        compared += rows;
        const std::vector<uint32_t> serial_words = words;
        const double ms_pool = best_ms(reps, [&] { pool.fill(jobs); });
        if (words != serial_words) {
            std::fprintf(stderr, "grammar_mask_bench: the parallel masks differ from the serial ones\n");
            return 1;
        }
        std::printf("| %lld | %.3f | %.3f | %.3f | %.1fx | %.1f |\n", (long long)rows, ms_reference, ms_serial, ms_pool,
                    ms_reference / ms_pool, ms_serial * 1e3 / double(rows));
    }
    std::printf("%lld masks equal to the reference's\n", (long long)compared);
    if (*steps_arg > 0 && !step_bench(compiled.value(), stops, *std::max_element(row_counts.begin(), row_counts.end()),
                                      int(*steps_arg), threads, uint32_t(*seed_arg)))
        return 1;
    return 0;
}
