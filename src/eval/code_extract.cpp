// Code extraction from replies (see code_extract.h).
#include "eval/code_extract.h"

#include <cctype>

namespace qs::eval {

namespace {

std::string lower(std::string_view s) {
    std::string r(s);
    for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
    return r;
}

bool is_python_tag(const std::string& lang) {
    return lang == "python" || lang == "py" || lang == "python3";
}

// Splits text into lines without their '\n'.
std::vector<std::string_view> lines_of(std::string_view text) {
    std::vector<std::string_view> lines;
    size_t begin = 0;
    while (begin <= text.size()) {
        size_t nl = text.find('\n', begin);
        if (nl == std::string_view::npos) {
            lines.push_back(text.substr(begin));
            break;
        }
        lines.push_back(text.substr(begin, nl - begin));
        begin = nl + 1;
    }
    return lines;
}

// A fence line: optional indentation up to 3 spaces, then >= 3 backticks or tildes.
bool fence_of(std::string_view line, char* ch, size_t* len, std::string_view* info) {
    size_t i = 0;
    while (i < line.size() && i < 3 && line[i] == ' ') ++i;
    if (i >= line.size() || (line[i] != '`' && line[i] != '~')) return false;
    char c = line[i];
    size_t j = i;
    while (j < line.size() && line[j] == c) ++j;
    if (j - i < 3) return false;
    *ch = c;
    *len = j - i;
    *info = line.substr(j);
    return true;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

}  // namespace

std::vector<FencedBlock> fenced_blocks(std::string_view text) {
    std::vector<FencedBlock> blocks;
    auto lines = lines_of(text);
    for (size_t i = 0; i < lines.size(); ++i) {
        char ch;
        size_t len;
        std::string_view info;
        if (!fence_of(lines[i], &ch, &len, &info)) continue;
        FencedBlock b;
        std::string_view tag = trim(info);
        b.lang = lower(tag.substr(0, tag.find_first_of(" \t{")));
        b.closed = false;
        size_t k = i + 1;
        for (; k < lines.size(); ++k) {
            char ch2;
            size_t len2;
            std::string_view info2;
            if (fence_of(lines[k], &ch2, &len2, &info2) && ch2 == ch && len2 >= len &&
                trim(info2).empty()) {
                b.closed = true;
                break;
            }
            b.code.append(lines[k]);
            b.code += '\n';
        }
        blocks.push_back(std::move(b));
        i = k;
    }
    return blocks;
}

std::string strip_reasoning(std::string_view content, bool* all_reasoning) {
    if (all_reasoning) *all_reasoning = false;
    size_t close = content.rfind("</think>");
    if (close != std::string_view::npos) return std::string(content.substr(close + 8));
    if (content.find("<think>") != std::string_view::npos) {
        if (all_reasoning) *all_reasoning = true;
        return std::string(content.substr(0, content.find("<think>")));
    }
    return std::string(content);
}

bool defines(std::string_view code, const std::string& name) {
    if (name.empty()) return false;
    for (std::string_view line : lines_of(code)) {
        std::string_view t = line;
        while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
        if (t.substr(0, 6) == "async ") t.remove_prefix(6);
        for (std::string_view kw : {std::string_view("def "), std::string_view("class ")}) {
            if (t.substr(0, kw.size()) != kw) continue;
            std::string_view rest = trim(t.substr(kw.size()));
            if (rest.substr(0, name.size()) == name && rest.size() > name.size() &&
                (rest[name.size()] == '(' || rest[name.size()] == ':' || rest[name.size()] == ' '))
                return true;
        }
        if (t.substr(0, name.size()) == name) {
            std::string_view rest = trim(t.substr(name.size()));
            if (!rest.empty() && rest.front() == '=' && rest.substr(0, 2) != "==") return true;
        }
    }
    return false;
}

ExtractedCode extract_code(std::string_view content, const std::string& entry_point) {
    bool all_reasoning = false;
    std::string text = strip_reasoning(content, &all_reasoning);
    auto blocks = fenced_blocks(text);
    const FencedBlock* with_entry = nullptr;
    const FencedBlock* last_python = nullptr;
    const FencedBlock* last_untagged = nullptr;
    for (const auto& b : blocks) {
        bool py = is_python_tag(b.lang);
        if (!py && !b.lang.empty()) continue;
        if (defines(b.code, entry_point)) with_entry = &b;
        if (py) last_python = &b;
        if (b.lang.empty()) last_untagged = &b;
    }
    auto from = [](const FencedBlock* b) {
        return ExtractedCode{b->code, b->lang.empty() ? "fence:untagged" : "fence:" + b->lang};
    };
    if (with_entry) return from(with_entry);
    if (last_python) return from(last_python);
    if (last_untagged) return from(last_untagged);
    if (blocks.empty() && defines(text, entry_point)) return {text, "whole_reply"};
    return {"", all_reasoning && text.empty() ? "reasoning_only" : "none"};
}

}  // namespace qs::eval
