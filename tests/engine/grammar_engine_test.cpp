// Structured outputs in the engine, on the trained test model (models/qwen36-tiny) and its
// tokenizer: every completion of a constrained request follows its grammar (checked on the
// decoded text by independent parsers: nlohmann for JSON, std::regex), greedy and sampled,
// n > 1, with MTP on (constrained sequences do not draft; the others in the batch still do),
// ends with "stop" once the grammar is complete and with "length" when max_tokens comes first;
// min_tokens cannot stall a complete grammar; a grammar for another vocabulary is refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "engine_test_util.h"
#include "grammar/grammar_compiler.h"
#include "tokenizer/tokenizer.h"

using namespace qs;
using namespace qs::test;

namespace {

struct Fixture {
    ModelWeights w;
    std::shared_ptr<const tok::Tokenizer> tok;
    std::unique_ptr<grammar::GrammarCompiler> compiler;
};

Fixture& fixture() {
    static Fixture* f = [] {
        const std::string dir = std::string(QS_SOURCE_DIR) + "/models/qwen36-tiny";
        auto w = load_model_dir(dir);
        QS_CHECK_MSG(w.is_ok(), w.status().message().c_str());
        auto tok = tok::Tokenizer::from_dir(dir);
        QS_CHECK_MSG(tok.is_ok(), tok.status().message().c_str());
        auto* fx = new Fixture{std::move(w.value()), std::shared_ptr<const tok::Tokenizer>(std::move(tok.value())), nullptr};
        std::vector<int32_t> stops;
        for (int64_t id : fx->w.config.eos_token_ids) stops.push_back(int32_t(id));
        fx->compiler = std::make_unique<grammar::GrammarCompiler>(
            grammar::grammar_vocab_from_tokenizer(*fx->tok, int32_t(fx->w.config.vocab_size), stops, true));
        return fx;
    }();
    return *f;
}

std::shared_ptr<const grammar::CompiledGrammar> compile(grammar::GrammarSpec::Kind kind, const std::string& text,
                                                        std::vector<std::string> choices = {}) {
    grammar::GrammarSpec s;
    s.kind = kind;
    s.text = text;
    s.choices = std::move(choices);
    auto r = fixture().compiler->compile(s);
    QS_CHECK_MSG(r.is_ok(), r.status().message().c_str());
    return r.value();
}

GenerationRequest request(const std::string& id, const std::string& prompt, double temperature, int max_tokens,
                          std::shared_ptr<const grammar::CompiledGrammar> g) {
    GenerationRequest r;
    r.id = id;
    r.prompt_ids = fixture().tok->encode(prompt);
    r.params.temperature = temperature;
    r.params.seed = 1234;
    r.params.max_tokens = max_tokens;
    r.grammar = std::move(g);
    return r;
}

Collector run(const std::vector<GenerationRequest>& reqs, int spec, std::vector<int64_t>* proposed = nullptr) {
    CpuOps ops;
    EngineConfig cfg;
    cfg.num_speculative_tokens = spec;
    cfg.max_num_seqs = 8;
    cfg.cache_memory_mb = 64;
    auto engine = Engine::create(fixture().w, ops, cfg, std::make_shared<TokenizerTextDecoder>(fixture().tok));
    QS_CHECK(engine.is_ok());
    Collector col;
    for (const auto& r : reqs) {
        const Status st = (*engine)->submit(r, col.sink_for(r.id));
        QS_CHECK_MSG(st.is_ok(), st.message().c_str());
    }
    (*engine)->run_until_idle();
    EXPECT_EQ((*engine)->num_blocks_in_use(), 0);
    if (proposed) *proposed = (*engine)->mtp_proposed_by_position();
    return col;
}

}  // namespace

TEST(GrammarEngine, CompletionsFollowTheirGrammars) {
    const std::string schema =
        R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":120},)"
        R"("tags":{"type":"array","items":{"enum":["a","b","c"]},"maxItems":3}},"required":["name","age","tags"]})";
    auto json = compile(grammar::GrammarSpec::Kind::kJsonSchema, schema);
    auto object = compile(grammar::GrammarSpec::Kind::kJsonObject, "");
    auto regex = compile(grammar::GrammarSpec::Kind::kRegex, "[A-Z][a-z]{1,6} [0-9]{2,3}");
    auto choice = compile(grammar::GrammarSpec::Kind::kChoice, "", {"alpha", "beta", "gamma delta"});
    std::vector<GenerationRequest> reqs;
    const char* prompts[] = {"def main():\n", "The weather today", "import json\n"};
    for (int i = 0; i < 3; ++i)
        for (double t : {0.0, 1.0}) {
            const std::string sfx = std::to_string(i) + (t > 0 ? "s" : "g");
            reqs.push_back(request("json" + sfx, prompts[i], t, 120, json));
            reqs.push_back(request("obj" + sfx, prompts[i], t, 120, object));
            reqs.push_back(request("re" + sfx, prompts[i], t, 40, regex));
            reqs.push_back(request("ch" + sfx, prompts[i], t, 40, choice));
        }
    reqs.push_back(request("n3", prompts[0], 1.0, 40, choice));
    reqs.back().params.n = 3;
    reqs.push_back(request("free", "import os\nimport sys\n\n\ndef main():\n", 0.0, 40, nullptr));
    reqs.back().params.ignore_eos = true;
    std::vector<int64_t> proposed;
    Collector col = run(reqs, /*spec=*/2, &proposed);
    EXPECT_GT(proposed[0], 0) << "the unconstrained request still drafts";
    const std::regex re_want("[A-Z][a-z]{1,6} [0-9]{2,3}");
    int stopped = 0;
    for (const auto& r : reqs) {
        for (int k = 0; k < int(r.params.n); ++k) {
            const Completion& c = col.got[r.id][k];
            ASSERT_EQ(c.num_final, 1) << r.id;
            if (!r.grammar) continue;
            ASSERT_TRUE(c.finish == FinishReason::kStop || c.finish == FinishReason::kLength) << r.id;
            if (c.finish == FinishReason::kLength) {
                EXPECT_EQ(int64_t(c.tokens.size()), r.params.max_tokens) << r.id;
                continue;
            }
            ++stopped;
            const std::string& text = c.text;
            if (r.id.rfind("json", 0) == 0) {
                const auto j = nlohmann::json::parse(text, nullptr, false);
                ASSERT_FALSE(j.is_discarded()) << r.id << ": " << text;
                ASSERT_TRUE(j.is_object() && j.contains("name") && j.contains("age") && j.contains("tags")) << text;
                EXPECT_TRUE(j["name"].is_string() && j["name"].get<std::string>().size() <= 12) << text;
                EXPECT_TRUE(j["age"].is_number_integer() && j["age"].get<int>() >= 0 && j["age"].get<int>() <= 120) << text;
                EXPECT_TRUE(j["tags"].is_array() && j["tags"].size() <= 3) << text;
            } else if (r.id.rfind("obj", 0) == 0) {
                const auto j = nlohmann::json::parse(text, nullptr, false);
                EXPECT_TRUE(!j.is_discarded() && j.is_object()) << r.id << ": " << text;
            } else if (r.id.rfind("re", 0) == 0) {
                EXPECT_TRUE(std::regex_match(text, re_want)) << r.id << ": " << text;
            } else {
                EXPECT_TRUE(text == "alpha" || text == "beta" || text == "gamma delta") << r.id << ": " << text;
            }
            // The stop token the grammar allowed at its end.
            EXPECT_TRUE(std::find(fixture().w.config.eos_token_ids.begin(), fixture().w.config.eos_token_ids.end(),
                                  c.tokens.back()) != fixture().w.config.eos_token_ids.end()) << r.id;
        }
    }
    EXPECT_GE(stopped, 12) << "choices and regexes are short: most end with the grammar";
}

TEST(GrammarEngine, MaxTokensEndsAnUnfinishedGrammarWithLength) {
    // A schema that needs more tokens than allowed: never a hang, always "length".
    auto g = compile(grammar::GrammarSpec::Kind::kJsonSchema,
                     R"({"type":"array","items":{"type":"integer"},"minItems":50})");
    Collector col = run({request("long", "x = [", 0.0, 8, g), request("long2", "x = [", 1.0, 8, g)}, 1);
    for (const char* id : {"long", "long2"}) {
        EXPECT_EQ(col.got[id][0].finish, FinishReason::kLength) << id;
        EXPECT_EQ(col.got[id][0].tokens.size(), 8u) << id;
        EXPECT_EQ(col.got[id][0].text.rfind("[", 0), 0u) << col.got[id][0].text;
    }
}

TEST(GrammarEngine, MinTokensDoesNotStallACompleteGrammar) {
    // A one-token choice with min_tokens 20: once the grammar is complete only EOS remains, so
    // the ban on EOS is dropped and the request ends there.
    auto g = compile(grammar::GrammarSpec::Kind::kChoice, "", {"A"});
    GenerationRequest r = request("min", "hello", 1.0, 30, g);
    r.params.min_tokens = 20;
    Collector col = run({r}, 0);
    EXPECT_EQ(col.got["min"][0].finish, FinishReason::kStop);
    EXPECT_EQ(col.got["min"][0].text, "A");
}

TEST(GrammarEngine, ConstraintStartsAfterTheReasoningEnds) {
    // grammar_after_token: free tokens until it appears, constrained after. The model is steered
    // to it by a bias, then the regex holds.
    auto g = compile(grammar::GrammarSpec::Kind::kRegex, "[0-9]{3}");
    const int32_t think_end = *fixture().compiler->vocab().reasoning_end_id;
    GenerationRequest r = request("think", "Question: ", 0.0, 12, g);
    r.grammar_after_token = think_end;
    r.params.logit_bias = {{think_end, 100.0f}};  // </think> is otherwise unlikely from the tiny model
    Collector col = run({r}, 0);
    const Completion& c = col.got["think"][0];
    ASSERT_FALSE(c.tokens.empty());
    EXPECT_EQ(c.tokens[0], think_end);
    EXPECT_EQ(c.finish, FinishReason::kStop);
    // </think> is not a special token: the decoded text keeps it (the server's reasoning parser
    // splits there).
    ASSERT_EQ(c.text.rfind("</think>", 0), 0u) << c.text;
    EXPECT_TRUE(std::regex_match(c.text.substr(8), std::regex("[0-9]{3}"))) << c.text;
}

TEST(GrammarEngine, RefusesAGrammarForAnotherVocabulary) {
    grammar::GrammarVocab v;
    v.tokens = {"a", "b"};
    v.vocab_size = 2;
    grammar::GrammarCompiler other(v);
    grammar::GrammarSpec s;
    s.kind = grammar::GrammarSpec::Kind::kRegex;
    s.text = "a+";
    auto g = other.compile(s);
    ASSERT_TRUE(g.is_ok());
    CpuOps ops;
    EngineConfig cfg;
    cfg.max_num_seqs = 8;
    cfg.cache_memory_mb = 64;
    auto engine = Engine::create(fixture().w, ops, cfg, nullptr);
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    GenerationRequest r = request("x", "hello", 0.0, 4, g.value());
    const Status st = (*engine)->submit(r, [](RequestOutput&&) {});
    ASSERT_FALSE(st.is_ok());
    EXPECT_NE(st.message().find("grammar"), std::string::npos) << st.message();
}
