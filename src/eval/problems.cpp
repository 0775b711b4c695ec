// Problem files and the built-in problem set (see problems.h).
#include "eval/problems.h"

#include <fstream>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace qs::eval {

namespace {

struct Builtin {
    const char* id;
    const char* entry;
    const char* task;      // what to write, after "Write a Python function "
    const char* test;      // check(candidate)
    const char* solution;  // a correct answer (no "]]": the fake engine's reply marker ends there)
};

const Builtin kBuiltins[] = {
    {"qs/sum_of_squares", "sum_of_squares",
     "`sum_of_squares(n)` that returns 1*1 + 2*2 + ... + n*n for an integer n >= 0 (0 for n = 0).",
     "def check(candidate):\n    assert candidate(0) == 0\n    assert candidate(1) == 1\n"
     "    assert candidate(3) == 14\n    assert candidate(10) == 385\n"
     "    assert candidate(1000) == 333833500\n",
     "def sum_of_squares(n):\n    return sum(k * k for k in range(1, n + 1))\n"},
    {"qs/is_palindrome", "is_palindrome",
     "`is_palindrome(s)` that tells whether the string s reads the same backwards when only its "
     "letters and digits are kept and case is ignored.",
     "def check(candidate):\n    assert candidate('A man, a plan, a canal: Panama') is True\n"
     "    assert candidate('race a car') is False\n    assert candidate('') is True\n"
     "    assert candidate('No lemon, no melon') is True\n    assert candidate('ab') is False\n",
     "def is_palindrome(s):\n    t = [c.lower() for c in s if c.isalnum()]\n"
     "    return t == t[::-1]\n"},
    {"qs/fizzbuzz", "fizzbuzz",
     "`fizzbuzz(n)` that returns a list of strings for 1..n: 'Fizz' for multiples of 3, 'Buzz' "
     "for multiples of 5, 'FizzBuzz' for multiples of both, else the number as a string.",
     "def check(candidate):\n    assert candidate(0) == []\n"
     "    assert candidate(5) == ['1', '2', 'Fizz', '4', 'Buzz']\n"
     "    assert candidate(15)[-1] == 'FizzBuzz'\n    assert len(candidate(100)) == 100\n"
     "    assert candidate(100).count('FizzBuzz') == 6\n",
     "def fizzbuzz(n):\n    out = []\n    for i in range(1, n + 1):\n"
     "        s = ('Fizz' if i % 3 == 0 else '') + ('Buzz' if i % 5 == 0 else '')\n"
     "        out.append(s or str(i))\n    return out\n"},
    {"qs/second_largest", "second_largest",
     "`second_largest(nums)` that returns the second largest distinct value of a list of "
     "integers, or None when there are fewer than two distinct values.",
     "def check(candidate):\n    assert candidate([3, 1, 4, 1, 5]) == 4\n"
     "    assert candidate([2, 2, 2]) is None\n    assert candidate([]) is None\n"
     "    assert candidate([-1, -5]) == -5\n    assert candidate([7, 7, 6]) == 6\n",
     "def second_largest(nums):\n    d = sorted(set(nums))\n"
     "    return d[-2] if len(d) >= 2 else None\n"},
    {"qs/run_length_encode", "run_length_encode",
     "`run_length_encode(s)` that encodes a string as each run's character followed by its "
     "length: 'aaabcc' becomes 'a3b1c2'; the empty string stays empty.",
     "def check(candidate):\n    assert candidate('aaabcc') == 'a3b1c2'\n"
     "    assert candidate('') == ''\n    assert candidate('a') == 'a1'\n"
     "    assert candidate('aaaaaaaaaaaa') == 'a12'\n    assert candidate('abab') == 'a1b1a1b1'\n",
     "def run_length_encode(s):\n    out = []\n    i = 0\n    while i < len(s):\n"
     "        j = i\n        while j < len(s) and s[j] == s[i]:\n            j += 1\n"
     "        out.append(s[i] + str(j - i))\n        i = j\n    return ''.join(out)\n"},
    {"qs/merge_intervals", "merge_intervals",
     "`merge_intervals(intervals)` that takes a list of (start, end) pairs with start <= end and "
     "returns the merged, sorted list of tuples; touching intervals such as (1, 2) and (2, 3) "
     "merge.",
     "def check(candidate):\n    assert candidate([]) == []\n"
     "    assert candidate([(1, 3), (2, 6), (8, 10), (15, 18)]) == [(1, 6), (8, 10), (15, 18)]\n"
     "    assert candidate([(1, 4), (4, 5)]) == [(1, 5)]\n"
     "    assert candidate([(5, 6), (1, 2)]) == [(1, 2), (5, 6)]\n"
     "    assert candidate([(1, 10), (2, 3)]) == [(1, 10)]\n",
     "def merge_intervals(intervals):\n    out = []\n    for s, e in sorted(intervals):\n"
     "        if out and s <= out[-1][1]:\n            out[-1] = (out[-1][0], max(out[-1][1], e))\n"
     "        else:\n            out.append((s, e))\n    return out\n"},
    {"qs/word_frequencies", "word_frequencies",
     "`word_frequencies(text)` that returns a dict from each lower-cased word to its count, where "
     "a word is a maximal run of ASCII letters.",
     "def check(candidate):\n    assert candidate('') == {}\n"
     "    assert candidate('The cat; the HAT.') == {'the': 2, 'cat': 1, 'hat': 1}\n"
     "    assert candidate('a1a 2b') == {'a': 2, 'b': 1}\n",
     "import re\n\ndef word_frequencies(text):\n    counts = {}\n"
     "    for w in re.findall('[A-Za-z]+', text):\n        w = w.lower()\n"
     "        counts[w] = counts.get(w, 0) + 1\n    return counts\n"},
    {"qs/is_balanced", "is_balanced",
     "`is_balanced(s)` that tells whether the brackets (), [] and {} in s are balanced and "
     "properly nested; other characters are ignored.",
     "def check(candidate):\n    assert candidate('') is True\n"
     "    assert candidate('([]{})') is True\n"
     "    assert candidate('([)]') is False\n    assert candidate('((') is False\n"
     "    assert candidate('a(b)c') is True\n    assert candidate(')(') is False\n",
     "def is_balanced(s):\n    pairs = {')': '(', ']': '[', '}': '{'}\n    stack = []\n"
     "    for c in s:\n        if c in '([{':\n            stack.append(c)\n"
     "        elif c in pairs:\n            if not stack or stack.pop() != pairs[c]:\n"
     "                return False\n    return not stack\n"},
    {"qs/rotate_matrix", "rotate_matrix",
     "`rotate_matrix(m)` that returns a new matrix (a list of lists) that is m rotated 90 degrees "
     "clockwise; m is rectangular and may be empty.",
     "def check(candidate):\n    assert candidate([]) == []\n"
     "    assert candidate([[1, 2], [3, 4]]) == [[3, 1], [4, 2]]\n"
     "    assert candidate([[1, 2, 3]]) == [[1], [2], [3]]\n"
     "    m = [[1, 2], [3, 4]]\n    candidate(m)\n    assert m == [[1, 2], [3, 4]]\n",
     "def rotate_matrix(m):\n    if not m:\n        return []\n"
     "    return [list(row) for row in zip(*m[::-1])]\n"},
    {"qs/nth_prime", "nth_prime",
     "`nth_prime(n)` that returns the n-th prime number, counting from nth_prime(1) == 2.",
     "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n"
     "    assert candidate(6) == 13\n    assert candidate(100) == 541\n"
     "    assert candidate(1000) == 7919\n",
     "def nth_prime(n):\n    count, k = 0, 1\n    while count < n:\n        k += 1\n"
     "        if all(k % d for d in range(2, int(k ** 0.5) + 1)):\n            count += 1\n"
     "    return k\n"},
};

const std::string* string_field(const nlohmann::json& j, const char* name) {
    auto it = j.find(name);
    if (it == j.end() || !it->is_string()) return nullptr;
    return &it->get_ref<const std::string&>();
}

}  // namespace

Result<Problem> parse_problem(const std::string& line, const std::string& prompt_field,
                              const std::string& where) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return corrupt_data(where + ": not a JSON object");
    Problem p;
    std::string pf = prompt_field;
    if (pf.empty()) pf = j.contains("prompt") ? "prompt" : "instruct_prompt";
    const std::pair<const char*, std::string*> required[] = {{"task_id", &p.task_id},
                                                             {pf.c_str(), &p.prompt},
                                                             {"entry_point", &p.entry_point},
                                                             {"test", &p.test}};
    for (auto [name, dst] : required) {
        const std::string* s = string_field(j, name);
        if (!s || s->empty())
            return corrupt_data(fmt::format("{}: \"{}\" must be a non-empty string", where, name));
        *dst = *s;
    }
    if (const std::string* s = string_field(j, "system")) p.system = *s;
    if (const std::string* s = string_field(j, "canonical_solution")) p.canonical_solution = *s;
    return p;
}

Result<std::vector<Problem>> read_problems(const std::string& path,
                                           const std::string& prompt_field) {
    std::ifstream f(path);
    if (!f) return not_found("cannot open problem file '" + path + "'");
    std::vector<Problem> out;
    std::set<std::string> ids;
    std::string line;
    for (int64_t n = 1; std::getline(f, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        auto p = parse_problem(line, prompt_field, fmt::format("{}:{}", path, n));
        if (!p.is_ok()) return p.status();
        if (!ids.insert(p->task_id).second)
            return corrupt_data(
                fmt::format("{}:{}: task_id '{}' appears twice", path, n, p->task_id));
        out.push_back(std::move(*p));
    }
    if (out.empty()) return corrupt_data("problem file '" + path + "' holds no problems");
    return out;
}

std::vector<Problem> builtin_problems() {
    std::vector<Problem> v;
    for (const auto& b : kBuiltins) {
        Problem p;
        p.task_id = b.id;
        p.entry_point = b.entry;
        p.prompt = fmt::format(
            "Write a Python function {}\nReply with the complete function (and any imports it "
            "needs) in one ```python code block.",
            b.task);
        p.test = b.test;
        p.canonical_solution = b.solution;
        v.push_back(std::move(p));
    }
    return v;
}

std::string problem_line(const Problem& p) {
    nlohmann::ordered_json j = {{"task_id", p.task_id},
                                {"prompt", p.prompt},
                                {"entry_point", p.entry_point},
                                {"test", p.test}};
    if (!p.system.empty()) j["system"] = p.system;
    if (!p.canonical_solution.empty()) j["canonical_solution"] = p.canonical_solution;
    return j.dump();
}

}  // namespace qs::eval
