// Thin wrappers over the PTX the tensor-core kernels use (cp.async, ldmatrix, movmatrix, mma.sync,
// prmt), the dynamic shared-memory base, programmatic dependent launch and the kernel launch.
// Device code only (nvcc); included by .cu files (attention_*, moe_kernels). Kept in one header so
// that the host-side emulators (bench/kernels/emu/backend/cuda/ptx_helpers.cuh,
// bench/kernels/moe_emu_shim.h) can stand in for exactly these primitives and run the kernels' own
// code on a machine without a GPU.
#pragma once

#include <cstdint>
#include <utility>

#include <cuda_runtime.h>

namespace qs::cuda::ptx {

// Base of the block's dynamic shared memory (16-byte aligned).
__device__ __forceinline__ uint8_t* dynamic_smem() {
    extern __shared__ __align__(16) uint8_t qs_dynamic_smem[];
    return qs_dynamic_smem;
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; bytes [src_bytes, 16) of the destination are zero-filled.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
// 4-byte global -> shared copy (cp.async.ca: the only form for sizes below 16 bytes).
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
// 8-byte global -> shared copy (cp.async.ca).
__device__ __forceinline__ void cp_async8(uint32_t dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i; lane l receives
// in r[i] the elements (row l/4, cols 2(l%4), 2(l%4)+1) of matrix i (.trans: its transpose).
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// D = A (16x16, row) * B (16x8, col) + C, fp32 accumulators in place.
__device__ __forceinline__ void mma_16816_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// The same with the A fragment as four registers (a0..a3 as in the array form).
__device__ __forceinline__ void mma_16816_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
    const uint32_t a[4] = {a0, a1, a2, a3};
    mma_16816_bf16(c, a, b0, b1);
}
__device__ __forceinline__ void mma_16816_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// PTX prmt.b32 in its default mode with b = 0: selector nibble bits 2:0 pick a byte of {b, a},
// bit 3 replicates that byte's sign bit (CUDA's __byte_perm ignores bit 3).
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(0u), "r"(sel));
    return d;
}

// PTX prmt.b32 with two sources: result byte n is byte sel[4n+2:4n] of {b, a} (a's bytes are
// 0-3, b's 4-7).
__device__ __forceinline__ uint32_t prmt2(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// Transposes an 8x8 b16 matrix held in one register per lane (lane l: row l/4, cols 2(l%4),
// 2(l%4)+1): afterwards lane l holds those elements of the transpose.
__device__ __forceinline__ uint32_t movmatrix_t(uint32_t x) {
    uint32_t d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(x));
    return d;
}

// Programmatic dependent launch (sm_90; launched by launch_kernel_pdl). griddep_wait: waits until
// the grids this one depends on have completed and their memory is visible (returns at once in a
// grid launched without the attribute); griddep_launch_dependents: lets the next grid of the stream,
// if launched with the attribute, start before this one ends (it starts once every block of this
// grid has called it or exited).
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }

// Brings the 128-byte line holding p into L2 (no register written, nothing waited for).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialisation: the kernel
// may start while the previous one in the stream still runs, so it must call griddep_wait before
// reading anything that kernel writes. Graph-capturable. Returns the launch's error.
template <typename... KP, typename... AP>
cudaError_t launch_kernel_pdl(void (*kernel)(KP...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                              AP&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<AP>(args)...);
}

// kernel<<<grid, block, smem, stream>>>(args...)
template <typename... KP, typename... AP>
void launch_kernel(void (*kernel)(KP...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, AP&&... args) {
    kernel<<<grid, block, smem, stream>>>(std::forward<AP>(args)...);
}

}  // namespace qs::cuda::ptx
