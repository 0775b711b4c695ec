// DeviceWeights (see device_weights.h).
#include "backend/cuda/device_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <variant>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_int4_dequant.h"
#include "backend/cuda/moe_int4_mixed.h"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/moe_prefill.h"
#include "backend/cuda/router_gemm.h"
#include "backend/int4_layout.h"
#include "backend/nvfp4_layout.h"
#include "core/check.h"
#include "core/dtype.h"
#include "core/progress.h"

namespace qs::cuda {

namespace {
// Host bytes of one WeightSet entry: what the upload's progress line counts (the device copy
// may be another format; reading the host side from disk is what takes the time).
size_t host_bytes(const WeightSet::Entry& entry) {
    auto linear = [](const LinearWeight& l) { return l.storage_bytes(); };
    auto vec = [](const ParamVector& v) { return v.size() * sizeof(float); };
    return std::visit(
        [&](const auto* p) -> size_t {
            using T = std::remove_cvref_t<decltype(*p)>;
            if constexpr (std::is_same_v<T, WeightBuffer>) return size_t(p->numel()) * dtype_size(p->dtype);
            else if constexpr (std::is_same_v<T, ParamVector>) return vec(*p);
            else if constexpr (std::is_same_v<T, LinearWeight>) return linear(*p);
            else if constexpr (std::is_same_v<T, GdnWeights>)
                return linear(p->in_proj_qkv) + linear(p->in_proj_z) + linear(p->in_proj_b) + linear(p->in_proj_a) +
                       linear(p->out_proj) + vec(p->conv1d) + vec(p->A_log) + vec(p->dt_bias) + vec(p->norm);
            else {
                size_t b = linear(p->router) + linear(p->shared_expert_gate) + linear(p->shared_expert.gate_proj) +
                           linear(p->shared_expert.up_proj) + linear(p->shared_expert.down_proj);
                for (const ExpertWeights& e : p->experts)
                    b += linear(e.gate_proj) + linear(e.up_proj) + linear(e.down_proj);
                return b;
            }
        },
        entry);
}
}  // namespace

void* DeviceWeights::upload_bytes(const void* src, size_t bytes, cudaStream_t stream) {
    buffers_.emplace_back(bytes);
    // Synchronous copy: the host source may be a temporary conversion buffer.
    QS_CUDA_CHECK(cudaMemcpy(buffers_.back().get(), src, bytes, cudaMemcpyHostToDevice));
    bytes_ += bytes;
    return buffers_.back().get();
}

DeviceLinear DeviceWeights::upload_linear(const LinearWeight& w, DeviceLinear::Dtype dtype, cudaStream_t stream,
                                          bool gemm_scales, bool int4_only) {
    DeviceLinear d;
    d.dtype = dtype;
    d.out = w.out_features;
    d.in = w.in_features;
    const size_t n = size_t(w.out_features * w.in_features);
    if (w.format == WeightFormat::kFP8Block && dtype == DeviceLinear::Dtype::kFP8Block) {
        d.w = upload_bytes(w.weight.data, n, stream);
        const std::vector<float> scales = w.scale_inv_f32();
        d.scale_inv = static_cast<const float*>(upload_bytes(scales.data(), scales.size() * 4, stream));
        // The block-scaled GEMM's copy (gemm.h, DeviceLinear::scale_blk): rows of in/128 scales
        // padded to a multiple of 4; the checkpoint's tensor already is that layout when in/128 is.
        if (gemm_scales && d.out % 128 == 0 && d.in % 128 == 0) {
            if (fp8_blk128_ld(d.in) == d.in / 128) {
                d.scale_blk = d.scale_inv;
            } else {
                const std::vector<float> blk = fp8_blk128_scales(scales.data(), d.out, d.in);
                d.scale_blk = static_cast<const float*>(upload_bytes(blk.data(), blk.size() * 4, stream));
            }
        }
        return d;
    }
    if (dtype == DeviceLinear::Dtype::kBF16 && w.format == WeightFormat::kIntGroup &&
        int4_layout_unsupported(w).empty()) {
        // INT4 kept packed for the small-row kernels, beside the BF16 copy made below.
        const Int4DeviceLayout l = int4_device_layout(w);
        d.int4_codes = static_cast<const uint32_t*>(upload_bytes(l.codes.data(), l.codes.size() * 4, stream));
        d.int4_scales = upload_bytes(l.scales.data(), l.scales.size() * 2, stream);
        d.int4_group = l.group;
        if (int4_only) return d;  // the layer's BF16 values come from the scratch (moe_int4_dequant.h)
    }
    if (nvfp4_kernels_ && dtype == DeviceLinear::Dtype::kBF16 && w.format == WeightFormat::kNvfp4 &&
        nvfp4_layout_unsupported(w).empty()) {
        // NVFP4 kept packed for the 4-bit kernels, beside the BF16 copy made below.
        const Nvfp4DeviceLayout l = nvfp4_device_layout(w);
        d.int4_codes = static_cast<const uint32_t*>(upload_bytes(l.codes.data(), l.codes.size() * 4, stream));
        d.int4_scales = upload_bytes(l.scales.data(), l.scales.size(), stream);  // E4M3 bytes
        d.int4_group = kNvfp4GroupSize;
        d.nvfp4 = true;
        d.nvfp4_global = l.global;
        if (int4_only) return d;  // the layer's BF16 values come from the scratch (moe_int4_dequant.h)
    }
    QS_CHECK_MSG(!int4_only, "upload_linear: int4_only for a weight without a 4-bit device layout");
    if (dtype == DeviceLinear::Dtype::kBF16 && w.format == WeightFormat::kDense && w.weight.dtype == DType::kBF16) {
        d.w = upload_bytes(w.weight.data, n * 2, stream);
        return d;
    }
    // Convert row by row through the format's reference dequantisation, rows spread over the
    // host's threads (a full-size INT4 model's BF16 copies took minutes on one thread).
    if (dtype == DeviceLinear::Dtype::kF32) {
        std::vector<float> all(n);
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < w.out_features; ++r) w.row_to_f32(r, all.data() + size_t(r * w.in_features));
        d.w = upload_bytes(all.data(), n * 4, stream);
    } else {
        QS_CHECK(dtype == DeviceLinear::Dtype::kBF16);
        std::vector<uint16_t> all(n);
#pragma omp parallel
        {
            std::vector<float> row(size_t(w.in_features));
#pragma omp for schedule(static)
            for (int64_t r = 0; r < w.out_features; ++r) {
                w.row_to_f32(r, row.data());
                for (int64_t i = 0; i < w.in_features; ++i)
                    all[size_t(r * w.in_features + i)] = f32_to_bf16(row[size_t(i)]).bits;
            }
        }
        d.w = upload_bytes(all.data(), n * 2, stream);
    }
    return d;
}

namespace {
// The slot of `h` in a table of `n` entries (a view the set numbered: WeightSet::add_*).
size_t slot(WeightHandle h, size_t n, const char* what) {
    QS_CHECK_MSG(h.valid() && size_t(h.index) < n, what);
    return size_t(h.index);
}
}  // namespace

void DeviceWeights::add_linear(const LinearWeight& w, bool keep_f32, cudaStream_t stream) {
    DeviceLinear& d = linears_[slot(w.handle, linears_.size(), "a linear of the weight set has no handle")];
    if (d.w) return;
    DeviceLinear::Dtype dtype = DeviceLinear::Dtype::kBF16;
    if (w.format == WeightFormat::kFP8Block) dtype = DeviceLinear::Dtype::kFP8Block;
    if (keep_f32 || reference_precision_ || (w.format == WeightFormat::kDense && w.weight.dtype != DType::kBF16))
        dtype = DeviceLinear::Dtype::kF32;
    d = upload_linear(w, dtype, stream);
}

void DeviceWeights::add_vec(const ParamVector& v, cudaStream_t stream) {
    DeviceVector& d = vectors_[slot(v.handle, vectors_.size(), "a vector of the weight set has no handle")];
    if (d.size >= 0) return;
    d.size = int64_t(v.size());
    if (!v.empty()) d.data = static_cast<const float*>(upload_bytes(v.data(), v.size() * 4, stream));
}

void DeviceWeights::add_experts(const MoeWeights& m, cudaStream_t stream) {
    const int64_t E = int64_t(m.experts.size());
    const int64_t H = m.router.in_features, I = E > 0 ? m.experts[0].gate_proj.out_features : 0;
    // One format per table: FP8 only when every expert (and the shared one) is FP8, else BF16
    // (an FP8 expert is then dequantised on the host: mixed checkpoints are not expected); F32
    // for reference precision, F32/F16 checkpoints and shapes the grouped GEMM does not tile.
    bool all_fp8 = m.shared_expert.gate_proj.format == WeightFormat::kFP8Block;
    bool any_wide = false;  // dense experts stored wider than bf16 (the transformers fixtures)
    for (const ExpertWeights& e : m.experts)
        for (const LinearWeight* l : {&e.gate_proj, &e.up_proj, &e.down_proj}) {
            all_fp8 = all_fp8 && l->format == WeightFormat::kFP8Block;
            any_wide = any_wide || (l->format == WeightFormat::kDense && l->weight.dtype != DType::kBF16);
        }
    const bool f32 = reference_precision_ || any_wide ||
                     !moe_grouped_gemm_tiles(E, H, I, m.shared_expert.gate_proj.out_features, top_k_);
    all_fp8 = all_fp8 && !f32;
    const DeviceLinear::Dtype dtype =
        f32 ? DeviceLinear::Dtype::kF32 : all_fp8 ? DeviceLinear::Dtype::kFP8Block : DeviceLinear::Dtype::kBF16;
    // Without BF16 copies only when every matrix takes the INT4 device layout with one group, or
    // every one the NVFP4 layout with nvfp4_kernels_ (the conditions for the 4-bit arrays below), and
    // the scratch's dequantisation covers the shapes.
    bool scratch = int4_scratch_wanted_ && dtype == DeviceLinear::Dtype::kBF16 && E > 0 && H % 32 == 0 &&
                   I % 32 == 0 && m.shared_expert.gate_proj.out_features % 32 == 0;
    const bool nvfp4_experts = m.shared_expert.gate_proj.format == WeightFormat::kNvfp4;
    const int64_t group0 = m.shared_expert.gate_proj.int_params.group_size;
    auto packable = [&](const ExpertWeights& e) {
        for (const LinearWeight* l : {&e.gate_proj, &e.up_proj, &e.down_proj}) {
            const bool ok = nvfp4_experts ? nvfp4_kernels_ && l->format == WeightFormat::kNvfp4 &&
                                                nvfp4_layout_unsupported(*l).empty()
                                          : l->format == WeightFormat::kIntGroup && l->int_params.group_size == group0 &&
                                                int4_layout_unsupported(*l).empty();
            if (!ok) return false;
        }
        return true;
    };
    if (scratch) scratch = packable(m.shared_expert) && std::all_of(m.experts.begin(), m.experts.end(), packable);
    std::vector<const void*> gate, up, down;
    std::vector<const float*> gate_s, up_s, down_s;
    std::vector<const uint32_t*> gate_q, up_q, down_q;
    std::vector<const void*> gate_qs, up_qs, down_qs;
    std::vector<int64_t> groups;  // every expert matrix's INT4 group (0: not INT4; NVFP4: 16)
    std::vector<float> globals;   // every expert matrix's NVFP4 global (NaN: not NVFP4), [3 (E + 1)]
    auto add = [&](const ExpertWeights& e) {
        // The grouped GEMM reads scale_inv itself: no block-scaled GEMM copy of the scales.
        const DeviceLinear g = upload_linear(e.gate_proj, dtype, stream, false, scratch),
                           u = upload_linear(e.up_proj, dtype, stream, false, scratch),
                           dn = upload_linear(e.down_proj, dtype, stream, false, scratch);
        gate.push_back(g.w), up.push_back(u.w), down.push_back(dn.w);
        gate_s.push_back(g.scale_inv), up_s.push_back(u.scale_inv), down_s.push_back(dn.scale_inv);
        gate_q.push_back(g.int4_codes), up_q.push_back(u.int4_codes), down_q.push_back(dn.int4_codes);
        gate_qs.push_back(g.int4_scales), up_qs.push_back(u.int4_scales), down_qs.push_back(dn.int4_scales);
        for (const DeviceLinear* l : {&g, &u, &dn}) {
            groups.push_back(l->int4_codes ? l->int4_group : 0);
            globals.push_back(l->int4_codes && l->nvfp4 ? l->nvfp4_global : std::nanf(""));
        }
    };
    for (const ExpertWeights& e : m.experts) add(e);
    add(m.shared_expert);
    DeviceExperts d;
    d.format = f32 ? DeviceWeightFormat::kF32 : all_fp8 ? DeviceWeightFormat::kFP8Block : DeviceWeightFormat::kBF16;
    auto table = [&](const auto& v) { return upload_bytes(v.data(), v.size() * sizeof(v[0]), stream); };
    if (scratch) {
        const int64_t Is = m.shared_expert.gate_proj.out_features;
        QS_CHECK_MSG(int4_scratch_layer_bytes(E, H, I, Is, nvfp4_experts ? 0 : group0) <= int4_scratch_need_,
                     "DeviceWeights: an INT4 MoE layer larger than the scratch the pre-pass sized");
        if (!int4_scratch_.get()) {
            int4_scratch_ = DeviceBuffer(int4_scratch_need_);
            bytes_ += int4_scratch_need_;
        }
        moe_int4_scratch_pointers(int4_scratch_.get(), E, H, I, Is, gate, up, down);
        d.bf16_in_scratch = true;
        d.int4_scratch = int4_scratch_.get();
        d.int4_scratch_bytes = int4_scratch_need_;
        ++int4_scratch_layers_;
    }
    d.gate = static_cast<const void* const*>(table(gate));
    d.up = static_cast<const void* const*>(table(up));
    d.down = static_cast<const void* const*>(table(down));
    if (all_fp8) {
        d.gate_scale = static_cast<const float* const*>(table(gate_s));
        d.up_scale = static_cast<const float* const*>(table(up_s));
        d.down_scale = static_cast<const float* const*>(table(down_s));
    }
    // INT4 only when every matrix has the packed copy with one group size (else the BF16 copies
    // serve every path; the packed ones stay unused).
    // NVFP4 the same way: every matrix NVFP4 (packed with a global), none INT4.
    const bool nvfp4 = !globals.empty() && std::none_of(globals.begin(), globals.end(), [](float g) { return std::isnan(g); });
    const bool int4 = !groups.empty() && groups[0] > 0 &&
                      std::all_of(groups.begin(), groups.end(), [&](int64_t g) { return g == groups[0]; }) &&
                      (nvfp4 || std::all_of(globals.begin(), globals.end(), [](float g) { return std::isnan(g); }));
    QS_CHECK_MSG(int4 || !scratch, "DeviceWeights: 4-bit experts without BF16 copies lack their packed copies");
    if (int4) {
        d.gate_q = static_cast<const uint32_t* const*>(table(gate_q));
        d.up_q = static_cast<const uint32_t* const*>(table(up_q));
        d.down_q = static_cast<const uint32_t* const*>(table(down_q));
        d.gate_qs = static_cast<const void* const*>(table(gate_qs));
        d.up_qs = static_cast<const void* const*>(table(up_qs));
        d.down_qs = static_cast<const void* const*>(table(down_qs));
        d.int4_group = int(groups[0]);
        if (nvfp4) {
            d.nvfp4 = true;
            d.nvfp4_global = static_cast<const float*>(table(globals));
        }
    }
    d.E = int(E);
    d.H = int(m.router.in_features);
    d.I = E > 0 ? int(m.experts[0].gate_proj.out_features) : 0;
    d.I_shared = int(m.shared_expert.gate_proj.out_features);
    experts_[slot(m.experts_handle, experts_.size(), "a MoE block of the weight set has no handle")] = d;
}

void DeviceWeights::add_table(const WeightBuffer& e, cudaStream_t stream) {
    DeviceTable t;
    t.dtype = e.dtype == DType::kBF16 ? TableDtype::kBF16 : e.dtype == DType::kF16 ? TableDtype::kF16 : TableDtype::kF32;
    QS_CHECK_MSG(e.dtype == DType::kBF16 || e.dtype == DType::kF16 || e.dtype == DType::kF32,
                 "embed_tokens must be F32, F16 or BF16");
    DeviceTable& d = tables_[slot(e.handle, tables_.size(), "a table of the weight set has no handle")];
    if (d.data) return;
    t.data = upload_bytes(e.data, size_t(e.numel()) * dtype_size(e.dtype), stream);
    d = t;
}

void DeviceWeights::add_gdn(const GdnWeights& g, cudaStream_t stream) {
    add_linear(g.in_proj_qkv, false, stream);
    add_linear(g.in_proj_z, false, stream);
    add_linear(g.in_proj_b, true, stream);
    add_linear(g.in_proj_a, true, stream);
    add_linear(g.out_proj, false, stream);
    add_vec(g.conv1d, stream);
    add_vec(g.A_log, stream);
    add_vec(g.dt_bias, stream);
    add_vec(g.norm, stream);
}

void DeviceWeights::add_moe(const MoeWeights& m, cudaStream_t stream) {
    add_linear(m.router, true, stream);
    add_linear(m.shared_expert_gate, true, stream);
    add_experts(m, stream);
    DeviceExperts& d = experts_[slot(m.experts_handle, experts_.size(), "a MoE block of the weight set has no handle")];
    if (router_split_ && !reference_precision_) add_router_split(m, d, stream);
}

void DeviceWeights::add_router_split(const MoeWeights& m, DeviceExperts& d, cudaStream_t stream) {
    const int64_t E = m.router.out_features, H = m.router.in_features;
    if (!router_logits_supported(E, H) || m.shared_expert_gate.out_features != 1 || m.shared_expert_gate.in_features != H)
        return;
    std::vector<float> w(size_t((E + 1) * H));  // [E + 1, H]: the router's rows, then the gate's
    for (int64_t r = 0; r < E; ++r) m.router.row_to_f32(r, w.data() + r * H);
    m.shared_expert_gate.row_to_f32(0, w.data() + E * H);
    std::vector<uint16_t> hi, lo;
    const int64_t rows = router_padded_rows(E);
    const bool any_lo = router_split_weights(w, E + 1, rows, H, hi, lo);
    d.router_hi = static_cast<const uint16_t*>(upload_bytes(hi.data(), hi.size() * 2, stream));
    if (any_lo) d.router_lo = static_cast<const uint16_t*>(upload_bytes(lo.data(), lo.size() * 2, stream));
}

size_t DeviceWeights::int4_scratch_layer_bytes(int64_t E, int64_t H, int64_t I, int64_t I_shared,
                                               int64_t group) const {
    const bool scales_only =
        int4_plan_.mixed_prefill && group > 0 && moe_int4_mixed_covers(H, I, I_shared, group) && top_k_ <= 31 &&
        double(int4_plan_.grouped_max_t + 1) * double(top_k_) / double(E) >= moe::prefill_min_rows_per_expert(false);
    return scales_only ? moe_int4_mixed_scratch_bytes(E, H, I, I_shared, group) : moe_int4_scratch_bytes(E, H, I, I_shared);
}

size_t DeviceWeights::upload(const WeightSet& w, cudaStream_t stream, bool reference_precision,
                             const Int4ScratchPlan& int4_scratch, bool nvfp4_kernels, bool router_split) {
    QS_CHECK(w.config != nullptr);
    reference_precision_ = reference_precision;
    nvfp4_kernels_ = nvfp4_kernels && !reference_precision;
    router_split_ = router_split;
    int4_scratch_wanted_ = int4_scratch.enabled && !reference_precision;
    int4_plan_ = int4_scratch;
    top_k_ = w.config->num_experts_per_tok;
    // The scratch's size: the largest need of a MoE layer whose experts may go without BF16 copies
    // (4-bit INT, or NVFP4 read as 4-bit; allocated by the first layer that does; none if none
    // does). INT4 layers by the plan (an upper bound: a layer whose experts turn out not packable
    // uses no scratch). Other layers (e.g. a BF16 MTP module's) never use it.
    for (const WeightSet::Entry& entry : w.entries())
        if (const auto* const* m = std::get_if<const MoeWeights*>(&entry); m && !(*m)->experts.empty()) {
            const LinearWeight& s = (*m)->shared_expert.gate_proj;
            const bool four_bit = (s.format == WeightFormat::kIntGroup && s.int_params.bits == 4) ||
                                  (s.format == WeightFormat::kNvfp4 && nvfp4_kernels_);
            if (!four_bit) continue;
            const int64_t group = s.format == WeightFormat::kIntGroup ? s.int_params.group_size : 0;
            int4_scratch_need_ = std::max(
                int4_scratch_need_,
                int4_scratch_layer_bytes(int64_t((*m)->experts.size()), (*m)->router.in_features,
                                         (*m)->experts[0].gate_proj.out_features, s.out_features, group));
        }
    QS_CHECK_MSG(linears_.empty() && vectors_.empty() && tables_.empty() && experts_.empty(),
                 "DeviceWeights: a backend prepares one weight set");
    linears_.resize(size_t(w.num_linears()));
    vectors_.resize(size_t(w.num_vectors()));
    tables_.resize(size_t(w.num_tables()));
    experts_.resize(size_t(w.num_expert_tables()));
    double total = 0;
    for (const WeightSet::Entry& entry : w.entries()) total += double(host_bytes(entry));
    Progress progress("uploading weights", total);
    for (const WeightSet::Entry& entry : w.entries()) {
        std::visit(
            [&](const auto* p) {
                using T = std::remove_cvref_t<decltype(*p)>;
                if constexpr (std::is_same_v<T, WeightBuffer>) add_table(*p, stream);
                else if constexpr (std::is_same_v<T, ParamVector>) add_vec(*p, stream);
                else if constexpr (std::is_same_v<T, LinearWeight>) add_linear(*p, false, stream);
                else if constexpr (std::is_same_v<T, GdnWeights>) add_gdn(*p, stream);
                else add_moe(*p, stream);
            },
            entry);
        progress.advance(double(host_bytes(entry)));
    }
    progress.finish();
    return bytes_;
}

// The lookups check that the copy at the view's handle has the view's shape: a view of another
// weight set (or of none) fails here, not in a kernel.
const DeviceLinear& DeviceWeights::linear(const LinearWeight& w) const {
    const DeviceLinear& d =
        linears_[slot(w.handle, linears_.size(), "linear weight was not uploaded (prepare_weights not called?)")];
    QS_CHECK_MSG(d.w != nullptr && d.out == w.out_features && d.in == w.in_features,
                 "linear weight does not match the copy at its handle (a view of another weight set?)");
    return d;
}

const float* DeviceWeights::vec(const ParamVector& v) const {
    const DeviceVector& d =
        vectors_[slot(v.handle, vectors_.size(), "parameter vector was not uploaded (prepare_weights not called?)")];
    QS_CHECK_MSG(d.size == int64_t(v.size()), "parameter vector does not match the copy at its handle");
    return d.data;
}

const DeviceTable& DeviceWeights::table(const WeightBuffer& b) const {
    const DeviceTable& d = tables_[slot(b.handle, tables_.size(), "embedding table was not uploaded")];
    QS_CHECK_MSG(d.data != nullptr, "embedding table was not uploaded");
    return d;
}

const DeviceExperts& DeviceWeights::experts(const MoeWeights& m) const {
    const DeviceExperts& d = experts_[slot(m.experts_handle, experts_.size(), "MoE weights were not uploaded")];
    QS_CHECK_MSG(d.gate != nullptr && d.E == int(m.experts.size()), "MoE weights do not match the copy at their handle");
    return d;
}

}  // namespace qs::cuda
