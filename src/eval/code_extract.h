// Finds the program in a model's reply (`eval code`). Rules, in order:
//   1. Reasoning is not code: text up to the last "</think>" is dropped (a server that does not
//      split reasoning leaves it in the content); a "<think>" never closed means the whole reply
//      was reasoning (no code). The server's separate reasoning_content is never searched.
//   2. Fenced blocks (``` or ~~~, three or more, optional language tag; an unclosed last fence runs
//      to the end): among blocks tagged python/py/python3 or untagged, the last one that defines
//      the entry point ("def NAME(" or "class NAME"); else the last python-tagged block; else the
//      last untagged one. Blocks tagged with another language are ignored.
//   3. No fences: the whole reply when it defines the entry point, else nothing.
// Pure functions; the eval's main thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace qs::eval {

struct FencedBlock {
    std::string lang;  // lower-cased info string's first word; empty when untagged
    std::string code;
    bool closed = true;
};
std::vector<FencedBlock> fenced_blocks(std::string_view text);

// Text after the reasoning (rule 1); `all_reasoning` set when "<think>" was never closed.
std::string strip_reasoning(std::string_view content, bool* all_reasoning = nullptr);

struct ExtractedCode {
    std::string code;  // empty: nothing found
    std::string
        source;  // "fence:python", "fence:untagged", "whole_reply", "none", "reasoning_only"
};
ExtractedCode extract_code(std::string_view content, const std::string& entry_point);

// "def NAME(" or "class NAME" at the start of a line (any indentation), or "NAME = ".
bool defines(std::string_view code, const std::string& name);

}  // namespace qs::eval
