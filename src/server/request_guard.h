// What every request must pass before its body is read: the API key (compared in constant time,
// on every route; /health, /ping and /metrics only when ServerOptions::open_health_metrics is false)
// and the body size limit of its route (413 with an OpenAI error body). The transport calls
// admit() once the headers are in, so an unauthenticated or oversized request is refused without
// reading its body; Router::handle checks the key again for callers that bypass the transport.
// Pure functions of the options and the request head; any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "server/http_types.h"
#include "server/server_state.h"

namespace qs {

// Equal strings, in a time that depends on the length of `given` only (never on where the first
// difference is, nor on the length of `expected`).
bool constant_time_equal(std::string_view given, std::string_view expected);

// The 401 response when `request` lacks the key its path needs; nullopt when it may proceed.
std::optional<HttpResponse> check_api_key(const ServerOptions& options, const HttpRequest& request);

// The most body bytes `method path` accepts: max_body_bytes for the POST routes that take a
// prompt (/v1/chat/completions, /v1/completions, /tokenize, /detokenize), kSmallBodyLimitBytes
// (or max_body_bytes if smaller) for every other request.
inline constexpr size_t kSmallBodyLimitBytes = 4096;
size_t body_limit_bytes(const ServerOptions& options, std::string_view method, std::string_view path);

// The 413 response for a body over `limit` (`size` 0: the size is not known yet, chunked).
HttpResponse body_too_large(const HttpRequest& head, size_t limit, size_t size);

// The decision once the headers are in (method, path and headers of `head` are set; its body is
// not read yet): a response to send instead (401, 413), or the body limit to read with.
struct Admission {
    std::optional<HttpResponse> reject;
    size_t body_limit = 0;
};
Admission admit(const ServerOptions& options, const HttpRequest& head, std::optional<size_t> content_length);

}  // namespace qs
