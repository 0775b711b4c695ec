// fp32 MoE on CUDA cores (see moe_reference_kernels.h). CPU reference: CpuOps::moe
// (src/backend/cpu/cpu_moe.cpp), whose order of operations each kernel follows:
//   route:   softmax over E with the max subtracted, top-k by probability (ties to the lower
//            index), weights renormalised over the k chosen;
//   hidden:  h[t, j] = silu(x_t · gate_e) * (x_t · up_e)   for j < k the routed experts, j = k shared;
//   out:     o[t, j] = h[t, j] · down_eᵀ;
//   combine: y_t = Σ_{j<k} w_tj o[t, j] (in top-k order) + sigmoid(shared_gate_t) · o[t, k].
#include "backend/cuda/moe_reference_kernels.h"

#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace qs::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxExperts = 1024, kMaxTopK = 32;

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

struct Workspace {
    int32_t* ids;   // [T, top_k] chosen experts, descending probability
    float* weight;  // [T, top_k]
    float* hidden;  // [T, top_k + 1, I_max]
    float* out;     // [T, top_k + 1, H]
};

Workspace carve(void* base, int64_t T, int64_t H, int64_t I_max, int64_t top_k) {
    char* p = static_cast<char*>(base);
    Workspace w;
    w.ids = reinterpret_cast<int32_t*>(p);
    p += align256(size_t(T * top_k) * 4);
    w.weight = reinterpret_cast<float*>(p);
    p += align256(size_t(T * top_k) * 4);
    w.hidden = reinterpret_cast<float*>(p);
    p += align256(size_t(T * (top_k + 1) * I_max) * 4);
    w.out = reinterpret_cast<float*>(p);
    return w;
}

// One thread per token: the routing is O(E·k) serial work, negligible at these sizes.
__global__ void route_kernel(const float* logits, int T, int E, int top_k, bool norm, int32_t* ids, float* weight) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const float* l = logits + int64_t(t) * E;
    float mx = l[0];
    for (int e = 1; e < E; ++e) mx = fmaxf(mx, l[e]);
    float sum = 0.0f;
    for (int e = 0; e < E; ++e) sum += expf(l[e] - mx);
    // Top-k by repeated selection over the probabilities p_e = exp(l_e - mx) / sum; a strict
    // comparison keeps the lower index on ties.
    bool taken[kMaxExperts];
    for (int e = 0; e < E; ++e) taken[e] = false;
    float top_sum = 0.0f, chosen_p[kMaxTopK];
    for (int j = 0; j < top_k; ++j) {
        int best = -1;
        float best_p = 0.0f;
        for (int e = 0; e < E; ++e) {
            if (taken[e]) continue;
            const float p = expf(l[e] - mx) / sum;
            if (best < 0 || p > best_p) best = e, best_p = p;
        }
        taken[best] = true;
        ids[t * top_k + j] = best;
        chosen_p[j] = best_p;
        top_sum += best_p;
    }
    for (int j = 0; j < top_k; ++j) weight[t * top_k + j] = norm ? chosen_p[j] / top_sum : chosen_p[j];
}

__device__ float silu(float v) { return v / (1.0f + expf(-v)); }

// Block per (token, j); threads over the expert's intermediate rows.
__global__ void hidden_kernel(const float* x, MoeExpertTable ex, const int32_t* ids, int top_k, int I_max,
                              float* hidden) {
    const int t = blockIdx.x / (top_k + 1), j = blockIdx.x % (top_k + 1);
    const int e = j < top_k ? ids[t * top_k + j] : ex.E;
    const int I = j < top_k ? ex.I : ex.I_shared;
    const float* g = static_cast<const float*>(ex.gate[e]);
    const float* u = static_cast<const float*>(ex.up[e]);
    const float* xt = x + int64_t(t) * ex.H;
    float* h = hidden + int64_t(blockIdx.x) * I_max;
    for (int i = threadIdx.x; i < I; i += blockDim.x) {
        float gs = 0.0f, us = 0.0f;
        for (int k = 0; k < ex.H; ++k) {
            gs += xt[k] * g[int64_t(i) * ex.H + k];
            us += xt[k] * u[int64_t(i) * ex.H + k];
        }
        h[i] = silu(gs) * us;
    }
}

// Block per (token, j); threads over the hidden outputs.
__global__ void out_kernel(const float* hidden, MoeExpertTable ex, const int32_t* ids, int top_k, int I_max,
                           float* out) {
    const int t = blockIdx.x / (top_k + 1), j = blockIdx.x % (top_k + 1);
    const int e = j < top_k ? ids[t * top_k + j] : ex.E;
    const int I = j < top_k ? ex.I : ex.I_shared;
    const float* d = static_cast<const float*>(ex.down[e]);
    const float* h = hidden + int64_t(blockIdx.x) * I_max;
    float* o = out + int64_t(blockIdx.x) * ex.H;
    for (int r = threadIdx.x; r < ex.H; r += blockDim.x) {
        float s = 0.0f;
        for (int i = 0; i < I; ++i) s += h[i] * d[int64_t(r) * I + i];
        o[r] = s;
    }
}

// Block per token; threads over hidden.
__global__ void combine_kernel(const float* out, const float* weight, const float* shared_gate_logit, int H,
                               int top_k, float* y) {
    const int t = blockIdx.x;
    const float sg = 1.0f / (1.0f + expf(-shared_gate_logit[t]));
    for (int r = threadIdx.x; r < H; r += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < top_k; ++j) acc += weight[t * top_k + j] * out[(int64_t(t) * (top_k + 1) + j) * H + r];
        acc += sg * out[(int64_t(t) * (top_k + 1) + top_k) * H + r];
        y[int64_t(t) * H + r] = acc;
    }
}

}  // namespace

size_t moe_reference_workspace_bytes(int64_t T, int64_t H, int64_t I, int64_t I_shared, int64_t top_k) {
    const int64_t I_max = I > I_shared ? I : I_shared;
    return 2 * align256(size_t(T * top_k) * 4) + align256(size_t(T * (top_k + 1) * I_max) * 4) +
           align256(size_t(T * (top_k + 1) * H) * 4);
}

void launch_moe_reference(const MoeParams& p, cudaStream_t stream) {
    const MoeExpertTable& ex = p.experts;
    QS_CHECK_MSG(ex.format == DeviceWeightFormat::kF32, "launch_moe_reference needs F32 expert tables");
    QS_CHECK_MSG(ex.E <= kMaxExperts && p.top_k <= kMaxTopK && p.top_k <= ex.E,
                 "launch_moe_reference: at most 1024 experts and top-k 32");
    if (p.T == 0) return;
    const int I_max = ex.I > ex.I_shared ? ex.I : ex.I_shared;
    const Workspace w = carve(p.workspace, p.T, ex.H, I_max, p.top_k);
    const int slots = p.T * (p.top_k + 1);
    route_kernel<<<(p.T + kThreads - 1) / kThreads, kThreads, 0, stream>>>(p.router_logits, p.T, ex.E, p.top_k,
                                                                           p.norm_topk_prob, w.ids, w.weight);
    QS_CUDA_CHECK(cudaGetLastError());
    hidden_kernel<<<slots, kThreads, 0, stream>>>(p.x, ex, w.ids, p.top_k, I_max, w.hidden);
    QS_CUDA_CHECK(cudaGetLastError());
    out_kernel<<<slots, kThreads, 0, stream>>>(w.hidden, ex, w.ids, p.top_k, I_max, w.out);
    QS_CUDA_CHECK(cudaGetLastError());
    combine_kernel<<<p.T, kThreads, 0, stream>>>(w.out, w.weight, p.shared_gate_logit, ex.H, p.top_k, p.y);
    QS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace qs::cuda
