// Loopback load test: 2,000 concurrent streaming completions against the fake engine, driven by
// one epoll thread. Every request must end with [DONE] or a proper 429/503 error within the time
// bound, and the engine's accounting must return to zero. Prints requests/s and the HTTP layer's
// added latency per token (engine sink call → chunk parsed by the client) at p50/p99; those
// numbers go to docs/PERF.md (they are printed, never asserted).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/epoll.h>

#include <algorithm>
#include <unordered_map>

#include "test_server.h"

namespace qs::testing {
namespace {

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Stream {
    int fd = -1;
    std::string out;       // request bytes not yet sent
    std::string in;        // received, not yet consumed
    int status = 0;
    bool done = false;
    bool proper_error = false;
    std::string id;
    std::vector<int64_t> recv_ns;  // per SSE event (except [DONE])
};

void run_load(int kStreams, int64_t max_running, int64_t max_waiting, int* num_errors) {
    constexpr double kTimeLimitS = 120.0;
    TestServerConfig cfg;
    cfg.server.io_threads = 2;
    cfg.server.max_in_flight = 4096;
    cfg.engine.max_running = max_running;
    cfg.engine.max_waiting = max_waiting;
    cfg.engine.step_interval = std::chrono::milliseconds(20);
    std::mutex emit_mu;
    std::unordered_map<std::string, std::vector<int64_t>> emit_ns;
    cfg.engine.on_emit = [&](const RequestOutput& o) {
        const int64_t t = now_ns();
        std::lock_guard<std::mutex> lock(emit_mu);
        emit_ns[o.request_id].push_back(t);
    };
    TestServer server(cfg);

    const std::string body = R"({"model":"test-model","prompt":"[[reply:0123456789abcdef]]","stream":true})";
    const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: l\r\nContent-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    const int ep = epoll_create1(0);
    std::vector<Stream> streams(kStreams);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(server.port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int64_t t0 = now_ns();
    for (int i = 0; i < kStreams; ++i) {
        Stream& s = streams[size_t(i)];
        s.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        ASSERT_GE(s.fd, 0);
        int one = 1;
        ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        ::connect(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
        s.out = request;
        epoll_event ev{};
        ev.events = EPOLLIN | EPOLLOUT;
        ev.data.u32 = uint32_t(i);
        epoll_ctl(ep, EPOLL_CTL_ADD, s.fd, &ev);
    }
    int num_done = 0;
    auto finish = [&](Stream& s) {
        if (s.done) return;
        s.done = true;
        ++num_done;
        epoll_ctl(ep, EPOLL_CTL_DEL, s.fd, nullptr);
        ::close(s.fd);
    };
    auto consume = [&](Stream& s, int64_t t) {
        if (s.status == 0) {
            const size_t he = s.in.find("\r\n\r\n");
            if (he == std::string::npos) return;
            s.status = std::stoi(s.in.substr(9, 3));
            if (s.status != 200) {
                // Content-Length bodies; a complete error body has "}}" at its end.
                if (s.in.find("\"error\"") != std::string::npos && s.in.size() >= 2 && s.in.substr(s.in.size() - 2) == "}}") {
                    s.proper_error = s.status == 429 || s.status == 503;
                    finish(s);
                }
                s.status = 0;
                return;
            }
            s.in.erase(0, he + 4);
        }
        size_t pos;
        while ((pos = s.in.find("data: ")) != std::string::npos) {
            const size_t end = s.in.find("\n\n", pos);
            if (end == std::string::npos) break;
            std::string_view ev(s.in.data() + pos + 6, end - pos - 6);
            if (ev == "[DONE]") {
                finish(s);
                return;
            }
            if (s.id.empty()) {
                const size_t k = ev.find("\"id\":\"");
                if (k != std::string_view::npos) s.id = std::string(ev.substr(k + 6, ev.find('"', k + 6) - k - 6));
            }
            s.recv_ns.push_back(t);
            s.in.erase(0, end + 2);
        }
    };
    std::vector<epoll_event> events(1024);
    char buf[65536];
    while (num_done < kStreams && double(now_ns() - t0) * 1e-9 < kTimeLimitS) {
        const int n = epoll_wait(ep, events.data(), int(events.size()), 100);
        const int64_t t = now_ns();
        for (int e = 0; e < n; ++e) {
            Stream& s = streams[events[size_t(e)].data.u32];
            if (s.done) continue;
            if ((events[size_t(e)].events & EPOLLOUT) && !s.out.empty()) {
                const ssize_t w = ::send(s.fd, s.out.data(), s.out.size(), MSG_NOSIGNAL);
                if (w > 0) s.out.erase(0, size_t(w));
                if (s.out.empty()) {
                    epoll_event ev{};
                    ev.events = EPOLLIN;
                    ev.data.u32 = events[size_t(e)].data.u32;
                    epoll_ctl(ep, EPOLL_CTL_MOD, s.fd, &ev);
                }
            }
            if (events[size_t(e)].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                while (true) {
                    const ssize_t r = ::recv(s.fd, buf, sizeof(buf), 0);
                    if (r > 0) {
                        s.in.append(buf, size_t(r));
                        continue;
                    }
                    if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) finish(s);
                    break;
                }
                if (!s.done) consume(s, t);
            }
        }
    }
    const double wall_s = double(now_ns() - t0) * 1e-9;
    ::close(ep);

    int completed = 0, proper_errors = 0, broken = 0;
    std::vector<double> added_ms;
    for (auto& s : streams) {
        if (!s.done) {
            ::close(s.fd);
            continue;
        }
        if (s.proper_error) {
            ++proper_errors;
            continue;
        }
        if (s.id.empty() || s.recv_ns.size() != 17) {
            ++broken;
            continue;
        }
        ++completed;
        std::lock_guard<std::mutex> lock(emit_mu);
        const auto& em = emit_ns[s.id];
        for (size_t k = 0; k < std::min(em.size(), s.recv_ns.size()); ++k) added_ms.push_back(double(s.recv_ns[k] - em[k]) * 1e-6);
    }
    std::sort(added_ms.begin(), added_ms.end());
    auto pct = [&](double p) { return added_ms.empty() ? 0.0 : added_ms[size_t(p * double(added_ms.size() - 1))]; };
    std::printf("load: %d streams, %d completed, %d proper errors (429/503), %d broken, %d hung; %.2f s wall, "
                "%.0f requests/s; HTTP added latency per token p50 %.3f ms, p99 %.3f ms (%zu tokens)\n",
                kStreams, completed, proper_errors, broken, kStreams - num_done, wall_s, double(completed) / wall_s,
                pct(0.5), pct(0.99), added_ms.size());
    EXPECT_EQ(num_done, kStreams) << "streams hung";
    EXPECT_EQ(broken, 0);
    EXPECT_EQ(completed + proper_errors, kStreams);
    EXPECT_TRUE(server.wait_idle(10.0));
    EXPECT_EQ(server.engine->num_live(), 0);
    EXPECT_EQ(server.engine->num_pages_used(), 0);
    EXPECT_EQ(server.state->metrics().in_flight.load(), 0);
    *num_errors = proper_errors;
}

// QS_LOAD_STREAMS overrides the count (for docs/PERF.md sweeps).
int load_streams() {
    const char* v = std::getenv("QS_LOAD_STREAMS");
    return v ? std::atoi(v) : 2000;
}

TEST(Load, TwoThousandConcurrentStreams) {
    int errors = 0;
    run_load(load_streams(), 4096, 4096, &errors);
    EXPECT_EQ(errors, 0);
}

// A small engine: most of the 2,000 get a proper 429 from the bounded waiting queue, none hangs.
TEST(Load, TwoThousandStreamsAgainstABoundedQueue) {
    int errors = 0;
    run_load(load_streams(), 64, 64, &errors);
    EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace qs::testing
