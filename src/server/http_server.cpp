// HttpServer (see http_server.h): the only translation unit with Asio and Beast in it (they are
// heavy to compile). Beast parses requests; responses and chunked framing are written by hand.
// Everything a Session does runs on its strand; exceptions from Asio/Beast never leave a handler.
#include "server/http_server.h"

#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include <list>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "server/request_guard.h"

namespace qs {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr size_t kHeaderLimitBytes = 64 * 1024;

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string reason_phrase(int status) {
    return std::string(http::obsolete_reason(http::int_to_status(unsigned(status))));
}

}  // namespace

class Session;

struct HttpServer::Impl {
    ServerOptions options;
    Handler handler;
    ServerMetrics* metrics = nullptr;
    asio::io_context ioc;
    tcp::acceptor acceptor{ioc};
    // Every acceptor operation after start (the accept loop's handlers, its retry timer, the
    // close of stop_accepting) runs on this strand: the I/O threads must not touch the acceptor
    // at the same time (TSan caught a close racing a re-armed accept).
    asio::strand<asio::io_context::executor_type> accept_strand{asio::make_strand(ioc)};
    std::vector<std::thread> threads;
    std::atomic<bool> stopped{false};
    mutable std::mutex sessions_mu;
    std::list<std::weak_ptr<Session>> sessions;

    void accept();
    void for_each_session(const std::function<void(const std::shared_ptr<Session>&)>& fn);
};

class SessionExchange;

// One TCP connection: read a request, hand it to the handler, write the response or stream,
// repeat while keep-alive.
class Session : public std::enable_shared_from_this<Session> {
public:
    Session(tcp::socket socket, HttpServer::Impl& server)
        : socket_(std::move(socket)), server_(server), idle_timer_(socket_.get_executor()),
          write_timer_(socket_.get_executor()) {}

    void start() { asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->read_request(); }); }

    // Any thread.
    void post(std::function<void()> fn) { asio::post(socket_.get_executor(), std::move(fn)); }
    std::function<void()> post_after(double seconds, std::function<void()> fn) {
        // The timer holds the strand, not the session: a long deadline keeps nothing else alive,
        // and a cancelled one goes at once.
        auto timer = std::make_shared<asio::steady_timer>(
            socket_.get_executor(), std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(seconds)));
        timer->async_wait([timer, fn = std::move(fn)](error_code ec) {
            if (!ec) fn();
        });
        return [weak = std::weak_ptr<asio::steady_timer>(timer)] {
            if (auto t = weak.lock()) t->cancel();
        };
    }
    void close_if_idle() {
        post([self = shared_from_this()] {
            if (!self->exchange_ && !self->writing_) self->close();
        });
    }
    void close_now() { post([self = shared_from_this()] { self->close(); }); }

    // Strand: the Exchange's operations.
    void respond(HttpResponse r);
    void start_stream(const std::string& content_type);
    bool write_stream(const std::string& data);
    void end_stream();
    void on_close(SessionExchange* ex, std::function<void()> cb);
    bool closed() const { return closed_; }

private:
    void read_request();
    void on_header(error_code ec);
    void on_read(error_code ec);
    void read_failed(error_code ec);
    HttpRequest head() const;
    void watch();
    void on_watch(error_code ec, size_t n);
    void queue_write(std::string bytes);
    void flush();
    void on_write(error_code ec);
    void end_exchange();
    void after_exchange();
    void close();
    void count_status(int status);

    tcp::socket socket_;
    HttpServer::Impl& server_;
    asio::steady_timer idle_timer_;
    asio::steady_timer write_timer_;
    boost::beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    size_t body_limit_ = 0;  // the route's, once the headers are in
    std::shared_ptr<SessionExchange> exchange_;  // the request being served
    bool exchange_ended_ = false;
    bool keep_alive_ = true;
    bool watching_ = false;
    bool reading_ = false;
    bool writing_ = false;
    bool closed_ = false;
    uint64_t read_gen_ = 0, write_gen_ = 0;
    std::string out_pending_, out_writing_;
};

class SessionExchange final : public Exchange {
public:
    explicit SessionExchange(std::shared_ptr<Session> s) : session_(std::move(s)) {}
    void post(std::function<void()> fn) override { session_->post(std::move(fn)); }
    std::function<void()> post_after(double seconds, std::function<void()> fn) override {
        return session_->post_after(seconds, std::move(fn));
    }
    void respond(HttpResponse r) override {
        if (active()) session_->respond(std::move(r));
    }
    void start_stream(std::string content_type) override {
        if (active()) session_->start_stream(content_type);
    }
    bool write_stream(std::string data) override { return active() && session_->write_stream(data); }
    void end_stream() override {
        if (active()) session_->end_stream();
    }
    void on_close(std::function<void()> cb) override { session_->on_close(this, std::move(cb)); }
    bool closed() const override { return !active(); }

    bool ended = false;    // respond/end_stream happened
    bool gone = false;     // the connection closed before the end
    std::vector<std::function<void()>> close_callbacks;

private:
    bool active() const { return !ended && !gone && !session_->closed(); }
    std::shared_ptr<Session> session_;
};

void Session::count_status(int status) {
    if (!server_.metrics) return;
    if (status >= 500)
        server_.metrics->http_5xx.fetch_add(1, std::memory_order_relaxed);
    else if (status >= 400)
        server_.metrics->http_4xx.fetch_add(1, std::memory_order_relaxed);
}

void Session::read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(kHeaderLimitBytes);
    // No limit while the headers are read (Beast would check Content-Length against it before
    // the key is checked); on_header checks the route's limit and sets it for the body.
    parser_->body_limit(boost::none);
    const uint64_t gen = ++read_gen_;
    idle_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(server_.options.idle_timeout_s)));
    idle_timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
        if (!ec && self->reading_ && self->read_gen_ == gen) self->close();
    });
    reading_ = true;
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
}

HttpRequest Session::head() const {
    const auto& msg = parser_->get();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.path = req.target.substr(0, req.target.find('?'));
    for (const auto& f : msg) req.headers[lower(f.name_string())] = std::string(f.value());
    return req;
}

// The headers are in: the API key and the route's body limit are checked before any body byte
// is read (request_guard), so a refused request costs no body transfer.
void Session::on_header(error_code ec) {
    if (closed_) return;
    if (ec) {
        reading_ = false;
        idle_timer_.cancel();
        read_failed(ec);
        return;
    }
    const auto length = parser_->content_length();
    const Admission a = admit(server_.options, head(), length ? std::optional<size_t>(size_t(*length)) : std::nullopt);
    if (a.reject) {
        reading_ = false;
        idle_timer_.cancel();
        keep_alive_ = false;  // the body (if any) is not read: the connection cannot be reused
        if (server_.metrics) server_.metrics->http_requests.fetch_add(1, std::memory_order_relaxed);
        exchange_ = std::make_shared<SessionExchange>(shared_from_this());
        exchange_ended_ = false;
        respond(*a.reject);
        return;
    }
    body_limit_ = a.body_limit;
    parser_->body_limit(body_limit_);  // chunked bodies are counted against it as they arrive
    // A client that waits for permission before sending its body (curl does above 1 KiB) gets
    // it now, instead of after its own timeout; a refused one got its final status above.
    if (lower(parser_->get()[http::field::expect]) == "100-continue" && !parser_->is_done())
        queue_write("HTTP/1.1 100 Continue\r\n\r\n");
    if (parser_->is_done()) {
        on_read({});
        return;
    }
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->on_read(ec); });
}

// A failed read: answers 413/431/400 where the client should hear why, closes otherwise.
void Session::read_failed(error_code ec) {
    if (ec == http::error::body_limit || ec == http::error::header_limit) {
        keep_alive_ = false;
        HttpResponse r;
        if (ec == http::error::body_limit) {
            r = body_too_large(head(), body_limit_, 0);
        } else {
            r.status = 431;
            r.body = R"({"error":{"message":"request headers too large","type":"invalid_request_error","param":null,"code":"headers_too_large"}})";
        }
        exchange_ = std::make_shared<SessionExchange>(shared_from_this());
        exchange_ended_ = false;
        respond(std::move(r));
        return;
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset) {
        close();
        return;
    }
    // Malformed HTTP: a 400 and close.
    keep_alive_ = false;
    exchange_ = std::make_shared<SessionExchange>(shared_from_this());
    exchange_ended_ = false;
    HttpResponse r;
    r.status = 400;
    r.body = fmt::format(R"({{"error":{{"message":"malformed HTTP request: {}","type":"invalid_request_error","param":null,"code":null}}}})",
                         ec.message());
    respond(std::move(r));
}

void Session::on_read(error_code ec) {
    reading_ = false;
    idle_timer_.cancel();
    if (closed_) return;
    if (ec) {
        read_failed(ec);
        return;
    }
    HttpRequest req = head();
    auto msg = parser_->release();
    req.body = std::move(msg.body());
    keep_alive_ = msg.keep_alive() && !server_.stopped.load();
    if (server_.metrics) server_.metrics->http_requests.fetch_add(1, std::memory_order_relaxed);
    exchange_ = std::make_shared<SessionExchange>(shared_from_this());
    exchange_ended_ = false;
    watch();
    try {
        server_.handler(std::move(req), exchange_);
    } catch (const std::exception& e) {
        log_error("http handler threw: {}", e.what());
        HttpResponse r;
        r.status = 500;
        r.body = R"({"error":{"message":"internal error","type":"internal_error","param":null,"code":null}})";
        if (exchange_ && !exchange_->ended) respond(std::move(r));
    }
}

void Session::watch() {
    if (watching_ || closed_) return;
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
        self->on_watch(ec, n);
    });
}

void Session::on_watch(error_code ec, size_t n) {
    watching_ = false;
    if (ec) {
        close();  // the peer went away: close callbacks abort the request
        return;
    }
    // The next (pipelined) request has begun: it is parsed once this exchange ends. The client
    // is evidently alive, so the watch is not re-armed; re-arming would leave the buffered bytes
    // unparsed until yet more bytes arrived.
    buffer_.commit(n);
    if (exchange_) return;
    if (!writing_) read_request();
}

void Session::respond(HttpResponse r) {
    if (closed_ || !exchange_ || exchange_->ended) return;
    count_status(r.status);
    std::string head = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", r.status,
                                   reason_phrase(r.status), r.content_type, r.body.size());
    for (const auto& [k, v] : r.headers) head += k + ": " + v + "\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    head += r.body;
    queue_write(std::move(head));
    end_exchange();
}

void Session::start_stream(const std::string& content_type) {
    if (closed_ || !exchange_ || exchange_->ended) return;
    queue_write(fmt::format("HTTP/1.1 200 OK\r\nContent-Type: {}\r\nCache-Control: no-cache\r\n"
                            "Transfer-Encoding: chunked\r\nConnection: {}\r\n\r\n",
                            content_type, keep_alive_ ? "keep-alive" : "close"));
}

bool Session::write_stream(const std::string& data) {
    if (closed_ || !exchange_ || exchange_->ended) return false;
    if (data.empty()) return true;
    if (out_pending_.size() + out_writing_.size() + data.size() > server_.options.stream_buffer_bytes) {
        log_warn("closing a connection whose client stopped reading ({} bytes unsent)",
                 out_pending_.size() + out_writing_.size());
        close();
        return false;
    }
    queue_write(fmt::format("{:x}\r\n", data.size()) + data + "\r\n");
    return true;
}

void Session::end_stream() {
    if (closed_ || !exchange_ || exchange_->ended) return;
    queue_write("0\r\n\r\n");
    end_exchange();
}

void Session::on_close(SessionExchange* ex, std::function<void()> cb) {
    if (ex->gone || (closed_ && !ex->ended)) {
        cb();
        return;
    }
    if (ex->ended) return;
    ex->close_callbacks.push_back(std::move(cb));
}

void Session::queue_write(std::string bytes) {
    out_pending_ += bytes;
    if (!writing_) flush();
}

void Session::flush() {
    if (closed_ || out_pending_.empty()) return;
    out_writing_.swap(out_pending_);
    out_pending_.clear();
    writing_ = true;
    const uint64_t gen = ++write_gen_;
    write_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(server_.options.write_stall_timeout_s)));
    write_timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
        if (!ec && self->writing_ && self->write_gen_ == gen) {
            log_warn("closing a connection whose write stalled for {} s", self->server_.options.write_stall_timeout_s);
            self->close();
        }
    });
    asio::async_write(socket_, asio::buffer(out_writing_),
                      [self = shared_from_this()](error_code ec, size_t) { self->on_write(ec); });
}

void Session::on_write(error_code ec) {
    writing_ = false;
    write_timer_.cancel();
    if (ec) {
        close();
        return;
    }
    out_writing_.clear();
    if (!out_pending_.empty()) {
        flush();
        return;
    }
    if (exchange_ && exchange_ended_) after_exchange();
}

void Session::end_exchange() {
    exchange_->ended = true;
    exchange_->close_callbacks.clear();
    exchange_ended_ = true;
    if (!writing_ && out_pending_.empty()) after_exchange();
}

void Session::after_exchange() {
    exchange_.reset();  // breaks the session ↔ exchange cycle
    exchange_ended_ = false;
    if (!keep_alive_ || server_.stopped.load()) {
        error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_send, ignored);
        close();
        return;
    }
    if (watching_) {
        // The pending read completes when the next request (or EOF) arrives; arm the idle timer.
        const uint64_t gen = ++read_gen_;
        reading_ = true;
        idle_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(server_.options.idle_timeout_s)));
        idle_timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
            if (!ec && self->reading_ && self->read_gen_ == gen) self->close();
        });
        return;
    }
    read_request();
}

void Session::close() {
    if (closed_) return;
    closed_ = true;
    error_code ignored;
    idle_timer_.cancel();
    write_timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    out_pending_.clear();
    if (exchange_) {
        auto ex = std::move(exchange_);
        if (!ex->ended) {
            ex->gone = true;
            auto callbacks = std::move(ex->close_callbacks);
            for (auto& cb : callbacks) {
                try {
                    cb();
                } catch (const std::exception& e) {
                    log_error("close callback threw: {}", e.what());
                }
            }
        }
    }
}

void HttpServer::Impl::accept() {
    acceptor.async_accept(asio::make_strand(ioc), asio::bind_executor(accept_strand, [this](error_code ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
        if (ec) {
            // EMFILE and friends: back off briefly instead of spinning.
            log_warn("accept failed: {}", ec.message());
            auto timer = std::make_shared<asio::steady_timer>(ioc, std::chrono::milliseconds(50));
            timer->async_wait(asio::bind_executor(accept_strand, [this, timer](error_code) { accept(); }));
            return;
        }
        error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        auto session = std::make_shared<Session>(std::move(socket), *this);
        {
            std::lock_guard<std::mutex> lock(sessions_mu);
            sessions.remove_if([](const std::weak_ptr<Session>& w) { return w.expired(); });
            sessions.push_back(session);
        }
        session->start();
        accept();
    }));
}

void HttpServer::Impl::for_each_session(const std::function<void(const std::shared_ptr<Session>&)>& fn) {
    std::lock_guard<std::mutex> lock(sessions_mu);
    for (auto& w : sessions)
        if (auto s = w.lock()) fn(s);
}

HttpServer::HttpServer(const ServerOptions& options, Handler handler, ServerMetrics* metrics)
    : impl_(std::make_unique<Impl>()) {
    impl_->options = options;
    impl_->handler = std::move(handler);
    impl_->metrics = metrics;
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
    try {
        tcp::resolver resolver(impl_->ioc);
        auto results = resolver.resolve(impl_->options.host, std::to_string(impl_->options.port));
        if (results.empty()) return invalid_argument(fmt::format("cannot resolve --host {}", impl_->options.host));
        const tcp::endpoint ep = results.begin()->endpoint();
        impl_->acceptor.open(ep.protocol());
        impl_->acceptor.set_option(asio::socket_base::reuse_address(true));
        impl_->acceptor.bind(ep);
        impl_->acceptor.listen(asio::socket_base::max_listen_connections);
    } catch (const boost::system::system_error& e) {
        return io_error(fmt::format("cannot listen on {}:{}: {}", impl_->options.host, impl_->options.port,
                                    e.code().message()));
    }
    impl_->accept();
    for (int i = 0; i < std::max(1, impl_->options.io_threads); ++i)
        impl_->threads.emplace_back([this] {
            auto guard = asio::make_work_guard(impl_->ioc);
            while (true) {
                try {
                    impl_->ioc.run();
                    return;
                } catch (const std::exception& e) {
                    log_error("I/O thread caught: {}", e.what());
                }
            }
        });
    return Status::ok();
}

int HttpServer::port() const {
    error_code ec;
    auto ep = impl_->acceptor.local_endpoint(ec);
    return ec ? -1 : int(ep.port());
}

void HttpServer::stop_accepting() {
    impl_->stopped = true;
    asio::post(impl_->accept_strand, [impl = impl_.get()] {
        error_code ignored;
        impl->acceptor.close(ignored);
    });
}

void HttpServer::close_idle_connections() {
    impl_->for_each_session([](const std::shared_ptr<Session>& s) { s->close_if_idle(); });
}

size_t HttpServer::num_connections() const {
    std::lock_guard<std::mutex> lock(impl_->sessions_mu);
    size_t n = 0;
    for (auto& w : impl_->sessions) n += !w.expired();
    return n;
}

void HttpServer::stop() {
    if (impl_->threads.empty()) return;
    stop_accepting();
    impl_->for_each_session([](const std::shared_ptr<Session>& s) { s->close_now(); });
    // Let the closes run, then stop the loop.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    impl_->ioc.stop();
    for (auto& t : impl_->threads) t.join();
    impl_->threads.clear();
}

}  // namespace qs
