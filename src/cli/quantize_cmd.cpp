// `qwenserve quantize --model IN_DIR --output OUT_DIR --format fp8-block|int4-w4a16|nvfp4
// [--scale-dtype f32|bf16] [--group-size N] [--shard-size-mb N]`: converts a BF16/F16/F32
// checkpoint to Qwen's official FP8 layout (E4M3 weights with one scale per 128×128 block) or to
// compressed-tensors INT4 W4A16 / NVFP4 by round-to-nearest (model/quantize_checkpoint.h,
// model/low_bit_rtn.h). OUT_DIR must not exist; it appears only when complete. Main thread.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/args.h"
#include "model/low_bit_rtn.h"
#include "model/quantize_checkpoint.h"

namespace qs::cli {

namespace {

Status run(const Args& args) {
    QS_ASSIGN_OR_RETURN(std::string in, model_path_from_args(args));
    QS_ASSIGN_OR_RETURN(std::string out, args.require("output"));
    QS_ASSIGN_OR_RETURN(std::string format, args.require("format"));
    QuantizeOptions o;
    if (format == "fp8-block") o.format = QuantizeFormat::kFp8Block;
    else if (format == "int4-w4a16") o.format = QuantizeFormat::kInt4W4A16;
    else if (format == "nvfp4") o.format = QuantizeFormat::kNvfp4;
    else
        return invalid_argument("--format must be 'fp8-block', 'int4-w4a16' or 'nvfp4', got '" + format + "'");
    if (args.has("scale-dtype") && o.format != QuantizeFormat::kFp8Block)
        return invalid_argument("--scale-dtype is only for --format fp8-block (int4-w4a16 scales are BF16, nvfp4's "
                                "E4M3 with an F32 global scale)");
    const std::string scale = args.get_or("scale-dtype", "f32");
    if (scale == "f32") o.scale_dtype = DType::kF32;
    else if (scale == "bf16") o.scale_dtype = DType::kBF16;
    else return invalid_argument("--scale-dtype must be 'f32' or 'bf16', got '" + scale + "'");
    if (args.has("group-size") && o.format != QuantizeFormat::kInt4W4A16)
        return invalid_argument("--group-size is only for --format int4-w4a16 (nvfp4's group is 16, fp8-block's "
                                "block 128x128)");
    QS_ASSIGN_OR_RETURN(o.group_size, args.get_int("group-size", kInt4DefaultGroupSize));
    if (o.group_size < 8 || o.group_size % 8 != 0)
        return invalid_argument(fmt::format("--group-size must be a positive multiple of 8, got {}", o.group_size));
    QS_ASSIGN_OR_RETURN(int64_t shard_mb, args.get_int("shard-size-mb", o.max_shard_bytes >> 20));
    if (shard_mb < 1) return invalid_argument(fmt::format("--shard-size-mb must be at least 1, got {}", shard_mb));
    o.max_shard_bytes = shard_mb << 20;
    return quantize_checkpoint(in, out, o);
}

}  // namespace

const CommandSpec& quantize_spec() {
    static const CommandSpec spec = [] {
        const QuantizeOptions d;
        CommandSpec c;
        c.name = "quantize";
        c.summary = "convert a BF16/F32 checkpoint to FP8 block (Qwen's FP8 layout), INT4 W4A16 or NVFP4 "
                    "(compressed-tensors)";
        c.usage = "quantize --model IN_DIR --output OUT_DIR --format fp8-block|int4-w4a16|nvfp4 [options]";
        c.description = "OUT_DIR must not exist; it appears only when complete. int4-w4a16 and nvfp4 are "
                        "round-to-nearest (no calibration) as compressed-tensors computes them; the MTP block stays "
                        "BF16 there (docs/QUANTIZATION.md).";
        c.groups.push_back(
            {"Quantize",
             {required("model", "IN_DIR|ORG/NAME", "the BF16/F16/F32 checkpoint (a Hugging Face id: from the local cache)"),
              required("output", "OUT_DIR", "the quantised checkpoint to write"),
              required("format", "fp8-block|int4-w4a16|nvfp4",
                       "the output format: fp8-block = FP8 E4M3 weights, one scale per 128x128 block; int4-w4a16 = "
                       "compressed-tensors pack-quantized symmetric INT4, one BF16 scale per group; nvfp4 = "
                       "compressed-tensors nvfp4-pack-quantized (FP4 E2M1, E4M3 scale per 16, F32 global scale)"),
              valued("scale-dtype", "f32|bf16", "fp8-block: dtype of weight_scale_inv", "f32"),
              valued("group-size", "N", "int4-w4a16: inputs per scale (a multiple of 8 dividing every in_features)",
                     std::to_string(kInt4DefaultGroupSize)),
              valued("shard-size-mb", "N", "output shards stay below this (unless one tensor is larger)",
                     std::to_string(d.max_shard_bytes >> 20))}});
        return c;
    }();
    return spec;
}

int run_quantize(int argc, char** argv) {
    int code = 0;
    auto args = parse_command(quantize_spec(), argc, argv, code);
    if (!args) return code;
    Status st = run(*args);
    return st.is_ok() ? 0 : fail("quantize", st);
}

}  // namespace qs::cli
