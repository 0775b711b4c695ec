// DeviceWeights: the model's weights (a WeightSet) uploaded to the GPU once (Ops::prepare_weights),
// one table per kind of view indexed by the views' WeightHandles (backend/weight_handle.h): an op
// reads the copy of the view it is handed at view.handle, no lookup. Linear layers keep their
// storage format (BF16, FP8 128×128 blocks; F32/F16 fixtures become F32); the MoE experts of a
// layer (routed, then the shared one as entry E) also get device arrays of per-expert pointers
// for the grouped GEMM (BF16 or FP8; INT4 experts also keep their packed codes for the small-T
// path, beside a BF16 copy, or with `int4_scratch` instead of it: see upload), or F32 for the fp32 MoE kernels (moe_reference_kernels.h)
// when the checkpoint's experts are F32/F16 or the grouped GEMM does not tile their shapes.
// Precision-critical small linears (router, shared-expert gate, GDN a/b) are kept in F32 so
// top-k choices and decays match the CPU. With `reference_precision` every linear and expert is
// uploaded as F32 (fp32 GEMMs, no bf16 rounding anywhere). Used from the engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/basic_kernels.h"
#include "backend/cuda/device_batch.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gemm.h"
#include "backend/weight_set.h"

namespace qs::cuda {

// One layer's experts for the grouped GEMM: device arrays of E + 1 entries (entry E is the
// shared expert). Scales are null for BF16.
struct DeviceExperts {
    DeviceWeightFormat format = DeviceWeightFormat::kBF16;
    const void* const* gate = nullptr;        // [E + 1] → [I_e, H]
    const void* const* up = nullptr;          // [E + 1] → [I_e, H]
    const void* const* down = nullptr;        // [E + 1] → [H, I_e]
    const float* const* gate_scale = nullptr; // [E + 1] → [ceil(I_e/128), ceil(H/128)]
    const float* const* up_scale = nullptr;
    const float* const* down_scale = nullptr; // [E + 1] → [ceil(H/128), ceil(I_e/128)]
    // INT4 W4A16 experts (every expert and the shared one symmetric 4-bit with one group size):
    // the packed copies (backend/int4_layout.h) for the small-T path, format kBF16 for the rest.
    const uint32_t* const* gate_q = nullptr;  // [E + 1] → codes [I_e, H/8]
    const uint32_t* const* up_q = nullptr;
    const uint32_t* const* down_q = nullptr;  // [E + 1] → codes [H, I_e/8]
    const void* const* gate_qs = nullptr;     // [E + 1] → scales [I_e, H/group] (DeviceLinear::int4_scales)
    const void* const* up_qs = nullptr;
    const void* const* down_qs = nullptr;     // [E + 1] → [H, I_e/group]
    int int4_group = 0;
    // NVFP4 experts (upload's nvfp4_kernels; every expert matrix NVFP4): the arrays above hold the
    // NVFP4 device layout (backend/nvfp4_layout.h, int4_group 16) and nvfp4_global the matrices'
    // global multipliers [3 (E + 1)] (MoeExpertTable::nvfp4_global).
    bool nvfp4 = false;
    const float* nvfp4_global = nullptr;
    // gate, up, down point into the one-layer BF16 scratch (upload's int4_scratch): valid only
    // once launch_moe dequantised the layer there (MoeExpertTable::bf16_in_scratch).
    bool bf16_in_scratch = false;
    void* int4_scratch = nullptr;  // that scratch's base and bytes (MoeExpertTable::int4_scratch)
    size_t int4_scratch_bytes = 0;
    int E = 0, H = 0, I = 0, I_shared = 0;
    // [router; shared_expert_gate] as hi + lo bf16 [router_padded_rows(E), H] for the tensor-core
    // router (router_gemm.h; upload's router_split): null when not uploaded (option off, reference
    // precision, shapes the kernel does not take); router_lo null also where every lo is zero
    // (bf16 checkpoints). The fp32 copies (linear()) stay: the small-T path reads them.
    const uint16_t* router_hi = nullptr;
    const uint16_t* router_lo = nullptr;
};

struct DeviceTable {
    const void* data = nullptr;  // [vocab, hidden]
    TableDtype dtype = TableDtype::kBF16;
};

// What the one-layer scratch of INT4 experts without BF16 copies must hold (upload's int4_scratch),
// from the options that pick each MoE call's path (CudaOps).
struct Int4ScratchPlan {
    bool enabled = false;  // CudaOptions::moe_int4_scratch 1: INT4 (and NVFP4) experts without BF16 copies
    // Whether every MoE call above grouped_max_t rows that the prefill path covers goes to the
    // mixed-input GEMMs (CudaOptions: moe_int4_prefill_version 2, moe_int4_grouped 1, moe_gemm_path
    // -1). Then a layer of INT4 experts they cover, all of whose calls above grouped_max_t take the
    // prefill path (T·k/E >= its minimum rows per expert from grouped_max_t + 1 up), needs the
    // scratch for its transposed scales only (12.6 MB for the real model against 1.6 GB of BF16
    // values); NVFP4 layers and every other case need BF16 values.
    bool mixed_prefill = false;
    int64_t grouped_max_t = 0;  // MoeParams::int4_grouped_max_t
};

class DeviceWeights {
public:
    // Uploads every tensor of w, in its order; returns the bytes now held on the device.
    // int4_scratch.enabled (CudaOptions::moe_int4_scratch): MoE layers whose experts are all INT4 in
    // the device layout keep only the packed copies, no BF16 ones; their BF16 tables point into one
    // scratch shared by every layer (launch_moe fills it per call), allocated here at the largest
    // need of any such layer: its BF16 values (moe_int4_dequant.h), or by int4_scratch's plan its
    // mixed-input scales only (moe_int4_mixed.h). Its bytes count in device_bytes(), so the cache
    // budget (measured from the free memory after the upload) sees it.
    // nvfp4_kernels (CudaOptions::nvfp4_kernels): NVFP4 linears and experts also get the packed
    // NVFP4 device layout (backend/nvfp4_layout.h) beside their BF16 copies, read by the 4-bit
    // small-rows linear kernel and the MoE small-T path as INT4's are.
    // router_split (CudaOptions::moe_router_kernel 1): each MoE layer's router and shared-expert
    // gate also get DeviceExperts::router_hi / router_lo (~1-2 MB a layer).
    size_t upload(const WeightSet& w, cudaStream_t stream, bool reference_precision = false,
                  const Int4ScratchPlan& int4_scratch = {}, bool nvfp4_kernels = false, bool router_split = false);

    // The copies of views of the uploaded set (checked: a view of another set, or one not
    // numbered, is an error naming what is missing).
    const DeviceLinear& linear(const LinearWeight& w) const;
    const float* vec(const ParamVector& v) const;
    const DeviceTable& table(const WeightBuffer& b) const;
    const DeviceExperts& experts(const MoeWeights& m) const;
    size_t device_bytes() const { return bytes_; }
    // The INT4 scratch's bytes (0: none), and how many MoE layers read it (tests, logs).
    size_t int4_scratch_bytes() const { return int4_scratch_.bytes(); }
    int int4_scratch_layers() const { return int4_scratch_layers_; }

private:
    void add_linear(const LinearWeight& w, bool keep_f32, cudaStream_t stream);
    void add_vec(const ParamVector& v, cudaStream_t stream);
    void add_table(const WeightBuffer& e, cudaStream_t stream);
    void add_gdn(const GdnWeights& g, cudaStream_t stream);
    void add_moe(const MoeWeights& m, cudaStream_t stream);
    void add_experts(const MoeWeights& m, cudaStream_t stream);
    void add_router_split(const MoeWeights& m, DeviceExperts& d, cudaStream_t stream);
    // Uploads a linear's weight as `dtype` (converting on the host when it differs); FP8 with
    // gemm_scales also gets the block-scaled GEMM's scale layout (DeviceLinear::scale_blk).
    // int4_only: an INT4 weight (in the device layout) gets its packed copy only, no BF16 one (w null).
    // With nvfp4_kernels_, an NVFP4 weight uploaded as kBF16 also gets its packed NVFP4 copy.
    DeviceLinear upload_linear(const LinearWeight& w, DeviceLinear::Dtype dtype, cudaStream_t stream,
                               bool gemm_scales = true, bool int4_only = false);
    void* upload_bytes(const void* src, size_t bytes, cudaStream_t stream);

    std::vector<DeviceBuffer> buffers_;
    // By WeightHandle::index; sized by the set's counts. An entry not uploaded yet is empty
    // (DeviceLinear::w / DeviceTable::data null, DeviceExperts::E 0 with gate null).
    struct DeviceVector {
        const float* data = nullptr;
        int64_t size = -1;  // -1: not uploaded
    };
    std::vector<DeviceLinear> linears_;
    std::vector<DeviceVector> vectors_;
    std::vector<DeviceTable> tables_;
    std::vector<DeviceExperts> experts_;
    size_t bytes_ = 0;
    bool reference_precision_ = false;
    bool int4_scratch_wanted_ = false;
    Int4ScratchPlan int4_plan_;
    bool router_split_ = false;
    bool nvfp4_kernels_ = false;
    size_t int4_scratch_need_ = 0;  // the largest MoE layer's need (upload's pre-pass, int4_scratch_layer_bytes)
    // The scratch bytes a layer of these shapes needs (its BF16 values, or by the plan the
    // mixed-input scales; group: its INT4 group, 0 for other formats).
    size_t int4_scratch_layer_bytes(int64_t E, int64_t H, int64_t I, int64_t I_shared, int64_t group) const;
    DeviceBuffer int4_scratch_;
    int int4_scratch_layers_ = 0;
    int64_t top_k_ = 0;  // the config's experts per token (decides whether the grouped GEMM tiles)
};

}  // namespace qs::cuda
