// OpenAI error bodies and the Status → HTTP status mapping (see api_error.h).
#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace qs {

ApiError ApiError::bad_request(std::string message, std::string param) {
    ApiError e;
    e.message = std::move(message);
    e.param = std::move(param);
    return e;
}

ApiError api_error_from_status(const Status& status, std::string param) {
    ApiError e;
    e.message = status.is_ok() ? "ok" : status.message();
    e.param = std::move(param);
    if (status.is_ok()) return e;
    switch (status.kind()) {
        case ErrorKind::kInvalidArgument:
            e.http_status = 400;
            break;
        case ErrorKind::kNotFound:
            e.http_status = 404;
            e.type = "not_found_error";
            break;
        case ErrorKind::kUnsupported:
            e.http_status = 400;
            e.code = "unsupported_value";
            break;
        case ErrorKind::kResourceExhausted:
            e.http_status = 429;
            e.type = "rate_limit_error";
            e.code = "server_overloaded";
            e.retry_after_s = 1;
            break;
        case ErrorKind::kCorruptData:
        case ErrorKind::kIo:
        case ErrorKind::kInternal:
            e.http_status = 500;
            e.type = "internal_error";
            break;
    }
    return e;
}

std::string api_error_body(const ApiError& error) {
    nlohmann::json j;
    j["error"]["message"] = error.message;
    j["error"]["type"] = error.type;
    j["error"]["param"] = error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param);
    j["error"]["code"] = error.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.code);
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpResponse api_error_response(const ApiError& error) {
    HttpResponse r;
    r.status = error.http_status;
    r.body = api_error_body(error);
    if (error.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(error.retry_after_s));
    return r;
}

}  // namespace qs
