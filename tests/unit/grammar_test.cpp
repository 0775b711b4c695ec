// src/grammar (structured outputs over xgrammar) on a synthetic byte vocabulary: masks allow
// exactly the continuations the grammar permits (checked against outputs built byte by byte and
// parsed independently: nlohmann for JSON, std::regex for regexes), stop tokens only where the
// grammar is complete, compile errors and unsupported schema features as errors (also when the
// same spec comes again, after xgrammar cached it), tool-call grammars, forks, and the
// vocabulary built from the trained model's tokenizer.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "backend/sampling.h"
#include "grammar/grammar_compiler.h"
#include "grammar/bitmask_filler.h"
#include "grammar/grammar_matcher.h"
#include "grammar/repetition_automaton.h"
#include "grammar/structural_tag.h"
#include "grammar/tool_call_grammar.h"
#include "tokenizer/tokenizer.h"

using namespace qs;
using namespace qs::grammar;

namespace {

// Ids 0..255: one byte each; 256..259: multi-byte tokens; 260: a special token; 261: EOS
// (stop). The model's vocabulary is wider (270): ids 262..269 are padding.
constexpr int32_t kEos = 261;
constexpr int32_t kSpecial = 260;
constexpr int32_t kV = 270;

GrammarVocab byte_vocab() {
    GrammarVocab v;
    for (int b = 0; b < 256; ++b) v.tokens.push_back(std::string(1, char(b)));
    for (const char* t : {"{\"", "\": ", "true", "null"}) v.tokens.push_back(t);
    v.tokens.push_back("");  // special
    v.tokens.push_back("");  // EOS
    v.vocab_size = kV;
    v.stop_token_ids = {kEos};
    return v;
}

const GrammarCompiler& compiler() {
    static GrammarCompiler c(byte_vocab());
    return c;
}

std::shared_ptr<const CompiledGrammar> must_compile(const GrammarSpec& s) {
    auto r = compiler().compile(s);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? r.value() : nullptr;
}

GrammarSpec spec(GrammarSpec::Kind kind, std::string text) {
    GrammarSpec s;
    s.kind = kind;
    s.text = std::move(text);
    return s;
}

std::vector<uint32_t> mask_of(GrammarMatcher& m) {
    std::vector<uint32_t> w(size_t(bitmask_words(kV)));
    m.fill_next_bitmask(w.data());
    return w;
}

// Feeds `text` byte by byte; every byte must be allowed by the mask before it and accepted.
bool feed(GrammarMatcher& m, const std::string& text) {
    for (size_t i = 0; i < text.size(); ++i) {
        const unsigned char c = text[i];
        const auto w = mask_of(m);
        EXPECT_TRUE(bitmask_allows(w.data(), c)) << "byte " << i << " '" << c << "' refused in " << text;
        if (!m.accept(c)) return false;
    }
    return true;
}

bool can_stop(GrammarMatcher& m) { return bitmask_allows(mask_of(m).data(), kEos); }

// A random walk over the mask: allowed tokens, stopping when the stop token is allowed with
// probability 1/3, else up to `max_len` tokens. The walk takes printable ASCII only (the byte
// tokens above 0x7f would test xgrammar's UTF-8 handling against the JSON parser's, not the
// grammar) and no exponent after a digit (a random exponent overflows a double).
std::string random_output(GrammarMatcher& m, std::mt19937& rng, int max_len, bool* stopped) {
    std::string out;
    *stopped = false;
    for (int i = 0; i < max_len; ++i) {
        const auto w = mask_of(m);
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < kV; ++t)
            if (bitmask_allows(w.data(), t)) allowed.push_back(t);
        EXPECT_FALSE(allowed.empty());
        for (int32_t t : allowed) {
            EXPECT_NE(t, kSpecial) << "a special token is never allowed";
            EXPECT_LT(t, 262) << "padding ids are never allowed";
        }
        const bool can_stop = std::find(allowed.begin(), allowed.end(), kEos) != allowed.end();
        if (can_stop && (allowed.size() == 1 || rng() % 3 == 0)) {
            EXPECT_TRUE(m.accept(kEos));
            EXPECT_TRUE(m.terminated());
            *stopped = true;
            return out;
        }
        std::vector<int32_t> pick;
        const bool after_digit = !out.empty() && (std::isdigit((unsigned char)out.back()) || out.back() == '.');
        for (int32_t t : allowed)
            if (t != kEos && (t >= 256 || (t >= 0x20 && t < 0x7f) || t == '\n') &&
                !(after_digit && (t == 'e' || t == 'E')))
                pick.push_back(t);
        if (pick.empty()) return out;  // only bytes this walk does not take
        const int32_t t = pick[rng() % pick.size()];
        EXPECT_TRUE(m.accept(t));
        out += byte_vocab().tokens[size_t(t)];
    }
    return out;
}

}  // namespace

TEST(Grammar, JsonSchemaMaskAllowsExactlyTheValidBytes) {
    auto g = must_compile(spec(GrammarSpec::Kind::kJsonSchema,
                               R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"));
    ASSERT_TRUE(g);
    EXPECT_EQ(g->vocab_size(), kV);
    GrammarMatcher m(g, {kEos});
    auto w = mask_of(m);
    EXPECT_TRUE(bitmask_allows(w.data(), '{'));
    EXPECT_FALSE(bitmask_allows(w.data(), '['));
    EXPECT_FALSE(bitmask_allows(w.data(), kEos)) << "nothing written yet: the grammar is not complete";
    EXPECT_FALSE(m.accept('x'));  // refused, state unchanged
    EXPECT_TRUE(feed(m, "{\"a\": 12"));
    w = mask_of(m);
    EXPECT_FALSE(bitmask_allows(w.data(), 'x'));
    EXPECT_FALSE(bitmask_allows(w.data(), kEos));
    EXPECT_TRUE(feed(m, "}"));
    EXPECT_TRUE(can_stop(m));
    EXPECT_FALSE(m.terminated());
    EXPECT_TRUE(m.accept(kEos));
    EXPECT_TRUE(m.terminated());
    std::vector<uint32_t> none(size_t(bitmask_words(kV)));
    EXPECT_EQ(m.fill_next_bitmask(none.data()), 0) << "a terminated matcher allows nothing";
}

TEST(Grammar, RandomWalksProduceValidJson) {
    const char* schemas[] = {
        R"({"type":"object","properties":{"name":{"type":"string","maxLength":5},"n":{"type":"integer","minimum":-3,"maximum":40}},"required":["name","n"]})",
        R"({"type":"array","items":{"enum":["x","y",1,null]},"minItems":1,"maxItems":3})",
        R"({"type":"object","properties":{"b":{"type":"boolean"},"o":{"type":"object","properties":{"z":{"type":"number"}},"required":["z"]}},"required":["b","o"]})",
    };
    std::mt19937 rng(3);
    for (const char* schema : schemas) {
        auto g = must_compile(spec(GrammarSpec::Kind::kJsonSchema, schema));
        ASSERT_TRUE(g);
        int stopped_count = 0;
        for (int trial = 0; trial < 30; ++trial) {
            GrammarMatcher m(g, {kEos});
            bool stopped = false;
            const std::string out = random_output(m, rng, 400, &stopped);
            if (!stopped) continue;
            ++stopped_count;
            const auto j = nlohmann::json::parse(out, nullptr, false);
            ASSERT_FALSE(j.is_discarded()) << schema << ": " << out;
            const auto s = nlohmann::json::parse(schema);
            if (s["type"] == "object") {
                ASSERT_TRUE(j.is_object()) << out;
                for (const auto& r : s["required"]) EXPECT_TRUE(j.contains(r.get<std::string>())) << out;
                if (j.contains("n")) {
                    EXPECT_GE(j["n"].get<int>(), -3) << out;
                    EXPECT_LE(j["n"].get<int>(), 40) << out;
                }
                if (j.contains("name")) {
                    EXPECT_LE(j["name"].get<std::string>().size(), 5u) << out;
                }
            } else {
                ASSERT_TRUE(j.is_array()) << out;
                EXPECT_GE(j.size(), 1u);
                EXPECT_LE(j.size(), 3u);
            }
        }
        EXPECT_GT(stopped_count, 5) << schema;
    }
}

TEST(Grammar, JsonObjectRegexChoiceAndEbnf) {
    std::mt19937 rng(5);
    auto obj = must_compile(spec(GrammarSpec::Kind::kJsonObject, ""));
    auto re = must_compile(spec(GrammarSpec::Kind::kRegex, "[a-c]{2,4}-[0-9]+"));
    GrammarSpec ch = spec(GrammarSpec::Kind::kChoice, "");
    ch.choices = {"yes", "no", "it \"depends\"\n\\"};
    auto choice = must_compile(ch);
    auto ebnf = must_compile(spec(GrammarSpec::Kind::kGrammar, R"g(root ::= "(" [0-9]+ ("+" [0-9]+)* ")")g"));
    auto lark = must_compile(spec(GrammarSpec::Kind::kGrammar, "start: \"<\" NAME \">\"\nNAME: /[a-z]+/\n"));
    ASSERT_TRUE(obj && re && choice && ebnf && lark);
    const std::regex re_want("[a-c]{2,4}-[0-9]+"), ebnf_want("\\([0-9]+(\\+[0-9]+)*\\)"), lark_want("<[a-z]+>");
    for (int trial = 0; trial < 40; ++trial) {
        bool stopped = false;
        GrammarMatcher m1(obj, {kEos});
        std::string out = random_output(m1, rng, 300, &stopped);
        if (stopped) {
            const auto j = nlohmann::json::parse(out, nullptr, false);
            EXPECT_TRUE(!j.is_discarded() && j.is_object()) << out;
        }
        GrammarMatcher m2(re, {kEos});
        out = random_output(m2, rng, 100, &stopped);
        if (stopped) {
            EXPECT_TRUE(std::regex_match(out, re_want)) << out;
        }
        GrammarMatcher m3(choice, {kEos});
        out = random_output(m3, rng, 100, &stopped);
        EXPECT_TRUE(stopped);
        EXPECT_TRUE(std::find(ch.choices.begin(), ch.choices.end(), out) != ch.choices.end()) << out;
        GrammarMatcher m4(ebnf, {kEos});
        out = random_output(m4, rng, 100, &stopped);
        if (stopped) {
            EXPECT_TRUE(std::regex_match(out, ebnf_want)) << out;
        }
        GrammarMatcher m5(lark, {kEos});
        out = random_output(m5, rng, 100, &stopped);
        if (stopped) {
            EXPECT_TRUE(std::regex_match(out, lark_want)) << out;
        }
    }
}

TEST(Grammar, ErrorsNameTheProblem) {
    struct Case {
        GrammarSpec spec;
        const char* needle;
    };
    GrammarSpec empty_choice = spec(GrammarSpec::Kind::kChoice, "");
    const Case cases[] = {
        {spec(GrammarSpec::Kind::kJsonSchema, R"({"type":"object","not":{"type":"string"}})"), "'not' at /"},
        {spec(GrammarSpec::Kind::kJsonSchema, R"({"type":"object","properties":{"a":{"type":"array","uniqueItems":true}}})"),
         "'uniqueItems' at /properties/a"},
        {spec(GrammarSpec::Kind::kJsonSchema, R"({"$defs":{"x":{"if":{"type":"string"}}},"$ref":"#/$defs/x"})"),
         "'if' at /$defs/x"},
        {spec(GrammarSpec::Kind::kJsonSchema, R"({"type":"array","items":[{"type":"string"}]})"), "prefixItems"},
        {spec(GrammarSpec::Kind::kJsonSchema, R"({"allOf":[{"type":"object"},{"required":["a"]}]})"), "allOf"},
        {spec(GrammarSpec::Kind::kJsonSchema, R"({"type":"number","multipleOf":0.5})"), "multipleOf"},
        {spec(GrammarSpec::Kind::kJsonSchema, R"({"type":"integer","minimum":5,"maximum":1})"), "json_schema"},
        {spec(GrammarSpec::Kind::kJsonSchema, R"({"$ref":"#/$defs/missing"})"), "json_schema"},
        {spec(GrammarSpec::Kind::kJsonSchema, "{not json"), "json_schema"},
        {spec(GrammarSpec::Kind::kRegex, "(ab"), "regex"},
        {spec(GrammarSpec::Kind::kGrammar, "root ::= \"a\" | "), "grammar"},
        {spec(GrammarSpec::Kind::kGrammar, "root ::= other"), "grammar"},
        {empty_choice, "choice"},
    };
    for (const Case& c : cases)
        for (int attempt = 0; attempt < 2; ++attempt) {  // the second time xgrammar may have it cached
            auto r = compiler().compile(c.spec);
            ASSERT_FALSE(r.is_ok()) << c.spec.text << " (attempt " << attempt << ")";
            EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidArgument);
            EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
        }
}

TEST(Grammar, ForkContinuesFromTheSameState) {
    auto g = must_compile(spec(GrammarSpec::Kind::kRegex, "ab(c|d)"));
    ASSERT_TRUE(g);
    GrammarMatcher m(g, {kEos});
    EXPECT_TRUE(feed(m, "a"));
    EXPECT_FALSE(can_stop(m));
    auto f = m.fork();
    EXPECT_TRUE(m.accept('b') && m.accept('c'));
    EXPECT_TRUE(f->accept('b'));
    EXPECT_FALSE(f->accept('e'));
    EXPECT_TRUE(f->accept('d'));
    EXPECT_TRUE(can_stop(*f));
}

TEST(Grammar, ToolCallGrammarsFollowTheQwenXmlSyntax) {
    const auto tools = nlohmann::ordered_json::parse(R"([
        {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
          "properties":{"city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7}},
          "required":["city","days"]}}},
        {"type":"function","function":{"name":"now"}}])");
    auto missing = tool_call_grammar(tools, "nope", true);
    ASSERT_FALSE(missing.is_ok());
    EXPECT_NE(missing.status().message().find("nope"), std::string::npos);

    auto named = tool_call_grammar(tools, "get_weather", true);
    ASSERT_TRUE(named.is_ok());
    auto g = must_compile(named.value());
    ASSERT_TRUE(g);
    GrammarMatcher m(g, {kEos});
    EXPECT_TRUE(feed(m, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"));
    EXPECT_TRUE(can_stop(m));
    GrammarMatcher wrong(g, {kEos});
    for (char c : std::string("<tool_call>\n<function=")) EXPECT_TRUE(wrong.accept(c));
    EXPECT_FALSE(wrong.accept('n')) << "only the named function";

    auto required = tool_call_grammar(tools, "", true);
    ASSERT_TRUE(required.is_ok());
    auto rg = must_compile(required.value());
    ASSERT_TRUE(rg);
    GrammarMatcher r(rg, {kEos});
    EXPECT_FALSE(bitmask_allows(mask_of(r).data(), kEos)) << "at least one call";
    EXPECT_FALSE(bitmask_allows(mask_of(r).data(), 'H')) << "no free text";
    // (xgrammar's Qwen format: the begin ends with ">\n" and the end starts with "\n", so a
    // call without parameters has an empty line between.)
    EXPECT_TRUE(feed(r, "<tool_call>\n<function=now>\n\n</function>\n</tool_call>"));
    EXPECT_TRUE(can_stop(r));
    EXPECT_TRUE(feed(r, "\n<tool_call>\n<function=get_weather>\n<parameter=city>Oslo</parameter>\n"
                        "<parameter=days>7</parameter>\n</function>\n</tool_call>"));
    EXPECT_TRUE(can_stop(r));

    auto json_style = tool_call_grammar(tools, "get_weather", false);
    ASSERT_TRUE(json_style.is_ok());
    auto jg = must_compile(json_style.value());
    ASSERT_TRUE(jg);
    GrammarMatcher j(jg, {kEos});
    EXPECT_TRUE(feed(j, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 2}}"
                        "\n</tool_call>"));
    EXPECT_TRUE(can_stop(j));
    // A tool whose schema uses a keyword xgrammar would ignore.
    const auto bad_tools = nlohmann::ordered_json::parse(
        R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"array","uniqueItems":true}}}}}])");
    auto bad = tool_call_grammar(bad_tools, "f", true);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("uniqueItems"), std::string::npos) << bad.status().message();
}

// Request structural tags (vLLM's response_format "structural_tag"), both shapes: the output is
// the tag around JSON valid for its schema (checked by nlohmann), free text only where the
// format allows it.
TEST(Grammar, StructuralTagsFromRequests) {
    using J = nlohmann::ordered_json;
    auto current = structural_tag_grammar(J::parse(R"({"type": "structural_tag", "format": {"type": "sequence",
        "elements": [{"type": "const_string", "value": "Answer: "},
                     {"type": "tag", "begin": "<json>", "content": {"type": "json_schema", "json_schema":
                        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9}},
                         "required": ["n"]}}, "end": "</json>"}]}})"));
    ASSERT_TRUE(current.is_ok()) << current.status().message();
    EXPECT_EQ(current->kind, GrammarSpec::Kind::kStructuralTag);
    auto g = must_compile(current.value());
    ASSERT_TRUE(g);
    GrammarMatcher m(g, {kEos});
    EXPECT_FALSE(bitmask_allows(mask_of(m).data(), 'x')) << "the constant comes first";
    EXPECT_TRUE(feed(m, "Answer: <json>{\"n\": 7}</json>"));
    EXPECT_TRUE(can_stop(m));
    GrammarMatcher out_of_range(g, {kEos});
    EXPECT_TRUE(feed(out_of_range, "Answer: <json>{\"n\": "));
    EXPECT_FALSE(bitmask_allows(mask_of(out_of_range).data(), '0')) << "minimum 1";
    std::mt19937 rng(3);
    for (int trial = 0; trial < 20; ++trial) {
        GrammarMatcher w(g, {kEos});
        bool stopped = false;
        const std::string out = random_output(w, rng, 200, &stopped);
        if (!stopped) continue;
        ASSERT_EQ(out.rfind("Answer: <json>", 0), 0u) << out;
        ASSERT_GE(out.size(), 21u);
        ASSERT_EQ(out.substr(out.size() - 7), "</json>") << out;
        const auto j = nlohmann::json::parse(out.substr(14, out.size() - 21), nullptr, false);
        ASSERT_FALSE(j.is_discarded()) << out;
        EXPECT_TRUE(j["n"].is_number_integer() && j["n"] >= 1 && j["n"] <= 9) << out;
    }

    // Legacy: free text, and after a trigger one of the tags with its schema.
    auto legacy = structural_tag_grammar(J::parse(R"({"type": "structural_tag", "triggers": ["<fn="],
        "structures": [{"begin": "<fn=add>", "schema": {"type": "object", "properties": {"a": {"type": "integer"}},
                        "required": ["a"]}, "end": "</fn>"}]})"));
    ASSERT_TRUE(legacy.is_ok()) << legacy.status().message();
    auto lg = must_compile(legacy.value());
    ASSERT_TRUE(lg);
    GrammarMatcher l(lg, {kEos});
    EXPECT_TRUE(feed(l, "Let me add. <fn=add>{\"a\": 3}</fn> done"));
    EXPECT_TRUE(can_stop(l));
    GrammarMatcher unknown(lg, {kEos});
    EXPECT_TRUE(feed(unknown, "<fn="));
    EXPECT_FALSE(bitmask_allows(mask_of(unknown).data(), 's')) << "only the tags after a trigger";

    // Errors name the problem; schemas with keywords xgrammar would drop are refused.
    for (const char* bad : {R"({"type": "structural_tag"})", R"({"type": "other", "format": {"type": "any_text"}})",
                            R"({"triggers": ["<a"], "structures": [{"begin": "<b>", "schema": {}, "end": "</b>"}]})",
                            R"({"format": {"type": "json_schema", "json_schema": {"not": {"type": "string"}}}})"}) {
        auto r = structural_tag_grammar(J::parse(bad));
        EXPECT_FALSE(r.is_ok()) << bad;
    }
    auto unknown_type = structural_tag_grammar(J::parse(R"({"format": {"type": "no_such_format"}})"));
    ASSERT_TRUE(unknown_type.is_ok()) << "the envelope is fine; xgrammar judges the format";
    EXPECT_FALSE(compiler().compile(unknown_type.value()).is_ok());
}

// BitmaskFiller: the masks filled on a pool of threads are the serial ones, row for row.
TEST(Grammar, BitmaskFillerEqualsSerialFill) {
    auto g = must_compile(spec(GrammarSpec::Kind::kJsonSchema,
                               R"({"type":"object","properties":{"s":{"type":"string"},"k":{"type":"integer"}}})"));
    ASSERT_TRUE(g);
    const int64_t W = bitmask_words(kV);
    std::mt19937 rng(9);
    std::vector<std::unique_ptr<GrammarMatcher>> matchers;
    for (int i = 0; i < 37; ++i) {
        matchers.push_back(std::make_unique<GrammarMatcher>(g, std::vector<int32_t>{kEos}));
        bool stopped = false;
        random_output(*matchers.back(), rng, int(rng() % 30), &stopped);
        if (stopped) matchers.back() = std::make_unique<GrammarMatcher>(g, std::vector<int32_t>{kEos});
    }
    std::vector<uint32_t> serial(matchers.size() * size_t(W)), pooled(serial.size(), 0xdeadbeef);
    std::vector<int64_t> serial_counts;
    for (size_t i = 0; i < matchers.size(); ++i) serial_counts.push_back(matchers[i]->fill_next_bitmask(serial.data() + i * W));
    BitmaskFiller filler(4);
    EXPECT_EQ(filler.threads(), 4);
    for (int round = 0; round < 3; ++round) {  // the pool is reused across fills
        std::vector<MaskJob> jobs;
        for (size_t i = 0; i < matchers.size(); ++i) jobs.push_back({matchers[i].get(), pooled.data() + i * W, -1});
        filler.fill(jobs);
        EXPECT_EQ(pooled, serial);
        for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(jobs[i].num_allowed, serial_counts[i]);
    }
    std::vector<MaskJob> none;
    filler.fill(none);  // nothing to do
    // start() returns while the pool fills (the engine runs its forward meanwhile); wait() joins
    // in and returns with every row filled. With one thread, wait() does it all.
    for (int threads : {4, 1}) {
        BitmaskFiller f(threads);
        std::fill(pooled.begin(), pooled.end(), 0xdeadbeef);
        std::vector<MaskJob> jobs;
        for (size_t i = 0; i < matchers.size(); ++i) jobs.push_back({matchers[i].get(), pooled.data() + i * W, -1});
        f.start(jobs);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the caller's own work
        f.wait();
        EXPECT_EQ(pooled, serial) << threads << " threads";
        for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(jobs[i].num_allowed, serial_counts[i]) << threads;
    }
}

// The engine defers each row's accept into its next fill (GrammarMatcher::accept_later), so the
// accepts run on the filler's threads. Many rows of a JSON schema, walked by random allowed
// tokens (multi-byte tokens and stop tokens included) over many steps: the masks and counts of
// the deferred route, filled on 4 threads, equal those of accepting each token at once and
// filling one row after the other, at every step; a stop token the mask allows completes the
// grammar either way (is_stop_token / terminated).
TEST(Grammar, DeferredAcceptsInTheParallelFillEqualSerialAccepts) {
    auto g = must_compile(spec(GrammarSpec::Kind::kJsonSchema,
                               R"({"type":"object","properties":{"s":{"type":"string","maxLength":6},)"
                               R"("k":{"type":"integer"},"a":{"type":"array","items":{"type":"boolean"}}},)"
                               R"("required":["s","k","a"]})"));
    ASSERT_TRUE(g);
    const int64_t W = bitmask_words(kV);
    constexpr size_t kRows = 96;
    std::vector<std::unique_ptr<GrammarMatcher>> serial, deferred;
    for (size_t r = 0; r < kRows; ++r) {
        serial.push_back(std::make_unique<GrammarMatcher>(g, std::vector<int32_t>{kEos}));
        deferred.push_back(std::make_unique<GrammarMatcher>(g, std::vector<int32_t>{kEos}));
    }
    std::vector<uint32_t> serial_words(kRows * size_t(W)), deferred_words(serial_words.size());
    BitmaskFiller filler(4);
    std::mt19937 rng(21);
    int64_t accepted = 0, completed = 0;
    for (int step = 0; step < 60; ++step) {
        std::vector<int64_t> serial_counts;
        for (size_t r = 0; r < kRows; ++r) serial_counts.push_back(serial[r]->fill_next_bitmask(serial_words.data() + r * W));
        std::fill(deferred_words.begin(), deferred_words.end(), 0xdeadbeefu);
        std::vector<MaskJob> jobs;
        for (size_t r = 0; r < kRows; ++r) jobs.push_back({deferred[r].get(), deferred_words.data() + r * W, -1});
        filler.fill(jobs);
        ASSERT_EQ(deferred_words, serial_words) << "step " << step;
        for (size_t r = 0; r < kRows; ++r) {
            ASSERT_EQ(jobs[r].num_allowed, serial_counts[r]) << "step " << step << " row " << r;
            ASSERT_GT(serial_counts[r], 0);
            std::vector<int32_t> allowed;
            for (int32_t t = 0; t < kV; ++t)
                if (bitmask_allows(serial_words.data() + r * W, t)) allowed.push_back(t);
            const int32_t t = allowed[rng() % allowed.size()];
            ASSERT_TRUE(serial[r]->accept(t));
            if (deferred[r]->is_stop_token(t)) {
                // The engine finishes the sequence without an accept; the matcher agrees.
                ASSERT_TRUE(serial[r]->terminated());
                deferred[r]->accept_later(t);
                ASSERT_TRUE(deferred[r]->terminated());
                serial[r] = std::make_unique<GrammarMatcher>(g, std::vector<int32_t>{kEos});
                deferred[r] = std::make_unique<GrammarMatcher>(g, std::vector<int32_t>{kEos});
                ++completed;
                continue;
            }
            ASSERT_FALSE(serial[r]->terminated());
            deferred[r]->accept_later(t);
            ++accepted;
        }
    }
    EXPECT_GT(accepted, 3000);
    EXPECT_GT(completed, 0) << "no walk completed its object: the stop-token path went untested";
}

// A deferred token is applied before anything else reads the state: a fork, an accept, a
// terminated(); a second accept_later applies the first. One the grammar refuses (only a
// sampler that ignored the mask could draw it) leaves the next fill with nothing allowed.
TEST(Grammar, DeferredAcceptIsAppliedBeforeTheStateIsRead) {
    auto g = must_compile(spec(GrammarSpec::Kind::kRegex, "ab(c|d)"));
    ASSERT_TRUE(g);
    GrammarMatcher m(g, {kEos});
    m.accept_later('a');
    auto f = m.fork();  // from "a"
    EXPECT_FALSE(f->accept('a'));
    EXPECT_TRUE(f->accept('b'));
    m.accept_later('b');
    m.accept_later('c');  // applies 'b'
    EXPECT_FALSE(m.terminated());  // applies 'c'
    EXPECT_TRUE(can_stop(m));
    EXPECT_TRUE(m.is_stop_token(kEos));
    EXPECT_FALSE(m.is_stop_token('c'));

    GrammarMatcher bad(g, {kEos});
    bad.accept_later('z');
    std::vector<uint32_t> w(size_t(bitmask_words(kV)), 0xffffffffu);
    EXPECT_EQ(bad.fill_next_bitmask(w.data()), 0);
    EXPECT_EQ(w, std::vector<uint32_t>(w.size(), 0u));
}

// compile() gives a regex as one automaton where xgrammar's regex → EBNF converter would give
// right-recursive rules (grammar_compiler.cpp: the same language, masks thousands of times
// cheaper). The masks must be the converter's, bit for bit: compile_reference() is xgrammar's
// own CompileRegex. Random walks over all tokens the mask allows (multi-byte tokens, UTF-8
// lead and continuation bytes, stop tokens) compare the two at every step, over the byte
// vocabulary and the trained model's BPE vocabulary; errors are the same errors.
void expect_masks_equal_the_reference(const GrammarCompiler& c, const GrammarSpec& s, int walks, int steps,
                                      int32_t stop) {
    const std::string& regex = s.text;  // what the failures name
    auto got = c.compile(s);
    auto ref = c.compile_reference(s);
    ASSERT_EQ(got.is_ok(), ref.is_ok()) << regex << ": " << got.status().message() << " / " << ref.status().message();
    if (!got.is_ok()) {
        EXPECT_EQ(got.status().message(), ref.status().message()) << regex;
        return;
    }
    const int32_t V = got.value()->vocab_size();
    ASSERT_EQ(V, ref.value()->vocab_size());
    const size_t W = size_t(bitmask_words(V));
    std::mt19937 rng(uint32_t(std::hash<std::string>()(regex)));
    std::vector<uint32_t> a(W), b(W);
    int64_t compared = 0;
    for (int walk = 0; walk < walks; ++walk) {
        GrammarMatcher m(got.value(), {stop}), r(ref.value(), {stop});
        std::string history;
        for (int step = 0; step < steps; ++step) {
            const int64_t n = m.fill_next_bitmask(a.data());
            r.fill_next_bitmask(b.data());
            if (a != b) {
                std::string diff;
                for (int32_t t = 0; t < V; ++t)
                    if (bitmask_allows(a.data(), t) != bitmask_allows(b.data(), t))
                        diff += fmt::format(" {}:{}", t, bitmask_allows(a.data(), t) ? "compile()" : "xgrammar's route");
                std::string hist;
                for (unsigned char ch : history) hist += fmt::format("{:02x} ", unsigned(ch));
                ADD_FAILURE() << regex << " walk " << walk << " step " << step << " after [" << hist
                              << "] only one route allows:" << diff;
                return;
            }
            ++compared;
            if (n == 0) break;
            std::vector<int32_t> allowed;
            for (int32_t t = 0; t < V; ++t)
                if (bitmask_allows(a.data(), t)) allowed.push_back(t);
            // Stop now and then; otherwise the walk goes on.
            const bool can_stop = std::find(allowed.begin(), allowed.end(), stop) != allowed.end();
            if (can_stop && (allowed.size() == 1 || rng() % 8 == 0)) break;
            std::erase(allowed, stop);
            const int32_t t = allowed[rng() % allowed.size()];
            ASSERT_TRUE(m.accept(t)) << regex;
            ASSERT_TRUE(r.accept(t)) << regex;
            history += c.vocab().tokens[size_t(t)];
        }
    }
    EXPECT_GT(compared, walks) << regex;
}

void expect_regex_masks_equal_the_converters(const GrammarCompiler& c, const std::string& regex, int walks, int steps,
                                             int32_t stop) {
    expect_masks_equal_the_reference(c, spec(GrammarSpec::Kind::kRegex, regex), walks, steps, stop);
}

const std::vector<std::string>& regexes_to_compare() {
    static const std::vector<std::string> r = {
        // ASCII-only languages: compile() takes the automaton.
        "[a-z ]+", R"(\d+(\.\d+)?)", "(ab|cd)+e*", "[a-c]+x", R"(\w+@\w+\.com)", "(?:foo|bar){2,4}",
        "[A-Z][a-z]*( [A-Z][a-z]*)*", "a|b|", R"([\d\-]+)", "^[a-z]+$", "x{3}", "(a(b(c)?)?)+",
        R"(\(\)\[\]\{\}\.\*\+\?\|\^\$\/)", "[-a]+", "[a-z]{2,}[0-9]{0,3}", R"(\{"k": \d+\})", "[ -~]+",
        "(a|ab)(c|bcd)(d*)", "[0-9]{1,300}", "[.]+[a^]", "a{,3}b", "a{2}", "a{2,}b", "x{0}y", "a{1,1}b", "a{", "a{x}",
        "{", "}", "a}", "[[]+", R"([\]]+)", "()a", "(|a)b", "a||b", "a**", "+a", "?", "[a-]", "[z-a]", R"([\w-]+)",
        // Outside the subset (they may match non-ASCII text, or the two readers differ): the
        // converter's grammar, as before.
        ".*", "[^x]*y", R"(\W\D+)", ".{0,5}z", "[^a-c]+x", R"(\s+)", "(?i)abc", "caf\xc3\xa9+", "(?<name>ab)+",
        // Errors and warnings (refused by both, with the same message).
        "[]a]", "(ab", "a{2,1}", R"((a)\1)", "a^b", R"(\q)"};
    return r;
}

TEST(Grammar, RegexMasksEqualXgrammarsConverterRoute) {
    for (const std::string& regex : regexes_to_compare())
        expect_regex_masks_equal_the_converters(compiler(), regex, 150, 24, kEos);
}

TEST(Grammar, RegexMasksEqualXgrammarsConverterRouteOnABpeVocabulary) {
    auto tok = tok::Tokenizer::from_dir(std::string(QS_SOURCE_DIR) + "/models/qwen36-tiny");
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    const GrammarCompiler c(grammar_vocab_from_tokenizer(**tok, 4096, {4000}, true));
    for (const std::string& regex : regexes_to_compare()) expect_regex_masks_equal_the_converters(c, regex, 20, 24, 4000);
}

// compile() gives a JSON schema's bounded character repetitions (maxLength strings, the
// whitespace bound) as automata where xgrammar's converter gives chains of rules
// (repetition_automaton.h): the masks must be CompileJSONSchema's, bit for bit, along random
// walks, for schemas of every kind the issue lists; recursive ones included.
const std::vector<std::string>& schemas_to_compare() {
    static const std::vector<std::string> s = {
        R"({"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150}}, "required": ["name", "age"]})",
        R"({"type": "string", "maxLength": 5})",
        R"({"type": "string", "minLength": 3})",
        R"({"type": "string", "minLength": 2, "maxLength": 2})",
        R"({"type": "string", "maxLength": 200})",
        R"({"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1, "maxItems": 3})",
        R"({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object",
            "properties": {"c": {"type": "string", "maxLength": 4}}, "required": ["c"]}}, "required": ["b"]}},
            "required": ["a"]})",
        R"({"type": "object", "properties": {"color": {"enum": ["red", "green", "blü"]},
            "n": {"type": "number", "minimum": -2.5, "maximum": 10}, "k": {"type": "integer", "exclusiveMinimum": 3}},
            "required": ["color", "n", "k"]})",
        R"({"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"},
            "note": {"type": "string"}}, "required": ["code", "note"]})",
        R"({"anyOf": [{"type": "string", "maxLength": 6}, {"type": "integer"}, {"type": "null"},
            {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]}]})",
        R"({"$defs": {"item": {"type": "object", "properties": {"id": {"type": "integer"},
            "label": {"type": "string", "maxLength": 8}}, "required": ["id", "label"]}},
            "type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 2})",
        R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "string", "maxLength": 3},
            "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
            "$ref": "#/$defs/node"})",
        R"({"type": "object", "additionalProperties": {"type": "string", "maxLength": 2}})",
        R"({"type": "object", "properties": {"s": {"type": "string", "format": "date"},
            "t": {"type": "string", "maxLength": 3}}, "required": ["s", "t"]})"};
    return s;
}

TEST(Grammar, JsonSchemaMasksEqualXgrammarsRoute) {
    for (const std::string& schema : schemas_to_compare()) {
        for (bool any_whitespace : {true, false}) {
            GrammarSpec s = spec(GrammarSpec::Kind::kJsonSchema, schema);
            s.any_whitespace = any_whitespace;
            expect_masks_equal_the_reference(compiler(), s, 60, 40, kEos);
        }
    }
    expect_masks_equal_the_reference(compiler(), spec(GrammarSpec::Kind::kJsonObject, ""), 60, 40, kEos);
}

TEST(Grammar, JsonSchemaMasksEqualXgrammarsRouteOnABpeVocabulary) {
    auto tok = tok::Tokenizer::from_dir(std::string(QS_SOURCE_DIR) + "/models/qwen36-tiny");
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    const GrammarCompiler c(grammar_vocab_from_tokenizer(**tok, 4096, {4000}, true));
    for (const std::string& schema : schemas_to_compare())
        expect_masks_equal_the_reference(c, spec(GrammarSpec::Kind::kJsonSchema, schema), 15, 40, 4000);
}

TEST(Grammar, RepetitionsBecomeAutomata) {
    // A class per UTF-8 width, as xgrammar's grammar builder encodes it.
    EXPECT_EQ(char_class_as_regex(R"([^\"\\\r\n])"),
              R"((?:[\u{0}-\u{9}\u{b}-\u{c}\u{e}-\u{21}\u{23}-\u{5b}\u{5d}-\u{7f}]|[\u{80}-\u{7ff}]|[\u{800}-\u{ffff}]|[\u{10000}-\u{10ffff}]))");
    EXPECT_EQ(char_class_as_regex(R"([ \n\r\t])"), R"((?:[\u{9}\u{a}\u{d}\u{20}]))");
    EXPECT_EQ(char_class_as_regex(R"([\x1f-\u00e9])"), R"((?:[\u{1f}-\u{7f}]|[\u{80}-\u{e9}]))");
    EXPECT_EQ(char_class_as_regex(R"([\q])"), "") << "an escape it does not know";
    const std::string g = "root ::= ((\"\\\"\" s{1, 40} \"\\\"\" w{0, 16} w{0, 16} s{0, -1} s{0, 300}))\n"
                          "s ::= (([^\\\"\\\\\\r\\n]))\nw ::= (([ \\n\\r\\t]))\n";
    const auto r = repetitions_as_automata(g);
    ASSERT_TRUE(r.has_value());
    EXPECT_NE(r->find("root ::= ((\"\\\"\" qs_repeat_0 \"\\\"\" qs_repeat_1 qs_repeat_1 s{0, -1} s{0, 300}))"),
              std::string::npos)
        << *r;
    EXPECT_FALSE(repetitions_as_automata("root ::= ((\"a\" r{0, 3}))\nr ::= ((\"a\" \"b\"))\n").has_value());
}

TEST(Grammar, VocabularyOfTheTrainedModelsTokenizer) {
    auto tok = tok::Tokenizer::from_dir(std::string(QS_SOURCE_DIR) + "/models/qwen36-tiny");
    ASSERT_TRUE(tok.is_ok()) << tok.status().message();
    const GrammarVocab v = grammar_vocab_from_tokenizer(**tok, 4096, {4000, 4002}, true);
    EXPECT_EQ(v.vocab_size, 4096);
    ASSERT_EQ(v.tokens.size(), size_t((*tok)->vocab_size()));
    EXPECT_EQ(v.tokens[4014], "<tool_call>");
    EXPECT_EQ(v.tokens[4015], "</tool_call>");
    for (int32_t id : {4000, 4001, 4002, 4012, 4024, 4025, 4016}) EXPECT_EQ(v.tokens[size_t(id)], "") << id;
    EXPECT_EQ(v.reasoning_end_id, 4025);
    EXPECT_EQ(v.tokens[size_t((*tok)->encode("{")[0])], "{");
}
