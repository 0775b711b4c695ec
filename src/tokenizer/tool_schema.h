// The tools of a request, reduced to what the tool-call parser needs: for each function name,
// the JSON-schema type of each parameter. Converts a parameter's raw text from the Qwen3.5/3.6
// XML format into a typed JSON value the way vLLM's qwen3_coder parser does: "null" -> null;
// integer / number / boolean by the declared type; object, array and unknown types parsed as
// JSON when they parse; strings (and anything that fails to convert, such as "nan" or "inf" for a
// number, which JSON cannot hold) kept as text. A parameter
// with an enum (or const) whose value, without surrounding whitespace, is one of its values
// (as text or as JSON) gets that value: a constrained decoder may put newlines around it. So
// does a string with minLength / maxLength / pattern / format: the value is trimmed (xgrammar's
// Qwen XML grammar puts free whitespace around such a value, outside it).
// Immutable after construction; any thread.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace qs::tok {

class ToolSchemas {
public:
    ToolSchemas() = default;
    // tools: the OpenAI `tools` array ({"type": "function", "function": {"name", "parameters"}}).
    static Result<ToolSchemas> from_json(const nlohmann::ordered_json& tools);
    // The same from JSON text; an error if it is not valid JSON.
    static Result<ToolSchemas> from_text(std::string_view tools_json);

    bool has_function(const std::string& name) const { return types_.count(name) != 0; }
    nlohmann::ordered_json convert(const std::string& function, const std::string& parameter,
                                   const std::string& raw) const;

private:
    // function -> parameter -> declared type ("" when absent or not a single type)
    std::map<std::string, std::map<std::string, std::string>> types_;
    // function -> parameter -> its "enum" values, plus "const" (when the schema has them)
    std::map<std::string, std::map<std::string, nlohmann::ordered_json>> enums_;
    // function -> parameters that are strings with minLength / maxLength / pattern / format
    std::map<std::string, std::map<std::string, bool>> bounded_strings_;
};

}  // namespace qs::tok
