// Backend options (see backend_args.h).
#include "cli/backend_args.h"

namespace qs::cli {

const std::set<std::string>& backend_valued_options() {
    static const std::set<std::string> s = {"device", "gdn-state-dtype", "cuda-graph-max-batch"};
    return s;
}

Result<BackendOptions> backend_options_from_args(const Args& args) {
    BackendOptions o;
    o.device = args.get_or("device", "cpu");
    const std::string state = args.get_or("gdn-state-dtype", "f32");
    if (state != "f32" && state != "bf16")
        return invalid_argument("--gdn-state-dtype must be 'f32' or 'bf16', got '" + state + "'");
    o.gdn_state_bf16 = state == "bf16";
    QS_ASSIGN_OR_RETURN(o.cuda_graph_max_batch, args.get_int("cuda-graph-max-batch", o.cuda_graph_max_batch));
    if (o.cuda_graph_max_batch < 0 || o.cuda_graph_max_batch > 4096)
        return invalid_argument("--cuda-graph-max-batch must be in [0, 4096] (0 disables CUDA graphs), got " +
                                std::to_string(o.cuda_graph_max_batch));
    if (args.has("cuda-graph-max-batch") && o.device != "cuda")
        return invalid_argument("--cuda-graph-max-batch is only for --device cuda");
    return o;
}

Result<std::unique_ptr<Ops>> make_backend_from_args(const Args& args, const ModelWeights& weights) {
    QS_ASSIGN_OR_RETURN(BackendOptions o, backend_options_from_args(args));
    return make_backend(o, weights);
}

Result<KvCacheDtype> single_sequence_kv_dtype(const Args& args) {
    const std::string device = args.get_or("device", "cpu");
    const std::string dt = args.get_or("kv-cache-dtype", device == "cuda" ? "bf16" : "f32");
    if (dt == "f32") {
        if (device == "cuda") return invalid_argument("--kv-cache-dtype f32 is CPU-only; use bf16 or fp8_e4m3");
        return KvCacheDtype::kF32;
    }
    if (dt == "bf16") return KvCacheDtype::kBF16;
    if (dt == "fp8_e4m3" || dt == "fp8") return KvCacheDtype::kFP8E4M3;
    return invalid_argument("--kv-cache-dtype must be f32, bf16 or fp8_e4m3, got '" + dt + "'");
}

}  // namespace qs::cli
