// Request guard (see request_guard.h).
#include "server/request_guard.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/api_error.h"

namespace qs {

bool constant_time_equal(std::string_view given, std::string_view expected) {
    // One pass over `given`, always to its end; `expected` is read cyclically so its length does
    // not change the work done. The result is folded so that no branch depends on the bytes.
    if (expected.empty()) return given.empty();
    volatile unsigned char diff = given.size() == expected.size() ? 0 : 1;
    for (size_t i = 0; i < given.size(); ++i)
        diff = diff | (static_cast<unsigned char>(given[i]) ^
                       static_cast<unsigned char>(expected[i % expected.size()]));
    return diff == 0;
}

std::optional<HttpResponse> check_api_key(const ServerOptions& options, const HttpRequest& request) {
    if (options.api_key.empty()) return std::nullopt;
    if (options.open_health_metrics && (request.path == "/health" || request.path == "/ping" || request.path == "/metrics"))
        return std::nullopt;
    const std::string auth = request.header("authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool bearer = auth.size() >= kBearer.size() && std::string_view(auth).substr(0, kBearer.size()) == kBearer;
    if (bearer && constant_time_equal(std::string_view(auth).substr(kBearer.size()), options.api_key))
        return std::nullopt;
    ApiError e;
    e.http_status = 401;
    e.message = auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "incorrect API key provided";
    e.code = "invalid_api_key";
    HttpResponse r = api_error_response(e);
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
}

size_t body_limit_bytes(const ServerOptions& options, std::string_view method, std::string_view path) {
    const bool prompt_route = path == "/v1/chat/completions" || path == "/v1/completions" || path == "/tokenize" ||
                              path == "/detokenize";
    if (method == "POST" && prompt_route) return options.max_body_bytes;
    return std::min(kSmallBodyLimitBytes, options.max_body_bytes);
}

HttpResponse body_too_large(const HttpRequest& head, size_t limit, size_t size) {
    ApiError e;
    e.http_status = 413;
    e.message = size > 0 ? fmt::format("the request body ({} bytes) exceeds the limit of {} bytes for {} {}", size,
                                       limit, head.method, head.path)
                         : fmt::format("the request body exceeds the limit of {} bytes for {} {}", limit, head.method,
                                       head.path);
    e.code = "request_too_large";
    return api_error_response(e);
}

Admission admit(const ServerOptions& options, const HttpRequest& head, std::optional<size_t> content_length) {
    Admission a;
    a.body_limit = body_limit_bytes(options, head.method, head.path);
    if (auto r = check_api_key(options, head)) {
        a.reject = std::move(r);
        return a;
    }
    if (content_length && *content_length > a.body_limit)
        a.reject = body_too_large(head, a.body_limit, *content_length);
    return a;
}

}  // namespace qs
