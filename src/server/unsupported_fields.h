// The request fields that OpenAI's chat/completions and completions APIs or vLLM's extensions
// define and this server does not implement: a request that sets one to anything but the value
// that asks for nothing gets a 400 naming the field (issue 13: never a silent no-op). The table
// is the single list; docs/API.md documents each entry (a test checks that it names them all).
// Stateless; runs on the worker pool.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string_view>

#include "server/api_error.h"
#include "server/openai_parse.h"

namespace qs {

enum ApiMask : uint8_t { kChatApi = 1, kCompletionApi = 2, kBothApis = 3 };

struct UnsupportedField {
    std::string_view name;      // top-level body field
    uint8_t apis;               // ApiMask: the endpoints on which it is refused
    std::string_view accepted;  // JSON array of the values that ask for nothing; "" = none
    std::string_view why;       // ends the error message
};

std::span<const UnsupportedField> unsupported_fields();

// The first field of `body` (a JSON object) that the table refuses for `kind`: a 400 with
// param = the field's name and code "unsupported_value".
std::optional<ApiError> check_unsupported_fields(const nlohmann::ordered_json& body, ApiKind kind);

}  // namespace qs
