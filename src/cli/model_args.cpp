// Model loading from command-line options (see model_args.h).
#include "cli/model_args.h"

#include <fmt/format.h>

#include "cli/backend_args.h"
#include "core/log.h"
#include "core/timer.h"
#include "io/hf_cache.h"
#include "model/dummy_vision_tower.h"

namespace qs::cli {

CliOption model_option() {
    return required("model", "DIR|ORG/NAME|builtin:NAME",
                    "the model: a checkpoint directory (config.json, *.safetensors, tokenizer.json); a Hugging Face "
                    "id ORG/NAME already in the local cache ($HF_HUB_CACHE, else $HF_HOME/hub, else "
                    "~/.cache/huggingface/hub; fetch it with `hf download ORG/NAME`), a local directory of that "
                    "name winning; or builtin:qwen36-35b-a3b / builtin:tiny, a config compiled in, for "
                    "--load-format dummy");
}

OptionGroup model_option_group() {
    return {"Model",
            {model_option(),
             choice("load-format", {"auto", "dummy"},
                    "auto: the checkpoint's weights; dummy: random weights of the config's shapes (benchmarks)",
                    "auto"),
             choice("dummy-format", {"auto", "bf16", "fp8-block", "int4-w4a16", "nvfp4"},
                    "the linears of dummy weights; auto: FP8 128x128 blocks when the config has a "
                    "quantization_config, else BF16; int4-w4a16: what `qwenserve quantize --format "
                    "int4-w4a16` writes (symmetric INT4, group 128, bf16 scales; docs/QUANTIZATION.md); nvfp4: "
                    "what `qwenserve quantize --format nvfp4` writes (E2M1, E4M3 scales per 16, a global scale)",
                    "auto"),
             flag("dummy-vision",
                  "dummy weights: also a vision tower of random weights (the config's vision_config; "
                  "builtin:qwen36-35b-a3b has the release one), so image and video input is on: for benchmarks "
                  "of image load"),
             valued("seed", "N", "seed of the dummy weights", "0"),
             valued("num-layers", "N", "keep only the first N decoder layers (dummy weights; 0: all)", "0"),
             flag("no-mtp", "do not load the MTP head (mtp.*)")}};
}

Result<std::string> model_path_from_args(const Args& args) {
    QS_ASSIGN_OR_RETURN(std::string model, args.require("model"));
    return resolve_model_path(model);
}

Result<ModelWeights> load_model_from_args(const Args& args) {
    QS_ASSIGN_OR_RETURN(std::string model, model_path_from_args(args));
    const std::string format = args.get_or("load-format", "auto");
    if (format != "auto" && format != "dummy")
        return invalid_argument("--load-format must be 'auto' or 'dummy', got '" + format + "'");
    QS_ASSIGN_OR_RETURN(int64_t seed, args.get_int("seed", 0));
    QS_ASSIGN_OR_RETURN(int64_t num_layers, args.get_int("num-layers", 0));
    const bool with_mtp = !args.has("no-mtp");
    const std::string dummy_format = args.get_or("dummy-format", "auto");
    if (dummy_format != "auto" && dummy_format != "bf16" && dummy_format != "fp8-block" && dummy_format != "int4-w4a16" &&
        dummy_format != "nvfp4")
        return invalid_argument("--dummy-format must be 'auto', 'bf16', 'fp8-block', 'int4-w4a16' or 'nvfp4', got '" +
                                dummy_format + "'");
    if (args.has("dummy-vision") && format != "dummy")
        return invalid_argument("--dummy-vision is only for --load-format dummy (a checkpoint's tower is its own)");
    if (args.has("dummy-format") && format != "dummy")
        return invalid_argument("--dummy-format is only for --load-format dummy (a checkpoint's format is its own)");

    ModelConfig config;
    const bool builtin = model.rfind("builtin:", 0) == 0;
    if (builtin) {
        if (format != "dummy") return invalid_argument("--model " + model + " has no weights: add --load-format dummy");
        const std::string name = model.substr(8);
        if (name == "qwen36-35b-a3b") config = qwen36_35b_a3b_config();
        else if (name == "tiny") config = tiny_model_config();
        else return invalid_argument("unknown builtin model '" + name + "' (known: qwen36-35b-a3b, tiny)");
    } else {
        QS_ASSIGN_OR_RETURN(config, load_model_config(model));
    }
    if (num_layers > 0) {
        if (format != "dummy") return invalid_argument("--num-layers is only for --load-format dummy");
        if (num_layers > config.num_hidden_layers)
            return invalid_argument(fmt::format("--num-layers {} exceeds num_hidden_layers {}", num_layers,
                                                config.num_hidden_layers));
        config.num_hidden_layers = num_layers;
        config.layer_types.resize(size_t(num_layers));
    }
    Timer timer;
    if (format == "dummy") {
        // auto: what the config declares (a quantization_config → FP8 block), else BF16.
        const bool fp8 = dummy_format == "fp8-block" || (dummy_format == "auto" && config.quantization.quantized());
        const bool int4 = dummy_format == "int4-w4a16", nvfp4 = dummy_format == "nvfp4";
        const WeightFormat wf = int4    ? WeightFormat::kIntGroup
                                : nvfp4 ? WeightFormat::kNvfp4
                                : fp8 ? WeightFormat::kFP8Block
                                      : WeightFormat::kDense;
        ModelWeights w = make_dummy_weights(config, uint64_t(seed), with_mtp, wf);
        if (args.has("dummy-vision")) {
            if (!config.vision)
                return invalid_argument("--dummy-vision: the model's config has no vision_config (no tower to make)");
            if (config.vision->out_hidden_size != config.hidden_size)
                return invalid_argument(fmt::format("--dummy-vision: vision_config.out_hidden_size {} is not the "
                                                    "text model's hidden_size {}",
                                                    config.vision->out_hidden_size, config.hidden_size));
            w.visual = std::make_shared<const VisionTower>(make_dummy_vision_tower(*config.vision, uint64_t(seed)));
        }
        log_info("dummy weights ({}): {} layers, {:.2f} GB, {:.1f} s",
                 int4 ? "int4-w4a16" : nvfp4 ? "nvfp4" : fp8 ? "fp8-block" : "bf16",
                 config.num_hidden_layers, double(w.storage_bytes()) / 1e9, timer.elapsed_s());
        return w;
    }
    LoadOptions options;
    options.load_mtp = with_mtp;
    // The vision tower (model.visual.*) is read for every device: its host copy (fp32) is what
    // the backend runs or uploads (Ops::vision_tower; docs/VISION.md).
    options.load_vision = true;
    QS_ASSIGN_OR_RETURN(ModelWeights w, load_model_dir(model, options));
    log_info("loaded {}: {} layers, {:.2f} GB, {:.2f} s", model, config.num_hidden_layers,
             double(w.storage_bytes()) / 1e9, timer.elapsed_s());
    return w;
}

Status check_token_ids(const std::vector<int64_t>& ids, int64_t vocab_size) {
    if (ids.empty()) return invalid_argument("no token ids given");
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= vocab_size)
            return invalid_argument(fmt::format("token id {} at index {} is outside the vocabulary (vocab_size {})",
                                                ids[i], i, vocab_size));
    return Status::ok();
}

}  // namespace qs::cli
