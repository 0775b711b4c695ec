// `qwenserve serve --model DIR|ORG/NAME [--host H] [--port P] [--api-key K] [--served-model-name
//  NAME] [server and engine knobs...]`: the OpenAI-compatible HTTP server. Every option is in
// serve_spec() (`serve --help`) and can also come from a QS_* environment variable (QS_PORT,
// QS_API_KEY, ...). The configuration is logged at start, the engine's with the values it
// resolved (max_model_len, snapshots, KV pages) rather than the 0s that ask for them. With
// --api-key every route needs the key, /health, /ping and /metrics too unless --open-health-metrics
// (server/request_guard). SIGTERM/SIGINT: stop accepting, let in-flight requests finish within
// --shutdown-grace-s, then abort the rest and exit.
// The tokenizer comes from --tokenizer or the model directory (src/tokenizer behind the
// TextPipeline seam). The engine is the batched Engine on the backend --device names (or, with
// --tensor-parallel-size N, on a group of N ranks: model/tensor_parallel_runner.h); --fake-engine serves
// a scripted test double instead (with the byte-level tokenizer double when there is no
// tokenizer), and says so in its log line.
// Threads: the main thread waits for signals; the HTTP server, worker pool and engine own theirs.
#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <set>
#include <thread>

#include "backend/vision_memory.h"
#include "cli/backend_args.h"
#include "cli/commands.h"
#include "cli/engine_option_group.h"
#include "cli/model_args.h"
#include "core/args.h"
#include "core/build_info.h"
#include "core/fd_limit.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "engine/engine_config.h"
#include "engine/engine_config_text.h"
#include "engine/engine_sizing.h"
#include "grammar/grammar_compiler.h"
#include "image/video_decode.h"
#include "server/http_server.h"
#include "server/remote_fetch.h"
#include "server/routes.h"
#include "server/testing/byte_text_pipeline.h"
#include "server/testing/fake_engine.h"
#include "server/tokenizer_text_pipeline.h"

namespace qs::cli {

namespace {

struct ServeConfig {
    ServerOptions server;
    std::string model;       // as given: a directory or a Hugging Face id
    std::string model_path;  // the directory it names (or builtin:NAME)
    std::string tokenizer;  // empty: the byte-level test double (fake engine only)
    std::string chat_template;  // --chat-template FILE (empty: the tokenizer's)
    bool fake_engine = false;
    double fake_step_ms = 20.0;
    double fake_load_s = 0.0;
    // TESTING: the real engine sleeps debug_stall_s once, in the step after
    // debug_stall_after_steps steps with a batch (the watchdog's device test).
    double debug_stall_s = 0.0;
    int64_t debug_stall_after_steps = 0;
    EngineConfig engine;  // every engine knob (engine/engine_config.h), flags and QS_* variables
};

std::vector<std::string> split_names(const std::string& s) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (pos <= s.size()) {
        size_t c = s.find(',', pos);
        std::string item = s.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
        if (!item.empty()) out.push_back(item);
        if (c == std::string::npos) break;
        pos = c + 1;
    }
    return out;
}

Result<ServeConfig> resolve(const Args& args) {
    ServeConfig c;
    QS_ASSIGN_OR_RETURN(c.model, args.require("model"));
    ServerOptions& s = c.server;
    s.log_requests = !args.has("disable-log-requests");
    s.log_prompts = args.has("log-prompts");
    s.host = args.get_or("host", s.host);
    QS_ASSIGN_OR_RETURN(int64_t port, args.get_int("port", s.port));
    if (port < 0 || port > 65535) return invalid_argument(fmt::format("--port must be in [0, 65535], got {}", port));
    s.port = int(port);
    s.api_key = args.get_or("api-key", "");
    s.open_health_metrics = args.has("open-health-metrics");
    const std::string policy = args.get_or("scheduling-policy", "fcfs");
    if (policy != "fcfs" && policy != "priority")
        return invalid_argument(fmt::format("--scheduling-policy must be fcfs or priority, got '{}'", policy));
    s.priority_scheduling = policy == "priority";
    s.served_model_names = split_names(args.get_or("served-model-name", c.model));
    if (s.served_model_names.empty()) return invalid_argument("--served-model-name must name at least one model");
    auto positive = [&](const char* name, int64_t fallback, int64_t& out) -> Status {
        QS_ASSIGN_OR_RETURN(out, args.get_int(name, fallback));
        if (out < 1) return invalid_argument(fmt::format("--{} must be >= 1, got {}", name, out));
        return Status::ok();
    };
    auto seconds = [&](const char* name, double fallback, double& out) -> Status {
        QS_ASSIGN_OR_RETURN(out, args.get_double(name, fallback));
        if (!(out >= 0)) return invalid_argument(fmt::format("--{} must be >= 0, got {}", name, out));
        return Status::ok();
    };
    int64_t v = 0;
    QS_RETURN_IF_ERROR(positive("io-threads", s.io_threads, v));
    s.io_threads = int(v);
    QS_RETURN_IF_ERROR(positive("worker-threads", s.worker_threads, v));
    s.worker_threads = int(v);
    QS_RETURN_IF_ERROR(positive("max-body-bytes", int64_t(s.max_body_bytes), v));
    s.max_body_bytes = size_t(v);
    QS_RETURN_IF_ERROR(positive("stream-buffer-bytes", int64_t(s.stream_buffer_bytes), v));
    s.stream_buffer_bytes = size_t(v);
    QS_RETURN_IF_ERROR(positive("max-in-flight", s.max_in_flight, s.max_in_flight));
    QS_RETURN_IF_ERROR(seconds("idle-timeout-s", s.idle_timeout_s, s.idle_timeout_s));
    QS_RETURN_IF_ERROR(seconds("write-stall-timeout-s", s.write_stall_timeout_s, s.write_stall_timeout_s));
    QS_RETURN_IF_ERROR(seconds("shutdown-grace-s", s.shutdown_grace_s, s.shutdown_grace_s));
    QS_RETURN_IF_ERROR(seconds("request-timeout-s", s.request_timeout_s, s.request_timeout_s));
    ImageInputOptions& im = s.images;
    im.allowed_local_media_path = args.get_or("allowed-local-media-path", "");
    if (!im.allowed_local_media_path.empty() && !std::filesystem::is_directory(im.allowed_local_media_path))
        return invalid_argument(fmt::format("--allowed-local-media-path '{}' is not a directory",
                                            im.allowed_local_media_path));
    im.allow_remote_images = args.has("allow-remote-images");
    QS_RETURN_IF_ERROR(positive("max-image-bytes", im.max_image_bytes, im.max_image_bytes));
    QS_RETURN_IF_ERROR(positive("max-image-pixels", im.max_image_pixels, im.max_image_pixels));
    QS_ASSIGN_OR_RETURN(im.max_images_per_request, args.get_int("max-images-per-request", im.max_images_per_request));
    if (im.max_images_per_request < 0)
        return invalid_argument(fmt::format("--max-images-per-request must be >= 0 (0: image and video input off), got {}",
                                            im.max_images_per_request));
    QS_RETURN_IF_ERROR(positive("max-video-frames", im.max_video_frames, im.max_video_frames));
    QS_RETURN_IF_ERROR(positive("max-video-bytes", im.max_video_bytes, im.max_video_bytes));
    im.remote_ca_file = args.get_or("remote-ca-file", "");
    if (!im.remote_ca_file.empty() && !std::filesystem::is_regular_file(im.remote_ca_file))
        return invalid_argument(fmt::format("--remote-ca-file '{}' is not a file", im.remote_ca_file));
    QS_ASSIGN_OR_RETURN(im.video_frame_list_fps, args.get_double("video-frame-list-fps", im.video_frame_list_fps));
    if (!(im.video_frame_list_fps > 0))
        return invalid_argument(fmt::format("--video-frame-list-fps must be positive, got {}", im.video_frame_list_fps));
    QS_RETURN_IF_ERROR(seconds("remote-image-timeout-s", im.remote_timeout_s, im.remote_timeout_s));
    QS_ASSIGN_OR_RETURN(c.engine, EngineConfig::from_args(args));
    c.fake_engine = args.has("fake-engine");
    c.tokenizer = args.get_or("tokenizer", "");
    c.chat_template = args.get_or("chat-template", "");
    // The directory --model names (a Hugging Face id resolved in the cache). The fake engine
    // reads only a tokenizer from it, so it tolerates a model that is not there.
    auto path = model_path_from_args(args);
    if (path.is_ok()) c.model_path = *path;
    else if (!c.fake_engine) return path.status();
    if (c.tokenizer.empty() && !c.model_path.empty() && std::filesystem::exists(c.model_path + "/tokenizer.json"))
        c.tokenizer = c.model_path;
    QS_RETURN_IF_ERROR(seconds("fake-step-ms", c.fake_step_ms, c.fake_step_ms));
    QS_RETURN_IF_ERROR(seconds("fake-load-s", c.fake_load_s, c.fake_load_s));
    QS_RETURN_IF_ERROR(seconds("debug-engine-stall-s", c.debug_stall_s, c.debug_stall_s));
    QS_ASSIGN_OR_RETURN(c.debug_stall_after_steps, args.get_int("debug-engine-stall-after-steps", c.debug_stall_after_steps));
    if (c.debug_stall_after_steps < 0)
        return invalid_argument(fmt::format("--debug-engine-stall-after-steps must be >= 0, got {}", c.debug_stall_after_steps));
    if (c.debug_stall_s > 0 && c.fake_engine)
        return invalid_argument("--debug-engine-stall-s is for the real engine (the fake engine's stall is a test hook)");
    return c;
}

void log_config(const ServeConfig& c) {
    const ServerOptions& s = c.server;
    const BuildInfo& b = build_info();
    log_info("serve: qwenserve {} (git {}, CUDA {})", b.version, b.git_hash, b.cuda ? b.cuda_arch : "off");
    std::string names;
    for (const auto& n : s.served_model_names) names += (names.empty() ? "" : ",") + n;
    log_info("serve: model={}{} served-model-name={} host={} port={} api-key={} open-health-metrics={} io-threads={} "
             "worker-threads={}",
             c.model, c.model_path.empty() || c.model_path == c.model ? "" : " (" + c.model_path + ")", names, s.host,
             s.port, s.api_key.empty() ? "off" : "set", s.open_health_metrics, s.io_threads, s.worker_threads);
    log_info("serve: scheduling-policy={}{}", s.priority_scheduling ? "priority" : "fcfs",
             c.chat_template.empty() ? "" : " chat-template=" + c.chat_template);
    log_info("serve: max-body-bytes={} stream-buffer-bytes={} max-in-flight={} idle-timeout-s={} "
             "write-stall-timeout-s={} shutdown-grace-s={} request-timeout-s={} request-log={}{}",
             s.max_body_bytes, s.stream_buffer_bytes, s.max_in_flight, s.idle_timeout_s, s.write_stall_timeout_s,
             s.shutdown_grace_s, s.request_timeout_s > 0 ? fmt::format("{}", s.request_timeout_s) : "off", s.log_requests ? "on" : "off", s.log_requests && s.log_prompts ? " (with prompts)" : "");
    const ImageInputOptions& im = s.images;
    log_info("serve: allowed-local-media-path={} allow-remote-images={} max-image-bytes={} max-image-pixels={} "
             "max-images-per-request={} max-video-frames={} max-video-bytes={} video-frame-list-fps={} "
             "remote-image-timeout-s={} remote-ca-file={} (video files {}, https {})",
             im.allowed_local_media_path.empty() ? "none" : im.allowed_local_media_path, im.allow_remote_images,
             im.max_image_bytes, im.max_image_pixels, im.max_images_per_request, im.max_video_frames,
             im.max_video_bytes, im.video_frame_list_fps, im.remote_timeout_s,
             im.remote_ca_file.empty() ? "system" : im.remote_ca_file,
             video_files_supported() ? "on" : "off: built without libavcodec",
             https_supported() ? "on" : "off: built without OpenSSL");
}

// The engine's knobs as it runs them: automatic values (0) replaced by what they resolved to.
void log_engine(const EngineConfig& effective, const std::string& what) {
    log_info("serve: engine={} {}", what, effective.describe());
}

Status serve(const Args& args) {
    QS_ASSIGN_OR_RETURN(ServeConfig c, resolve(args));
    log_config(c);
    // Every connection is a descriptor: thousands of clients need more than a soft limit of 1024.
    log_info("serve: open-file limit {}", raise_fd_limit());
    if (!c.chat_template.empty() && c.tokenizer.empty())
        return invalid_argument("--chat-template needs a tokenizer (--tokenizer or a model directory with tokenizer.json)");
    if (!c.fake_engine && c.tokenizer.empty())
        return invalid_argument("--model " + c.model + " has no tokenizer.json: pass --tokenizer PATH");
    if (c.fake_engine && c.engine.max_model_len == 0) c.engine.max_model_len = 32768;

    // Signals are taken by this thread only (blocked before any other thread starts).
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);

    std::unique_ptr<TextPipeline> text_owner;
    std::vector<int32_t> eos_ids;
    if (!c.tokenizer.empty()) {
        QS_ASSIGN_OR_RETURN(auto tp, TokenizerTextPipeline::load(c.tokenizer, c.chat_template));
        eos_ids = tp->eos_token_ids();
        log_info("serve: tokenizer {} ({} ids, {} chat template)", c.tokenizer, tp->vocab_size(),
                 tp->renders_with_jinja()                          ? "Jinja-interpreted"
                 : tp->chat_format() == tok::ChatFormat::kQwen35 ? "Qwen3.5/3.6"
                                                                  : "Qwen3");
        text_owner = std::move(tp);
    } else {
        log_info("serve: tokenizer = byte-level test double (no tokenizer.json in --model, no --tokenizer)");
        eos_ids = {ByteTextPipeline::kImEnd, ByteTextPipeline::kEndOfText};
        text_owner = std::make_unique<ByteTextPipeline>();
    }
    const TextPipeline& text = *text_owner;
    auto state = std::make_unique<ServerState>(c.server, &text);
    Router router(*state);
    HttpServer server(c.server, [&router](HttpRequest r, std::shared_ptr<Exchange> ex) { router.handle(std::move(r), std::move(ex)); },
                      &state->metrics());
    QS_RETURN_IF_ERROR(server.start());
    log_info("serve: listening on http://{}:{}", c.server.host, server.port());

    // The engine: the real one on the CPU backend, or the scripted test double.
    std::unique_ptr<ModelWeights> weights;
    std::unique_ptr<Ops> ops;
    std::unique_ptr<EngineApi> engine;
    std::unique_ptr<grammar::GrammarCompiler> grammars;  // structured outputs (real engine only)
    std::unique_ptr<VisionInput> vision;                 // image input (a model with a vision tower)
    if (c.fake_engine) {
        FakeEngineOptions fo;
        fo.step_interval = std::chrono::microseconds(int64_t(c.fake_step_ms * 1000));
        fo.max_running = c.engine.max_num_seqs;
        fo.max_waiting = c.engine.max_waiting;
        fo.max_model_len = c.engine.max_model_len;
        fo.load_s = c.fake_load_s;
        fo.health_stall_s = c.engine.engine_stall_timeout_s;
        fo.eos_ids = eos_ids;
        fo.vocab_size = text.vocab_size();
        fo.token_bytes = [&text](int32_t id) { return text.token_text(id); };
        fo.encode = [&text](std::string_view s) { return text.encode(s); };
        engine = std::make_unique<FakeEngine>(fo);
        log_engine(c.engine, fmt::format("FAKE (scripted test double, step {} ms) - not a model; it uses max-num-seqs, "
                                         "max-waiting, max-model-len only;",
                                         c.fake_step_ms));
    } else {
        QS_ASSIGN_OR_RETURN(ModelWeights w, load_model_from_args(args));
        weights = std::make_unique<ModelWeights>(std::move(w));
        // Stop on the chat EOS as well as the config's (generation_config lists both).
        for (int32_t id : eos_ids)
            if (std::find(weights->config.eos_token_ids.begin(), weights->config.eos_token_ids.end(), id) ==
                weights->config.eos_token_ids.end())
                weights->config.eos_token_ids.push_back(id);
        // Image input when the checkpoint has a vision tower (and its preprocessor_config.json).
        auto proc = weights->visual ? load_image_processor_config(c.model_path)
                                    : Result<ImageProcessorConfig>(not_found("no vision tower"));
        if (proc.is_ok()) {
            // The processor's patches must be the tower's (a checkpoint without its own
            // preprocessor_config.json gets the release defaults, which may not fit a test tower).
            const VisionConfig& vc = weights->visual->config();
            if (proc->patch_size != vc.patch_size || proc->temporal_patch_size != vc.temporal_patch_size ||
                proc->merge_size != vc.spatial_merge_size)
                proc = invalid_argument(fmt::format(
                    "its preprocessor (patch {}, temporal {}, merge {}) does not fit the tower (patch {}, temporal "
                    "{}, merge {})",
                    proc->patch_size, proc->temporal_patch_size, proc->merge_size, vc.patch_size,
                    vc.temporal_patch_size, vc.spatial_merge_size));
        }
        if (weights->visual && c.server.images.max_images_per_request == 0) {
            // Operators who serve text only keep the tower's device memory for the cache.
            proc = unsupported("--max-images-per-request is 0");
            log_info("serve: image and video input off (--max-images-per-request 0): the vision tower holds no "
                     "device memory");
        } else if (weights->visual && !proc.is_ok()) {
            log_warn("serve: image input off: the model has a vision tower but {}", proc.status().message());
        }
        // Videos need video_preprocessor_config.json (its defaults when absent) to fit the tower too.
        auto video_proc = proc.is_ok() ? load_video_processor_config(c.model_path)
                                       : Result<VideoProcessorConfig>(not_found("no image input"));
        if (video_proc.is_ok() && (video_proc->image.patch_size != proc->patch_size ||
                                   video_proc->image.temporal_patch_size != proc->temporal_patch_size ||
                                   video_proc->image.merge_size != proc->merge_size))
            video_proc = invalid_argument("its video_preprocessor_config.json patch sizes differ from the tower's");
        if (proc.is_ok()) {
            vision = std::make_unique<VisionInput>();
            vision->processor = proc.value();
            vision->image_token_id = int32_t(weights->config.image_token_id);
            vision->vision_start_token_id = int32_t(weights->config.vision_start_token_id);
            vision->vision_end_token_id = int32_t(weights->config.vision_end_token_id);
            if (video_proc.is_ok()) {
                vision->video = video_proc.value();
                vision->video_token_id = int32_t(weights->config.video_token_id);
            } else {
                log_warn("serve: video input off: {}", video_proc.status().message());
            }
            state->set_vision(vision.get());
            log_info("serve: image input on (vision tower, {}..{} pixels per image after resizing); video input {}",
                     vision->processor.min_pixels, vision->processor.max_pixels,
                     vision->video_token_id >= 0 ? video_files_supported() ? "on (frame lists and files)" : "on (frame lists; files need libavcodec)" : "off");
        }
        // One backend, or a tensor-parallel group whose ranks each own theirs.
        QS_ASSIGN_OR_RETURN(const BackendOptions backend, backend_options_from_args(args, c.engine));
        std::unique_ptr<ModelRunner> group;
        if (backend.tensor_parallel_size > 1) {
            QS_ASSIGN_OR_RETURN(group, make_tensor_parallel_runner(backend, *weights));
            log_info("serve: tensor parallel over {} ranks (one thread each, device {}{})", backend.tensor_parallel_size,
                     backend.device, backend.expert_parallel ? ", experts split over the ranks" : "");
        } else {
            QS_ASSIGN_OR_RETURN(ops, make_backend(backend, *weights));
        }
        // With image input on, the tower's memory for the largest image the processor makes is
        // taken before the cache is sized.
        const int64_t max_image_rows =
            vision ? vision_max_patch_rows(vision->processor.max_pixels, vision->processor.patch_size) : 0;
        QS_ASSIGN_OR_RETURN(c.engine, size_engine(c.engine, ops.get(), *weights, backend.device == "cuda",
                                                  args.has("cache-memory-mb"), max_image_rows));
        auto* tp = static_cast<const TokenizerTextPipeline*>(&text);
        std::vector<int32_t> stops;
        for (int64_t id : weights->config.eos_token_ids) stops.push_back(int32_t(id));
        grammars = std::make_unique<grammar::GrammarCompiler>(grammar::grammar_vocab_from_tokenizer(
            *tp->tokenizer(), int32_t(weights->config.vocab_size), stops, tp->chat_format() == tok::ChatFormat::kQwen35));
        state->set_grammars(grammars.get());
        auto decoder = std::make_shared<TokenizerTextDecoder>(tp->tokenizer());
        QS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> real,
                            group ? Engine::create(*weights, std::move(group), c.engine, decoder)
                                  : Engine::create(*weights, *ops, c.engine, decoder));
        log_engine(with_resolved_sizes(c.engine, real->capacity()), "batched");
        log_info("serve: capacity: {}", real->capacity().describe());
        if (c.debug_stall_s > 0) {
            log_warn("serve: TESTING: the engine will stall for {} s after {} steps (--debug-engine-stall-s)",
                     c.debug_stall_s, c.debug_stall_after_steps);
            real->set_step_hook([after = c.debug_stall_after_steps, s = c.debug_stall_s](int64_t steps) {
                if (steps == after) std::this_thread::sleep_for(std::chrono::duration<double>(s));
            });
        }
        // Graphs before the first request: no request pays a capture.
        const double capture_start = now_seconds();
        std::unique_ptr<Progress> capture_progress;
        const int64_t graph_sizes = real->capture_graphs([&capture_progress](const GraphCaptureProgress& p) {
            if (!capture_progress)
                capture_progress = std::make_unique<Progress>("capturing CUDA graphs (batch sizes)", double(p.total),
                                                              kProgressCount, /*interval_s=*/2.0);
            capture_progress->advance(1.0);
        });
        if (capture_progress) capture_progress->finish();
        if (graph_sizes > 0)
            log_info("serve: {} CUDA graphs captured for {} batch sizes in {:.1f} s", ops ? ops->graph_captures() : 0, graph_sizes,
                     now_seconds() - capture_start);
        real->start();
        engine = std::move(real);
    }
    state->set_engine(engine.get());

    int sig = 0;
    sigwait(&signals, &sig);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(c.server.shutdown_grace_s));
    log_info("serve: {} received: draining {} in-flight requests (grace {} s)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
             state->metrics().in_flight.load(), c.server.shutdown_grace_s);
    state->set_draining();
    server.stop_accepting();
    while (state->metrics().in_flight.load() > 0 && std::chrono::steady_clock::now() < deadline) {
        server.close_idle_connections();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (state->metrics().in_flight.load() > 0) {
        log_warn("serve: grace period over: aborting {} requests", state->metrics().in_flight.load());
        state->abort_all();
        const auto abort_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (state->metrics().in_flight.load() > 0 && std::chrono::steady_clock::now() < abort_deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    server.stop();
    state.reset();   // joins the workers (they may still use the engine)
    state = nullptr;
    engine.reset();  // drops the sinks (and with them the last connections) before the server goes
    log_info("serve: stopped");
    return Status::ok();
}

}  // namespace

const CommandSpec& serve_spec() {
    static const CommandSpec spec = [] {
        const ServeConfig defaults;
        const ServerOptions& d = defaults.server;
        CommandSpec c;
        c.name = "serve";
        c.summary = "OpenAI-compatible HTTP server (chat, completions, streaming, metrics)";
        c.usage = "serve --model DIR|ORG/NAME [options]";
        c.description =
            "Serves /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics, /tokenize and "
            "/detokenize. SIGTERM or SIGINT: stop accepting, let in-flight requests finish within "
            "--shutdown-grace-s, abort the rest, exit 0.";
        c.groups.push_back(
            {"Server",
             {valued("host", "HOST", "address to listen on", d.host),
              valued("port", "N", "TCP port (0: any free port)", std::to_string(d.port)),
              valued("api-key", "KEY",
                     "require 'Authorization: Bearer KEY' on every route (compared in constant time)", "none"),
              flag("open-health-metrics", "with --api-key, let /health, /ping and GET /metrics answer without the key "
                                          "(for probes and scrapers)"),
              valued("served-model-name", "NAME[,NAME...]",
                     "the model names clients may ask for (the first is the one /v1/models lists first)",
                     "the --model value"),
              valued("tokenizer", "PATH", "tokenizer.json or its directory", "the model directory's"),
              valued("chat-template", "FILE",
                     "a Jinja chat template file to use instead of the tokenizer's: a Qwen3 or Qwen3.5/3.6 "
                     "template is rendered natively, any other by the Jinja interpreter (a construct it does not "
                     "support is refused at start, naming the line: docs/API.md)",
                     "the tokenizer's"),
              valued("scheduling-policy", "fcfs|priority",
                     "fcfs: a request's 'priority' other than 0 is a 400 (as vLLM); priority: waiting requests "
                     "are admitted by priority (lower first), then arrival, and pages are taken from the "
                     "lowest-priority running request first",
                     "fcfs"),
              valued("io-threads", "N", "HTTP I/O threads", std::to_string(d.io_threads)),
              valued("worker-threads", "N", "threads that apply the chat template and tokenize",
                     std::to_string(d.worker_threads)),
              valued("max-body-bytes", "N",
                     "largest request body of the prompt routes (chat, completions, tokenize, detokenize); the "
                     "others take 4 KiB; beyond: 413 before the body is read",
                     std::to_string(d.max_body_bytes)),
              valued("stream-buffer-bytes", "N",
                     "unsent bytes a connection may hold before its request is aborted",
                     std::to_string(d.stream_buffer_bytes)),
              valued("max-in-flight", "N", "generation requests in the HTTP layer; beyond it a 503",
                     std::to_string(d.max_in_flight)),
              valued("idle-timeout-s", "S", "keep-alive connections waiting for a request are closed after this",
                     fmt::format("{}", d.idle_timeout_s)),
              valued("write-stall-timeout-s", "S", "a write that makes no progress this long closes the connection",
                     fmt::format("{}", d.write_stall_timeout_s)),
              valued("shutdown-grace-s", "S", "on SIGTERM, in-flight requests get this long to finish",
                     fmt::format("{}", d.shutdown_grace_s)),
              valued("request-timeout-s", "S",
                     "a generation request not finished this long after it arrived is answered with a 504 "
                     "request_timeout error (streams: an error event, then [DONE]) and aborted in the engine, "
                     "which frees its slot and pages (0: no timeout)",
                     "0")}});
        for (auto& o : c.groups.back().options) {
            if (o.name == "port") o.allowed = "in [0, 65535]";
            if (o.metavar == "N" && o.name != "port") o.allowed = ">= 1";
            if (o.metavar == "S") o.allowed = ">= 0";
        }
        const ImageInputOptions& di = d.images;
        c.groups.push_back(
            {"Image input",
             {valued("allowed-local-media-path", "DIR",
                     "image_url parts may name local files (a path or file:// URL) under DIR (symbolic links "
                     "resolved first); without it only data: URLs (and http:// with --allow-remote-images)",
                     "none"),
              flag("allow-remote-images", "image_url and video_url parts may be http:// or https:// URLs, fetched "
                                          "by the server within --max-image-bytes (--max-video-bytes) and "
                                          "--remote-image-timeout-s; https certificates are verified"),
              valued("remote-ca-file", "FILE",
                     "PEM CA certificates that https image and video URLs are verified against (instead of the "
                     "system's CA store)", "system"),
              valued("max-image-bytes", "N", "largest encoded image (data: URL, file or download), in bytes",
                     std::to_string(di.max_image_bytes)),
              valued("max-image-pixels", "N", "largest image, width x height before resizing (a 400 beyond)",
                     std::to_string(di.max_image_pixels)),
              valued("max-images-per-request", "N",
                     "image_url and video_url parts per request; 0 turns image and video input off (then the vision "
                     "tower reserves no device memory before the cache is sized)",
                     std::to_string(di.max_images_per_request)),
              valued("max-video-frames", "N",
                     "frames in one video: a video_url frame list (counted before decoding) or the frames sampled "
                     "from a video file", std::to_string(di.max_video_frames)),
              valued("max-video-bytes", "N", "largest video file (data: URL, file or download), in bytes",
                     std::to_string(di.max_video_bytes)),
              valued("video-frame-list-fps", "FPS",
                     "frame rate a video_url frame list is taken to have (sets the timestamps written before each "
                     "pair of frames; 1 as in vLLM)", fmt::format("{}", di.video_frame_list_fps)),
              valued("remote-image-timeout-s", "S", "time for one http:// or https:// image or video fetch", fmt::format("{}", di.remote_timeout_s))}});
        for (auto& o : c.groups.back().options) {
            if (o.metavar == "N") o.allowed = o.name == "max-images-per-request" ? ">= 0" : ">= 1";
            if (o.metavar == "S") o.allowed = ">= 0";
            if (o.metavar == "FPS") o.allowed = "> 0";
        }
        c.groups.push_back(
            {"Request log",
             {flag("disable-log-requests",
                   "no request-log line (id, prompt/cached/completion tokens, TTFT, end-to-end time, decode "
                   "tokens/s, finish reason) per request"),
              flag("log-prompts", "put the prompt (chat messages as JSON, or the completion prompt) in the "
                                  "request-log line; off because prompts may be private")}});
        c.groups.push_back(model_option_group());
        c.groups.push_back(backend_option_group());
        c.groups.push_back(parallel_option_group());
        c.groups.push_back(engine_option_group());
        c.groups.push_back(
            {"Testing",
             {flag("fake-engine", "serve a scripted test double instead of a model (its log line says so)"),
              valued("fake-step-ms", "MS", "the fake engine's step interval", fmt::format("{}", defaults.fake_step_ms)),
              valued("fake-load-s", "S", "the fake engine's pretend load time", fmt::format("{}", defaults.fake_load_s)),
              valued("debug-engine-stall-s", "S",
                     "TESTING: the real engine sleeps this long, once, before the forward of the step after "
                     "--debug-engine-stall-after-steps steps (to test the watchdog; 0: never)",
                     "0"),
              valued("debug-engine-stall-after-steps", "N", "TESTING: see --debug-engine-stall-s", "0")}});
        return c;
    }();
    return spec;
}

int run_serve(int argc, char** argv) {
    int code = 0;
    auto args = parse_command(serve_spec(), argc, argv, code);
    if (!args) return code;
    Status st = serve(*args);
    return st.is_ok() ? 0 : fail("serve", st);
}

}  // namespace qs::cli
