// `qwenserve generate --model DIR --prompt-ids 1,2,3 --max-tokens N [--ignore-eos]`
// Greedy decoding of one sequence on the CPU backend; prints the generated ids and prefill/decode
// tokens/s. With `--input prompts.jsonl --output out.jsonl` it runs a batch through the Engine
// instead (batch_generate.h). Main thread.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "cli/backend_args.h"
#include "cli/batch_generate.h"
#include "cli/commands.h"
#include "cli/engine_option_group.h"
#include "cli/model_args.h"
#include "core/timer.h"
#include "engine/engine_config.h"
#include "engine/request.h"
#include "model/single_sequence.h"

namespace qs::cli {

namespace {

int32_t argmax(const std::vector<float>& v) {
    return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

Status run(const Args& args) {
    QS_ASSIGN_OR_RETURN(std::string ids_text, args.require("prompt-ids"));
    QS_ASSIGN_OR_RETURN(std::vector<int64_t> ids64, parse_int_list(ids_text, "--prompt-ids"));
    QS_ASSIGN_OR_RETURN(int64_t max_tokens, args.get_int("max-tokens", SamplingParams{}.max_tokens));
    if (max_tokens < 1) return invalid_argument(fmt::format("--max-tokens must be at least 1, got {}", max_tokens));
    const bool ignore_eos = args.has("ignore-eos");
    QS_ASSIGN_OR_RETURN(EngineConfig engine, EngineConfig::from_args(args));  // the cache dtypes

    QS_ASSIGN_OR_RETURN(ModelWeights weights, load_model_from_args(args));
    const ModelConfig& c = weights.config;
    QS_RETURN_IF_ERROR(check_token_ids(ids64, c.vocab_size));
    std::vector<int32_t> prompt(ids64.begin(), ids64.end());

    QS_ASSIGN_OR_RETURN(std::unique_ptr<Ops> ops, make_backend_from_args(args, engine, weights));
    Qwen36Model model(weights, *ops);
    SingleSequence seq(model, int64_t(prompt.size()) + max_tokens, engine.kv_cache_dtype);
    Timer t_prefill;
    std::vector<float> logits = seq.feed(prompt, /*all_rows=*/false);
    const double prefill_s = t_prefill.elapsed_s();
    std::vector<int32_t> out;
    Timer t_decode;
    for (int64_t i = 0; i < max_tokens; ++i) {
        const int32_t next = argmax(logits);
        out.push_back(next);
        const bool eos = std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), next) != c.eos_token_ids.end();
        if ((eos && !ignore_eos) || i + 1 == max_tokens) break;
        logits = seq.feed({next}, /*all_rows=*/false);
    }
    const double decode_s = t_decode.elapsed_s();
    std::string text;
    for (size_t i = 0; i < out.size(); ++i) text += (i ? "," : "") + std::to_string(out[i]);
    std::printf("ids: %s\n", text.c_str());
    std::printf("prefill: %zu tokens in %.3f s (%.1f tokens/s)\n", prompt.size(), prefill_s,
                double(prompt.size()) / prefill_s);
    const size_t decoded = out.size() > 1 ? out.size() - 1 : 0;  // the first token came from prefill
    std::printf("decode:  %zu tokens in %.3f s (%.1f tokens/s)\n", decoded, decode_s,
                decoded ? double(decoded) / decode_s : 0.0);
    return Status::ok();
}

}  // namespace

const CommandSpec& generate_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "generate";
        c.summary = "greedy generation from prompt ids, or a JSONL batch through the engine (--input/--output)";
        c.usage = "generate --model DIR --prompt-ids 1,2,3 [--max-tokens N] [options]\n"
                  "       qwenserve generate --model DIR --input prompts.jsonl --output out.jsonl [options]";
        c.description =
            "With --prompt-ids: one sequence, greedy, on its own cache; prints the ids and prefill/decode "
            "tokens/s. With --input/--output: every JSON line of the input through the batched engine, one "
            "output line per completion in input order, and a throughput summary.";
        c.groups.push_back(
            {"Generation",
             {valued("prompt-ids", "IDS", "comma-separated prompt token ids (one sequence)"),
              valued("max-tokens", "N", "completion tokens (with --input: for the lines that do not say)",
                     std::to_string(SamplingParams{}.max_tokens)),
              flag("ignore-eos", "do not stop at an end-of-sequence token"),
              valued("input", "FILE.jsonl", "a batch: one request a line ({\"prompt\": ...} or {\"prompt_ids\": ...})"),
              valued("output", "FILE.jsonl", "where the batch's completions go")}});
        c.groups.push_back(model_option_group());
        c.groups.push_back(backend_option_group());
        c.groups.push_back(engine_option_group());
        return c;
    }();
    return spec;
}

int run_generate(int argc, char** argv) {
    int code = 0;
    auto args = parse_command(generate_spec(), argc, argv, code);
    if (!args) return code;
    if (args->has("input") && args->has("prompt-ids"))
        return fail("generate", invalid_argument("give either --prompt-ids (one sequence) or --input (a batch)"));
    Status st = args->has("input") || args->has("output") ? run_batch_generate(*args) : run(*args);
    return st.is_ok() ? 0 : fail("generate", st);
}

}  // namespace qs::cli
