// `eval code`: sends each problem to an OpenAI-compatible chat endpoint (the bench's load
// generator, bounded concurrency, streaming with usage), extracts the code from each reply
// (eval/code_extract.h), runs it with the problem's tests in the sandbox (eval/code_exec.h) and
// returns one result per problem, in problem order. Results are JSONL, one object per problem:
//   task_id, passed, error_class, message, code_source, completion_tokens, reasoning_tokens,
//   reasoning_tokens_source ("usage": the server's completion_tokens_details; "chunks": estimated
//   as completion tokens x the share of streamed chunks that carried reasoning_content),
//   prompt_tokens, latency_s, ttft_s, finish_reason, exec_s, code
// Request failures get error_class "request_error:<kind>" (connect, http_404, ...) and are not
// executed. Main thread (the load generator and the executor pool run their own threads).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/loadgen.h"
#include "eval/code_exec.h"
#include "eval/problems.h"

namespace qs::eval {

struct CodeEvalOptions {
    bench::Url url;
    std::string api_key;
    std::string model = "qwen3.6-35b-a3b";
    int64_t concurrency = 8;  // requests in flight
    int threads = 1;          // load-generator I/O threads
    int64_t max_tokens = 4096;
    double temperature = 0.0;  // greedy: the paired comparison sees configurations, not draws
    double top_p = 1.0;
    int64_t seed = -1;      // >= 0: sent as "seed"
    bool thinking = false;  // chat_template_kwargs.enable_thinking
    double timeout_s = 0;   // > 0: requests still open then are cut (error_class incomplete)
    int jobs = 2;           // sandboxes at once
    ExecOptions exec;
};

struct ProblemResult {
    std::string task_id;
    bool passed = false;
    std::string error_class;  // "pass", an execution class, "no_code", "request_error:<kind>"
    std::string message;
    std::string code_source;  // eval/code_extract.h
    std::string code;
    int64_t completion_tokens = 0, reasoning_tokens = 0, prompt_tokens = 0;
    std::string reasoning_tokens_source;  // "usage" or "chunks"
    double latency_s = 0, ttft_s = -1, exec_s = 0;
    std::string finish_reason;
};

// The chat request for one problem (what run_code_eval sends).
nlohmann::json problem_request(const Problem& p, const CodeEvalOptions& o);

// Errors: the endpoint refused every request in transport (nothing was evaluated), or the
// sandbox cannot be set up.
Result<std::vector<ProblemResult>> run_code_eval(const std::vector<Problem>& problems,
                                                 const CodeEvalOptions& options);

// Judges one finished request (extract, execute, classify); used by run_code_eval and tests.
Result<ProblemResult> judge_record(const Problem& p, const bench::RequestRecord& r,
                                   const ExecOptions& exec);

nlohmann::ordered_json result_json(const ProblemResult& r);
Status write_results(const std::string& path, const std::vector<ProblemResult>& results);
// Errors name the file and line.
Result<std::vector<ProblemResult>> read_results(const std::string& path);

}  // namespace qs::eval
