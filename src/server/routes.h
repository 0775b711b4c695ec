// The URL map of the server: /v1/chat/completions, /v1/completions, /v1/models, /health,
// /metrics, /tokenize, /detokenize; the API key on every route (request_guard); 404/405 for the
// rest. Called on the
// connection strand for every parsed request; every path ends in exactly one respond() or one
// stream on the exchange.
#pragma once

#include <memory>

#include "server/http_types.h"
#include "server/server_state.h"

namespace qs {

class Router {
public:
    explicit Router(ServerState& state) : state_(state) {}
    void handle(HttpRequest request, std::shared_ptr<Exchange> exchange);

private:
    HttpResponse models() const;
    HttpResponse health() const;
    HttpResponse version() const;  // {"version", "git_hash"} (vLLM answers {"version"})
    HttpResponse metrics() const;
    HttpResponse tokenize(const HttpRequest& request) const;
    HttpResponse detokenize(const HttpRequest& request) const;

    ServerState& state_;
};

}  // namespace qs
