// Backend options (see backend_args.h).
#include "cli/backend_args.h"

namespace qs::cli {

OptionGroup backend_option_group() {
    const BackendOptions defaults;
    OptionGroup g{"Backend",
                  {choice("device", {"cpu", "cuda"},
                          "cpu: the exact reference backend; cuda: the GPU backend (Hopper sm_90a; needs a CUDA "
                          "build)",
                          defaults.device),
                   valued("cuda-graph-max-batch", "N",
                          "largest decode batch replayed from a CUDA graph (--device cuda; 0: no graphs)",
                          std::to_string(defaults.cuda_graph_max_batch))}};
    g.options.back().allowed = "in [0, 4096]";
    return g;
}

Result<BackendOptions> backend_options_from_args(const Args& args, const EngineConfig& engine) {
    BackendOptions o;
    o.device = args.get_or("device", "cpu");
    o.gdn_state_bf16 = engine.gdn_state_bf16;
    if (o.device == "cuda" && engine.kv_cache_dtype == KvCacheDtype::kF32)
        return invalid_argument("--kv-cache-dtype f32 is CPU-only; on --device cuda use bf16 or fp8_e4m3");
    QS_ASSIGN_OR_RETURN(o.cuda_graph_max_batch, args.get_int("cuda-graph-max-batch", o.cuda_graph_max_batch));
    if (o.cuda_graph_max_batch < 0 || o.cuda_graph_max_batch > 4096)
        return invalid_argument("--cuda-graph-max-batch must be in [0, 4096] (0 disables CUDA graphs), got " +
                                std::to_string(o.cuda_graph_max_batch));
    if (args.has("cuda-graph-max-batch") && o.device != "cuda")
        return invalid_argument("--cuda-graph-max-batch is only for --device cuda");
    return o;
}

Result<std::unique_ptr<Ops>> make_backend_from_args(const Args& args, const EngineConfig& engine,
                                                    const ModelWeights& weights) {
    QS_ASSIGN_OR_RETURN(BackendOptions o, backend_options_from_args(args, engine));
    return make_backend(o, weights);
}

}  // namespace qs::cli
