// The HTTP/1.1 transport: an Asio acceptor and Beast-parsed sessions with keep-alive; the headers
// are read first and admitted (API key, the route's body limit: request_guard) before the body,
// so a refused request (401, 413) transfers no body; idle and write-stall timeouts, chunked SSE
// streaming with a bounded per-connection buffer, and disconnect detection while a request is
// being served (a read kept pending on the socket), which fires the Exchange's close callbacks so
// the request gets aborted. Each connection runs on its own strand over a small pool of I/O
// threads. This header hides Asio and Beast; http_server.cpp is the only translation unit that
// includes them.
// Lifetime: stop() joins the I/O threads; anything that may still hold an Exchange (the engine's
// sinks) must be destroyed before the HttpServer itself.
#pragma once

#include <functional>
#include <memory>

#include "core/status.h"
#include "server/http_types.h"
#include "server/server_state.h"

namespace qs {

class HttpServer {
public:
    using Handler = std::function<void(HttpRequest, std::shared_ptr<Exchange>)>;

    // metrics may be null. Nothing happens until start().
    HttpServer(const ServerOptions& options, Handler handler, ServerMetrics* metrics);
    ~HttpServer();

    // Binds host:port (port 0: any free port), listens and starts the I/O threads.
    Status start();
    int port() const;
    // Closes the listening socket; connections already open are served until they end.
    void stop_accepting();
    // Closes idle keep-alive connections (graceful shutdown: busy ones finish first).
    void close_idle_connections();
    size_t num_connections() const;
    // Closes every connection and joins the I/O threads. Idempotent.
    void stop();

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace qs
