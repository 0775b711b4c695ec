// The HTTP vocabulary shared by the transport (http_server.cpp, the only file that sees Asio and
// Beast) and the routes: a parsed request, a complete response, and Exchange, the routes' handle
// on one request/response exchange of a connection.
// Threads: every Exchange method must be called on the connection's strand, i.e. inside
// Router::handle or inside a function given to Exchange::post. post itself may be called from
// any thread (the engine thread's sinks use it to hand outputs over).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace qs {

struct HttpRequest {
    std::string method;                         // "GET", "POST", ...
    std::string target;                         // "/v1/chat/completions?x=1"
    std::string path;                           // target without the query
    std::map<std::string, std::string> headers; // names lower-cased
    std::string body;

    std::string header(const std::string& lower_name) const {
        auto it = headers.find(lower_name);
        return it == headers.end() ? std::string() : it->second;
    }
};

struct HttpResponse {
    int status = 200;
    std::string content_type = "application/json";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

class Exchange {
public:
    virtual ~Exchange() = default;

    // Runs fn on the connection's strand (from any thread). If the connection is gone, fn still
    // runs and the other methods are no-ops, so callers need no liveness checks.
    virtual void post(std::function<void()> fn) = 0;
    // Runs fn on the strand once `seconds` have passed (from any thread; like post, it runs
    // whether or not the connection is still there), unless the returned canceller (to be called
    // on the strand) has run first. Deadlines: --request-timeout-s.
    virtual std::function<void()> post_after(double seconds, std::function<void()> fn) = 0;

    // Sends a complete response; ends the exchange.
    virtual void respond(HttpResponse response) = 0;

    // Streaming: a 200 with chunked transfer encoding, then one chunk per write_stream call.
    virtual void start_stream(std::string content_type) = 0;
    // Queues bytes. Returns false when the connection is closed or when the bytes not yet taken by
    // the client exceed the per-connection bound; in the latter case the connection is closed and
    // the close callbacks run (the request gets aborted).
    virtual bool write_stream(std::string data) = 0;
    // Ends the stream (last chunk); ends the exchange.
    virtual void end_stream() = 0;

    // Registers a callback run once, on the strand, if the client goes away (or overflows its
    // buffer) before the exchange ends. Runs at once if that already happened.
    virtual void on_close(std::function<void()> callback) = 0;
    virtual bool closed() const = 0;
};

}  // namespace qs
