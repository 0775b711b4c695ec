// Diagnosis of a MoE router implementation against a reference computed on the same x
// (CudaOptions::moe_router_check: the tensor-core router of router_gemm.h against cuBLAS's fp32
// GEMMs). Per row: the largest |logit difference| relative to the row's largest reference |logit|
// (the shared-expert gate's logit included), and whether the top-k set changed, with the
// reference's own top-k gap (k-th minus (k+1)-th logit, relative to the same scale) at that row.
// A correct fp32-class router stays below its bound (2e-5) everywhere and changes a top-k set
// only where the reference's gap is below that bound (a near-tie); anything else is a defect,
// and the row it happened at says where.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace qs {

// The tensor-core router's error is ≤ 1.2e-5 of the logits' scale on the H200 (router_lab).
constexpr double kRouterCheckBound = 2e-5;

struct RouterCheckStats {
    int64_t calls = 0, rows = 0;
    int64_t topk_changes = 0;      // rows whose top-k set differs from the reference's
    int64_t suspicious_rows = 0;   // rows over the bound, or a top-k change at a gap above it
    double max_rel_diff = 0.0;     // over every row compared
    double max_gap_at_change = 0.0;  // the largest reference gap (relative) where a top-k set changed
};

// The top-k experts of one row by logit (descending; ties to the lower index, as the routing's
// softmax keeps the order of the logits), as a sorted set.
template <class Logit>
std::vector<int> top_k_set(const Logit* l, int64_t E, int64_t k) {
    std::vector<int> idx(static_cast<size_t>(E));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int i, int j) { return l[i] > l[j]; });
    idx.resize(size_t(k));
    std::sort(idx.begin(), idx.end());
    return idx;
}

// Compares one call: got / ref logits [T, E] and gate logits [T]. Adds to `stats`; appends a line
// for each of the first few suspicious rows to `report`. Returns this call's suspicious rows.
int64_t compare_router_call(const float* got, const float* got_gate, const float* ref, const float* ref_gate,
                            int64_t T, int64_t E, int64_t top_k, double bound, RouterCheckStats& stats,
                            std::string& report);

}  // namespace qs
