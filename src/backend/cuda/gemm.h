// Dense linear layers on the GPU through cuBLASLt: y [T, out] (fp32) = x [T, in] (fp32) · Wᵀ for a
// weight W [out, in] in device memory. BF16 weights: x is rounded to bf16 (one kernel) and the
// product accumulates in fp32 on the tensor cores. F32 weights (test fixtures, the router):
// fp32 GEMM without TF32.
// FP8 128×128-block weights, two paths:
//  - block-scaled (the DeepSeek recipe, cuBLASLt ≥ 12.9 on sm_90): x is quantised to e4m3 per row
//    and 128-column group (scale = amax/448, launch_quant_fp8_rows128), then one FP8 GEMM with
//    A = W (BLK128x128_32F scales, DeviceLinear::scale_blk) and B = x (VEC128_32F scales), fp32
//    accumulation promoted per 128-deep block, fp32 D (bf16 D + a conversion if fp32 is refused).
//    T is padded to a multiple of 4 (zero rows) so the activation scales' leading dimension is
//    16-byte aligned; the padded D rows go to a scratch and the first T rows are copied into y.
//    Adds the activations' fp8 rounding: ~2.5e-2 normalised error for Gaussian x (vs ~2e-3 for
//    the bf16 path).
//  - dequant (fallback): W dequantised to a bf16 scratch every call, then the bf16 path. Used when
//    out or in is not a multiple of 128 (tiny test models), when cuBLASLt has no algorithm for the
//    block-scaled descriptor at a shape (decided once per shape, never aborts), or on request.
// Single-stream calls (BF16: T ≤ 2, in % 256 == 0; FP8: T = 1, in % 512 == 0; FP8 T ≤ 4 with
// set_fp8_small_rows) take neither: small_linear_kernels.h streams W once in one launch, rounding
// x as the path it replaces does. F32 weights at T ≤ 8 (in % 128 == 0) likewise, the F32 weights
// of one linears() call sharing a launch (up to four).
// linears(): several weights on one x — the weights on the block-scaled path share one
// quantisation of x, those on the bf16 cuBLASLt path one bf16 copy; linear() is linears() of one
// weight, so each output is bitwise what its own linear() gives.
// Which path ran is recorded (last_fp8_path, fp8_counts) for tests and labs. Plans (descriptors +
// heuristic algorithm) are cached per shape; a call does no host synchronisation and no device
// allocation (scratch comes from the arena), so it can be captured into a CUDA graph. CPU
// reference: cpu::linear. Used from the engine thread.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "backend/cuda/device_memory.h"
#include "backend/cuda/small_linear_kernels.h"

namespace qs::cuda {

struct DeviceLinear {
    enum class Dtype : uint8_t { kF32, kBF16, kFP8Block };
    Dtype dtype = Dtype::kBF16;
    const void* w = nullptr;          // [out, in] in dtype
    const float* scale_inv = nullptr; // kFP8Block: [ceil(out/128), ceil(in/128)]
    // kFP8Block with out and in multiples of 128: the same scales in cuBLASLt's BLK128x128_32F
    // layout for the K-major A operand, [out/128, round_up(in/128, 4)] row-major (the block along
    // `in` fastest, rows padded to 16 bytes); aliases scale_inv when in/128 is a multiple of 4.
    // Null otherwise (then only the dequant path runs).
    const float* scale_blk = nullptr;
    int64_t out = 0, in = 0;
    // INT4 W4A16 weights kept packed (backend/int4_layout.h; dtype is then kBF16 and w their
    // dequantised copy): u32 codes [out, in/8] and bf16 scales [out, in/int4_group]. Null unless the
    // checkpoint's linear is symmetric 4-bit grouped integers the layout takes. Calls of up to
    // kInt4LinearMaxRows rows read these (int4_linear_kernels.h); larger T the BF16 copy.
    const uint32_t* int4_codes = nullptr;
    const void* int4_scales = nullptr;  // INT4: bf16 [out, in/int4_group]; NVFP4: E4M3 bytes [out, in/16]
    int64_t int4_group = 0;
    // NVFP4 weights kept packed (CudaOptions::nvfp4_kernels; backend/nvfp4_layout.h): int4_codes
    // and int4_scales then hold the NVFP4 layout's E2M1 codes and E4M3 block scale bytes (int4_group
    // 16), and nvfp4_global multiplies every output; calls of up to kInt4LinearMaxRows rows read
    // them (launch_nvfp4_linear), larger T the BF16 copy.
    bool nvfp4 = false;
    float nvfp4_global = 1.0f;
};

// The BLK128x128_32F copy of FP8 block scales for out, in multiples of 128: scale_inv
// [out/128, in/128] row-major → [out/128, fp8_blk128_ld(in)] row-major, padding zero (DeviceLinear::
// scale_blk; made once at upload by device_weights, and by the lab).
inline int64_t fp8_blk128_ld(int64_t in) { return (in / 128 + 3) / 4 * 4; }
std::vector<float> fp8_blk128_scales(const float* scale_inv, int64_t out, int64_t in);

enum class Fp8Path : uint8_t { kNone, kBlockScaled, kDequant, kSmallRows };
// Which paths Gemm::linear may take (labs and tests force the others). kAuto: the small-rows
// kernel where it applies (above), else cuBLASLt (block-scaled for FP8 where possible);
// kNoSmallRows: the same without the small-rows kernel (BF16 and FP8); kDequantOnly: FP8 always
// through the dequant path.
enum class LinearPolicy : uint8_t { kAuto, kNoSmallRows, kDequantOnly };

class Gemm {
public:
    Gemm();
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;

    // y [T, w.out] = x [T, w.in] · Wᵀ; scratch for the bf16/fp8 copy of x (and of W for FP8 dequant).
    void linear(const DeviceLinear& w, const float* x, int64_t T, float* y, DeviceArena& scratch,
                cudaStream_t stream);

    // Several linears of one input x [T, in] (every ws[i]->in equal; no ys[i] overlaps x):
    // ys[i] [T, ws[i]->out] = x · W_iᵀ, x's quantisation or bf16 rounding made once for all the
    // weights whose path takes it, each output bitwise what linear(*ws[i], x, T, ys[i]) writes.
    void linears(const float* x, int64_t T, std::span<const DeviceLinear* const> ws, std::span<float* const> ys,
                 DeviceArena& scratch, cudaStream_t stream);
    // linears() on h = rms_norm_zc(x + norm.pending) (norm.pending may be null), which it writes to
    // norm.h (x is not written). With `fused`, when T, in and some weight take the FP8 small-rows
    // kernel (small_linear_fp8_v2_norm_supports), that kernel's first launch computes h in its
    // prologue and the other weights read h after it; otherwise the norm kernel
    // (launch_residual_rms_norm_zc) runs first. h and every output are the same bits either way.
    // Returns whether the norm rode on a linear launch (tests and labs).
    bool norm_linears(const float* x, const SmallLinearInputNorm& norm, bool fused, int64_t T,
                      std::span<const DeviceLinear* const> ws, std::span<float* const> ys, DeviceArena& scratch,
                      cudaStream_t stream);

    // linear(w, a, T, y), then the post-attention norm (SmallLinearOutputNorm: x += pending, x += y,
    // h = rms_norm_zc(x); w.out columns). With `fused`, when the weight takes the FP8 small-rows
    // kernel and T and w.out fit (small_linear_fp8_v2_output_norm_supports), the launch's last block
    // runs the norm; otherwise the norm kernel (launch_residual_rms_norm_zc) runs after the linear.
    // y, x and h are the same bits either way. Returns whether the norm rode on the launch.
    bool linear_norm(const DeviceLinear& w, const float* a, int64_t T, float* y, const SmallLinearOutputNorm& post,
                     bool fused, DeviceArena& scratch, cudaStream_t stream);

    // x as the block-scaled path's B operand, made by the first weight of a linears() call that
    // needs it (or by the input norm: norm_for_linears): e4m3 codes [n, k] and VEC128_32F scales
    // [k/128, n] (n = fp8_padded_rows(T)).
    struct QuantisedInput {
        uint8_t* q = nullptr;
        float* scales = nullptr;
        bool filled = false;  // the quantisation kernel has been enqueued
    };
    // The norm before linears() on cuBLASLt's shapes: h = rms_norm_zc(x + norm.pending) into norm.h
    // (launch_residual_rms_norm_zc). Where some weight of ws takes the block-scaled FP8 GEMM at T
    // (and set_norm_quant is on), the same launch also writes h's quantisation
    // (launch_residual_rms_norm_quant: launch_quant_fp8_rows128's bits), returned filled for
    // linears(..., preset) so that no GEMM quantises h again; otherwise an empty one.
    QuantisedInput norm_for_linears(const float* x, const SmallLinearInputNorm& norm, int64_t T,
                                    std::span<const DeviceLinear* const> ws, DeviceArena& scratch, cudaStream_t stream);
    // linears() whose block-scaled GEMMs take x's quantisation from `preset` where it is filled.
    void linears(const float* x, int64_t T, std::span<const DeviceLinear* const> ws, std::span<float* const> ys,
                 DeviceArena& scratch, cudaStream_t stream, const QuantisedInput& preset);
    // norm_for_linears quantises h in the norm's launch (CudaOptions::fused_norm_quant; on by default
    // in a Gemm), and how many times it did (tests and labs).
    void set_norm_quant(bool on) { norm_quant_ = on; }
    int64_t norm_quants() const { return norm_quants_; }

    void set_policy(LinearPolicy p) { policy_ = p; }
    // FP8 calls of 1..n rows (n <= kSmallLinearFp8V2MaxRows) take the small-rows kernel's version 2
    // (small_linear_kernels.h) under kAuto; 0 (default): version 1 at T = 1, cuBLASLt above
    // (CudaOptions::fp8_small_rows). blocks_per_sm: its grid cap (labs).
    void set_fp8_small_rows(int n, int blocks_per_sm = 2) {
        fp8_small_rows_ = n;
        fp8_small_blocks_per_sm_ = blocks_per_sm;
    }
    // 3: the FP8 small-rows launches take version 3 (tensor cores, small_linear_fp8_mma.cu) where it
    // supports the call, those with a fused input or output norm too (rows of 2,048 or 4,096); 2:
    // version 2 everywhere. A Gemm starts at 2 (the labs and emulators that drive one directly
    // compare versions from there); CudaOps sets CudaOptions::fp8_small_version, whose default is 3.
    // v3_blocks_per_sm: version 3's grid cap (0: a block per 16 output features;
    // CudaOptions::fp8_small_v3_blocks_per_sm).
    void set_fp8_small_version(int v, int v3_blocks_per_sm = 0) {
        fp8_small_version_ = v;
        fp8_small_v3_blocks_per_sm_ = v3_blocks_per_sm;
    }
    // F32 weights at kSmallLinearF32MaxRows < T <= rows (and T·out <= kF32LinearTilesMaxOutputs, where
    // it is the faster) take the tiled fp32 kernel (f32_linear_tiles.cu: each output the small-rows
    // kernel's bits) instead of cuBLAS's fp32 GEMM; 0: cuBLAS there (CudaOptions::f32_tiles_max_rows).
    void set_f32_tiles_max_rows(int64_t rows) { f32_tiles_max_rows_ = rows; }
    // 2: the 4-bit small-rows weights of one linears() call share launches (up to kInt4LinearMaxParts
    // of one group each) and linear_norm's norm rides on the launch; 3: the same, INT4 launches on
    // tensor cores where int4_linear_mma_supports; 4: NVFP4's too; 1 (a Gemm's start): a launch per
    // weight (CudaOptions::int4_linear_version).
    void set_int4_linear_version(int v) { int4_linear_version_ = v; }
    // The path the latest FP8 linear took, and how many calls took each.
    Fp8Path last_fp8_path() const { return last_fp8_path_; }
    struct Fp8Counts {
        int64_t block_scaled = 0, dequant = 0, small_rows = 0;
        int64_t small_rows_v2 = 0;           // of small_rows: version 2 (set_fp8_small_rows), weights
        int64_t small_rows_v2_launches = 0;  // its launches (up to four weights of one linears() call)
        int64_t small_rows_v3_launches = 0;  // of those launches: version 3's (set_fp8_small_version)
    };
    // Weights of any dtype that took a small-rows kernel.
    int64_t small_rows_calls() const { return small_rows_calls_; }
    // F32 weights that took the small-rows fp32 kernel (counted in small_rows_calls too), and its
    // launches (up to four weights of one linears() call each; tests and labs).
    int64_t small_rows_f32_weights() const { return small_rows_f32_weights_; }
    int64_t small_rows_f32_launches() const { return small_rows_f32_launches_; }
    // F32 weights that took the tiled fp32 kernel, and its launches (tests and labs).
    int64_t f32_tiles_weights() const { return f32_tiles_weights_; }
    int64_t f32_tiles_launches() const { return f32_tiles_launches_; }
    // Calls that took the INT4 small-row kernel (DeviceLinear::int4_codes; tests and labs).
    int64_t int4_calls() const { return int4_calls_; }
    // Calls that took it on NVFP4 weights (DeviceLinear::nvfp4; counted in int4_calls too).
    int64_t nvfp4_calls() const { return nvfp4_calls_; }
    // Launches of the 4-bit small-row kernels (fewer than int4_calls with set_int4_linear_version 2 or
    // 3), and of those version 3's (tensor cores).
    int64_t int4_launches() const { return int4_launches_; }
    int64_t int4_mma_launches() const { return int4_mma_launches_; }
    const Fp8Counts& fp8_counts() const { return fp8_counts_; }
    // Weights of linears() calls that reused x's quantisation or bf16 copy made for an earlier
    // weight of the same call or by the input norm (norm_for_linears; the work saved; tests, labs).
    int64_t shared_input_reuses() const { return shared_input_reuses_; }
    // The cached block-scaled plan of a shape (T as passed to linear): planned = a call at this
    // shape tried it; ok = cuBLASLt gave an algorithm; d_type = the output type it runs with.
    struct Fp8PlanInfo {
        bool planned = false, ok = false;
        cudaDataType_t d_type = CUDA_R_32F;
    };
    Fp8PlanInfo fp8_plan_info(int64_t out, int64_t in, int64_t T) const;
    // Whether `device` and the loaded cuBLASLt should accept FP8 block scaling (compute capability
    // 9.x and cuBLASLt ≥ 12.9): where true, a fallback at a real shape is a bug (tests assert it).
    static bool fp8_block_scaling_expected(int device);
    // Rows the block-scaled path pads T to (a multiple of 4).
    static int64_t fp8_padded_rows(int64_t T) { return (T + 3) / 4 * 4; }

private:
    struct Plan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
        cublasLtMatmulAlgo_t algo{};
        bool ok = true;                 // false: cuBLASLt refused this (block-scaled) shape
        cudaDataType_t d_type = CUDA_R_32F;
    };
    // (input dtype, m = out, n = T or padded T, k = in); CUDA_R_8F_E4M3 marks block-scaled plans.
    using Key = std::tuple<int, int64_t, int64_t, int64_t>;
    const Plan& plan(cudaDataType_t ab_type, int64_t m, int64_t n, int64_t k);
    void matmul(cudaDataType_t ab_type, const void* w, const void* x, int64_t m, int64_t n, int64_t k, float* y,
                cudaStream_t stream);
    // Builds (once per shape) the block-scaled plan; the scale pointers are those of the first call.
    Plan& fp8_block_plan(int64_t m, int64_t n, int64_t k, const float* a_scale, const float* b_scale);
    bool try_fp8_block_plan(Plan& p, cudaDataType_t d_type, int64_t m, int64_t n, int64_t k, const float* a_scale,
                            const float* b_scale);
    // linears(); with norm, x is h and the first FP8 small-rows launch computes it from x_raw (and
    // runs before every other launch of the call).
    void linears_on(const float* x, int64_t T, std::span<const DeviceLinear* const> ws, std::span<float* const> ys,
                    DeviceArena& scratch, cudaStream_t stream, const float* x_raw, const SmallLinearInputNorm* norm,
                    const QuantisedInput* preset = nullptr);
    // How linears() runs one weight at T rows (the dispatch of every dense linear).
    enum class Route : uint8_t { kF32, kSmallRowsF32, kTilesF32, kInt4, kNvfp4, kSmallRows, kSmallRowsFp8V2, kBf16Gemm, kFp8Block, kFp8Dequant };
    Route route(const DeviceLinear& w, const float* x, int64_t T) const;
    // false: cuBLASLt refused the shape (nothing useful written; the caller falls back).
    bool linear_fp8_block(const DeviceLinear& w, const float* x, int64_t T, float* y, QuantisedInput& xq,
                          DeviceArena& scratch, cudaStream_t stream);
    void linear_fp8_dequant(const DeviceLinear& w, const float* x, int64_t T, float* y, DeviceArena& scratch,
                            cudaStream_t stream);
    static void destroy(Plan& p);

    cublasLtHandle_t handle_ = nullptr;
    DeviceBuffer workspace_;
    std::map<Key, Plan> plans_;
    LinearPolicy policy_ = LinearPolicy::kAuto;
    int fp8_small_rows_ = 0;
    int fp8_small_blocks_per_sm_ = 2;
    int fp8_small_version_ = 2;
    int fp8_small_v3_blocks_per_sm_ = 0;
    Fp8Path last_fp8_path_ = Fp8Path::kNone;
    Fp8Counts fp8_counts_;
    int64_t small_rows_calls_ = 0;
    int64_t small_rows_f32_weights_ = 0;
    int64_t small_rows_f32_launches_ = 0;
    int64_t f32_tiles_max_rows_ = 0;
    int64_t f32_tiles_weights_ = 0;
    int64_t f32_tiles_launches_ = 0;
    int sm_count_ = 132;
    int64_t int4_calls_ = 0;
    int64_t int4_launches_ = 0;
    int64_t int4_mma_launches_ = 0;
    int int4_linear_version_ = 1;
    int64_t shared_input_reuses_ = 0;
    int64_t nvfp4_calls_ = 0;
    bool norm_quant_ = true;
    int64_t norm_quants_ = 0;
};

}  // namespace qs::cuda
