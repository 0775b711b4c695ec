// Backend options (see backend_args.h).
#include "cli/backend_args.h"

#include <fmt/format.h>

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
                          std::to_string(defaults.cuda_graph_max_batch)),
                   choice("int4-expert-copies", {"bf16", "none"},
                          "--device cuda with INT4 W4A16 or NVFP4 experts: none keeps them packed only (NVFP4 "
                          "linears read as 4-bit where a kernel takes them); prompt chunks above 1,024 rows run "
                          "INT4 experts on a mixed-input GEMM that reads them as they are (a 12.6 MB scratch of "
                          "scales), and NVFP4 experts above 4,096 rows are dequantised one layer at a time into "
                          "a 1.6 GB BF16 scratch, leaving the rest to the KV cache; bf16 also uploads every "
                          "expert as BF16 (~65 GB for Qwen3.6-35B-A3B) for the calls of more than 1,024 rows "
                          "(faster prompts, a smaller cache; NVFP4 then runs on the BF16 copies only)",
                          defaults.int4_expert_bf16_copies ? "bf16" : "none")}};
    g.options[1].allowed = "in [0, 4096]";
    return g;
}

OptionGroup parallel_option_group() {
    const BackendOptions defaults;
    OptionGroup g{"Parallel",
                  {valued("tensor-parallel-size", "N",
                          "ranks of the tensor-parallel group the model is split over (attention and "
                          "linear-attention heads, every expert's intermediate, the vocabulary; "
                          "docs/ARCHITECTURE.md, \"Tensor parallel\"): on --device cpu one thread per rank; "
                          "--device cuda refuses N > 1 for now. N must divide the model's attention heads, "
                          "linear-attention value heads, MoE and shared-expert intermediate sizes and vocabulary, "
                          "and divide or be a multiple of its K/V heads and linear-attention key heads; the error "
                          "names the field that does not split",
                          std::to_string(defaults.tensor_parallel_size)),
                   flag("enable-expert-parallel",
                        "with --tensor-parallel-size N > 1: split the routed experts over the ranks (rank r "
                        "holds experts r*E/N .. (r+1)*E/N - 1 whole) instead of splitting every expert's "
                        "intermediate; attention and the shared expert stay tensor-parallel. N must divide "
                        "num_experts")}};
    g.options[0].allowed = ">= 1";
    g.options[0].short_name = "tp";
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
    const std::string copies = args.get_or("int4-expert-copies", o.int4_expert_bf16_copies ? "bf16" : "none");
    if (copies != "bf16" && copies != "none")
        return invalid_argument("--int4-expert-copies must be 'bf16' or 'none', got '" + copies + "'");
    if (args.has("int4-expert-copies") && o.device != "cuda")
        return invalid_argument("--int4-expert-copies is only for --device cuda");
    o.int4_expert_bf16_copies = copies == "bf16";
    QS_ASSIGN_OR_RETURN(o.tensor_parallel_size, args.get_int("tensor-parallel-size", o.tensor_parallel_size));
    if (o.tensor_parallel_size < 1)
        return invalid_argument(fmt::format("--tensor-parallel-size must be >= 1, got {}", o.tensor_parallel_size));
    o.expert_parallel = args.has("enable-expert-parallel");
    if (o.expert_parallel && o.tensor_parallel_size < 2)
        return invalid_argument("--enable-expert-parallel splits the experts over a tensor-parallel group: it needs "
                                "--tensor-parallel-size >= 2");
    return o;
}

Result<std::unique_ptr<Ops>> make_backend_from_args(const Args& args, const EngineConfig& engine,
                                                    ModelWeights& weights) {
    QS_ASSIGN_OR_RETURN(BackendOptions o, backend_options_from_args(args, engine));
    if (o.tensor_parallel_size > 1)
        return invalid_argument("--tensor-parallel-size is only for serve (this command runs one backend)");
    return make_backend(o, weights);
}

}  // namespace qs::cli
