// Would the tensor-core router's arithmetic (router_gemm.h: x and W split into bf16 hi + lo, the
// products xh·wh + xl·wh + xh·wl summed in fp32-class precision) change any top-k choice against
// the fp32 router on a model? Runs the CPU model over each transformers parity fixture's prompt and
// its MTP head, recomputes every MoE call's router logits the split way (in double), and prints
// the top-k set flips and the smallest gap between the k-th and (k+1)-th logit relative to the
// row's largest |logit|. No flips with a gap far above the split's ~1e-5 relative error means the
// kernel's arithmetic cannot move these models' routing: a failing model-level GPU test with the
// kernel on then points at a bug, not at near-ties (bench/kernels/NOTES.md "Router on tensor cores").
// Usage: router_routing_check FIXTURE_DIR... (e.g. tests/data/parity/*)
//        router_routing_check --engine MODEL_DIR [PERTURB] (CudaModel.EngineOnGpuEqualsSingleSequence*'s 24
//        prompts on the trained tiny model, each fed whole and decoded greedily for 24 tokens)
// No CMake target: compile with the library's flags and link against a build's libqs_lib.a with the
// libraries of any bench target's link line (build.ninja). Each run also prints how many routings have a top-k gap below 1e-7 .. 1e-3 of the row's largest
// |logit|: the density of near-ties, i.e. how often a perturbation of that relative size (another
// summation order, another batch's rounding upstream) changes an expert.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>

#include <fmt/format.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/router_check.h"
#include "core/dtype.h"
#include "io/npy.h"
#include "model/single_sequence.h"
#include "model/weights.h"

namespace {

using namespace qs;

float bf16_round(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// logits [T, E] as the kernel's split products give them (summed in double: the kernel's fp32
// accumulation adds ~2^-24 relative on top).
std::vector<float> split_logits(const float* x, int64_t T, const LinearWeight& router) {
    const int64_t E = router.out_features, H = router.in_features;
    std::vector<float> w(size_t(E * H)), out(size_t(T * E));
    for (int64_t r = 0; r < E; ++r) router.row_to_f32(r, w.data() + r * H);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < E; ++e) {
            double s = 0;
            for (int64_t i = 0; i < H; ++i) {
                const float xv = x[t * H + i], wv = w[size_t(e * H + i)];
                const float xh = bf16_round(xv), xl = bf16_round(xv - xh);
                const float wh = bf16_round(wv), wl = bf16_round(wv - wh);
                s += double(xh) * wh + double(xl) * wh + double(xh) * wl;
            }
            out[size_t(t * E + e)] = float(s);
        }
    return out;
}

// The same for one row of x with a method: 0 exact (double; cuBLAS's fp32 GEMM is this to ~1e-7),
// 1 the kernel's two-way split of x (xh + xl; the remainder x - xh - xl, up to 2^-17 |x|, dropped),
// 2 a three-way split (xh + xm + xl = x exactly). W is split hi + lo in methods 1 and 2.
void row_logits(int method, const float* x, const std::vector<float>& w, int64_t E, int64_t H, double* out) {
    for (int64_t e = 0; e < E; ++e) {
        double s = 0;
        for (int64_t i = 0; i < H; ++i) {
            const float xv = x[i], wv = w[size_t(e * H + i)];
            if (method == 0) {
                s += double(xv) * wv;
                continue;
            }
            const float xh = bf16_round(xv), xm = bf16_round(xv - xh), xl = bf16_round(xv - xh - xm);
            const float wh = bf16_round(wv), wl = bf16_round(wv - wh);
            s += double(xh) * wh + double(xm) * wh + double(xh) * wl;
            if (method == 2) s += double(xl) * wh + double(xm) * wl;
        }
        out[e] = s;
    }
}

// The CPU backend, watching each MoE call's routing (the forward itself is unchanged).
struct RoutingWatch : CpuOps {
    // Perturbation experiment: each row's x again with every element moved by one fp32 ulp up or
    // down at random (another upstream summation order, as a batch of another size gives): how
    // often each method's top-k set changes, and its mean |logit change| / max |logit|.
    std::mt19937 rng{5};
    std::normal_distribution<float> nd{0.0f, 1.0f};
    double perturb = 0;  // > 0: each element scaled by 1 + perturb·N(0, 1) instead of one ulp
    long pert_flips[3] = {};
    double pert_change[3] = {};
    long tokens = 0, flips = 0;
    double min_rel_gap = 1e30, max_rel_dev = 0;
    long below[5] = {};  // routings with a relative top-k gap below 1e-7, 1e-6, 1e-5, 1e-4, 1e-3
    void moe(const float* x, int64_t T, const MoeWeights& w, int64_t top_k, bool norm, float* y) override {
        const int64_t E = w.router.out_features;
        std::vector<float> fp32(size_t(T * E));
        cpu::linear(x, T, w.router, fp32.data());
        const std::vector<float> split = split_logits(x, T, w.router);
        const int64_t H = w.router.in_features;
        std::vector<float> wf(static_cast<size_t>(E * H)), xp(static_cast<size_t>(H));
        for (int64_t r = 0; r < E; ++r) w.router.row_to_f32(r, wf.data() + r * H);
        std::vector<double> l0(static_cast<size_t>(E)), l1(static_cast<size_t>(E));
        for (int64_t t = 0; t < T; ++t) {
            for (int64_t i = 0; i < H; ++i)
                xp[size_t(i)] = perturb > 0 ? x[t * H + i] * (1.0f + float(perturb) * nd(rng))
                                            : std::nextafter(x[t * H + i], (rng() & 1) ? INFINITY : -INFINITY);
            for (int m = 0; m < 3; ++m) {
                row_logits(m, x + t * H, wf, E, H, l0.data());
                row_logits(m, xp.data(), wf, E, H, l1.data());
                double scale = 0, change = 0;
                for (int64_t e = 0; e < E; ++e) {
                    scale = std::max(scale, std::fabs(l0[size_t(e)]));
                    change = std::max(change, std::fabs(l1[size_t(e)] - l0[size_t(e)]));
                }
                pert_change[m] += change / std::max(scale, 1e-30);
                pert_flips[m] += top_k_set(l0.data(), E, top_k) != top_k_set(l1.data(), E, top_k);
            }
        }
        for (int64_t t = 0; t < T; ++t) {
            const float* a = fp32.data() + t * E;
            ++tokens;
            if (top_k_set(a, E, top_k) != top_k_set(split.data() + t * E, E, top_k)) ++flips;
            if (top_k < E) {
                std::vector<float> s(a, a + E);
                std::sort(s.begin(), s.end(), std::greater<float>());
                double scale = 0;
                for (float v : s) scale = std::max(scale, double(std::fabs(v)));
                const double rel = (double(s[size_t(top_k - 1)]) - s[size_t(top_k)]) / std::max(scale, 1e-30);
                min_rel_gap = std::min(min_rel_gap, rel);
                double lim = 1e-7;
                for (long& b : below) {
                    b += rel < lim;
                    lim *= 10;
                }
                for (int64_t e = 0; e < E; ++e)
                    max_rel_dev = std::max(max_rel_dev,
                                           std::fabs(double(split[size_t(t * E + e)]) - a[e]) / std::max(scale, 1e-30));
            }
        }
        CpuOps::moe(x, T, w, top_k, norm, y);
    }
};

void print_gaps(const RoutingWatch& ops) {
    std::printf("  routings with a relative top-k gap below 1e-7: %ld, 1e-6: %ld, 1e-5: %ld, 1e-4: %ld, 1e-3: %ld "
                "(of %ld); largest |split - fp32| / max|logit| %.2e\n",
                ops.below[0], ops.below[1], ops.below[2], ops.below[3], ops.below[4], ops.tokens, ops.max_rel_dev);
    const double n = double(std::max<long>(ops.tokens, 1));
    std::printf("  x moved by %s per element: top-k changes exact %ld, two-way split %ld, three-way split %ld; "
                "mean max|logit change| / max|logit| %.2e, %.2e, %.2e\n",
                ops.perturb > 0 ? fmt::format("{:g} relative", ops.perturb).c_str() : "one ulp", ops.pert_flips[0],
                ops.pert_flips[1], ops.pert_flips[2], ops.pert_change[0] / n,
                ops.pert_change[1] / n, ops.pert_change[2] / n);
}

// The engine test's requests (tests/gpu/cuda_model_test.cpp, engine_equals_single_sequence): the
// same generator, each request fed whole and decoded greedily like its single-sequence reference.
int engine_prompts(const std::string& dir, double perturb) {
    auto weights = load_model_dir(dir);
    if (!weights.is_ok()) {
        std::printf("%s: %s\n", dir.c_str(), weights.status().message().c_str());
        return 1;
    }
    RoutingWatch ops;
    ops.perturb = perturb;
    Qwen36Model model(*weights, ops);
    std::mt19937 rng(7);
    for (int i = 0; i < 24; ++i) {
        const int len = 1 + int(rng() % 120);
        std::vector<int32_t> prompt;
        for (int t = 0; t < len; ++t) prompt.push_back(int32_t(rng() % uint32_t(weights->config.vocab_size)));
        SingleSequence seq(model, int64_t(len) + 26, KvCacheDtype::kBF16);
        std::vector<float> logits = seq.feed(prompt, false);
        for (int s = 0; s + 1 < 24; ++s) {
            const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            logits = seq.feed({next}, false);
        }
    }
    std::printf("%s, the engine test's 24 requests: %ld routings, %ld flips; min relative top-k gap %.3g\n",
                dir.c_str(), ops.tokens, ops.flips, ops.min_rel_gap);
    print_gaps(ops);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: router_routing_check FIXTURE_DIR...\n");
        return 2;
    }
    if (std::string(argv[1]) == "--engine" && (argc == 3 || argc == 4))
        return engine_prompts(argv[2], argc == 4 ? std::atof(argv[3]) : 0.0);
    int rc = 0;
    for (int a = 1; a < argc; ++a) {
        const std::string dir = argv[a];
        if (!std::filesystem::exists(dir + "/reference.json")) continue;
        auto weights = load_model_dir(dir);
        if (!weights.is_ok()) {
            std::printf("%s: %s\n", dir.c_str(), weights.status().message().c_str());
            rc = 1;
            continue;
        }
        std::ifstream f(dir + "/reference.json");
        const nlohmann::json j = nlohmann::json::parse(f);
        auto ids = read_npy_int(dir + "/" + j.at("refs_dir").get<std::string>() + "/ids.npy");
        if (!ids.is_ok()) {
            std::printf("%s: %s\n", dir.c_str(), ids.status().message().c_str());
            rc = 1;
            continue;
        }
        RoutingWatch ops;
        Qwen36Model model(*weights, ops);
        SingleSequence seq(model, int64_t(ids->data.size()), KvCacheDtype::kBF16);
        seq.feed(std::vector<int32_t>(ids->data.begin(), ids->data.end()), /*all_rows=*/true);
        const long main_tokens = ops.tokens, main_flips = ops.flips;
        if (weights->mtp.present) seq.mtp_over_history(0);
        std::printf("%-40s main: %5ld routings, %ld flips; MTP: %4ld routings, %ld flips; min relative top-k gap %.3g\n",
                    std::filesystem::path(dir).filename().c_str(), main_tokens, main_flips, ops.tokens - main_tokens,
                    ops.flips - main_flips, ops.min_rel_gap);
        print_gaps(ops);
    }
    return rc;
}
