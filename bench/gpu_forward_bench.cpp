// First full-size numbers of the CUDA backend (issue #6 item 7): load time, cache capacity for
// the memory left after weights and activations, single-stream prefill and decode speed, and
// offline batch throughput through the real engine. A benchmark that prints a table, never a
// test. Needs a GPU.
// Usage: build/bench/gpu_forward_bench --model builtin:qwen36-35b-a3b --load-format dummy
//          [--kv-cache-dtype bf16|fp8_e4m3] [--gdn-state-dtype f32|bf16] [--gpu-memory-utilization 0.90]
//          [--mode all|single|batch|profile|mtp] [--requests 1024] [--prompt 1000] [--completion 256]
//          (profile: GPU time per op of a 16,384-token prefill, single-stream decode, a prefill
//          of 16 prompts of 1,024 tokens and a 512-sequence decode step, CUDA graphs off;
//          [--profile-ncu-case prefill16x1024|decode]: one more forward of that case between
//          cudaProfilerStart/Stop, for `ncu --profile-from-start off`)
//          [--max-num-seqs 512] [--max-num-batched-tokens 16384] [--decode-steps 128]
//          (mtp: a k=0 decode step against MTP k=1/k=2 steps with forced acceptance at 1 and 512
//          resident sequences, GPU time per phase, syncs and launches per step; without --no-mtp:
//          [--mtp-k 0,1,2] [--mtp-acceptance 0,0.8] [--mtp-seqs 1,512] [--mtp-steps 32]
//          [--mtp-prompt-tokens 128] [--mtp-overlap on|off|on,off] [--mtp-spare-slots-list 0,512]
//          [--mtp-profiler-range] (cudaProfilerStart/Stop around each point's timed steps, for
//          `ncu --profile-from-start off`);
//          see gpu_forward_bench_mtp.h)
//          [--moe-small-version -1|1|2]  (CudaOptions::moe_small_version: the small-T MoE path's
//          version for decode steps of up to 8 rows; 2 fuses the router, bench/kernels/NOTES.md)
//          [--attention-combine-version 1|2]  (CudaOptions::attention_combine_version: 2 = the split-K
//          decode combine with its loads hoisted; default 1; the same bits)
//          [--moe-small-prefetch-down 0|1]  (CudaOptions::moe_small_prefetch_down: the small-T MoE
//          path's gate_up prefetches the down matrices into L2; default 0; the same bits)
//          [--moe-small-down-version -1|1|2]  (CudaOptions::moe_small_down_version: 2 = the small-T
//          MoE path's down + combine by expert slots, -1 = that from 2 rows on; the same bits)
//          [--moe-small-int4-gate-up-version 1|2]  (CudaOptions::moe_small_int4_gate_up_version: 2 =
//          the small-T MoE gate_up of INT4 (and NVFP4) experts on tensor cores; 1 = fp32 FMAs, the default)
//          [--fp8-small-version 2|3]  (CudaOptions::fp8_small_version: 3 = the FP8 small-rows launches
//          on tensor cores, small_linear_fp8_mma.cu, the fused norms' too; default 3)
//          [--fp8-small-v3-blocks-per-sm 0..4]  (CudaOptions::fp8_small_v3_blocks_per_sm: version 3's
//          grid cap; default 0 = a block per 16 output features)
//          [--int4-linear-version 1|2|3|4]  (CudaOptions::int4_linear_version: 2 = the 4-bit small-rows
//          weights of one input in one launch and the post-attention norm on o_proj's / out_proj's
//          launch; 3 = the same with INT4 on tensor cores; 4 = NVFP4 on tensor cores too (default);
//          1 = a launch per weight)
//          [--f32-tiles-max-rows 0|1024|4096|16384]  (CudaOptions::f32_tiles_max_rows: fp32 linears of
//          9..N rows on the tiled kernel, each row the small-rows kernel's bits; 0 = cuBLAS above 8,
//          the default)
//          [--moe-decode-version 1|2]  (CudaOptions::moe_decode_version: the MoE decode grouped
//          GEMMs at 9+ rows below the prefill path; 2 (default) = moe_decode_gemm.cu, 1 = moe_gemm.cu)
//          [--moe-decode-pdl 0|1]  (CudaOptions::moe_decode_pdl: version 2's down GEMM launched with
//          programmatic dependent launch; the same bits)
//          [--moe-decode-eout-bf16 0|1]  (CudaOptions::moe_decode_eout_bf16: the expert outputs between
//          version 2's down GEMM and the combine in bf16; changes bits; default 0)
//          [--moe-prefill-version 1|2]  (CudaOptions::moe_prefill_version: the MoE prefill path's
//          sort / gather / SiLU / combine stages; 2 = bench/kernels/NOTES.md "Prefill v2")
//          [--moe-gemm-path -1|0|1|2]  (CudaOptions::moe_gemm_path: -1 = by shape (default); 0 =
//          the mma.sync grouped GEMMs, 1 = the CUTLASS prefill path, 2 = CUTLASS ping-pong (fp8),
//          for every MoE call)
//          [--moe-router-kernel 0|1|2]  (CudaOptions::moe_router_kernel: 1 (default) = the router and shared-
//          expert-gate logits on bf16 tensor cores with split operands, router_gemm.h)
//          [--gdn-prefill-version 0|1|2|3|4|5|6]  (CudaOptions::gdn_prefill_version: the GDN chunked
//          prefill; 0 = auto (default: 6 with bf16 state, 1 with fp32); 1 = 3xTF32; 2 = bf16 tensor
//          cores, gdn_tc_*.cu, bench/kernels/NOTES.md "v5"; 3 = 2 with split operands; 4 = 2 on fp16
//          operands; 5 = 4 with early loads, bit-identical to 4; 6 = 5 with 64-column state-pass
//          blocks, bit-identical to 5)
//          [--gdn-decode-version 1|2]  (CudaOptions::gdn_decode_version: the streaming GDN decode
//          kernel's version; 2 = bench/kernels/NOTES.md "GDN decode v2")
//          [--gdn-slices-version 1|2|3]  (CudaOptions::gdn_slices_version: the warp-slice GDN decode
//          kernel's version; 3 (default) = the state copied in and stored back by whole rows
//          through a block-shared ring, 2 = the copies by whole rows only, 1 = lane-private copies;
//          bit-identical)
//          [--gdn-chunk-map 0|1]  (CudaOptions::gdn_chunk_map: 1 (default) = the chunked GDN prefill
//          kernels' blocks from a per-batch chunk map, 0 = a block per key searching the sequences)
//          [--gdn-side-stream 0|1]  (CudaOptions::gdn_side_stream: 1 (default) = a GDN call's one-token
//          and short sequences on a second stream beside its chunk kernels, 0 = one stream)
//          [--gdn-side-blocks 0|33|66|132|264]  (CudaOptions::gdn_side_blocks: the warp slices' grid on
//          that stream; 0 = their usual grid, 2 blocks an SM)
//          [--gdn-decode-kernel -1|0|1|2]  (CudaOptions::gdn_decode_kernel: the token-serial GDN
//          sequences' kernel; -1 = by shape, 0 = one block per head, 1 = streaming, 2 = one-token
//          rows by warp slices)
//          [--moe-int4-grouped 0|1]  (CudaOptions::moe_int4_grouped: with --dummy-format int4-w4a16,
//          MoE calls of 9..1,024 rows on the INT4 tensor-core grouped GEMMs instead of the BF16 copy)
//          [--moe-int4-prefill-version 1|2]  (CudaOptions::moe_int4_prefill_version: INT4 experts
//          without BF16 copies on the CUTLASS prefill path; 1 = dequantised into the BF16 scratch +
//          BF16 GEMMs, 2 (default) = CUTLASS's mixed-input GEMMs on the 4-bit codes, the same bits)
//          [--moe-int4-grouped-max-t N]  (CudaOptions::moe_int4_grouped_max_t, default 0 = 1,024 with
//          BF16 expert copies, 4,096 without: the largest MoE call on the INT4 grouped GEMMs; above
//          it the CUTLASS BF16 path)
//          [--nvfp4-kernels 0|1]  (CudaOptions::nvfp4_kernels: an NVFP4 model's (--dummy-format nvfp4)
//          linears of up to 8 rows and its MoE calls up to the 4-bit grouped GEMMs' rows read the packed
//          4-bit layout instead of BF16 copies; default: 1 with --int4-expert-copies none, else 0)
//          [--int4-expert-copies bf16|none]  (the serve option, CudaOptions::moe_int4_scratch: with
//          --dummy-format int4-w4a16 or nvfp4, none = no BF16 expert copies; MoE calls above the 4-bit
//          kernels' rows dequantise one layer's experts into a BF16 scratch first)
//          [--fp8-small-rows 0..4]  (CudaOptions::fp8_small_rows: FP8 dense linears of 1..N rows on
//          the small-rows kernel's version 2, e.g. the MTP verify's 2 rows; default 4, 0 = the old path)
//          [--fp8-small-blocks-per-sm 1..4]  (CudaOptions::fp8_small_blocks_per_sm: that kernel's grid cap
//          in blocks per SM; default 2)
//          [--shared-linear-input 0|1]  (CudaOptions::shared_linear_input: q/k/v and GDN qkv/z/b/a
//          share one quantisation (FP8) or bf16 copy of their input; default 1; 0 = one per linear)
//          [--fused-input-norm 0..4]  (CudaOptions::fused_input_norm: a layer's input norm computed in the
//          FP8 small-rows launch of its projections at 1..N rows; default 0; the same bits either way)
//          [--fused-output-norm 0..4]  (CudaOptions::fused_output_norm: the post-attention norm in the last
//          block of the o_proj / out_proj FP8 small-rows launch at 1..N rows; default 2; the same bits)
//          [--fused-norm-quant 0|1]  (CudaOptions::fused_norm_quant: 1 (default) = the input norm's
//          launch also writes h's e4m3 quantisation for the block-scaled projections; the same bits)
//          [--attention-decode-rows 1..4]  (CudaOptions::attention_decode_rows: sequences of up to
//          N new rows on the split-K decode attention kernel; default 4)
//          [--attention-prefill-version 1|2]  (CudaOptions::attention_prefill_version: 2 = the
//          wgmma/TMA prefill attention, attention_prefill_wgmma.cu, for sequences of >= 1,024 rows)
//          [--attention-decode-version 1|2]  (CudaOptions::attention_decode_version: 2 = the
//          streaming decode attention kernel, attention_decode_v2.cu, the default; 1 = version 1)
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <random>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "cli/backend_args.h"
#include "cli/model_args.h"
#include "core/args.h"
#include "core/timer.h"
#include "engine/engine.h"
#include "model/single_sequence.h"

#include "gpu_forward_bench_mtp.h"

using namespace qs;

namespace {

// The CudaOptions fields this bench sets from options of the same name (kebab case), with the
// values each takes: one table for the parser's option names and the parsing.
struct KernelOption {
    const char* name;
    std::vector<int> allowed;
    int cuda::CudaOptions::*field;
};
const std::vector<KernelOption>& kernel_options() {
    using O = cuda::CudaOptions;
    static const std::vector<KernelOption> options = {
        {"moe-small-version", {-1, 1, 2}, &O::moe_small_version},
        {"moe-decode-version", {1, 2}, &O::moe_decode_version},
        {"moe-decode-pdl", {0, 1}, &O::moe_decode_pdl},
        {"moe-decode-eout-bf16", {0, 1}, &O::moe_decode_eout_bf16},
        {"moe-small-prefetch-down", {0, 1}, &O::moe_small_prefetch_down},
        {"moe-small-down-version", {-1, 1, 2}, &O::moe_small_down_version},
        {"moe-small-int4-gate-up-version", {1, 2}, &O::moe_small_int4_gate_up_version},
        {"fp8-small-version", {2, 3}, &O::fp8_small_version},
        {"fp8-small-v3-blocks-per-sm", {0, 1, 2, 3, 4}, &O::fp8_small_v3_blocks_per_sm},
        {"int4-linear-version", {1, 2, 3, 4}, &O::int4_linear_version},
        {"attention-combine-version", {1, 2}, &O::attention_combine_version},
        {"moe-prefill-version", {1, 2}, &O::moe_prefill_version},
        {"moe-gemm-path", {-1, 0, 1, 2}, &O::moe_gemm_path},
        {"moe-router-kernel", {0, 1, 2}, &O::moe_router_kernel},
        {"gdn-prefill-version", {0, 1, 2, 3, 4, 5, 6}, &O::gdn_prefill_version},
        {"gdn-decode-version", {1, 2}, &O::gdn_decode_version},
        {"gdn-slices-version", {1, 2, 3}, &O::gdn_slices_version},
        {"gdn-chunk-map", {0, 1}, &O::gdn_chunk_map},
        {"gdn-side-stream", {0, 1}, &O::gdn_side_stream},
        {"gdn-side-blocks", {0, 33, 66, 132, 264}, &O::gdn_side_blocks},
        {"gdn-decode-kernel", {-1, 0, 1, 2}, &O::gdn_decode_kernel},
        {"moe-int4-grouped", {0, 1}, &O::moe_int4_grouped},
        {"moe-int4-prefill-version", {1, 2}, &O::moe_int4_prefill_version},
        {"nvfp4-kernels", {0, 1}, &O::nvfp4_kernels},
        {"fp8-small-rows", {0, 1, 2, 3, 4}, &O::fp8_small_rows},
        {"f32-tiles-max-rows", {0, 1024, 4096, 16384}, &O::f32_tiles_max_rows},
        {"fp8-small-blocks-per-sm", {1, 2, 3, 4}, &O::fp8_small_blocks_per_sm},
        {"shared-linear-input", {0, 1}, &O::shared_linear_input},
        {"fused-input-norm", {0, 1, 2, 3, 4}, &O::fused_input_norm},
        {"fused-output-norm", {0, 1, 2, 3, 4}, &O::fused_output_norm},
        {"fused-norm-quant", {0, 1}, &O::fused_norm_quant},
        {"attention-decode-rows", {1, 2, 3, 4}, &O::attention_decode_rows},
        {"attention-prefill-version", {1, 2}, &O::attention_prefill_version},
        {"attention-decode-version", {1, 2}, &O::attention_decode_version},
    };
    return options;
}


double gib(size_t b) { return double(b) / double(size_t(1) << 30); }

std::vector<int32_t> random_ids(std::mt19937& rng, int64_t n, int64_t vocab) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& t : v) t = int32_t(rng() % uint32_t(std::min<int64_t>(vocab, 150000)));
    return v;
}

// One table: GPU ms per op for `steps` forwards, largest first.
void print_profile(const char* title, const std::map<std::string, cuda::OpProfiler::Total>& totals, int64_t steps) {
    std::vector<std::pair<std::string, cuda::OpProfiler::Total>> rows(totals.begin(), totals.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    double all = 0.0;
    for (const auto& [name, t] : rows) all += t.ms;
    std::printf("\n%s: %.3f ms of op time per forward\n\n| op | calls per forward | ms per forward | share |\n|---|---|---|---|\n",
                title, all / double(steps));
    for (const auto& [name, t] : rows)
        std::printf("| %s | %.0f | %.3f | %.1f %% |\n", name.c_str(), double(t.calls) / double(steps),
                    t.ms / double(steps), 100.0 * t.ms / all);
}

// n sequences of `rows` new rows each after `start_pos` cached tokens (the caches hold zeros, which
// costs the same reads as real keys and states): sequence s in state slot s and pages
// [s·pages, (s+1)·pages), its last row's logits asked for. `tables` holds the block tables the spans view.
ForwardBatch uniform_batch(int64_t n, int64_t rows, int64_t start_pos, int64_t pages,
                           std::vector<std::vector<int32_t>>& tables, std::mt19937& rng) {
    tables.assign(size_t(n), {});
    ForwardBatch b;
    for (int64_t s = 0; s < n; ++s) {
        auto& t = tables[size_t(s)];
        for (int64_t p = 0; p < pages; ++p) t.push_back(int32_t(s * pages + p));
        SeqSpan span;
        span.row_begin = int32_t(s * rows);
        span.num_tokens = int32_t(rows);
        span.start_pos = int32_t(start_pos);
        span.state_slot = int32_t(s);
        span.block_table = t;
        b.seqs.push_back(span);
        for (int64_t i = 0; i < rows; ++i) b.token_ids.push_back(int32_t(rng() % 1000));
        b.logits_rows.push_back(int32_t(s * rows + rows - 1));
    }
    b.argmax_only = true;
    return b;
}

// --profile-ncu-case KEY: one more forward of that case between cudaProfilerStart and Stop, after its
// warm-up (for `ncu --profile-from-start off`); KEY prefill16x1024 or decode.
std::string g_ncu_case;

// `b` once (first use of its shapes), then `steps` forwards with the op profile printed under `what`.
void profile_steps(cuda::CudaOps& ops, Qwen36Model& model, const ForwardBatch& b, ModelCache& cache, int64_t steps,
                   const std::string& what, const std::string& key) {
    model.forward(b, cache);
    if (key == g_ncu_case) {
        QS_CUDA_CHECK(cudaDeviceSynchronize());
        QS_CUDA_CHECK(cudaProfilerStart());
        model.forward(b, cache);
        QS_CUDA_CHECK(cudaDeviceSynchronize());
        QS_CUDA_CHECK(cudaProfilerStop());
    }
    ops.take_op_profile();
    Timer t;
    for (int64_t i = 0; i < steps; ++i) model.forward(b, cache);
    const double per = t.elapsed_s() / double(steps);
    print_profile((what + " (wall " + std::to_string(per * 1e3) + " ms per step)").c_str(), ops.take_op_profile(),
                  steps);
}

// Per-op GPU time of the forwards that make up the batch workload (opts.profile_ops is on): a
// prefill, single-stream decode, a single-stream 2-row step (MTP k = 1 verify shape), and decode
// of `batch` sequences.
void profile_ops(cuda::CudaOps& ops, Qwen36Model& model, KvCacheDtype kv, int64_t prefill, int64_t context,
                 int64_t batch) {
    const ModelConfig& c = model.config();
    std::mt19937 rng(5);
    ops.take_op_profile();  // drop the warm-up's
    {
        SingleSequence seq(model, prefill + 40 + 2 * 16, kv);
        Timer t;
        std::vector<float> logits = seq.feed(random_ids(rng, prefill, c.vocab_size), false);
        const double wall = t.elapsed_s();
        print_profile(("prefill of " + std::to_string(prefill) + " tokens, one sequence (wall " +
                       std::to_string(int(wall * 1e3)) + " ms)").c_str(),
                      ops.take_op_profile(), 1);
        const int64_t steps = 32;
        Timer td;
        for (int64_t i = 0; i < steps; ++i) {
            const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            logits = seq.feed({next}, false);
        }
        const double per = td.elapsed_s() / double(steps);
        print_profile(("single-stream decode after it (wall " + std::to_string(per * 1e3) + " ms per step)").c_str(),
                      ops.take_op_profile(), steps);
        // Two rows a forward, both rows' logits: the shape of an MTP k = 1 verify of one stream
        // (without its deferred GDN stores and stash), to set beside the one-row step above: the
        // ops whose time grows from 1 row to 2 are what the verify's second row costs.
        const int64_t steps2 = 16;
        Timer t2;
        for (int64_t i = 0; i < steps2; ++i) {
            const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            const std::vector<float> both = seq.feed({next, int32_t(rng() % 1000)}, true);
            logits.assign(both.end() - c.vocab_size, both.end());
        }
        const double per2 = t2.elapsed_s() / double(steps2);
        print_profile(("single-stream 2-row step after it, both rows' logits (MTP k=1 verify shape; wall " +
                       std::to_string(per2 * 1e3) + " ms per step)")
                          .c_str(),
                      ops.take_op_profile(), steps2);
    }
    // Many fresh prompts in one step: the shape of the seed-replay's prefill steps through HTTP
    // (about 15k prompt tokens a step over prompts of 256-1,792), where the split between ops
    // differs from one long prompt (short attention, the GDN kernels' per-sequence paths).
    {
        const int64_t n = 16, len = 1024, bs = 16, pages = len / bs + 1;
        auto pcache = ops.make_cache(CacheGeometry::for_model(c, n * pages, bs, n, false, kv));
        std::vector<std::vector<int32_t>> tables;
        const ForwardBatch b = uniform_batch(n, len, 0, pages, tables, rng);
        profile_steps(ops, model, b, *pcache, 4,
                      "prefill of " + std::to_string(n) + " prompts of " + std::to_string(len) + " tokens",
                      "prefill16x1024");
    }
    // Decode of `batch` sequences at `context` tokens each.
    const int64_t bs = 16, pages = (context + 1 + bs - 1) / bs;
    auto cache = ops.make_cache(CacheGeometry::for_model(c, batch * pages, bs, batch, false, kv));
    std::vector<std::vector<int32_t>> tables;
    const ForwardBatch b = uniform_batch(batch, 1, context, pages, tables, rng);
    profile_steps(ops, model, b, *cache, 8,
                  "decode step of " + std::to_string(batch) + " sequences at " + std::to_string(context) +
                      " tokens of context",
                  "decode");
}

int run(const Args& args) {
    const std::string mode = args.get_or("mode", "all");
    // The engine's knobs (max-num-seqs, max-num-batched-tokens, kv-cache-dtype, gdn-state-dtype,
    // gpu-memory-utilization) are parsed and validated as serve parses them.
    auto parsed = EngineConfig::from_args(args);
    if (!parsed.is_ok()) {
        std::fprintf(stderr, "%s\n", parsed.status().message().c_str());
        return 2;
    }
    EngineConfig ec = *parsed;
    const double util = ec.gpu_memory_utilization;
    const int64_t requests = std::stoll(args.get_or("requests", "1024"));
    const int64_t prompt = std::stoll(args.get_or("prompt", "1000"));
    const int64_t completion = std::stoll(args.get_or("completion", "256"));
    const int64_t decode_steps = std::stoll(args.get_or("decode-steps", "128"));
    const KvCacheDtype kv = ec.kv_cache_dtype;

    Timer t_load;
    auto w = cli::load_model_from_args(args);
    if (!w.is_ok()) {
        std::fprintf(stderr, "%s\n", w.status().message().c_str());
        return 1;
    }
    const double host_s = t_load.elapsed_s();
    cuda::CudaOptions co;
    co.ssm_bf16 = ec.gdn_state_bf16;
    co.graph_max_batch = std::stoll(args.get_or("cuda-graph-max-batch", "512"));
    const std::string copies =
        args.get_or("int4-expert-copies", BackendOptions{}.int4_expert_bf16_copies ? "bf16" : "none");
    if (copies != "bf16" && copies != "none") {
        std::fprintf(stderr, "--int4-expert-copies must be 'bf16' or 'none', got '%s'\n", copies.c_str());
        return 2;
    }
    co.moe_int4_scratch = copies == "none" ? 1 : 0;
    co.nvfp4_kernels = copies == "none" ? 1 : 0;  // as serve sets it (make_backend.cpp); --nvfp4-kernels overrides
    co.moe_int4_grouped_max_t = std::stoi(args.get_or("moe-int4-grouped-max-t", "0"));
    if (co.moe_int4_grouped_max_t != 0 && co.moe_int4_grouped_max_t < 9) {
        std::fprintf(stderr, "--moe-int4-grouped-max-t must be 0 (by the copies) or >= 9, got %d\n",
                     co.moe_int4_grouped_max_t);
        return 2;
    }
    co.profile_ops = mode == "profile";
    g_ncu_case = args.get_or("profile-ncu-case", "");
    if (!g_ncu_case.empty() && (mode != "profile" || (g_ncu_case != "prefill16x1024" && g_ncu_case != "decode"))) {
        std::fprintf(stderr, "--profile-ncu-case takes prefill16x1024 or decode, with --mode profile\n");
        return 2;
    }
    co.step_timeline = mode == "mtp";
    // The kernel-version options (kernel_options()): each defaults to CudaOptions' own default.
    for (const KernelOption& k : kernel_options()) {
        int* field = &(co.*k.field);
        const std::string v = args.get_or(k.name, std::to_string(*field));
        std::string list;
        bool found = false;
        for (int a : k.allowed) {
            list += (list.empty() ? "" : ", ") + std::to_string(a);
            if (v == std::to_string(a)) *field = a, found = true;
        }
        if (!found) {
            std::fprintf(stderr, "--%s must be one of %s, got '%s'\n", k.name, list.c_str(), v.c_str());
            return 2;
        }
    }
    cuda::CudaOps ops(co);
    Timer t_up;
    ops.prepare_weights(weight_set(*w));
    const double upload_s = t_up.elapsed_s();
    Qwen36Model model(*w, ops);
    const ModelConfig& c = w->config;
    std::printf("| item | value |\n|---|---|\n");
    std::printf("| device | %s |\n", ops.device_name().c_str());
    std::printf("| weights | %.2f GB on the device |\n", double(ops.weights().device_bytes()) / 1e9);
    std::printf("| load: host weights | %.1f s |\n| load: upload | %.1f s |\n", host_s, upload_s);

    // Warm-up: the largest prefill chunk sizes the activation arena.
    const int64_t max_batched = ec.max_num_batched_tokens;
    {
        std::mt19937 rng(1);
        SingleSequence warm(model, max_batched + 1, kv);
        Timer t;
        warm.feed(random_ids(rng, max_batched, c.vocab_size), false);
        std::printf("| warm-up prefill of %lld tokens | %.3f s (arena %.2f GiB) |\n", (long long)max_batched,
                    t.elapsed_s(), gib(ops.arena_high_water()));
    }
    size_t free_b = 0, total_b = 0;
    QS_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // --mode mtp: room for what MTP keeps outside the arena (logits of 1 + k rows per sequence,
    // the GDN stash of the verify rows, the kept hidden states): a few GiB at 512 sequences.
    const double mtp_room = mode == "mtp" ? 6.0 * double(1 << 30) : 0.0;
    const double budget = double(total_b) * util - double(total_b - free_b) - mtp_room;
    std::printf("| memory | total %.1f GiB, free after weights+arena %.1f GiB, cache budget at %.2f: %.1f GiB |\n",
                gib(total_b), gib(free_b), util, budget / double(1 << 30));

    ec.cache_memory_mb = int64_t(budget / double(1 << 20));
    ec.enable_prefix_caching = false;
    auto plan = plan_capacity(c, ec, false);
    if (!plan.is_ok()) {
        std::fprintf(stderr, "capacity: %s\n", plan.status().message().c_str());
        return 1;
    }
    std::printf("| capacity | %s |\n", plan->describe().c_str());
    std::printf("| CUDA graphs | decode batches up to %lld sequences |\n", (long long)co.graph_max_batch);

    if (mode == "profile") {
        profile_ops(ops, model, kv, max_batched, prompt, ec.max_num_seqs);
        return 0;
    }
    if (mode == "mtp") return mtp_bench::run(args, *w, ops, ec);
    if (mode == "all" || mode == "single") {
        std::mt19937 rng(2);
        SingleSequence seq(model, prompt + decode_steps + 2, kv);
        Timer tp;
        std::vector<float> logits = seq.feed(random_ids(rng, prompt, c.vocab_size), false);
        const double prefill_s = tp.elapsed_s();
        Timer td;
        for (int64_t i = 0; i < decode_steps; ++i) {
            const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            logits = seq.feed({next}, false);
        }
        const double decode_s = td.elapsed_s();
        std::printf("| single stream prefill (%lld tokens) | %.3f s, %.0f tokens/s |\n", (long long)prompt, prefill_s,
                    double(prompt) / prefill_s);
        std::printf("| single stream decode (%lld steps after the prompt) | %.2f ms/token, %.1f tokens/s |\n",
                    (long long)decode_steps, decode_s / double(decode_steps) * 1e3, double(decode_steps) / decode_s);
    }

    if (mode == "all" || mode == "batch") {
        auto engine = Engine::create(*w, ops, ec, nullptr);
        if (!engine.is_ok()) {
            std::fprintf(stderr, "engine: %s\n", engine.status().message().c_str());
            return 1;
        }
        std::mt19937 rng(3);
        std::uniform_int_distribution<int64_t> len(prompt * 3 / 4, prompt * 5 / 4);
        int64_t prompt_tokens = 0;
        for (int64_t i = 0; i < requests; ++i) {
            GenerationRequest r;
            r.id = "b" + std::to_string(i);
            r.prompt_ids = random_ids(rng, len(rng), c.vocab_size);
            prompt_tokens += int64_t(r.prompt_ids.size());
            r.params.temperature = 0.0;
            r.params.max_tokens = completion;
            r.params.ignore_eos = true;
            if (!(*engine)->submit(std::move(r), [](RequestOutput&&) {}).is_ok()) return 1;
        }
        Timer tb;
        (*engine)->run_until_idle();
        const double s = tb.elapsed_s();
        const EngineStats st = (*engine)->stats();
        const EngineProfile& p = (*engine)->profile();
        std::printf("| batch: %lld requests, %lld prompt tokens, %lld completion tokens | %.1f s |\n",
                    (long long)requests, (long long)prompt_tokens, (long long)st.num_completion_tokens_total, s);
        std::printf("| batch: completion tokens/s | %.0f |\n| batch: total tokens/s | %.0f |\n",
                    double(st.num_completion_tokens_total) / s,
                    double(st.num_completion_tokens_total + prompt_tokens) / s);
        std::printf("| batch: engine steps %lld; forward %.1f s, host sampling %.1f s, other %.1f s | |\n",
                    (long long)p.steps, p.forward_s, p.sample_s, p.total_s - p.forward_s - p.sample_s);
    }
    std::printf("| CUDA graphs captured / replayed | %lld / %lld |\n", (long long)ops.graphs().captures(),
                (long long)ops.graphs().replays());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::set<std::string> valued = {"mode",     "profile-ncu-case", "requests",  "prompt",
                                    "completion", "decode-steps",   "mtp-k",     "mtp-acceptance",
                                    "mtp-seqs",   "mtp-steps",      "mtp-prompt-tokens", "mtp-overlap",
                                    "mtp-spare-slots-list", "moe-int4-grouped-max-t"};
    for (const KernelOption& k : kernel_options()) valued.insert(k.name);
    std::set<std::string> flags = {"mtp-profiler-range"};
    cli::add_option_names(cli::model_option_group(), flags, valued);
    cli::add_option_names(cli::backend_option_group(), flags, valued);
    valued.insert(EngineConfig::valued_options().begin(), EngineConfig::valued_options().end());
    flags.insert(EngineConfig::flag_options().begin(), EngineConfig::flag_options().end());
    auto args = Args::parse(argc, argv, flags, valued);
    if (!args.is_ok()) {
        std::fprintf(stderr, "%s\n", args.status().message().c_str());
        return 2;
    }
    return run(*args);
}
