// `qwenserve logits --model DIR --ids 1,2,3 [--incremental-from K] --out F.npy`
// Writes float32 logits from the CPU reference forward. Without --incremental-from: [T, vocab],
// all positions from one prefill. With it: prefill ids[0, K), then ids K..T-1 one at a time
// through the decode path; rows for positions K-1..T-1 ([T-K+1, vocab]). With --mtp-out M.npy,
// also the MTP draft logits over the whole sequence ([T-1, vocab], row p predicts token p+2).
#include <fmt/format.h>

#include "cli/backend_args.h"
#include "cli/commands.h"
#include "cli/engine_option_group.h"
#include "cli/model_args.h"
#include "engine/engine_config.h"
#include "io/npy.h"
#include "model/single_sequence.h"

namespace qs::cli {

namespace {

Status run(const Args& args) {
    QS_ASSIGN_OR_RETURN(std::string ids_text, args.require("ids"));
    QS_ASSIGN_OR_RETURN(std::string out_path, args.require("out"));
    QS_ASSIGN_OR_RETURN(std::vector<int64_t> ids64, parse_int_list(ids_text, "--ids"));
    QS_ASSIGN_OR_RETURN(int64_t K, args.get_int("incremental-from", 0));
    const bool incremental = args.get("incremental-from").has_value();
    const int64_t T = int64_t(ids64.size());
    if (incremental && (K < 1 || K > T))
        return invalid_argument(fmt::format("--incremental-from must be in [1, {}] (the number of ids), got {}", T, K));
    const auto mtp_out = args.get("mtp-out");
    // Only the cache dtypes are registered for this command; the rest keep their defaults.
    QS_ASSIGN_OR_RETURN(EngineConfig engine, EngineConfig::from_args(args));

    QS_ASSIGN_OR_RETURN(ModelWeights weights, load_model_from_args(args));
    const ModelConfig& c = weights.config;
    QS_RETURN_IF_ERROR(check_token_ids(ids64, c.vocab_size));
    if (mtp_out && !weights.mtp.present) return invalid_argument("--mtp-out: the model has no MTP block");
    if (mtp_out && T < 2) return invalid_argument("--mtp-out needs at least 2 ids");

    std::vector<int32_t> ids(ids64.begin(), ids64.end());
    QS_ASSIGN_OR_RETURN(std::unique_ptr<Ops> ops, make_backend_from_args(args, engine, weights));
    Qwen36Model model(weights, *ops);
    SingleSequence seq(model, T, engine.kv_cache_dtype);
    std::vector<float> logits;
    int64_t rows = T;
    if (!incremental) {
        logits = seq.feed(ids, /*all_rows=*/true);
    } else {
        logits = seq.feed(std::vector<int32_t>(ids.begin(), ids.begin() + K), /*all_rows=*/false);
        for (int64_t t = K; t < T; ++t) {
            std::vector<float> row = seq.feed({ids[size_t(t)]}, /*all_rows=*/false);
            logits.insert(logits.end(), row.begin(), row.end());
        }
        rows = T - K + 1;
    }
    if (mtp_out) {
        std::vector<float> mtp = seq.mtp_over_history(0);
        QS_RETURN_IF_ERROR(write_npy(*mtp_out, mtp.data(), {T - 1, c.vocab_size}));
    }
    return write_npy(out_path, logits.data(), {rows, c.vocab_size});
}

}  // namespace

const CommandSpec& logits_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "logits";
        c.summary = "write float32 .npy logits for a token sequence (prefill or incremental decode)";
        c.usage = "logits --model DIR --ids 1,2,3 --out F.npy [options]";
        c.description =
            "Without --incremental-from: [T, vocab], every position from one prefill. With it: prefill "
            "ids[0, K), then the rest one at a time through the decode path; rows for positions K-1..T-1.";
        c.groups.push_back(
            {"Logits",
             {required("ids", "IDS", "comma-separated token ids"),
              required("out", "F.npy", "where the float32 logits go"),
              valued("incremental-from", "K", "prefill the first K ids, decode the rest one by one (in [1, T])"),
              valued("mtp-out", "M.npy", "also the MTP head's draft logits over the sequence ([T-1, vocab])")}});
        c.groups.push_back(model_option_group());
        c.groups.push_back(backend_option_group());
        c.groups.push_back(engine_option_group({"kv-cache-dtype", "gdn-state-dtype"}));
        return c;
    }();
    return spec;
}

int run_logits(int argc, char** argv) {
    int code = 0;
    auto args = parse_command(logits_spec(), argc, argv, code);
    if (!args) return code;
    Status st = run(*args);
    return st.is_ok() ? 0 : fail("logits", st);
}

}  // namespace qs::cli
