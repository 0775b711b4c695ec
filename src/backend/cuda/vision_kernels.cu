// Kernels of the CUDA vision tower (vision_kernels.h): elementwise bias/activation/residual,
// LayerNorm (one block per row), the position-embedding taps, the axial rotary, and a plain
// flash-style attention on CUDA cores (one thread per query row, keys staged through shared memory
// 32 at a time, online softmax per key tile). Correctness first; the linears are the cuBLASLt
// GEMMs (gemm.h).
#include "backend/cuda/vision_kernels.h"

#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace qs::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 16)); }

__device__ __forceinline__ float act_of(float v, VisionAct act) {
    if (act == VisionAct::kGeluTanh) {
        const double k = 0.7978845608028654;  // sqrt(2/pi)
        const double x = v;
        return float(0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x))));
    }
    if (act == VisionAct::kGeluErf) return float(0.5 * double(v) * (1.0 + erf(double(v) * 0.7071067811865476)));
    return v;
}

__global__ void bias_act_kernel(float* y, const float* b, int64_t total, int64_t n, VisionAct act) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = act_of(__fadd_rn(y[i], b[i % n]), act);
}

__global__ void residual_bias_kernel(float* x, const float* y, const float* b, int64_t total, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
        x[i] = __fadd_rn(x[i], __fadd_rn(y[i], b[i % n]));
}

__device__ __forceinline__ float block_sum(float v, float* red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();  // red is reused between calls
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) s += red[w];
    return s;
}

__global__ void layer_norm_kernel(const float* x, const float* w, const float* b, int64_t n, float eps, float* y) {
    __shared__ float red[kThreads / 32];
    const float* xr = x + blockIdx.x * n;
    float* yr = y + blockIdx.x * n;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += xr[i];
    const float mean = block_sum(s, red) / float(n);
    float v = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float d = xr[i] - mean;
        v = fmaf(d, d, v);
    }
    const float inv = rsqrtf(block_sum(v, red) / float(n) + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

__global__ void pos_embed_kernel(float* x, const float* table, const int32_t* index, const float* weight, int64_t R,
                                 int64_t H) {
    const int64_t total = R * H;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / H, c = i - r * H;
        float acc = 0.0f;
#pragma unroll
        for (int tap = 0; tap < 4; ++tap)
            acc = __fadd_rn(acc, __fmul_rn(table[int64_t(index[r * 4 + tap]) * H + c], weight[r * 4 + tap]));
        x[i] = __fadd_rn(x[i], acc);
    }
}

// One thread per (row, q or k, head, pair d < hd/2).
__global__ void rope_kernel(float* qkv, const float* cosv, const float* sinv, int64_t R, int heads, int hd) {
    const int half = hd / 2;
    const int64_t total = R * 2 * heads * half;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int d = int(i % half);
        const int64_t rest = i / half;
        const int head = int(rest % heads);
        const int part = int((rest / heads) % 2);
        const int64_t r = rest / (int64_t(heads) * 2);
        float* v = qkv + r * 3 * heads * hd + int64_t(part) * heads * hd + int64_t(head) * hd;
        const float c = cosv[r * half + d], s = sinv[r * half + d];
        const float a = v[d], bb = v[d + half];
        v[d] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(bb, s));
        v[d + half] = __fadd_rn(__fmul_rn(bb, c), __fmul_rn(a, s));
    }
}

constexpr int kKeys = 32;  // keys per shared-memory tile

// grid (num_tiles, heads), kVisionAttnTileRows threads: thread t owns query row tile.x + t.
template <int HDP>
__global__ void __launch_bounds__(kVisionAttnTileRows) attention_kernel(const float* qkv, const int4* tiles, int heads,
                                                                        int hd, float* out) {
    __shared__ float sk[kKeys][HDP];
    __shared__ float sv[kKeys][HDP];
    const int4 tile = tiles[blockIdx.x];
    const int head = blockIdx.y, tid = threadIdx.x;
    const int64_t W = int64_t(3) * heads * hd;
    const int row = tile.x + tid;
    const bool active = row < tile.y;
    const float scale_log2 = rsqrtf(float(hd)) * 1.4426950408889634f;
    float q[HDP], acc[HDP];
#pragma unroll
    for (int d = 0; d < HDP; ++d) {
        q[d] = (active && d < hd) ? qkv[int64_t(row) * W + int64_t(head) * hd + d] * scale_log2 : 0.0f;
        acc[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int k0 = tile.z; k0 < tile.w; k0 += kKeys) {
        const int nk = min(kKeys, tile.w - k0);
        __syncthreads();  // the previous tile is consumed
        for (int i = tid; i < kKeys * HDP; i += blockDim.x) {
            const int j = i / HDP, d = i - j * HDP;
            const bool ok = j < nk && d < hd;
            const int64_t base = int64_t(k0 + j) * W + int64_t(head) * hd + d;
            sk[j][d] = ok ? qkv[base + int64_t(heads) * hd] : 0.0f;
            sv[j][d] = ok ? qkv[base + 2 * int64_t(heads) * hd] : 0.0f;
        }
        __syncthreads();
        if (!active) continue;
        float s[kKeys];
        float mx = m;
#pragma unroll
        for (int j = 0; j < kKeys; ++j) {
            float dot = 0.0f;
#pragma unroll
            for (int d = 0; d < HDP; ++d) dot = fmaf(q[d], sk[j][d], dot);
            s[j] = j < nk ? dot : -INFINITY;
            mx = fmaxf(mx, s[j]);
        }
        const float corr = exp2f(m - mx);  // 0 on the first tile (m = -inf, mx finite)
        l *= corr;
#pragma unroll
        for (int d = 0; d < HDP; ++d) acc[d] *= corr;
#pragma unroll
        for (int j = 0; j < kKeys; ++j) {
            const float p = exp2f(s[j] - mx);  // 0 for the padding keys
            l += p;
#pragma unroll
            for (int d = 0; d < HDP; ++d) acc[d] = fmaf(p, sv[j][d], acc[d]);
        }
        m = mx;
    }
    if (!active) return;
    const float inv = 1.0f / l;
    float* o = out + int64_t(row) * heads * hd + int64_t(head) * hd;
#pragma unroll
    for (int d = 0; d < HDP; ++d)
        if (d < hd) o[d] = acc[d] * inv;
}

template <int HDP>
void launch_attention(const float* qkv, const int4* tiles, int num_tiles, int heads, int hd, float* out,
                      cudaStream_t stream) {
    attention_kernel<HDP><<<dim3(unsigned(num_tiles), unsigned(heads)), kVisionAttnTileRows, 0, stream>>>(
        qkv, tiles, heads, hd, out);
    QS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_vision_bias_act(float* y, const float* b, int64_t R, int64_t n, VisionAct act, cudaStream_t stream) {
    if (R * n == 0) return;
    bias_act_kernel<<<blocks_for(R * n), kThreads, 0, stream>>>(y, b, R * n, n, act);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_vision_residual_bias(float* x, const float* y, const float* b, int64_t R, int64_t n, cudaStream_t stream) {
    if (R * n == 0) return;
    residual_bias_kernel<<<blocks_for(R * n), kThreads, 0, stream>>>(x, y, b, R * n, n);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_vision_layer_norm(const float* x, const float* w, const float* b, int64_t R, int64_t n, float eps, float* y,
                              cudaStream_t stream) {
    if (R == 0) return;
    QS_CHECK(R <= 0x7fffffff);
    layer_norm_kernel<<<unsigned(R), kThreads, 0, stream>>>(x, w, b, n, eps, y);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_vision_pos_embed(float* x, const float* table, const int32_t* index, const float* weight, int64_t R,
                             int64_t H, cudaStream_t stream) {
    if (R * H == 0) return;
    pos_embed_kernel<<<blocks_for(R * H), kThreads, 0, stream>>>(x, table, index, weight, R, H);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_vision_rope(float* qkv, const float* cos, const float* sin, int64_t R, int heads, int hd,
                        cudaStream_t stream) {
    const int64_t total = R * 2 * heads * (hd / 2);
    if (total == 0) return;
    rope_kernel<<<blocks_for(total), kThreads, 0, stream>>>(qkv, cos, sin, R, heads, hd);
    QS_CUDA_CHECK_LAUNCH();
}

void launch_vision_attention(const float* qkv, const int4* tiles, int num_tiles, int heads, int hd, float* out,
                             cudaStream_t stream) {
    if (num_tiles == 0) return;
    QS_CHECK_MSG(hd >= 1 && hd <= 128, "vision attention: head_dim must be in [1, 128]");
    QS_CHECK(heads <= 65535);
    if (hd <= 16) launch_attention<16>(qkv, tiles, num_tiles, heads, hd, out, stream);
    else if (hd <= 32) launch_attention<32>(qkv, tiles, num_tiles, heads, hd, out, stream);
    else if (hd <= 64) launch_attention<64>(qkv, tiles, num_tiles, heads, hd, out, stream);
    else if (hd <= 80) launch_attention<80>(qkv, tiles, num_tiles, heads, hd, out, stream);
    else launch_attention<128>(qkv, tiles, num_tiles, heads, hd, out, stream);
}

}  // namespace qs::cuda
