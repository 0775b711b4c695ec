// Router (see routes.h). The cheap routes answer on the strand; tokenize/detokenize are cheap
// enough for the byte-level test pipeline and bounded by the body limit for the real one.
#include "server/routes.h"

#include <fmt/format.h>

#include <chrono>
#include <utility>
#include <nlohmann/json.hpp>

#include "core/build_info.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/openai_parse.h"
#include "server/openai_write.h"
#include "server/request_guard.h"

namespace qs {

namespace {

using J = nlohmann::json;

HttpResponse json_response(const J& body, int status = 200) {
    HttpResponse r;
    r.status = status;
    r.body = dump(body);
    return r;
}

HttpResponse error_response(int status, std::string message, std::string type, std::string code = "") {
    ApiError e;
    e.http_status = status;
    e.message = std::move(message);
    e.type = std::move(type);
    e.code = std::move(code);
    return api_error_response(e);
}

}  // namespace

void Router::handle(HttpRequest request, std::shared_ptr<Exchange> exchange) {
    const std::string& path = request.path;
    const bool is_get = request.method == "GET";
    const bool is_post = request.method == "POST";
    auto method_not_allowed = [&] {
        exchange->respond(error_response(405, fmt::format("{} is not allowed on {}", request.method, path),
                                         "invalid_request_error", "method_not_allowed"));
    };
    // The key first, on every route (the transport has checked it already; this covers callers
    // that hand requests to the router directly).
    if (auto denied = check_api_key(state_.options(), request)) return exchange->respond(std::move(*denied));
    if (path == "/health") return is_get ? exchange->respond(health()) : method_not_allowed();
    // vLLM's /ping (SageMaker's health probe): /health's answer, to GET and POST.
    if (path == "/ping") return is_get || is_post ? exchange->respond(health()) : method_not_allowed();
    if (path == "/version") return is_get ? exchange->respond(version()) : method_not_allowed();
    if (path == "/metrics") return is_get ? exchange->respond(metrics()) : method_not_allowed();

    const bool known = path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/models" ||
                       path == "/tokenize" || path == "/detokenize";
    if (!known)  // e.g. vLLM's /v1/responses or /v1/embeddings: say what is served instead
        return exchange->respond(error_response(
            404,
            fmt::format("no route {} {}; this server serves POST /v1/chat/completions, /v1/completions, /tokenize, "
                        "/detokenize and GET /v1/models, /health, /ping, /version, /metrics",
                        request.method, path),
            "invalid_request_error", "not_found"));
    if (path == "/v1/models") return is_get ? exchange->respond(models()) : method_not_allowed();
    if (!is_post) return method_not_allowed();
    if (path == "/tokenize") return exchange->respond(tokenize(request));
    if (path == "/detokenize") return exchange->respond(detokenize(request));
    if (state_.draining()) {
        HttpResponse r = error_response(503, "the server is shutting down", "server_error", "shutting_down");
        r.headers.emplace_back("Retry-After", "5");
        return exchange->respond(std::move(r));
    }
    const ApiKind kind = path == "/v1/chat/completions" ? ApiKind::kChat : ApiKind::kCompletion;
    handle_generation(state_, kind, std::move(request), std::move(exchange));
}

HttpResponse Router::models() const {
    const int64_t now =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    J data = J::array();
    const EngineApi* e = state_.engine();
    for (const auto& name : state_.options().served_model_names) {
        J m = {{"id", name}, {"object", "model"}, {"created", now}, {"owned_by", "qwenserve"}};
        if (e) m["max_model_len"] = e->max_model_len();
        data.push_back(std::move(m));
    }
    return json_response({{"object", "list"}, {"data", std::move(data)}});
}

HttpResponse Router::health() const {
    const EngineApi* e = state_.engine();
    HttpResponse r;
    r.content_type = "application/json";
    if (!e) {
        r.status = 503;
        r.body = R"({"status":"loading"})";
    } else if (!e->healthy()) {
        // The watchdog (--engine-stall-timeout-s): the loop has not come round for that long.
        r.status = 503;
        r.body = fmt::format(R"({{"status":"stalled","last_step_age_s":{:.3f}}})", e->stats().last_step_age_s);
    } else if (state_.draining()) {
        r.status = 503;
        r.body = R"({"status":"draining"})";
    } else {
        r.body = R"({"status":"ok"})";
    }
    return r;
}

HttpResponse Router::version() const {
    const BuildInfo& b = build_info();
    HttpResponse r;
    r.content_type = "application/json";
    r.body = J{{"version", b.version}, {"git_hash", b.git_hash}}.dump();
    return r;
}

HttpResponse Router::metrics() const {
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    const EngineApi* e = state_.engine();
    const std::string& model = state_.options().served_model_names.front();
    if (e) {
        const EngineStats s = e->stats();
        r.body = const_cast<ServerState&>(state_).metrics().render(&s, model);
    } else {
        r.body = const_cast<ServerState&>(state_).metrics().render(nullptr, model);
    }
    return r;
}

HttpResponse Router::tokenize(const HttpRequest& request) const {
    nlohmann::ordered_json o;
    if (auto e = parse_json_object(request.body, o)) return api_error_response(*e);
    const TextPipeline& text = state_.text();
    std::string prompt;
    if (o.contains("messages")) {
        const auto& m = o["messages"];
        if (!m.is_array() || m.empty())
            return api_error_response(ApiError::bad_request("'messages' must be a non-empty array", "messages"));
        // The template flags as chat completions reads them (one parser: the same 400s).
        ChatRenderOptions ro;
        if (auto e = parse_chat_render_options(o, text.reads_any_template_kwarg(), ro)) return api_error_response(*e);
        auto rendered = text.render_chat(m, o.value("tools", nlohmann::ordered_json()), ro);
        if (!rendered.is_ok()) return api_error_response(api_error_from_status(rendered.status(), "messages"));
        prompt = rendered.value();
    } else if (o.contains("prompt") && o["prompt"].is_string()) {
        prompt = o["prompt"].get<std::string>();
    } else {
        return api_error_response(ApiError::bad_request("send 'prompt' (a string) or 'messages'", "prompt"));
    }
    const std::vector<int32_t> ids = text.encode(prompt);
    J body = {{"count", ids.size()}, {"tokens", ids}};
    if (const EngineApi* e = state_.engine()) body["max_model_len"] = e->max_model_len();
    return json_response(body);
}

HttpResponse Router::detokenize(const HttpRequest& request) const {
    nlohmann::ordered_json o;
    if (auto e = parse_json_object(request.body, o)) return api_error_response(*e);
    if (!o.contains("tokens") || !o["tokens"].is_array())
        return api_error_response(ApiError::bad_request("'tokens' must be an array of token ids", "tokens"));
    std::vector<int32_t> ids;
    const int32_t vocab = state_.text().vocab_size();
    for (const auto& t : o["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
            return api_error_response(ApiError::bad_request(
                fmt::format("'tokens' must hold ids in [0, {})", vocab), "tokens"));
        ids.push_back(int32_t(t.get<int64_t>()));
    }
    return json_response({{"prompt", state_.text().decode(ids)}});
}

}  // namespace qs
