// The MoE prefill path's grouped GEMMs on Hopper wgmma + TMA (CUTLASS 4.2's warp-specialised
// pointer-array grouped GEMM with FP8 128-block scaling; moe_cutlass_gemm.cu) and the device-side
// group setup that feeds them. Pipeline and maths: moe_prefill.cu; public API: moe_kernels.h.
// Included from g++-compiled code: no device-only syntax here.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace qs::cuda {
struct Int4MixedOperands;  // moe_int4_mixed.h
}

namespace qs::cuda::moe {

// Whether the CUTLASS kernels were compiled in (CMake found .deps/cutlass-4.2.0, see
// scripts/setup_cutlass.sh). Without them launch_moe keeps the mma.sync kernels at every size.
bool cutlass_grouped_gemm_compiled();

// Every stride array entry is this one 64-bit leading dimension (cute::Stride<int64_t, _1, _0>
// in both GEMM types; each translation unit static_asserts it), so one setup kernel serves both.

// Device-side description of the two grouped GEMMs of one MoE call, written by the setup kernel
// from the sort's per-expert row offsets (no host synchronisation; the host knows only E).
// Activations and weights are fp8 e4m3 (act_bytes 1, with scales) or bf16 (act_bytes 2, no scales).
//   gate_up: 2(E+1) groups, g = 2e (gate) and 2e+1 (up) of expert e (e = E: the shared expert):
//            M = rows of e, N = I_e, K = H; A = a8 rows [off_e, off_e + M) (lda H) with scales
//            sfa[r·H/128 + kb]; B = gate/up weights [I_e, H] with scale_inv [I_e/128, H/128];
//            D = gu[r, 0..I_e) (gate) or gu[r, Imax..Imax+I_e) (up), bf16, ldd 2·Imax.
//   down:    E+1 groups: M = rows of e, N = H, K = I_e; A = h8 (lda Imax) with scales packed
//            per row group (routed rows: I/128 per row, shared rows after them: I_shared/128);
//            B = down [H, I_e] with scale_inv [H/128, I_e/128]; D = eo[r, 0..H) bf16.
struct GroupedSetupParams {
    const int* expert_off;           // [E + 2]: first sorted row of expert e; [E + 1] = all rows
    int E, H, I, I_shared;
    const void* const* gate;         // [E + 1] fp8 weights (MoeExpertTable)
    const void* const* up;
    const void* const* down;
    const float* const* gate_scale;  // [E + 1] scale_inv
    const float* const* up_scale;
    const float* const* down_scale;
    int act_bytes;                   // 1: fp8 e4m3 activations and weights; 2: bf16
    const uint8_t* a8;               // [R, H] activations (act_bytes each)
    const float* sfa;                // [R, H/128] (fp8)
    const uint8_t* h8;               // [R, Imax] activations (act_bytes each)
    const float* sfh;                // packed as above (fp8)
    void* gu;                        // [R, 2·Imax] bf16
    void* eo;                        // [R, H] bf16
    void* arrays;                    // grouped_arrays_bytes(E) bytes of device scratch (256-aligned)
    bool pingpong = false;           // fp8: ping-pong schedule on 64×128 tiles instead of cooperative 128×128
};

// Bytes of the per-group argument arrays of both GEMMs, and of CUTLASS's own workspace
// (tensor-map copies per SM; an upper bound checked at launch).
size_t grouped_arrays_bytes(int E);
size_t grouped_gemm_workspace_bytes();

// Enqueues the setup kernel, then the two grouped GEMMs are launched by the calls below (the
// SiLU·mul stage runs between them).
void launch_grouped_setup(const GroupedSetupParams& p, cudaStream_t stream);
// FP8 with blockwise scaling (moe_cutlass_gemm.cu) and BF16 (moe_cutlass_gemm_bf16.cu).
void launch_grouped_gemm_gate_up(const GroupedSetupParams& p, void* workspace, cudaStream_t stream);
void launch_grouped_gemm_down(const GroupedSetupParams& p, void* workspace, cudaStream_t stream);
void launch_grouped_gemm_bf16(const GroupedSetupParams& p, bool gate_up, void* workspace, cudaStream_t stream);

// INT4 experts on CUTLASS's mixed-input grouped GEMM (moe_cutlass_gemm_int4.cu; moe_int4_mixed.h):
// its own setup (the operands swapped: each group computes D^T = W · X^T with the weights' rows as
// M, so the 4-bit operand is wgmma's register-sourced A; bf16 activations as for BF16 experts,
// act_bytes 2) over the experts' int4b_t codes and the MN-major scales of `w`, then the two GEMMs.
void launch_grouped_setup_int4(const GroupedSetupParams& p, const Int4MixedOperands& w, cudaStream_t stream);
// tile: MoeParams::int4_mixed_tile.
void launch_grouped_gemm_int4(const GroupedSetupParams& p, bool gate_up, int group, int tile, void* workspace,
                              cudaStream_t stream);

// The group arrays inside GroupedSetupParams::arrays (the three translation units use them): G =
// 3(E+1) groups, gate_up's 2(E+1) first, then down's E+1; each array 256-aligned. ss: the INT4
// GEMM's scale strides (two 64-bit values each; its scale pointers are in sfa).
struct GroupedArrayLayout {
    size_t shapes, a, b, sfa, sfb, d, sa, sb, sd, ss, total;
};
inline GroupedArrayLayout grouped_array_layout(int E) {
    const size_t G = 3 * size_t(E + 1);
    GroupedArrayLayout L{};
    size_t off = 0;
    auto take = [&](size_t bytes) {
        const size_t o = off;
        off = (off + bytes + 255) & ~size_t(255);
        return o;
    };
    L.shapes = take(G * 3 * sizeof(int));  // {M, N, K}
    L.a = take(G * sizeof(void*));
    L.b = take(G * sizeof(void*));
    L.sfa = take(G * sizeof(void*));
    L.sfb = take(G * sizeof(void*));
    L.d = take(G * sizeof(void*));
    L.sa = take(G * sizeof(int64_t));
    L.sb = take(G * sizeof(int64_t));
    L.sd = take(G * sizeof(int64_t));
    L.ss = take(G * 2 * sizeof(int64_t));
    L.total = off;
    return L;
}

}  // namespace qs::cuda::moe
