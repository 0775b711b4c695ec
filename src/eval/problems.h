// Code problems for `eval code`: a JSONL file, one problem per line, or the built-in set.
//   {"task_id": "qs/add", "prompt": "...", "entry_point": "add", "test": "def check(candidate):
//   ..."}
// Required: task_id (unique), prompt (the user message, sent verbatim), entry_point (the function
// the tests call), test (Python: a check(candidate) function, unittest.TestCase classes, or bare
// asserts; see eval/code_exec.h). Optional: system (a system message), canonical_solution (not
// sent; the tests use it). BigCodeBench files load as they are: without "prompt" the
// "instruct_prompt" field is the prompt (or the field named by prompt_field). Unknown fields are
// ignored. Main thread.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace qs::eval {

struct Problem {
    std::string task_id;
    std::string prompt;
    std::string entry_point;
    std::string test;
    std::string system;              // optional
    std::string canonical_solution;  // optional, never sent
};

// prompt_field: the field holding the prompt ("" = "prompt", else "instruct_prompt").
// Errors name the file, the line and the field.
Result<std::vector<Problem>> read_problems(const std::string& path,
                                           const std::string& prompt_field = "");
// Parses one line (the same rules); `where` prefixes error messages.
Result<Problem> parse_problem(const std::string& line, const std::string& prompt_field,
                              const std::string& where);

// Ten small Python problems with check(candidate) tests and canonical solutions.
std::vector<Problem> builtin_problems();
std::string problem_line(const Problem& p);  // one JSON line, no newline

}  // namespace qs::eval
