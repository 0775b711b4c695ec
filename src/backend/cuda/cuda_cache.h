// CudaCacheStorage: the ModelCache's memory on the GPU, in the layouts backend/cpu uses
// (model_cache.h): per KV layer K and V [num_blocks, block_size, num_kv_heads, head_dim] in bf16,
// fp8 e4m3 or (reference precision, cuda_ops.h) f32; per GDN layer the conv window [num_state_slots, conv_window, conv_dim] fp32 and
// the recurrent state [num_state_slots, num_value_heads, key_head_dim, value_head_dim] in fp32
// (or bf16 storage, math in fp32). One page and one slot beyond the geometry's are kept for the
// dummy rows that pad a decode batch to a captured CUDA graph's size: they write there and
// nothing reads what they write. Slot/page copies are enqueued on the backend's stream, so
// they are ordered with the forwards. Used from the engine thread.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/device_batch.h"
#include "backend/cuda/device_memory.h"
#include "backend/model_cache.h"

namespace qs::cuda {

class CudaCacheStorage final : public CacheStorage {
public:
    // `owner`: the CudaOps that makes it (CudaOps::make_cache) and alone reads it.
    CudaCacheStorage(const Ops* owner, const CacheGeometry& g, bool ssm_bf16, cudaStream_t stream);

    void* k(int64_t kv_layer) const { return bytes_at(k_, kv_layer * kv_layer_bytes_); }
    void* v(int64_t kv_layer) const { return bytes_at(v_, kv_layer * kv_layer_bytes_); }
    float* conv(int64_t gdn_layer) const { return static_cast<float*>(bytes_at(conv_, gdn_layer * conv_layer_bytes_)); }
    void* ssm(int64_t gdn_layer) const { return bytes_at(ssm_, gdn_layer * ssm_layer_bytes_); }
    // [num_blocks + 1, block_size] token id at each cached position (the sampler's history).
    int32_t* token_pages() const { return tokens_.as<int32_t>(); }
    int64_t block_size() const { return g_.block_size; }
    DeviceKvDtype kv_dtype() const { return kv_dtype_; }
    // The page and GDN slot the padding rows of a graph-replayed batch use (outside the geometry).
    int32_t pad_block() const { return int32_t(g_.num_blocks); }
    int32_t pad_slot() const { return int32_t(g_.num_state_slots); }
    // Unique per storage ever made in this process: captured graphs embed its addresses.
    uint64_t id() const { return id_; }
    bool ssm_bf16() const { return ssm_bf16_; }
    size_t device_bytes() const { return k_.bytes() + v_.bytes() + conv_.bytes() + ssm_.bytes() + tokens_.bytes(); }

    void reset_slot(int64_t slot) override;
    void copy_slot(int64_t from, int64_t to) override;
    void copy_block(int64_t from, int64_t to) override;

private:
    static void* bytes_at(const DeviceBuffer& b, size_t offset) { return static_cast<char*>(b.get()) + offset; }

    CacheGeometry g_;
    uint64_t id_;
    DeviceKvDtype kv_dtype_;
    bool ssm_bf16_;
    cudaStream_t stream_;
    size_t kv_block_bytes_, kv_layer_bytes_, conv_slot_bytes_, conv_layer_bytes_, ssm_slot_bytes_, ssm_layer_bytes_;
    DeviceBuffer k_, v_, conv_, ssm_, tokens_;
};

}  // namespace qs::cuda
