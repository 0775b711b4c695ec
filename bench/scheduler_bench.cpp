// Engine bookkeeping cost: everything a step costs except the model forward, with N resident
// sequences decoding, at the real Qwen3.6-35B-A3B shapes (vocabulary 248,320, real cache
// geometry) on NullOps (no arithmetic, no cache storage). Reports per step: scheduling, the whole
// step minus the forward, and the sampling call (building the SampleRows and NullOps::sample,
// which draws nothing: the draws themselves run on the backend) separately, for each sampling
// mode. A benchmark, never a test; single-threaded.
// Usage: build/bench/scheduler_bench [--steps 20] [--prompt 512] [--residents 64,256,512]
//            [--spec 0,2] [--prefix on,off] [--modes greedy,sampled,penalties,logprobs] [--vocab V]
//            [--tokenizer tokenizer.json] [--sink none|stream] [--io-threads 4]
// --residents/--spec/--prefix/--modes pick scenarios; --vocab changes the vocabulary.
// --tokenizer detokenizes every new token on the engine thread, as `serve` does (stop-string
// checks included); --sink stream hands each output to a per-request outbox and posts one drain
// per request and step to an io_context of --io-threads threads that formats an SSE chunk, as the
// HTTP server's GenerationStream does (server/generation_stream.cpp), so the step's host time
// includes what serving adds per sequence on the engine thread.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>

#include <atomic>
#include <boost/asio.hpp>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/null/null_ops.h"
#include "core/args.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "engine/text_decoder.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

using namespace qs;

namespace {

struct Scenario {
    int64_t residents;
    bool prefix_caching;
    int64_t spec;
    std::string mode;  // greedy | sampled (T 0.7, top_p 0.95) | penalties (T 1 + all three) | logprobs (5)
};

void apply_mode(const std::string& mode, SamplingParams& p) {
    p.temperature = 0.0;
    if (mode == "sampled") {
        p.temperature = 0.7;
        p.top_p = 0.95;
    } else if (mode == "penalties") {
        p.temperature = 1.0;
        p.repetition_penalty = 1.1;
        p.presence_penalty = 0.5;
        p.frequency_penalty = 0.5;
    } else if (mode == "logprobs") {
        p.logprobs = 5;
    }
}

// What the HTTP server does with a streamed request's outputs (GenerationStream::on_output and
// drain): the engine thread appends to the request's outbox under a mutex and posts one drain
// when none is pending; an I/O thread takes the outbox and formats each output as an SSE chunk.
class StreamSink {
public:
    explicit StreamSink(int threads) : guard_(boost::asio::make_work_guard(io_)) {
        for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { io_.run(); });
    }
    ~StreamSink() {
        guard_.reset();
        io_.stop();
        for (auto& t : threads_) t.join();
    }
    OutputSink sink_for() {
        auto s = std::make_shared<Stream>();
        return [this, s](RequestOutput&& out) {
            bool post = false;
            {
                std::lock_guard<std::mutex> lock(s->mu);
                s->outbox.push_back(std::move(out));
                post = !s->posted;
                s->posted = true;
            }
            if (post) boost::asio::post(io_, [this, s] { drain(*s); });
        };
    }
    int64_t chunks() const { return chunks_.load(); }

private:
    struct Stream {
        std::mutex mu;
        std::vector<RequestOutput> outbox;
        bool posted = false;
        std::string last_chunk;
    };
    void drain(Stream& s) {
        std::vector<RequestOutput> batch;
        {
            std::lock_guard<std::mutex> lock(s.mu);
            batch.swap(s.outbox);
            s.posted = false;
        }
        for (const RequestOutput& o : batch) {
            nlohmann::json j = {{"id", o.request_id}, {"object", "chat.completion.chunk"},
                                {"choices", {{{"index", o.index}, {"delta", {{"content", o.text}}}}}}};
            s.last_chunk = "data: " + j.dump() + "\n\n";
            chunks_.fetch_add(1, std::memory_order_relaxed);
        }
    }
    boost::asio::io_context io_;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
    std::vector<std::thread> threads_;
    std::atomic<int64_t> chunks_{0};
};

struct Serving {
    std::shared_ptr<const TextDecoder> decoder;  // null: no detokenization
    int io_threads = 0;                          // 0: outputs dropped on the engine thread
};

struct Measured {
    double schedule_ms, step_minus_forward_ms, sample_ms, bookkeeping_ms, forward_ms, engine_cpu_ms;
};

Measured run_scenario(const ModelWeights& w, const Scenario& sc, int64_t prompt_len, int64_t steps,
                      const Serving& serving) {
    NullOps ops;
    EngineConfig ec;
    ec.max_num_seqs = sc.residents;
    ec.enable_prefix_caching = sc.prefix_caching;
    ec.num_speculative_tokens = sc.spec;
    ec.cache_memory_mb = 1 << 20;  // capacity arithmetic only: NullOps allocates no cache storage
    const int64_t max_tokens = (steps + 64) * (1 + sc.spec);
    ec.num_kv_blocks = sc.residents * ((prompt_len + max_tokens) / ec.kv_block_size + 2) + 1024;
    ec.max_model_len = prompt_len + max_tokens + 16;
    auto engine = Engine::create(w, ops, ec, serving.decoder);
    std::unique_ptr<StreamSink> streams;
    if (serving.io_threads > 0) streams = std::make_unique<StreamSink>(serving.io_threads);
    if (!engine.is_ok()) {
        std::fprintf(stderr, "engine: %s\n", engine.status().message().c_str());
        std::exit(1);
    }
    Engine& e = **engine;
    // Prompts share a 256-token system prefix (prefix-cache hits when enabled).
    std::mt19937 rng(1);
    const uint32_t max_id = uint32_t(std::min<int64_t>(150000, w.config.vocab_size));
    std::vector<int32_t> system(256);
    for (auto& t : system) t = int32_t(rng() % max_id);
    for (int64_t i = 0; i < sc.residents; ++i) {
        GenerationRequest r;
        r.id = "r" + std::to_string(i);
        r.prompt_ids = system;
        while (int64_t(r.prompt_ids.size()) < prompt_len) r.prompt_ids.push_back(int32_t(rng() % max_id));
        apply_mode(sc.mode, r.params);
        r.params.seed = uint64_t(i);
        r.params.max_tokens = max_tokens;
        r.params.ignore_eos = true;
        OutputSink sink = streams ? streams->sink_for() : OutputSink([](RequestOutput&&) {});
        if (!e.submit(std::move(r), std::move(sink)).is_ok()) std::exit(1);
    }
    // Prefill everything, then a few decode steps to settle (MTP drafts in place).
    while (e.stats().num_waiting > 0 || e.stats().num_running < sc.residents) e.step();
    for (int i = 0; i < 8; ++i) e.step();
    e.reset_profile();
    // The engine thread's CPU time: the host work itself, whatever else shares the cores (wall
    // times on a loaded machine also count the time the thread waited for a core).
    timespec c0{}, c1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    for (int64_t i = 0; i < steps; ++i) e.step();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    const EngineProfile& p = e.profile();
    const double n = double(p.steps);
    Measured m;
    m.schedule_ms = p.schedule_s / n * 1e3;
    m.forward_ms = p.forward_s / n * 1e3;
    m.step_minus_forward_ms = (p.total_s - p.forward_s) / n * 1e3;
    m.sample_ms = p.sample_s / n * 1e3;
    m.engine_cpu_ms = (double(c1.tv_sec - c0.tv_sec) + 1e-9 * double(c1.tv_nsec - c0.tv_nsec)) / n * 1e3;
    m.bookkeeping_ms = (p.total_s - p.forward_s - p.sample_s) / n * 1e3;
    if (e.stats().num_running != sc.residents) std::fprintf(stderr, "warning: sequences finished early\n");
    return m;
}

}  // namespace

int main(int argc, char** argv) {
    auto args = Args::parse(argc, argv, {}, {"steps", "prompt", "residents", "spec", "prefix", "modes", "vocab", "tokenizer", "sink", "io-threads"});
    if (!args.is_ok()) {
        std::fprintf(stderr, "%s\n", args.status().message().c_str());
        return 2;
    }
    const int64_t steps = args->get_int("steps", 20).value();
    const int64_t prompt_len = args->get_int("prompt", 512).value();
    auto residents_list = parse_int_list(args->get_or("residents", "64,256,512"), "--residents");
    auto spec_list = parse_int_list(args->get_or("spec", "0,2"), "--spec");
    if (!residents_list.is_ok() || !spec_list.is_ok()) {
        std::fprintf(stderr, "bad --residents or --spec\n");
        return 2;
    }
    const std::string prefix = args->get_or("prefix", "on,off");
    std::vector<std::string> modes;
    {
        const std::string list = args->get_or("modes", "greedy");
        for (size_t at = 0; at <= list.size();) {
            const size_t comma = std::min(list.find(',', at), list.size());
            const std::string m = list.substr(at, comma - at);
            if (m != "greedy" && m != "sampled" && m != "penalties" && m != "logprobs") {
                std::fprintf(stderr, "--modes: unknown mode '%s' (greedy, sampled, penalties, logprobs)\n", m.c_str());
                return 2;
            }
            modes.push_back(m);
            at = comma + 1;
        }
    }
    Serving serving;
    if (args->has("tokenizer")) {
        auto tok = tok::Tokenizer::from_file(args->get_or("tokenizer", ""));
        if (!tok.is_ok()) {
            std::fprintf(stderr, "--tokenizer: %s\n", tok.status().message().c_str());
            return 2;
        }
        serving.decoder = std::make_shared<TokenizerTextDecoder>(std::shared_ptr<const tok::Tokenizer>(std::move(*tok)));
    }
    const std::string sink = args->get_or("sink", "none");
    if (sink != "none" && sink != "stream") {
        std::fprintf(stderr, "--sink: '%s' is neither none nor stream\n", sink.c_str());
        return 2;
    }
    const int64_t io_threads = args->get_int("io-threads", 4).value();
    if (io_threads < 1 || io_threads > 64) {
        std::fprintf(stderr, "--io-threads must be in [1, 64]\n");
        return 2;
    }
    if (sink == "stream") serving.io_threads = int(io_threads);
    ModelConfig config = qwen36_35b_a3b_config();
    config.vocab_size = args->get_int("vocab", config.vocab_size).value();
    const ModelWeights w = make_shape_only_weights(config, /*with_mtp=*/true);

    std::printf("Engine step cost without the forward: qwen36-35b-a3b shapes (vocab %lld), NullOps,\n"
                "prompt %lld tokens (256 shared), %lld measured decode steps; ms per step.\n"
                "sampling = building the SampleRows + the backend call (NullOps draws nothing);\n"
                "bookkeeping = step - forward - sampling; detokenize: %s; sink: %s\n\n",
                (long long)config.vocab_size, (long long)prompt_len, (long long)steps,
                serving.decoder ? "yes" : "no", serving.io_threads ? "stream (SSE chunks on I/O threads)" : "none");
    std::printf("| resident | prefix cache | MTP k | mode | schedule | step - forward | sampling | bookkeeping | engine-thread CPU |\n");
    std::printf("|---------:|:------------:|------:|:-----|---------:|---------------:|---------:|------------:|------------------:|\n");
    // Plain decode with the prefix cache on and off; MTP (k > 0) with it on.
    std::vector<Scenario> scenarios;
    for (int64_t residents : *residents_list)
        for (int64_t spec : *spec_list)
            for (bool on : {true, false}) {
                if (prefix.find(on ? "on" : "off") == std::string::npos || (spec > 0 && !on)) continue;
                for (const std::string& mode : modes) scenarios.push_back({residents, on, spec, mode});
            }
    for (const Scenario& sc : scenarios) {
        const Measured m = run_scenario(w, sc, prompt_len, steps, serving);
        std::printf("| %8lld | %12s | %5lld | %s | %8.3f | %14.3f | %8.3f | %11.3f | %17.3f |\n", (long long)sc.residents,
                    sc.prefix_caching ? "on" : "off", (long long)sc.spec, sc.mode.c_str(), m.schedule_ms,
                    m.step_minus_forward_ms, m.sample_ms, m.bookkeeping_ms, m.engine_cpu_ms);
        std::fflush(stdout);
    }

    return 0;
}
