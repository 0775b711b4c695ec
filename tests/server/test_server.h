// Test harness for the server tests: a live HttpServer on a loopback port backed by FakeEngine
// and ByteTextPipeline, and a small blocking HTTP/1.1 client on POSIX sockets (no Beast here,
// to keep the tests quick to compile). Header-only; one instance per test.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "server/http_server.h"
#include "server/routes.h"
#include "server/testing/byte_text_pipeline.h"
#include "server/testing/fake_engine.h"

namespace qs::testing {

struct ClientResponse {
    int status = 0;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;                              // de-chunked
};

class TestConnection {
public:
    explicit TestConnection(int port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(uint16_t(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    }
    ~TestConnection() { close(); }
    bool ok() const { return ok_; }
    void close() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    // Shrinks the receive buffer (slow-reader tests); call before sending.
    void set_rcvbuf(int bytes) { ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)); }

    bool send_all(const std::string& data) {
        size_t off = 0;
        while (off < data.size()) {
            ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
            if (n <= 0) return false;
            off += size_t(n);
        }
        return true;
    }
    void send_request(const std::string& method, const std::string& path, const std::string& body = "",
                      const std::string& extra_headers = "") {
        send_all(method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
                 extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
    }
    // Reads bytes until `pred(buffer)` or EOF/timeout; returns false on EOF/timeout.
    template <typename Pred>
    bool read_until(Pred pred, double timeout_s = 10.0) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        while (!pred(buf_)) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return false;
            pollfd p{fd_, POLLIN, 0};
            if (::poll(&p, 1, int(left.count())) <= 0) continue;
            char tmp[16384];
            ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
            if (n <= 0) return false;
            buf_.append(tmp, size_t(n));
        }
        return true;
    }
    // One complete response (Content-Length or chunked).
    bool read_response(ClientResponse& r, double timeout_s = 10.0) {
        if (!read_until([](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; }, timeout_s)) return false;
        const size_t head_end = buf_.find("\r\n\r\n");
        const std::string head = buf_.substr(0, head_end);
        r = ClientResponse{};
        r.status = std::stoi(head.substr(9, 3));
        size_t pos = head.find("\r\n");
        while (pos != std::string::npos && pos < head.size()) {
            size_t next = head.find("\r\n", pos + 2);
            std::string line = head.substr(pos + 2, next == std::string::npos ? std::string::npos : next - pos - 2);
            size_t colon = line.find(':');
            if (colon != std::string::npos) {
                std::string k = line.substr(0, colon);
                for (char& c : k) c = char(std::tolower(static_cast<unsigned char>(c)));
                r.headers[k] = line.substr(colon + 2);
            }
            pos = next;
        }
        buf_.erase(0, head_end + 4);
        if (r.headers.count("content-length")) {
            const size_t len = std::stoul(r.headers["content-length"]);
            if (!read_until([&](const std::string& b) { return b.size() >= len; }, timeout_s)) return false;
            r.body = buf_.substr(0, len);
            buf_.erase(0, len);
            return true;
        }
        // Chunked.
        while (true) {
            if (!read_until([](const std::string& b) { return b.find("\r\n") != std::string::npos; }, timeout_s)) return false;
            const size_t eol = buf_.find("\r\n");
            const size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
            if (!read_until([&](const std::string& b) { return b.size() >= eol + 2 + size + 2; }, timeout_s)) return false;
            r.body += buf_.substr(eol + 2, size);
            buf_.erase(0, eol + 2 + size + 2);
            if (size == 0) return true;
        }
    }
    // True once the server closed the connection (EOF) within the timeout.
    bool wait_closed(double timeout_s = 5.0) {
        return !read_until([](const std::string&) { return false; }, timeout_s) && peer_closed();
    }
    bool peer_closed() {
        char c;
        return ::recv(fd_, &c, 1, MSG_DONTWAIT) == 0;
    }
    std::string& buffer() { return buf_; }
    int fd() const { return fd_; }

private:
    int fd_ = -1;
    bool ok_ = false;
    std::string buf_;
};

inline ClientResponse http_call(int port, const std::string& method, const std::string& path,
                                const std::string& body = "", const std::string& extra_headers = "") {
    TestConnection c(port);
    c.send_request(method, path, body, extra_headers);
    ClientResponse r;
    c.read_response(r);
    return r;
}

// Every "data: ..." payload of an SSE body, in order.
inline std::vector<std::string> sse_payloads(const std::string& body) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = body.find("data: ", pos)) != std::string::npos) {
        size_t end = body.find("\n\n", pos);
        out.push_back(body.substr(pos + 6, end - pos - 6));
        pos = end == std::string::npos ? body.size() : end + 2;
    }
    return out;
}

struct TestServerConfig {
    ServerOptions server;
    FakeEngineOptions engine;
    TestServerConfig() {
        server.port = 0;
        server.served_model_names = {"test-model"};
        server.io_threads = 2;
        server.worker_threads = 1;
        engine.step_interval = std::chrono::microseconds(500);
        engine.eos_ids = {ByteTextPipeline::kImEnd, ByteTextPipeline::kEndOfText};
    }
};

// Member order is destruction order in reverse: the engine (holding sinks → exchanges) goes
// first, then the state (workers), then the HTTP server (the io_context).
class TestServer {
public:
    explicit TestServer(TestServerConfig cfg = TestServerConfig()) {
        state = std::make_unique<ServerState>(cfg.server, &text);
        router = std::make_unique<Router>(*state);
        http = std::make_unique<HttpServer>(
            cfg.server, [r = router.get()](HttpRequest req, std::shared_ptr<Exchange> ex) { r->handle(std::move(req), std::move(ex)); },
            &state->metrics());
        QS_CHECK(http->start().is_ok());
        cfg.engine.token_bytes = [this](int32_t id) { return text.token_text(id); };
        cfg.engine.encode = [this](std::string_view s) { return text.encode(s); };
        engine = std::make_unique<FakeEngine>(cfg.engine);
        state->set_engine(engine.get());
    }
    ~TestServer() {
        http->stop();
        state->set_engine(nullptr);
        state.reset();
        engine.reset();
        http.reset();
    }
    int port() const { return http->port(); }

    // Waits until the engine holds no request and the HTTP layer has none in flight.
    bool wait_idle(double timeout_s = 5.0) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
        while (std::chrono::steady_clock::now() < deadline) {
            if (engine->num_live() == 0 && engine->num_pages_used() == 0 && state->metrics().in_flight.load() == 0 &&
                state->num_live() == 0)
                return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        return false;
    }

    ByteTextPipeline text;
    std::unique_ptr<HttpServer> http;
    std::unique_ptr<ServerState> state;
    std::unique_ptr<Router> router;
    std::unique_ptr<FakeEngine> engine;
};

}  // namespace qs::testing
