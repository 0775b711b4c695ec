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
// Usage: build/bench/grammar_mask_bench [--tokenizer DIR] [--threads T] [--reps 10] [--walk 24]
//            [--schema S]  (another JSON schema, as JSON text, instead of the built-in one)
//            [--regex R]   (a regex grammar instead of the JSON schema, e.g. "[a-z ]+")
//            [--ebnf G]    (an xgrammar EBNF grammar instead, e.g. 'root ::= [a-z ]+')
//            [--rows 1,8,32,128,512]
// "gain" is (a) over (c).
#include <algorithm>
#include <bit>
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

}  // namespace

int main(int argc, char** argv) {
    auto args = Args::parse(argc, argv, {}, {"tokenizer", "threads", "reps", "walk", "schema", "regex", "ebnf", "rows"});
    if (!args.is_ok()) {
        std::fprintf(stderr, "%s\n", args.status().message().c_str());
        return 2;
    }
    const std::string path = args->get_or("tokenizer", "../shared/data/tokenizers/qwen3");
    auto threads_arg = args->get_int("threads", int64_t(std::min(16u, std::max(1u, std::thread::hardware_concurrency()))));
    auto reps_arg = args->get_int("reps", 10), walk_arg = args->get_int("walk", 24);
    if (!threads_arg.is_ok() || !reps_arg.is_ok() || !walk_arg.is_ok() || *threads_arg < 1 || *reps_arg < 1 ||
        *walk_arg < 0) {
        std::fprintf(stderr, "grammar_mask_bench: --threads, --reps take positive integers, --walk >= 0\n");
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
    grammar::GrammarCompiler compiler(grammar::grammar_vocab_from_tokenizer(**tokenizer, V, stops, true));
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
    std::printf("grammar_mask_bench: tokenizer %s (%d ids), %s compiled in %.1f ms, %d threads "
                "(hardware %u), walk %lld tokens, best of %d\n",
                path.c_str(), V, label.c_str(), compile_ms, threads, std::thread::hardware_concurrency(),
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
                int64_t pick = int64_t(rng() % uint64_t(n));  // the pick-th allowed token
                int32_t token = -1;
                for (int64_t w = 0; w < W && token < 0; ++w) {
                    const int c = std::popcount(scratch[size_t(w)]);
                    if (pick >= c) {
                        pick -= c;
                        continue;
                    }
                    for (int b = 0; b < 32; ++b)
                        if (((scratch[size_t(w)] >> b) & 1u) && pick-- == 0) {
                            token = int32_t(w * 32 + b);
                            break;
                        }
                }
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
    return 0;
}
