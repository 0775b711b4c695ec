// Checkpoint conversion: a BF16/F16/F32 checkpoint directory → Qwen's official FP8 layout
// (`qwenserve quantize --format fp8-block`) or compressed-tensors INT4 W4A16 / NVFP4
// (`--format int4-w4a16|nvfp4`, model/low_bit_rtn.h). Main thread; quantisation uses OpenMP threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/dtype.h"
#include "core/status.h"

namespace qs {

enum class QuantizeFormat : uint8_t { kFp8Block, kInt4W4A16, kNvfp4 };

struct QuantizeOptions {
    QuantizeFormat format = QuantizeFormat::kFp8Block;
    DType scale_dtype = DType::kF32;          // fp8-block: weight_scale_inv dtype, F32 (transformers) or BF16
    int64_t group_size = 128;                 // int4-w4a16: inputs per scale (a multiple of 8)
    int64_t max_shard_bytes = 4ll << 30;      // output shards stay below this (unless one tensor is larger)
    // The progress line ("quantizing: 42% (12.3 of 29.4 GB), ..."; core/progress.h): at most one
    // line this often, through `progress_sink` (empty: the log).
    double progress_interval_s = 5.0;
    std::function<void(const std::string&)> progress_sink;
};

// Reads IN (config.json + safetensors, any layout Checkpoint::open accepts) and writes OUT.
// int4-w4a16 / nvfp4: every linear low_bit_quantized() selects becomes the compressed-tensors
// tensors of low_bit_rtn.h (fused main-model experts split per expert as below; the MTP block
// is copied unchanged), config.json gets low_bit_quantization_config with ignore =
// low_bit_ignore; the rest as for fp8-block. A quantised linear whose in_features the group
// size (16 for nvfp4) does not divide is refused, naming the tensor. fp8-block:
//  * every linear fp8_role() marks kQuantized becomes `X.weight` F8_E4M3 + `X.weight_scale_inv`
//    (fp8_block.h); fused expert tensors are split per expert (`…mlp.experts.{e}.gate_proj.weight`,
//    …), as in the official FP8 release;
//  * every other tensor (embeddings, lm_head, router, norms, A_log, conv1d, model.visual.*, ...)
//    is copied unchanged, same dtype and bytes;
//  * config.json is IN's with a `quantization_config` (quant_method fp8, fmt e4m3, dynamic
//    activations, weight_block_size [128, 128], modules_to_not_convert = the unquantised linears
//    and "model.visual"); every other file of IN (tokenizer, generation_config, ...) is copied;
//  * one model.safetensors, or shards model-0000i-of-0000n.safetensors + index when larger.
// IN must load as a model and must not be quantised already; OUT must not exist. Everything is
// written into a sibling temporary directory, checked by loading it, then renamed to OUT: on any
// error OUT does not exist and the temporary directory is removed.
Status quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& options = {});

}  // namespace qs
