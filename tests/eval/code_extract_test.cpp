// Code extraction from replies: fences (python, untagged, other languages, unclosed), the block
// that defines the entry point wins, reasoning left in the content is skipped, an unclosed
// <think> means no code, and a bare function without fences.
#include "eval/code_extract.h"

#include <gtest/gtest.h>

namespace qs::eval {
namespace {

TEST(CodeExtract, PicksTheBlockDefiningTheEntryPoint) {
    std::string reply =
        "Here is a helper:\n```python\ndef helper():\n    return 1\n```\nand the answer:\n"
        "```python\ndef add(a, b):\n    return a + b\n```\nAn example:\n```python\nprint(add(1, "
        "2))\n"
        "```\n";
    auto c = extract_code(reply, "add");
    EXPECT_EQ(c.code, "def add(a, b):\n    return a + b\n");
    EXPECT_EQ(c.source, "fence:python");
}

TEST(CodeExtract, FallsBackToTheLastPythonThenUntaggedBlock) {
    EXPECT_EQ(extract_code("```py\nx = 1\n```\n```python\ny = 2\n```", "f").code, "y = 2\n");
    auto u = extract_code("```\nz = 3\n```\n```bash\nls\n```", "f");
    EXPECT_EQ(u.code, "z = 3\n");
    EXPECT_EQ(u.source, "fence:untagged");
    EXPECT_EQ(extract_code("```bash\nls\n```", "f").source, "none");
}

TEST(CodeExtract, UnclosedFenceRunsToTheEnd) {
    auto c = extract_code("```python\ndef f():\n    return 2", "f");
    EXPECT_EQ(c.code, "def f():\n    return 2\n");
}

TEST(CodeExtract, TildesAndLongerFences) {
    EXPECT_EQ(extract_code("~~~python\ndef f(): pass\n~~~\n", "f").code, "def f(): pass\n");
    EXPECT_EQ(extract_code("````python\n```\ndef f(): pass\n````\n", "f").code,
              "```\ndef f(): pass\n");
}

TEST(CodeExtract, ReasoningIsNotCode) {
    std::string r =
        "<think>\nmaybe ```python\ndef f(): return 0\n```\n</think>\n\n```python\n"
        "def f():\n    return 1\n```";
    EXPECT_EQ(extract_code(r, "f").code, "def f():\n    return 1\n");
    auto only = extract_code("<think>\n```python\ndef f(): return 0\n```\n", "f");
    EXPECT_TRUE(only.code.empty());
    EXPECT_EQ(only.source, "reasoning_only");
    // The server split reasoning off and the content starts after </think>.
    EXPECT_EQ(extract_code("</think>\n```python\ndef f(): pass\n```", "f").code, "def f(): pass\n");
}

TEST(CodeExtract, BareFunctionWithoutFences) {
    auto c = extract_code("def f(x):\n    return x\n", "f");
    EXPECT_EQ(c.source, "whole_reply");
    EXPECT_TRUE(extract_code("I cannot do that.", "f").code.empty());
}

TEST(CodeExtract, Defines) {
    EXPECT_TRUE(defines("import os\n\ndef task_func(x):\n  pass", "task_func"));
    EXPECT_TRUE(defines("async def f():\n  pass", "f"));
    EXPECT_TRUE(defines("class Solver:\n  pass", "Solver"));
    EXPECT_TRUE(defines("f = lambda x: x", "f"));
    EXPECT_FALSE(defines("def fx():\n  pass", "f"));
    EXPECT_FALSE(defines("f == 2", "f"));
}

}  // namespace
}  // namespace qs::eval
