// Load generator implementation (see loadgen.h): the only translation unit of the bench that
// includes Asio. Plain Asio sockets and our own HTTP/1.1 response reading (status line, headers,
// chunked or Content-Length or close-delimited body) keep it small; each de-chunked body piece is
// handed to an SseReader stamped with the time of the read that brought it in. Each client is a
// C++20 coroutine on one I/O thread's io_context; a client owns its socket and only writes the
// RequestRecord of the index it claimed from the shared atomic counter, so records need no lock.
// Open loop: each I/O thread runs a Dispatcher over the requests i ≡ thread (mod threads), which
// waits for each one's arrival time and hands it to an idle client of its own pool (or a new
// one, up to its share of the cap); records are written by the one client serving the index.
#include "bench/loadgen.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <charconv>
#include <memory>
#include <thread>

#include <boost/asio.hpp>
#include <fmt/format.h>

#include "bench/sse_reader.h"

namespace qs::bench {

namespace asio = boost::asio;
using asio::awaitable;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

Result<Url> parse_url(const std::string& url) {
    std::string rest = url;
    if (rest.rfind("https://", 0) == 0) return unsupported("https is not supported: '" + url + "'");
    if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
    if (auto slash = rest.find('/'); slash != std::string::npos) rest = rest.substr(0, slash);
    Url u;
    auto colon = rest.rfind(':');
    u.host = rest.substr(0, colon);
    if (colon != std::string::npos) {
        std::string p = rest.substr(colon + 1);
        auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), u.port);
        if (ec != std::errc() || ptr != p.data() + p.size() || u.port <= 0 || u.port > 65535)
            return invalid_argument("bad port in --url '" + url + "'");
    }
    if (u.host.empty()) return invalid_argument("no host in --url '" + url + "'");
    return u;
}

namespace {

constexpr auto kTok = asio::as_tuple(asio::use_awaitable);

struct Shared {
    tcp::resolver::results_type endpoints;
    std::vector<std::string> wire;  // full HTTP request per fixture entry
    std::vector<RequestRecord>* records = nullptr;
    std::atomic<int64_t> next{0};   // closed loop: the next index to claim
    std::vector<char> sent;         // open loop: [requests], set when request i was handed to a client
    std::vector<double> arrivals;   // open loop: send times
    std::atomic<bool> expired{false};
    bool keep_text = false;
    bool keep_full_text = false;
    Clock::time_point t0;
    double now() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }
};

class Client {
   public:
    Client(asio::io_context& io, Shared& sh) : sock_(io), sh_(sh) {}

    awaitable<void> run() {
        for (;;) {
            // A request cut by the pass timeout returns here while the watchdog is still stopping
            // the loops: claiming another then would record a request that was never really sent.
            if (sh_.expired.load()) break;
            int64_t i = sh_.next.fetch_add(1);
            if (i >= int64_t(sh_.records->size())) break;
            co_await one(i);
        }
        close();
    }

    // Serves request i (open loop: the dispatcher claimed it).
    awaitable<void> serve(int64_t i) { co_await one(i); }

   private:
    void close() {
        boost::system::error_code ec;
        sock_.close(ec);
        open_ = false;
        buf_.clear();
    }

    awaitable<bool> read_more() {
        if (sh_.expired.load(std::memory_order_relaxed)) co_return false;
        size_t old = buf_.size();
        buf_.resize(old + 16384);
        auto [ec, n] = co_await sock_.async_read_some(asio::buffer(buf_.data() + old, 16384), kTok);
        buf_.resize(old + n);
        last_read_s_ = sh_.now();
        co_return !ec;
    }

    awaitable<bool> connect() {
        auto [ec, ep] = co_await asio::async_connect(sock_, sh_.endpoints, kTok);
        if (ec) co_return false;
        sock_.set_option(tcp::no_delay(true), ec);
        open_ = true;
        co_return true;
    }

    awaitable<void> one(int64_t i) {
        RequestRecord& r = (*sh_.records)[size_t(i)];
        const std::string& wire = sh_.wire[size_t(i) % sh_.wire.size()];
        r.start_s = sh_.now();
        // A kept-alive connection the server closed while idle fails the write or ends before
        // the response head: retry once on a fresh connection. A fresh connection is not retried.
        size_t hend = std::string::npos;
        for (int attempt = 0;; ++attempt) {
            bool fresh = !open_;
            if (!open_ && !co_await connect()) {
                r.error = "connect";
                r.latency_s = sh_.now() - r.start_s;
                co_return;
            }
            auto [ec, n] = co_await asio::async_write(sock_, asio::buffer(wire), kTok);
            if (!ec) {
                while ((hend = buf_.find("\r\n\r\n")) == std::string::npos)
                    if (!co_await read_more()) break;
                if (hend != std::string::npos) break;
            }
            close();
            if (fresh || attempt > 0 || sh_.expired.load()) {
                r.error = ec ? "write" : "read";
                r.latency_s = sh_.now() - r.start_s;
                co_return;
            }
        }
        SseReader reader(&r, sh_.keep_text, sh_.keep_full_text);
        Head h = parse_head(std::string_view(buf_).substr(0, hend));
        buf_.erase(0, hend + 4);
        if (h.status != 200) {
            r.error = h.status == 0 ? "bad_response" : fmt::format("http_{}", h.status);
            close();
            reader.finish(sh_.now());
            co_return;
        }
        bool clean = co_await read_body(h, reader);
        reader.finish(sh_.now());
        if (!clean || h.close) close();
    }

    struct Head {
        int status = 0;
        bool chunked = false, close = false;
        int64_t content_length = -1;
    };

    static Head parse_head(std::string_view head) {
        Head h;
        if (head.size() > 12 && head.substr(0, 5) == "HTTP/") {
            std::from_chars(head.data() + 9, head.data() + 12, h.status);
        }
        size_t pos = head.find("\r\n");
        while (pos != std::string_view::npos) {
            size_t end = head.find("\r\n", pos + 2);
            std::string line(
                head.substr(pos + 2, end == std::string_view::npos ? end : end - pos - 2));
            for (auto& c : line) c = char(std::tolower(static_cast<unsigned char>(c)));
            if (line.rfind("transfer-encoding:", 0) == 0 &&
                line.find("chunked") != std::string::npos)
                h.chunked = true;
            else if (line.rfind("content-length:", 0) == 0)
                h.content_length = std::strtoll(line.c_str() + 15, nullptr, 10);
            else if (line.rfind("connection:", 0) == 0 && line.find("close") != std::string::npos)
                h.close = true;
            pos = end;
        }
        return h;
    }

    // Feeds up to `left` body bytes as they arrive; false if the connection ended first.
    awaitable<bool> pass_bytes(int64_t left, SseReader& reader) {
        for (;;) {
            size_t take = size_t(std::min<int64_t>(left, int64_t(buf_.size())));
            if (take > 0) {
                reader.feed(std::string_view(buf_.data(), take), last_read_s_);
                buf_.erase(0, take);
                left -= int64_t(take);
            }
            if (left == 0) co_return true;
            if (!co_await read_more()) co_return false;
        }
    }

    awaitable<bool> read_line(std::string& line) {
        size_t crlf;
        while ((crlf = buf_.find("\r\n")) == std::string::npos)
            if (!co_await read_more()) co_return false;
        line.assign(buf_, 0, crlf);
        buf_.erase(0, crlf + 2);
        co_return true;
    }

    // True when the body ended cleanly and the connection can be reused.
    awaitable<bool> read_body(const Head& h, SseReader& reader) {
        if (h.chunked) {
            std::string line;
            for (;;) {
                if (!co_await read_line(line)) co_return false;
                int64_t size = std::strtoll(line.c_str(), nullptr, 16);
                if (size == 0) {
                    do {  // trailers up to the empty line
                        if (!co_await read_line(line)) co_return false;
                    } while (!line.empty());
                    co_return true;
                }
                if (!co_await pass_bytes(size, reader)) co_return false;
                if (!co_await read_line(line) || !line.empty()) co_return false;
            }
        }
        if (h.content_length >= 0) co_return co_await pass_bytes(h.content_length, reader);
        co_await pass_bytes(INT64_MAX, reader);  // close-delimited
        co_return false;
    }

    tcp::socket sock_;
    Shared& sh_;
    std::string buf_;  // bytes read and not yet consumed
    bool open_ = false;
    double last_read_s_ = 0;
};

// Open loop on one I/O thread: sends its requests at their arrival times through a pool of
// keep-alive clients of at most `cap` connections.
class Dispatcher {
   public:
    Dispatcher(asio::io_context& io, Shared& sh, int64_t first, int64_t step, int64_t cap)
        : io_(io), sh_(sh), first_(first), step_(step), cap_(cap), wake_(io) {}

    awaitable<void> run() {
        asio::steady_timer timer(io_);
        const int64_t n = int64_t(sh_.records->size());
        for (int64_t i = first_; i < n; i += step_) {
            timer.expires_at(sh_.t0 + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(sh_.arrivals[size_t(i)])));
            co_await timer.async_wait(kTok);
            while (idle_.empty() && int64_t(pool_.size()) >= cap_ && !sh_.expired.load()) {
                wake_.expires_at(Clock::time_point::max());
                co_await wake_.async_wait(kTok);  // cancelled when a client comes free
            }
            if (sh_.expired.load()) break;
            Client* c;
            if (idle_.empty()) {
                pool_.push_back(std::make_unique<Client>(io_, sh_));
                c = pool_.back().get();
            } else {
                c = idle_.back();
                idle_.pop_back();
            }
            sh_.sent[size_t(i)] = 1;
            asio::co_spawn(io_, serve(c, i), asio::detached);
        }
    }

   private:
    awaitable<void> serve(Client* c, int64_t i) {
        co_await c->serve(i);
        idle_.push_back(c);
        wake_.cancel();
    }

    asio::io_context& io_;
    Shared& sh_;
    int64_t first_, step_, cap_;
    asio::steady_timer wake_;
    std::vector<std::unique_ptr<Client>> pool_;
    std::vector<Client*> idle_;
};

std::string wire_request(const Url& url, const std::string& api_key, const FixtureRequest& f) {
    nlohmann::json body = f.body;
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    std::string b = body.dump();
    std::string auth = api_key.empty() ? "" : "Authorization: Bearer " + api_key + "\r\n";
    return fmt::format(
        "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Type: application/json\r\n"
        "Accept: text/event-stream\r\n{}Content-Length: {}\r\n\r\n{}",
        f.endpoint, url.host, url.port, auth, b.size(), b);
}

}  // namespace

Result<PassResult> run_pass(const LoadgenOptions& o, const std::vector<FixtureRequest>& fixture) {
    if (fixture.empty()) return invalid_argument("the fixture holds no requests");
    if (o.clients <= 0 || o.requests <= 0 || o.threads <= 0)
        return invalid_argument("--clients, --requests and --threads must be positive");
    Shared sh;
    {
        asio::io_context io;
        tcp::resolver resolver(io);
        boost::system::error_code ec;
        sh.endpoints = resolver.resolve(o.url.host, std::to_string(o.url.port), ec);
        if (ec) return not_found(fmt::format("cannot resolve '{}': {}", o.url.host, ec.message()));
    }
    for (const auto& f : fixture) sh.wire.push_back(wire_request(o.url, o.api_key, f));
    sh.keep_text = o.keep_text;
    sh.keep_full_text = o.keep_full_text;
    PassResult result;
    result.records.resize(size_t(o.requests));
    sh.records = &result.records;

    const bool open_loop = !o.arrivals.empty();
    if (open_loop && int64_t(o.arrivals.size()) != o.requests)
        return invalid_argument(fmt::format("{} arrival times for {} requests", o.arrivals.size(), o.requests));
    int64_t clients = std::min(o.clients, o.requests);
    std::vector<std::unique_ptr<asio::io_context>> ios;
    for (int t = 0; t < o.threads; ++t) ios.push_back(std::make_unique<asio::io_context>());
    std::vector<std::unique_ptr<Client>> all;
    std::vector<std::unique_ptr<Dispatcher>> dispatchers;
    if (open_loop) {
        sh.arrivals = o.arrivals;
        sh.sent.assign(size_t(o.requests), 0);
        for (int t = 0; t < o.threads; ++t) {
            // The cap is shared out: thread t gets ceil((clients - t) / threads) connections.
            const int64_t cap = std::max<int64_t>(1, (clients - t + o.threads - 1) / o.threads);
            dispatchers.push_back(std::make_unique<Dispatcher>(*ios[size_t(t)], sh, t, o.threads, cap));
            asio::co_spawn(*ios[size_t(t)], dispatchers.back()->run(), asio::detached);
        }
    } else {
        for (int64_t c = 0; c < clients; ++c) {
            auto& io = *ios[size_t(c % o.threads)];
            all.push_back(std::make_unique<Client>(io, sh));
            asio::co_spawn(io, all.back()->run(), asio::detached);
        }
    }
    sh.t0 = Clock::now();
    std::vector<std::thread> threads;
    for (auto& io : ios) threads.emplace_back([&io] { io->run(); });
    if (o.pass_timeout_s > 0) {
        // Watchdog: after the timeout, stop the loops; open requests stay recorded as incomplete.
        auto deadline = sh.t0 + std::chrono::duration<double>(o.pass_timeout_s);
        while (Clock::now() < deadline) {
            bool all_stopped = true;
            for (auto& io : ios) all_stopped = all_stopped && io->stopped();
            if (all_stopped) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        sh.expired = true;
        for (auto& io : ios) io->stop();
    }
    for (auto& t : threads) t.join();
    result.wall_s = sh.now();
    // Requests never claimed (the pass timed out first) were never sent: drop them.
    if (open_loop) {
        std::vector<RequestRecord> sent;
        for (size_t i = 0; i < result.records.size(); ++i)
            if (sh.sent[i]) sent.push_back(std::move(result.records[i]));
        result.records = std::move(sent);
    } else {
        result.records.resize(size_t(std::min<int64_t>(sh.next.load(), o.requests)));
    }
    if (sh.expired) {
        double end = result.wall_s;
        for (auto& r : result.records)
            if (!r.done && r.error.empty() && r.latency_s == 0)
                r.latency_s = std::max(0.0, end - r.start_s);
    }
    dispatchers.clear();
    all.clear();
    return result;
}

}  // namespace qs::bench
