// `eval code` mechanics against a live loopback server with the scripted FakeEngine (its reply is
// the "[[reply:...]]" text of the prompt): the built-in problems' canonical solutions pass their
// own tests through the whole path (request, stream, extraction, sandbox); wrong code, no code,
// reasoning before the code (thinking on: reasoning tokens counted) and an unreachable endpoint.
#include "eval/code_eval.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../server/test_server.h"
#include "eval/sandbox.h"

namespace qs::eval {
namespace {

bool sandbox_ok() {
    return std::filesystem::exists("/usr/bin/python3") && check_sandbox_available().is_ok();
}

CodeEvalOptions options_for(int port) {
    CodeEvalOptions o;
    o.url = bench::parse_url("http://127.0.0.1:" + std::to_string(port)).value();
    o.model = "test-model";
    o.concurrency = 3;
    o.max_tokens = 2000;
    o.jobs = 2;
    return o;
}

Problem scripted(const std::string& id, const std::string& reply) {
    Problem p;
    p.task_id = id;
    p.entry_point = "add";
    p.prompt = "Write add(a, b). [[reply:" + reply + "]]";
    p.test = "def check(candidate):\n    assert candidate(2, 3) == 5\n";
    return p;
}

TEST(CodeEval, BuiltinCanonicalSolutionsPassThroughTheServer) {
    if (!sandbox_ok()) GTEST_SKIP() << "no python3 or no namespaces";
    testing::TestServer server;
    auto problems = builtin_problems();
    ASSERT_EQ(problems.size(), 10u);
    for (auto& p : problems) {
        ASSERT_EQ(p.canonical_solution.find("]]"), std::string::npos) << p.task_id;
        p.prompt += "\n[[reply:Sure.\n```python\n" + p.canonical_solution + "```\n]]";
    }
    auto results = run_code_eval(problems, options_for(server.port()));
    ASSERT_TRUE(results.is_ok()) << results.status().message();
    ASSERT_EQ(results->size(), problems.size());
    for (size_t i = 0; i < problems.size(); ++i) {
        const auto& r = (*results)[i];
        EXPECT_EQ(r.task_id, problems[i].task_id);
        EXPECT_TRUE(r.passed) << r.task_id << ": " << r.error_class << ": " << r.message;
        EXPECT_EQ(r.code, problems[i].canonical_solution);
        EXPECT_EQ(r.code_source, "fence:python");
        EXPECT_GT(r.completion_tokens, 0);
        EXPECT_GT(r.latency_s, 0);
        EXPECT_EQ(r.reasoning_tokens, 0);  // thinking off
    }
}

TEST(CodeEval, WrongCodeNoCodeAndReasoning) {
    if (!sandbox_ok()) GTEST_SKIP() << "no python3 or no namespaces";
    testing::TestServer server;
    std::vector<Problem> problems = {
        scripted("right", "```python\ndef add(a, b):\n    return a + b\n```"),
        scripted("wrong", "```python\ndef add(a, b):\n    return a * b\n```"),
        scripted("none", "I would rather not."),
        scripted("loop", "```python\ndef add(a, b):\n    while True:\n        pass\n```"),
    };
    auto o = options_for(server.port());
    o.exec.limits.cpu_s = 1;
    auto results = run_code_eval(problems, o);
    ASSERT_TRUE(results.is_ok()) << results.status().message();
    EXPECT_EQ((*results)[0].error_class, "pass");
    EXPECT_EQ((*results)[1].error_class, "assertion_failed");
    EXPECT_EQ((*results)[2].error_class, "no_code");
    EXPECT_EQ((*results)[3].error_class, "cpu_limit");

    // Thinking on: the generation starts inside <think>; the reasoning is not searched for code
    // and its share of the tokens is counted.
    std::string thought(300, 'x');
    std::vector<Problem> thinking = {
        scripted("think", thought + "</think>\n\n```python\ndef add(a, b):\n    return a + b\n```"),
        scripted("all_thought", "```python\ndef add(a, b):\n    return a + b\n```\nstill thinking"),
    };
    o.thinking = true;
    auto t = run_code_eval(thinking, o);
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    const auto& a = (*t)[0];
    EXPECT_TRUE(a.passed) << a.error_class << ": " << a.message;
    EXPECT_EQ(a.reasoning_tokens_source, "chunks");
    EXPECT_GT(a.reasoning_tokens, a.completion_tokens / 2);  // 300 of ~350 bytes were reasoning
    EXPECT_LT(a.reasoning_tokens, a.completion_tokens);
    EXPECT_EQ((*t)[1].error_class, "no_code");  // the code was inside the reasoning
    EXPECT_EQ((*t)[1].reasoning_tokens, (*t)[1].completion_tokens);
}

TEST(CodeEval, RequestErrorsAreClassifiedNotExecuted) {
    if (!sandbox_ok()) GTEST_SKIP() << "no python3 or no namespaces";
    testing::TestServer server;
    auto o = options_for(server.port());
    // One request fails in the engine (the fake's [[fail]]), the other is judged.
    auto r = run_code_eval({scripted("ok", "```python\ndef add(a, b):\n    return a + b\n```"),
                            scripted("failed", "x [[fail]]")},
                           o);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ((*r)[0].error_class, "pass");
    EXPECT_EQ((*r)[1].error_class.rfind("request_error:", 0), 0u) << (*r)[1].error_class;
    // Every request failed (a model the server does not serve): an error, not a results file.
    o.model = "no-such-model";
    auto all = run_code_eval({scripted("a", "x"), scripted("b", "y")}, o);
    ASSERT_FALSE(all.is_ok());
    EXPECT_NE(all.status().message().find("every request failed"), std::string::npos)
        << all.status().message();
    EXPECT_NE(all.status().message().find("--model"), std::string::npos) << all.status().message();
}

TEST(CodeEval, UnreachableEndpointIsAnError) {
    int port;
    {
        testing::TestServer server;
        port = server.port();
    }  // closed now
    auto r = run_code_eval({scripted("a", "x")}, options_for(port));
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().kind(), ErrorKind::kIo);
    EXPECT_NE(r.status().message().find("no request reached"), std::string::npos);
}

TEST(CodeEval, ResultsRoundTripAndBadFiles) {
    ProblemResult a;
    a.task_id = "t1";
    a.passed = true;
    a.error_class = "pass";
    a.completion_tokens = 12;
    a.reasoning_tokens = 5;
    a.latency_s = 0.5;
    const std::string path = ::testing::TempDir() + "qs_eval_results.jsonl";
    ASSERT_TRUE(write_results(path, {a}).is_ok());
    auto back = read_results(path);
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ((*back)[0].task_id, "t1");
    EXPECT_EQ((*back)[0].completion_tokens, 12);
    EXPECT_EQ((*back)[0].reasoning_tokens, 5);
    std::ofstream(path) << "{\"task_id\": \"x\"}\n";
    auto bad = read_results(path);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find(":1:"), std::string::npos);
    std::remove(path.c_str());
}

TEST(CodeEval, ProblemFilesAreValidated) {
    const std::string path = ::testing::TempDir() + "qs_eval_problems.jsonl";
    std::ofstream(path) << problem_line(builtin_problems()[0]) << "\n{not json\n";
    auto r = read_problems(path);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().kind(), ErrorKind::kCorruptData);
    EXPECT_NE(r.status().message().find(":2:"), std::string::npos) << r.status().message();
    std::ofstream(path) << R"({"task_id": "a", "prompt": "p", "test": "t"})"
                        << "\n";
    auto missing = read_problems(path);
    ASSERT_FALSE(missing.is_ok());
    EXPECT_NE(missing.status().message().find("entry_point"), std::string::npos);
    // BigCodeBench's fields load as they are.
    std::ofstream(path) << R"({"task_id": "BigCodeBench/0", "instruct_prompt": "do it", )"
                        << R"("entry_point": "task_func", "test": "import unittest"})"
                        << "\n";
    auto bcb = read_problems(path);
    ASSERT_TRUE(bcb.is_ok()) << bcb.status().message();
    EXPECT_EQ((*bcb)[0].prompt, "do it");
    std::remove(path.c_str());
}

}  // namespace
}  // namespace qs::eval
