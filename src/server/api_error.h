// OpenAI-shaped errors: an HTTP status plus {"error": {"message", "type", "param", "code"}}.
// Built from a Status (anything a user can cause) or directly. Stateless; any thread.
#pragma once

#include <string>

#include "core/status.h"
#include "server/http_types.h"

namespace qs {

struct ApiError {
    int http_status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;      // empty: null
    std::string code;       // empty: null
    int retry_after_s = 0;  // > 0: a Retry-After header

    static ApiError bad_request(std::string message, std::string param = "");
};

// Maps a Status kind to the HTTP status and error type; param names the offending field.
ApiError api_error_from_status(const Status& status, std::string param = "");

// The JSON body {"error": {...}}.
std::string api_error_body(const ApiError& error);
HttpResponse api_error_response(const ApiError& error);

}  // namespace qs
