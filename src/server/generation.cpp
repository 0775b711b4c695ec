// The generation route (see generation.h). Everything CPU-heavy runs on the worker pool; the
// strand only sees the outcome.
#include "server/generation.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <random>

#include "grammar/tool_call_grammar.h"
#include "server/generation_stream.h"
#include "server/video_input.h"

namespace qs {

namespace {

std::string new_request_id(ApiKind kind) {
    static std::atomic<uint64_t> counter{uint64_t(std::random_device{}()) << 32};
    const uint64_t x = counter.fetch_add(1, std::memory_order_relaxed);
    return fmt::format("{}-{:016x}", kind == ApiKind::kChat ? "chatcmpl" : "cmpl", x);
}

int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void reply_error(ServerState& state, const std::shared_ptr<Exchange>& exchange, ApiError error) {
    state.metrics().in_flight.fetch_sub(1, std::memory_order_relaxed);
    exchange->post([exchange, error = std::move(error)] { exchange->respond(api_error_response(error)); });
}

// Structured outputs: the spec's constraint compiled over the model's vocabulary (tool_choice's
// grammar is built here, in the model's tool-call format). Errors are 400s naming the field.
std::optional<ApiError> compile_grammar(const ServerState& state, GenerationSpec& spec,
                                        std::shared_ptr<const grammar::CompiledGrammar>& out) {
    if (spec.grammar_param.empty()) return std::nullopt;
    const grammar::GrammarCompiler* compiler = state.grammars();
    if (!compiler) {
        ApiError e = ApiError::bad_request(
            fmt::format("'{}' asks for structured outputs, which this server does not provide (it runs the fake "
                        "engine)", spec.grammar_param),
            spec.grammar_param);
        e.code = "unsupported_value";
        return e;
    }
    if (!spec.grammar) {  // tool_choice
        auto g = grammar::tool_call_grammar(spec.tools, spec.tool_choice_function, compiler->vocab().tool_calls_xml,
                                            spec.parallel_tool_calls);
        if (!g.is_ok()) return ApiError::bad_request(g.status().message(), "tool_choice");
        spec.grammar = std::move(g.value());
    }
    auto compiled = compiler->compile(*spec.grammar);
    if (!compiled.is_ok()) {
        ApiError e = ApiError::bad_request(fmt::format("'{}': {}", spec.grammar_param, compiled.status().message()),
                                           spec.grammar_param);
        return e;
    }
    out = std::move(compiled.value());
    return std::nullopt;
}

// The request's images and videos in message order (images numbered among images, videos among
// videos in the errors). Worker thread.
Result<std::vector<PromptMedia>> load_media(ServerState& state, const TextPipeline& text,
                                            const std::vector<MediaUrl>& urls, const MediaKwargs& kwargs) {
    const VisionInput* vision = state.vision();
    if (!vision)
        return invalid_argument("this server takes no images or videos (the model has no vision tower or no fitting "
                                "preprocessor_config.json, image input is off on this device, or "
                                "--max-images-per-request is 0: docs/VISION.md)");
    const ImageInputOptions& o = state.options().images;
    if (int64_t(urls.size()) > o.max_images_per_request)
        return invalid_argument(fmt::format("the request has {} images and videos; at most {} are allowed "
                                            "(--max-images-per-request)", urls.size(), o.max_images_per_request));
    std::vector<std::string> image_urls;
    for (const MediaUrl& m : urls)
        if (!m.video) image_urls.push_back(m.url);
    QS_ASSIGN_OR_RETURN(const ImageProcessorConfig image_proc, apply_media_kwargs(kwargs, vision->processor));
    const VideoProcessorConfig video_proc = apply_media_kwargs(kwargs, vision->video);
    QS_ASSIGN_OR_RETURN(auto images, load_images(image_urls, o, image_proc));
    std::vector<PromptMedia> out;
    size_t next_image = 0, video = 0;
    for (const MediaUrl& m : urls) {
        if (!m.video) {
            out.push_back({images[next_image++], {}});
            continue;
        }
        ++video;
        auto v = load_video(m.url, o, video_proc, kwargs);
        if (!v.is_ok()) return invalid_argument(fmt::format("video {} of the request: {}", video, v.status().message()));
        PromptMedia pm{v->patches, {}};
        for (double ts : v->timestamps) pm.frame_prefix.push_back(text.encode(timestamp_text(ts)));
        out.push_back(std::move(pm));
    }
    return out;
}

// A prompt ready for the engine: its token ids and its completion budget.
struct PreparedPrompt {
    std::vector<int32_t> ids;
    int64_t max_tokens = 0;
};

// "prompt[i]: " in a batch of completions prompts, else nothing: errors name the prompt.
std::string prompt_label(const GenerationSpec& spec, size_t i) {
    return spec.kind == ApiKind::kCompletion && spec.prompts.size() > 1 ? fmt::format("prompt[{}]: ", i) : std::string();
}

// truncate_prompt_tokens, then the prompt and max_tokens against the context: vLLM's rules and
// messages. Without max_tokens a prompt may fill the context.
std::optional<ApiError> fit_prompt(const GenerationSpec& spec, int64_t max_len, size_t index, PreparedPrompt& pp) {
    const std::string label = prompt_label(spec, index);
    if (spec.truncate_prompt_tokens != 0) {
        // vLLM: keep the last k tokens; -1 = max_model_len; more than max_model_len is an error.
        const int64_t k = spec.truncate_prompt_tokens < 0 ? max_len : spec.truncate_prompt_tokens;
        if (k > max_len)
            return ApiError::bad_request(
                fmt::format("'truncate_prompt_tokens' ({}) exceeds this model's maximum context length ({} tokens)", k,
                            max_len), "truncate_prompt_tokens");
        if (int64_t(pp.ids.size()) > k) pp.ids.erase(pp.ids.begin(), pp.ids.end() - k);
    }
    const int64_t num_prompt = int64_t(pp.ids.size());
    if (num_prompt == 0) return ApiError::bad_request(label + "the prompt is empty", "prompt");
    if (num_prompt >= max_len) {
        ApiError e = ApiError::bad_request(
            fmt::format("{}the prompt is {} tokens long; this model's maximum context length is {} tokens", label,
                        num_prompt, max_len),
            spec.kind == ApiKind::kChat ? "messages" : "prompt");
        e.code = "context_length_exceeded";
        return e;
    }
    pp.max_tokens = spec.params.max_tokens;
    if (!spec.max_tokens_given) {
        pp.max_tokens = max_len - num_prompt;
    } else if (num_prompt + spec.params.max_tokens > max_len) {
        ApiError e = ApiError::bad_request(
            fmt::format("{}max_tokens ({}) plus the prompt ({} tokens) exceeds this model's maximum context length ({} "
                        "tokens)", label, spec.params.max_tokens, num_prompt, max_len),
            "max_tokens");
        e.code = "context_length_exceeded";
        return e;
    }
    return std::nullopt;
}

// Worker thread.
void prepare_and_submit(ServerState& state, ApiKind kind, const HttpRequest& request,
                        const std::shared_ptr<Exchange>& exchange, std::chrono::steady_clock::time_point arrival) {
    GenerationSpec spec;
    if (auto e = parse_generation_request(kind, request.body, state.options().served_model_names, spec,
                                          state.text().reads_any_template_kwarg()))
        return reply_error(state, exchange, std::move(*e));
    EngineApi* engine = state.engine();
    if (!engine) {
        ApiError e;
        e.http_status = 503;
        e.type = "server_error";
        e.message = "the model is still loading";
        e.retry_after_s = 5;
        return reply_error(state, exchange, std::move(e));
    }
    const TextPipeline& text = state.text();
    // The engine requests' prompts: chat one, completions one or a batch (choices i·n + j).
    std::vector<PreparedPrompt> prompts;
    std::vector<std::shared_ptr<const ImagePatches>> images;  // chat image_url parts, in order
    bool starts_in_reasoning = false;
    if (kind == ApiKind::kChat) {
        const ChatRenderOptions& ro = spec.chat_render;
        auto rendered = text.render_chat(spec.messages, spec.tools, ro);
        if (!rendered.is_ok()) return reply_error(state, exchange, api_error_from_status(rendered.status(), "messages"));
        PreparedPrompt pp;
        pp.ids = text.encode(rendered.value());
        starts_in_reasoning = text.prompt_opens_reasoning(ro);
        if (!spec.media.empty()) {
            auto loaded = load_media(state, text, spec.media, spec.media_kwargs);
            if (!loaded.is_ok())
                return reply_error(state, exchange, ApiError::bad_request(loaded.status().message(), "messages"));
            Status st = expand_media_pads(pp.ids, *state.vision(), loaded.value());
            if (!st.is_ok()) return reply_error(state, exchange, ApiError::bad_request(st.message(), "messages"));
            for (const PromptMedia& m : loaded.value()) images.push_back(m.patches);
        }
        prompts.push_back(std::move(pp));
    } else {
        for (const GenerationSpec::Prompt& in : spec.prompts) {
            PreparedPrompt pp;
            if (in.text) {
                pp.ids = text.encode(*in.text);
            } else {
                pp.ids = in.ids;
                for (int32_t id : pp.ids)
                    if (id >= text.vocab_size())
                        return reply_error(state, exchange, ApiError::bad_request(
                            fmt::format("{}token id {} is outside the vocabulary (size {})",
                                        prompt_label(spec, prompts.size()), id, text.vocab_size()), "prompt"));
            }
            prompts.push_back(std::move(pp));
        }
    }
    for (size_t i = 0; i < prompts.size(); ++i)
        if (auto e = fit_prompt(spec, engine->max_model_len(), i, prompts[i]))
            return reply_error(state, exchange, std::move(*e));

    if (spec.priority != 0 && !state.options().priority_scheduling) {
        ApiError e = ApiError::bad_request(
            fmt::format("'priority' = {} needs priority scheduling, which is not enabled on this server (serve "
                        "--scheduling-policy priority)", spec.priority),
            "priority");
        e.code = "unsupported_value";
        return reply_error(state, exchange, std::move(e));
    }
    // What the stream reports of each prompt: its token count, and with echo the prompt as the
    // client sees it (token ids decoded; a truncated prompt as truncated).
    std::vector<StreamPrompt> stream_prompts;
    for (size_t i = 0; i < prompts.size(); ++i) {
        StreamPrompt sp{int64_t(prompts[i].ids.size()), {}};
        if (spec.echo) {
            const GenerationSpec::Prompt& in = spec.prompts[i];
            sp.echo_text = in.text && spec.truncate_prompt_tokens == 0 ? *in.text : text.decode(prompts[i].ids);
        }
        stream_prompts.push_back(std::move(sp));
    }

    std::shared_ptr<const grammar::CompiledGrammar> compiled;
    if (auto e = compile_grammar(state, spec, compiled)) return reply_error(state, exchange, std::move(*e));

    ResponseHeader header{new_request_id(kind), unix_seconds(), spec.model};
    // One engine request a prompt: the header's id alone, or "<id>-<i>" in a batch.
    std::vector<GenerationRequest> gens(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        GenerationRequest& gen = gens[i];
        gen.id = prompts.size() == 1 ? header.id : fmt::format("{}-{}", header.id, i);
        gen.prompt_ids = std::move(prompts[i].ids);
        gen.params = spec.params;
        gen.params.max_tokens = prompts[i].max_tokens;
        gen.priority = spec.priority;
        gen.grammar = compiled;
        gen.images = images;
        // A chat reply that starts inside reasoning is constrained after </think>, like vLLM's
        // reasoning-aware structured outputs: the answer follows the grammar, the thinking is free.
        if (gen.grammar && starts_in_reasoning && state.grammars()->vocab().reasoning_end_id)
            gen.grammar_after_token = *state.grammars()->vocab().reasoning_end_id;
    }
    std::vector<std::string> engine_ids;
    for (const auto& g : gens) engine_ids.push_back(g.id);
    const int32_t n = int32_t(spec.params.n);
    auto stream = std::make_shared<GenerationStream>(state, exchange, std::move(spec), header, std::move(stream_prompts),
                                                     engine_ids, starts_in_reasoning, arrival);
    // Registered before submit: the strand runs posts in order, so the close hook is in place
    // before any output can arrive; a close before submit is caught by mark_submitted.
    exchange->post([exchange, stream] { exchange->on_close([stream] { stream->on_client_closed(); }); });
    for (const auto& id : engine_ids) state.add_live(id);
    for (size_t i = 0; i < gens.size(); ++i) {
        // Prompt i's completion j is choice i·n + j.
        const int32_t first_choice = int32_t(i) * n;
        Status st = engine->submit(std::move(gens[i]), [stream, first_choice](RequestOutput&& out) {
            out.index += first_choice;
            stream->on_output(std::move(out));
        });
        if (st.is_ok()) continue;
        ApiError e = api_error_from_status(st);
        if (st.kind() == ErrorKind::kInvalidArgument) e.param = st.message().substr(0, st.message().find(' '));
        if (st.kind() == ErrorKind::kResourceExhausted) e.type = "rate_limit_error";
        if (i == 0) {
            for (const auto& id : engine_ids) state.remove_live(id);
            return reply_error(state, exchange, std::move(e));
        }
        // Part of a batch is in the engine: it is aborted, and the stream answers with this error
        // once those requests have ended (their accounting is the stream's).
        for (size_t j = i; j < engine_ids.size(); ++j) state.remove_live(engine_ids[j]);
        stream->fail_unsubmitted(i, std::move(e));
        return;
    }
    stream->mark_submitted();
}

}  // namespace

void handle_generation(ServerState& state, ApiKind kind, HttpRequest request, std::shared_ptr<Exchange> exchange) {
    const auto arrival = std::chrono::steady_clock::now();
    const int64_t in_flight = state.metrics().in_flight.fetch_add(1, std::memory_order_relaxed);
    if (in_flight >= state.options().max_in_flight) {
        ApiError e;
        e.http_status = 503;
        e.type = "server_error";
        e.code = "server_overloaded";
        e.message = fmt::format("the server has {} requests in flight; retry later", in_flight);
        e.retry_after_s = 1;
        state.metrics().in_flight.fetch_sub(1, std::memory_order_relaxed);
        exchange->respond(api_error_response(e));
        return;
    }
    state.workers().post([&state, kind, request = std::move(request), exchange, arrival] {
        prepare_and_submit(state, kind, request, exchange, arrival);
    });
}

}  // namespace qs
