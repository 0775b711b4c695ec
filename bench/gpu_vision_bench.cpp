// Image encode time of the CUDA vision tower (issue 21 item 6): CudaOps::vision_tower at the
// release config (spec §1.3: 27 blocks, hidden 1152, 16 heads, intermediate 4304, patch 16,
// merge 2, out 2048) with random weights, one square image per call at each size. Prints the
// median wall time of --reps calls after one warm-up call per size (the first call also uploads
// the weights), patch rows, merged tokens, and the device memory the tower's arena reached.
// A benchmark, never a test. Needs a GPU.
// Usage: build/bench/gpu_vision_bench [--sizes 448,1024,2048] [--reps 5] [--depth 27]
//          [--reference-precision]   (fp32 GEMMs without TF32 instead of bf16 inputs)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "backend/cuda/cuda_ops.h"
#include "core/args.h"
#include "core/timer.h"

using namespace qs;

namespace {

void fill(std::vector<float>& v, size_t n, float scale, std::mt19937& rng) {
    std::normal_distribution<float> d(0.0f, scale);
    v.resize(n);
    for (float& x : v) x = d(rng);
}

VisionLinear linear(int in, int out, std::mt19937& rng) {
    VisionLinear l;
    l.in = in;
    l.out = out;
    fill(l.w, size_t(in) * size_t(out), 1.0f / std::sqrt(float(in)), rng);
    fill(l.b, size_t(out), 0.02f, rng);
    return l;
}

VisionNorm norm(int n) {
    VisionNorm v;
    v.w.assign(size_t(n), 1.0f);
    v.b.assign(size_t(n), 0.0f);
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    auto args = Args::parse(argc, argv, {"reference-precision"}, {"sizes", "reps", "depth"});
    if (!args.is_ok()) {
        std::fprintf(stderr, "%s\n", args.status().message().c_str());
        return 2;
    }
    auto sizes = parse_int_list(args->get_or("sizes", "448,1024,2048"), "--sizes");
    auto reps = args->get_int("reps", 5);
    auto depth = args->get_int("depth", 27);
    if (!sizes.is_ok() || !reps.is_ok() || !depth.is_ok() || *reps < 1 || *depth < 1) {
        std::fprintf(stderr, "bad --sizes, --reps or --depth\n");
        return 2;
    }
    std::mt19937 rng(1);
    VisionWeights w;
    VisionDims& d = w.dims;
    d.hidden = 1152;
    d.heads = 16;
    d.intermediate = 4304;
    d.patch_dim = 3 * 2 * 16 * 16;
    d.pos_side = 48;
    d.merge = 2;
    d.out_hidden = 2048;
    w.patch_embed = linear(d.patch_dim, d.hidden, rng);
    fill(w.pos_embed, size_t(d.pos_side * d.pos_side) * size_t(d.hidden), 0.02f, rng);
    for (int64_t i = 0; i < *depth; ++i) {
        VisionBlockWeights b;
        b.norm1 = norm(d.hidden);
        b.norm2 = norm(d.hidden);
        b.qkv = linear(d.hidden, 3 * d.hidden, rng);
        b.proj = linear(d.hidden, d.hidden, rng);
        b.fc1 = linear(d.hidden, d.intermediate, rng);
        b.fc2 = linear(d.intermediate, d.hidden, rng);
        w.blocks.push_back(std::move(b));
    }
    w.merger_norm = norm(d.hidden);
    w.merger_fc1 = linear(4 * d.hidden, 4 * d.hidden, rng);
    w.merger_fc2 = linear(4 * d.hidden, d.out_hidden, rng);

    cuda::CudaOptions o;
    o.reference_precision = args->has("reference-precision");
    cuda::CudaOps ops(o);
    std::printf("vision tower, %lld blocks, %s GEMMs\n", (long long)*depth, o.reference_precision ? "fp32" : "bf16");
    std::printf("%10s %10s %10s %12s %12s %14s\n", "pixels", "patches", "tokens", "first ms", "median ms", "GiB used");
    for (int64_t side : *sizes) {
        const int g = int(side / 16) / 2 * 2;  // patches per side, a multiple of the merge
        const std::vector<VisionGrid> grids = {{1, g, g}};
        const int64_t rows = grids[0].rows();
        std::vector<float> patches;
        fill(patches, size_t(rows) * size_t(d.patch_dim), 1.0f, rng);
        std::vector<float> out(size_t(rows / 4) * size_t(d.out_hidden));
        size_t free0 = 0, total = 0;
        cudaMemGetInfo(&free0, &total);
        Timer first;
        ops.vision_tower(w, patches.data(), grids, out.data());
        const double first_ms = first.elapsed_s() * 1e3;
        std::vector<double> ms;
        for (int64_t r = 0; r < *reps; ++r) {
            Timer t;
            ops.vision_tower(w, patches.data(), grids, out.data());
            ms.push_back(t.elapsed_s() * 1e3);
        }
        std::sort(ms.begin(), ms.end());
        size_t free1 = 0;
        cudaMemGetInfo(&free1, &total);
        std::printf("%5lldx%-4lld %10lld %10lld %12.1f %12.1f %14.2f\n", (long long)side, (long long)side,
                    (long long)rows, (long long)rows / 4, first_ms, ms[ms.size() / 2],
                    double(total - free1) / double(size_t(1) << 30));
        (void)free0;
    }
    return 0;
}
