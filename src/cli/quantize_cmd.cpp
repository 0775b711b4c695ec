// `qwenserve quantize --model IN_DIR --output OUT_DIR --format fp8-block [--scale-dtype f32|bf16]
// [--shard-size-mb N]`: converts a BF16/F16/F32 checkpoint to Qwen's official FP8 layout (E4M3
// weights with one scale per 128×128 block, model/quantize_checkpoint.h). OUT_DIR must not exist;
// it appears only when complete. Main thread.
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_args.h"
#include "core/args.h"
#include "model/quantize_checkpoint.h"

namespace qs::cli {

namespace {

Status run(const Args& args) {
    QS_ASSIGN_OR_RETURN(std::string in, model_path_from_args(args));
    QS_ASSIGN_OR_RETURN(std::string out, args.require("output"));
    QS_ASSIGN_OR_RETURN(std::string format, args.require("format"));
    if (format == "int4-w4a16" || format == "nvfp4")
        return unsupported("--format " + format +
                           " is not implemented yet (issue 18 item 3): qwenserve loads such checkpoints "
                           "(docs/QUANTIZATION.md) but writes only fp8-block");
    if (format != "fp8-block")
        return invalid_argument("--format must be 'fp8-block' (FP8 E4M3, 128x128 block scales), got '" + format + "'");
    QuantizeOptions o;
    const std::string scale = args.get_or("scale-dtype", "f32");
    if (scale == "f32") o.scale_dtype = DType::kF32;
    else if (scale == "bf16") o.scale_dtype = DType::kBF16;
    else return invalid_argument("--scale-dtype must be 'f32' or 'bf16', got '" + scale + "'");
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
        c.summary = "convert a BF16/F32 checkpoint to FP8 E4M3 with 128x128 block scales (Qwen's FP8 layout)";
        c.usage = "quantize --model IN_DIR --output OUT_DIR --format fp8-block [options]";
        c.description = "OUT_DIR must not exist; it appears only when complete.";
        c.groups.push_back(
            {"Quantize",
             {required("model", "IN_DIR|ORG/NAME", "the BF16/F16/F32 checkpoint (a Hugging Face id: from the local cache)"),
              required("output", "OUT_DIR", "the FP8 checkpoint to write"),
              required("format", "fp8-block", "the output format: FP8 E4M3 weights, one scale per 128x128 block"),
              valued("scale-dtype", "f32|bf16", "dtype of weight_scale_inv", "f32"),
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
