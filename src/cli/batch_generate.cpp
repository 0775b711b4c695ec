// Batch generation through the Engine (see batch_generate.h). Everything is validated before the
// first forward (line numbers and fields named); the output goes to OUT.tmp and is renamed to
// OUT only when every request has finished, so an error never leaves a partial file.
#include "cli/batch_generate.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/backend_args.h"
#include "cli/batch_input.h"
#include "cli/model_args.h"
#include "core/log.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "engine/engine_config_text.h"
#include "engine/engine_sizing.h"
#include "tokenizer/tokenizer.h"

namespace qs::cli {

namespace {

namespace fs = std::filesystem;

// One completion's accumulated output (filled by the sink on this thread: we step the engine).
struct CompletionOut {
    std::vector<int32_t> token_ids;
    std::string text;
    std::vector<TokenLogprob> logprobs;
    std::vector<std::vector<TokenLogprob>> top_logprobs;
    FinishReason finish = FinishReason::kNone;
    std::string stop_reason, error;
    int64_t prompt_tokens = 0, cached_prompt_tokens = 0;
};

nlohmann::json logprob_json(const TokenLogprob& t) { return {{"token_id", t.token_id}, {"logprob", t.logprob}}; }

nlohmann::json completion_json(const BatchItem& item, int index, const CompletionOut& c) {
    nlohmann::json j = {{"id", item.id},
                        {"index", index},
                        {"prompt_tokens", c.prompt_tokens},
                        {"token_ids", c.token_ids},
                        {"text", c.text},
                        {"finish_reason", finish_reason_name(c.finish)},
                        {"stop_reason", c.stop_reason},
                        {"cached_prompt_tokens", c.cached_prompt_tokens}};
    if (item.params.logprobs >= 0) {
        nlohmann::json lp = nlohmann::json::array(), top = nlohmann::json::array();
        for (const auto& t : c.logprobs) lp.push_back(logprob_json(t));
        for (const auto& row : c.top_logprobs) {
            nlohmann::json r = nlohmann::json::array();
            for (const auto& t : row) r.push_back(logprob_json(t));
            top.push_back(std::move(r));
        }
        j["logprobs"] = std::move(lp);
        j["top_logprobs"] = std::move(top);
    }
    if (!c.error.empty()) j["error"] = c.error;
    return j;
}

// Fills prompt_ids from text where needed and checks everything the engine would reject.
Status prepare(std::vector<BatchItem>& items, const tok::Tokenizer* tokenizer, const ModelConfig& config,
               int64_t max_model_len) {
    for (BatchItem& item : items) {
        if (item.prompt) {
            if (!tokenizer)
                return invalid_argument(fmt::format("line {}: \"prompt\": text needs the model directory's "
                                                    "tokenizer.json (or give \"prompt_ids\")",
                                                    item.line));
            item.prompt_ids = tokenizer->encode(*item.prompt);
            if (item.prompt_ids->empty())
                return invalid_argument(fmt::format("line {}: \"prompt\": tokenizes to nothing", item.line));
        }
        const auto& ids = *item.prompt_ids;
        const char* field = item.prompt ? "prompt" : "prompt_ids";
        for (size_t i = 0; i < ids.size(); ++i)
            if (ids[i] >= config.vocab_size)
                return invalid_argument(fmt::format("line {}: \"{}[{}]\": token id {} is outside the vocabulary "
                                                    "(vocab_size {})",
                                                    item.line, field, i, ids[i], config.vocab_size));
        for (size_t i = 0; i < item.params.stop_token_ids.size(); ++i)
            if (item.params.stop_token_ids[i] >= config.vocab_size)
                return invalid_argument(fmt::format("line {}: \"stop_token_ids[{}]\": token id {} is outside the "
                                                    "vocabulary (vocab_size {})",
                                                    item.line, i, item.params.stop_token_ids[i], config.vocab_size));
        if (int64_t(ids.size()) >= max_model_len)
            return invalid_argument(fmt::format("line {}: \"{}\": {} tokens, but max_model_len is {}", item.line, field,
                                                ids.size(), max_model_len));
        if (!item.params.stop.empty() && !tokenizer)
            return invalid_argument(
                fmt::format("line {}: \"stop\": stop strings need the model directory's tokenizer.json", item.line));
    }
    return Status::ok();
}

// Submits every item (keeping the waiting queue within its bound) and steps until all finish.
Status run_all(Engine& engine, const std::vector<BatchItem>& items, std::vector<std::vector<CompletionOut>>& results) {
    results.resize(items.size());
    size_t next = 0;
    while (next < items.size() || engine.num_live_requests() > 0) {
        for (; next < items.size(); ++next) {
            const BatchItem& item = items[next];
            results[next].resize(size_t(item.params.n));
            GenerationRequest r;
            r.id = item.id;
            r.prompt_ids = *item.prompt_ids;
            r.params = item.params;
            auto* out = &results[next];
            Status st = engine.submit(std::move(r), [out](RequestOutput&& o) {
                CompletionOut& c = (*out)[size_t(o.index)];
                c.token_ids.insert(c.token_ids.end(), o.token_ids.begin(), o.token_ids.end());
                c.text += o.text;
                c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
                for (auto& t : o.top_logprobs) c.top_logprobs.push_back(std::move(t));
                c.prompt_tokens = o.num_prompt_tokens;
                c.cached_prompt_tokens = o.num_cached_prompt_tokens;
                if (o.finish_reason != FinishReason::kNone) {
                    c.finish = o.finish_reason;
                    c.stop_reason = o.stop_reason;
                    c.error = o.error;
                }
            });
            if (st.is_ok()) continue;
            if (st.kind() == ErrorKind::kResourceExhausted) break;  // queue full: step, then retry
            return st.with_context(fmt::format("line {}", item.line));
        }
        engine.step();
    }
    return Status::ok();
}

Status write_output(const std::string& path, const std::vector<BatchItem>& items,
                    const std::vector<std::vector<CompletionOut>>& results) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) return io_error("cannot write '" + tmp + "'");
        for (size_t i = 0; i < items.size(); ++i)
            for (size_t k = 0; k < results[i].size(); ++k)
                out << completion_json(items[i], int(k), results[i][k]).dump(-1, ' ', false,
                                                                           nlohmann::json::error_handler_t::replace)
                    << '\n';
        out.flush();
        if (!out) {
            std::error_code ec;
            fs::remove(tmp, ec);
            return io_error("writing '" + tmp + "' failed");
        }
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) return io_error(fmt::format("renaming '{}' to '{}': {}", tmp, path, ec.message()));
    return Status::ok();
}

void print_summary(const Engine& engine, const std::vector<BatchItem>& items,
                   const std::vector<std::vector<CompletionOut>>& results, double wall_s) {
    int64_t prompt_tokens = 0, completion_tokens = 0, cached = 0, completions = 0;
    for (size_t i = 0; i < items.size(); ++i) {
        prompt_tokens += int64_t(items[i].prompt_ids->size());
        for (const CompletionOut& c : results[i]) {
            completion_tokens += int64_t(c.token_ids.size());
            cached += c.cached_prompt_tokens;
            ++completions;
        }
    }
    std::printf("requests: %zu (%lld completions)\n", items.size(), (long long)completions);
    std::printf("prompt tokens: %lld (%lld from the prefix cache)\n", (long long)prompt_tokens, (long long)cached);
    std::printf("completion tokens: %lld\n", (long long)completion_tokens);
    std::printf("wall: %.3f s, %.1f completion tokens/s, %lld engine steps\n", wall_s,
                wall_s > 0 ? double(completion_tokens) / wall_s : 0.0, (long long)engine.stats().steps_total);
    const auto& proposed = engine.mtp_proposed_by_position();
    const auto& accepted = engine.mtp_accepted_by_position();
    for (size_t i = 0; i < proposed.size(); ++i)
        std::printf("MTP draft %zu: %lld/%lld accepted (%.1f%%)\n", i + 1, (long long)accepted[i],
                    (long long)proposed[i], proposed[i] ? 100.0 * double(accepted[i]) / double(proposed[i]) : 0.0);
}

}  // namespace

Status run_batch_generate(const Args& args) {
    QS_ASSIGN_OR_RETURN(std::string input, args.require("input"));
    QS_ASSIGN_OR_RETURN(std::string output, args.require("output"));
    QS_ASSIGN_OR_RETURN(EngineConfig engine_config, EngineConfig::from_args(args));
    // --max-tokens and --ignore-eos are the defaults for lines that leave them out.
    SamplingParams defaults;
    QS_ASSIGN_OR_RETURN(defaults.max_tokens, args.get_int("max-tokens", defaults.max_tokens));
    defaults.ignore_eos = args.has("ignore-eos");
    if (Status st = defaults.validate(); !st.is_ok()) return st.with_context("--max-tokens");
    QS_ASSIGN_OR_RETURN(std::vector<BatchItem> items, read_batch_file(input, defaults));

    QS_ASSIGN_OR_RETURN(ModelWeights weights, load_model_from_args(args));
    std::shared_ptr<const tok::Tokenizer> tokenizer;
    QS_ASSIGN_OR_RETURN(const std::string model, model_path_from_args(args));
    if (fs::exists(fs::path(model) / "tokenizer.json")) {
        QS_ASSIGN_OR_RETURN(std::unique_ptr<tok::Tokenizer> t, tok::Tokenizer::from_dir(model));
        tokenizer = std::move(t);
    }
    QS_ASSIGN_OR_RETURN(std::unique_ptr<Ops> ops, make_backend_from_args(args, engine_config, weights));
    QS_ASSIGN_OR_RETURN(engine_config, size_engine(engine_config, ops.get(), weights, args.get_or("device", "cpu") == "cuda",
                                                   args.has("cache-memory-mb")));
    QS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                        Engine::create(weights, *ops, engine_config,
                                       tokenizer ? std::make_shared<TokenizerTextDecoder>(tokenizer) : nullptr));
    log_info("generate: {} requests; engine: {}; capacity: {}", items.size(),
             with_resolved_sizes(engine_config, engine->capacity()).describe(),
             engine->capacity().describe());
    QS_RETURN_IF_ERROR(prepare(items, tokenizer.get(), weights.config, engine->max_model_len()));

    std::vector<std::vector<CompletionOut>> results;
    Timer timer;
    QS_RETURN_IF_ERROR(run_all(*engine, items, results));
    const double wall_s = timer.elapsed_s();
    QS_RETURN_IF_ERROR(write_output(output, items, results));
    print_summary(*engine, items, results, wall_s);
    return Status::ok();
}

}  // namespace qs::cli
