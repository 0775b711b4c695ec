// Small helpers the request parsers (openai_parse, structured_output_parse) share: the 400
// errors they return and the lookup of an optional JSON field. Stateless; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/api_error.h"

namespace qs::request_json {

// A 400 naming the field.
inline ApiError bad(const std::string& param, const std::string& message) {
    return ApiError::bad_request(message, param);
}

// A 400 for a value the server understands but does not implement.
inline ApiError unsupported(const std::string& param, const std::string& message) {
    ApiError e = bad(param, message);
    e.code = "unsupported_value";
    return e;
}

// The field `name` of object `o`, or null when it is absent or JSON null.
inline const nlohmann::ordered_json* field(const nlohmann::ordered_json& o, const char* name) {
    auto it = o.find(name);
    if (it == o.end() || it->is_null()) return nullptr;
    return &*it;
}

}  // namespace qs::request_json
