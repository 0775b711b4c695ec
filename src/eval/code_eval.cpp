// `eval code` orchestration and its result files (see code_eval.h).
#include "eval/code_eval.h"

#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "eval/code_extract.h"

namespace qs::eval {

nlohmann::json problem_request(const Problem& p, const CodeEvalOptions& o) {
    nlohmann::json messages = nlohmann::json::array();
    if (!p.system.empty()) messages.push_back({{"role", "system"}, {"content", p.system}});
    messages.push_back({{"role", "user"}, {"content", p.prompt}});
    nlohmann::json body = {
        {"model", o.model},           {"messages", messages},
        {"max_tokens", o.max_tokens}, {"temperature", o.temperature},
        {"top_p", o.top_p},           {"chat_template_kwargs", {{"enable_thinking", o.thinking}}}};
    if (o.seed >= 0) body["seed"] = o.seed;
    return body;
}

Result<ProblemResult> judge_record(const Problem& p, const bench::RequestRecord& r,
                                   const ExecOptions& exec) {
    ProblemResult out;
    out.task_id = p.task_id;
    out.completion_tokens = r.completion_tokens;
    out.prompt_tokens = r.prompt_tokens;
    out.latency_s = r.latency_s;
    out.ttft_s = r.ttft_s;
    out.finish_reason = r.finish_reason;
    if (r.reasoning_tokens >= 0) {
        out.reasoning_tokens = r.reasoning_tokens;
        out.reasoning_tokens_source = "usage";
    } else {
        const int64_t chunks = r.ttft_s >= 0 ? int64_t(r.itl_s.size()) + 1 : 0;
        out.reasoning_tokens =
            chunks > 0 ? int64_t(std::llround(double(r.completion_tokens) *
                                              double(r.num_reasoning_chunks) / double(chunks)))
                       : 0;
        out.reasoning_tokens_source = "chunks";
    }
    if (!r.error.empty() || !r.done) {
        out.error_class = r.error.empty() ? "incomplete" : "request_error:" + r.error;
        out.message = r.error.empty() ? "the stream ended without [DONE]" : "request failed";
        return out;
    }
    ExtractedCode code = extract_code(r.content, p.entry_point);
    out.code_source = code.source;
    out.code = code.code;
    if (code.code.empty()) {
        out.error_class = "no_code";
        out.message = code.source == "reasoning_only" ? "the reply was all reasoning"
                                                      : "no code block in the reply";
        if (r.finish_reason == "length") out.message += " (finish_reason length: max_tokens)";
        return out;
    }
    auto e = execute_solution(code.code, p.test, p.entry_point, exec);
    if (!e.is_ok()) return e.status();
    out.passed = e->passed;
    out.error_class = e->error_class;
    out.message = e->message;
    out.exec_s = e->wall_s;
    return out;
}

Result<std::vector<ProblemResult>> run_code_eval(const std::vector<Problem>& problems,
                                                 const CodeEvalOptions& o) {
    if (problems.empty()) return invalid_argument("no problems");
    std::vector<bench::FixtureRequest> fixture;
    for (const auto& p : problems)
        fixture.push_back({"/v1/chat/completions", 0, problem_request(p, o)});
    bench::LoadgenOptions lo;
    lo.url = o.url;
    lo.api_key = o.api_key;
    lo.clients = o.concurrency;
    lo.requests = int64_t(problems.size());
    lo.threads = o.threads;
    lo.pass_timeout_s = o.timeout_s;
    lo.keep_full_text = true;
    auto pass = bench::run_pass(lo, fixture);
    if (!pass.is_ok()) return pass.status();
    std::vector<bench::RequestRecord>& records = pass->records;
    records.resize(problems.size());  // requests a timeout left unsent stay empty: incomplete

    // Every request failed: nothing was evaluated, and the cause is one fix away (a wrong
    // --url, --model or --api-key). Stop with the kinds instead of writing a file of failures.
    std::map<std::string, int64_t> kinds;
    for (const auto& r : records)
        if (!r.error.empty()) ++kinds[r.error];
    int64_t num_failed = 0;
    std::string what;
    for (const auto& [k, n] : kinds) {
        num_failed += n;
        what += fmt::format("{}{} x {}", what.empty() ? "" : ", ", k, n);
    }
    if (num_failed == int64_t(records.size())) {
        const bool transport = kinds.count("connect") || kinds.count("write") || kinds.count("read");
        std::string hint = kinds.count("http_404") ? " (is --model a model the server serves?)"
                           : kinds.count("http_401") ? " (--api-key?)"
                                                     : "";
        return io_error(fmt::format("{} http://{}:{} ({} of {} failed: {}){}",
                                    transport ? "no request reached" : "every request failed at",
                                    o.url.host, o.url.port, num_failed, records.size(), what,
                                    hint));
    }

    std::vector<ProblemResult> results(problems.size());
    std::vector<Status> errors(problems.size());
    std::atomic<size_t> next{0};
    auto work = [&] {
        for (size_t i; (i = next.fetch_add(1)) < problems.size();) {
            auto r = judge_record(problems[i], records[i], o.exec);
            if (r.is_ok())
                results[i] = std::move(*r);
            else
                errors[i] = r.status();
        }
    };
    std::vector<std::thread> pool;
    for (int j = 0; j < std::max(1, o.jobs); ++j) pool.emplace_back(work);
    for (auto& t : pool) t.join();
    for (const auto& s : errors)
        if (!s.is_ok()) return s;
    return results;
}

nlohmann::ordered_json result_json(const ProblemResult& r) {
    return {{"task_id", r.task_id},
            {"passed", r.passed},
            {"error_class", r.error_class},
            {"message", r.message},
            {"code_source", r.code_source},
            {"completion_tokens", r.completion_tokens},
            {"reasoning_tokens", r.reasoning_tokens},
            {"reasoning_tokens_source", r.reasoning_tokens_source},
            {"prompt_tokens", r.prompt_tokens},
            {"latency_s", r.latency_s},
            {"ttft_s", r.ttft_s},
            {"finish_reason", r.finish_reason},
            {"exec_s", r.exec_s},
            {"code", r.code}};
}

Status write_results(const std::string& path, const std::vector<ProblemResult>& results) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    for (const auto& r : results)
        f << result_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    if (!f) return io_error("cannot write '" + path + "'");
    return Status::ok();
}

Result<std::vector<ProblemResult>> read_results(const std::string& path) {
    std::ifstream f(path);
    if (!f) return not_found("cannot open results file '" + path + "'");
    std::vector<ProblemResult> out;
    std::string line;
    for (int64_t n = 1; std::getline(f, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto where = fmt::format("{}:{}", path, n);
        nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) return corrupt_data(where + ": not a JSON object");
        if (!j.contains("task_id") || !j["task_id"].is_string() || !j.contains("passed") ||
            !j["passed"].is_boolean())
            return corrupt_data(where + ": needs \"task_id\" (string) and \"passed\" (boolean)");
        ProblemResult r;
        r.task_id = j["task_id"].get<std::string>();
        r.passed = j["passed"].get<bool>();
        auto str = [&](const char* k) {
            auto it = j.find(k);
            return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
        };
        auto num = [&](const char* k, double fallback) {
            auto it = j.find(k);
            return it != j.end() && it->is_number() ? it->get<double>() : fallback;
        };
        r.error_class = str("error_class");
        r.message = str("message");
        r.code_source = str("code_source");
        r.code = str("code");
        r.finish_reason = str("finish_reason");
        r.reasoning_tokens_source = str("reasoning_tokens_source");
        r.completion_tokens = int64_t(num("completion_tokens", 0));
        r.reasoning_tokens = int64_t(num("reasoning_tokens", 0));
        r.prompt_tokens = int64_t(num("prompt_tokens", 0));
        r.latency_s = num("latency_s", 0);
        r.ttft_s = num("ttft_s", -1);
        r.exec_s = num("exec_s", 0);
        out.push_back(std::move(r));
    }
    if (out.empty()) return corrupt_data("results file '" + path + "' holds no results");
    return out;
}

}  // namespace qs::eval
