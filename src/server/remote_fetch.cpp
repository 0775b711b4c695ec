// http:// and https:// GETs for media input (see remote_fetch.h).
#include "server/remote_fetch.h"

#include <fmt/format.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>

#if QS_HAVE_OPENSSL
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>
#endif

namespace qs {

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;

struct Url {
    bool tls = false;
    std::string host, port, authority, target;
};

Result<Url> parse_url(const std::string& url) {
    Url u;
    u.tls = url.rfind("https://", 0) == 0;
    const std::string rest = url.substr(u.tls ? 8 : 7);
    const size_t slash = rest.find('/');
    u.authority = rest.substr(0, slash);
    u.target = slash == std::string::npos ? "/" : rest.substr(slash);
    u.host = u.authority;
    u.port = u.tls ? "443" : "80";
    if (const size_t colon = u.authority.rfind(':');
        colon != std::string::npos && u.authority.find(']') == std::string::npos) {
        u.host = u.authority.substr(0, colon);
        u.port = u.authority.substr(colon + 1);
    }
    if (u.host.empty()) return invalid_argument("the URL has no host");
    return u;
}

// Runs the exchange on `stream` (a tcp_stream or an ssl_stream over one) after `connected`.
template <class Stream>
void exchange(Stream& stream, const Url& u, http::response_parser<http::string_body>& parser,
              beast::flat_buffer& buffer, http::request<http::empty_body>& req, beast::error_code& result) {
    http::async_write(stream, req, [&](beast::error_code ec, size_t) {
        if (ec) return void(result = ec);
        http::async_read(stream, buffer, parser, [&](beast::error_code ec2, size_t) { result = ec2; });
    });
}

Result<std::string> finish(const std::string& what, beast::error_code result, bool done,
                           const http::response_parser<http::string_body>& parser, double timeout_s) {
    if (!done || result == beast::error::timeout)
        return invalid_argument(fmt::format("fetching it timed out after {} s", timeout_s));
    if (result == http::error::body_limit) return invalid_argument(kRemoteTooLarge);
    if (result) return invalid_argument(fmt::format("it is unreachable{}: {}", what, result.message()));
    const auto& res = parser.get();
    if (res.result_int() != 200) return invalid_argument(fmt::format("it answered HTTP {}", res.result_int()));
    return res.body();
}

}  // namespace

#if QS_HAVE_OPENSSL
bool https_supported() { return true; }
#else
bool https_supported() { return false; }
#endif

Result<std::string> fetch_remote(const std::string& url, const RemoteFetchLimits& limits) {
    QS_ASSIGN_OR_RETURN(const Url u, parse_url(url));
#if !QS_HAVE_OPENSSL
    if (u.tls)
        return invalid_argument("https URLs need a build with OpenSSL (this server was built without libssl-dev); "
                                "use http:// or a data: URL");
#endif
    net::io_context ioc;
    net::ip::tcp::resolver resolver(ioc);
    http::request<http::empty_body> req{http::verb::get, u.target, 11};
    req.set(http::field::host, u.authority);
    req.set(http::field::user_agent, "qwenserve");
    http::response_parser<http::string_body> parser;
    parser.body_limit(uint64_t(limits.max_bytes));
    beast::flat_buffer buffer;
    beast::error_code result;
    const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(limits.timeout_s));
    std::string what;  // extra context for a TLS failure
    if (!u.tls) {
        beast::tcp_stream stream(ioc);
        stream.expires_after(timeout);
        resolver.async_resolve(u.host, u.port, [&](beast::error_code ec, net::ip::tcp::resolver::results_type hosts) {
            if (ec) return void(result = ec);
            stream.async_connect(hosts, [&](beast::error_code ec2, const net::ip::tcp::endpoint&) {
                if (ec2) return void(result = ec2);
                exchange(stream, u, parser, buffer, req, result);
            });
        });
        // The resolver is not covered by the stream's timer: bound the whole fetch as well.
        ioc.run_for(timeout + std::chrono::seconds(1));
        return finish(what, result, ioc.stopped(), parser, limits.timeout_s);
    }
#if QS_HAVE_OPENSSL
    net::ssl::context ctx(net::ssl::context::tls_client);
    beast::error_code ec;
    if (limits.ca_file.empty()) ctx.set_default_verify_paths(ec);
    else ctx.load_verify_file(limits.ca_file, ec);
    if (ec)
        return invalid_argument(fmt::format("the TLS certificate store ({}) cannot be loaded: {}",
                                            limits.ca_file.empty() ? "the system's" : limits.ca_file, ec.message()));
    ctx.set_verify_mode(net::ssl::verify_peer);
    beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
    stream.set_verify_callback(net::ssl::host_name_verification(u.host));
    if (!SSL_set_tlsext_host_name(stream.native_handle(), u.host.c_str()))
        return invalid_argument(fmt::format("the host name '{}' cannot be sent for TLS", u.host));
    beast::get_lowest_layer(stream).expires_after(timeout);
    resolver.async_resolve(u.host, u.port, [&](beast::error_code ec1, net::ip::tcp::resolver::results_type hosts) {
        if (ec1) return void(result = ec1);
        beast::get_lowest_layer(stream).async_connect(hosts, [&](beast::error_code ec2, const net::ip::tcp::endpoint&) {
            if (ec2) return void(result = ec2);
            stream.async_handshake(net::ssl::stream_base::client, [&](beast::error_code ec3) {
                if (ec3) {
                    const long v = SSL_get_verify_result(stream.native_handle());
                    if (v != X509_V_OK)
                        what = fmt::format(" (TLS certificate not accepted: {})", X509_verify_cert_error_string(v));
                    else what = " (TLS handshake failed)";
                    return void(result = ec3);
                }
                exchange(stream, u, parser, buffer, req, result);
            });
        });
    });
    ioc.run_for(timeout + std::chrono::seconds(1));
    // A server that closes without close_notify ends the read with stream_truncated after a
    // complete response: the body is whole when the parser is done.
    if (result == net::ssl::error::stream_truncated && parser.is_done()) result = {};
    return finish(what, result, ioc.stopped(), parser, limits.timeout_s);
#endif
}

}  // namespace qs
