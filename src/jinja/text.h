// Python string operations the built-ins share: code points (len, indexing, slicing act on
// them, not bytes), case mapping (utf8proc's simple mappings, as str.lower/upper for all but
// the few special-cased characters), str.title, str.split, str.splitlines. Pure functions.
#pragma once

#include <string>
#include <vector>

namespace qs::jinja {

// One string per code point (invalid bytes: one each).
std::vector<std::string> code_point_strings(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_upper(const std::string& s);
// str.title(): a cased letter after an uncased character is upper-cased, others lower-cased.
std::string py_title(const std::string& s);
// str.capitalize(): the first character title-cased, the rest lower-cased; first_upper:
// upper-cased instead (jinja2's title filter: word[0].upper() + word[1:].lower()).
std::string py_capitalize(const std::string& s, bool first_upper = false);
// str.split(sep, maxsplit): with no separator, runs of whitespace split and ends are dropped.
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit);
// str.rsplit(sep, maxsplit).
std::vector<std::string> py_rsplit(const std::string& s, const std::string* sep, int64_t maxsplit);
// str.splitlines() (keepends=False).
std::vector<std::string> py_splitlines(const std::string& s);
// str.replace(old, new, count) (count < 0: all).
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);

}  // namespace qs::jinja
