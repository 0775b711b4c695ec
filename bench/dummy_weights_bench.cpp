// Time to make dummy weights of the real Qwen3.6-35B-A3B shapes (`--load-format dummy`), BF16,
// FP8 block-scaled, INT4 W4A16 and NVFP4 (`--dummy-format`), with all OpenMP threads. Prints a table (a benchmark, never a test).
// Usage: build/bench/dummy_weights_bench [--layers 40] [--formats bf16,fp8-block,int4-w4a16,nvfp4] [--no-mtp]
// Memory: about 35 GB (FP8) / 69 GB (BF16) for all 40 layers + MTP; one format at a time.
#include <omp.h>

#include <cstdio>
#include <string>
#include <utility>

#include "core/args.h"
#include "core/timer.h"
#include "model/weights.h"

using namespace qs;

int main(int argc, char** argv) {
    auto args = Args::parse(argc - 1, argv + 1, {"no-mtp"}, {"layers", "formats"});
    if (!args.is_ok()) {
        std::fprintf(stderr, "%s\n", args.status().message().c_str());
        return 2;
    }
    ModelConfig c = qwen36_35b_a3b_config();
    auto layers_arg = args->get_int("layers", 40);
    const int64_t layers = layers_arg.is_ok() ? *layers_arg : 0;
    if (layers < 1 || layers > 40) {
        std::fprintf(stderr, "--layers must be in [1, 40]\n");
        return 2;
    }
    c.num_hidden_layers = layers;
    c.layer_types.resize(size_t(layers));
    const bool mtp = !args->has("no-mtp");
    const std::string formats = args->get_or("formats", "bf16,fp8-block");
    std::printf("dummy weights of qwen36-35b-a3b: %lld layers%s, %d OpenMP threads\n\n", (long long)layers,
                mtp ? " + MTP" : "", omp_get_max_threads());
    std::printf("| format | GB | seconds | GB/s |\n|---|---|---|---|\n");
    const std::pair<const char*, WeightFormat> kFormats[] = {{"bf16", WeightFormat::kDense},
                                                             {"fp8-block", WeightFormat::kFP8Block},
                                                             {"int4-w4a16", WeightFormat::kIntGroup},
                                                             {"nvfp4", WeightFormat::kNvfp4}};
    for (const auto& [f, format] : kFormats) {
        if (formats.find(f) == std::string::npos) continue;
        Timer t;
        ModelWeights w = make_dummy_weights(c, 0, mtp, format);
        const double s = t.elapsed_s();
        const double gb = double(w.storage_bytes()) / 1e9;
        std::printf("| %s | %.2f | %.2f | %.2f |\n", f, gb, s, gb / s);
        std::fflush(stdout);
    }
    return 0;
}
