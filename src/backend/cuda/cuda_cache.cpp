// CudaCacheStorage (see cuda_cache.h).
#include "backend/cuda/cuda_cache.h"

#include <atomic>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace qs::cuda {

namespace {
std::atomic<uint64_t> next_storage_id{1};
}

CudaCacheStorage::CudaCacheStorage(const Ops* owner, const CacheGeometry& g, bool ssm_bf16, cudaStream_t stream)
    : CacheStorage(owner), g_(g), id_(next_storage_id++), ssm_bf16_(ssm_bf16), stream_(stream) {
    kv_dtype_ = g.kv_dtype == KvCacheDtype::kBF16   ? DeviceKvDtype::kBF16
                : g.kv_dtype == KvCacheDtype::kF32 ? DeviceKvDtype::kF32
                                                   : DeviceKvDtype::kFP8E4M3;
    const size_t kv_elem = kv_dtype_ == DeviceKvDtype::kF32 ? 4 : kv_dtype_ == DeviceKvDtype::kBF16 ? 2 : 1;
    kv_block_bytes_ = size_t(g.block_size * g.num_kv_heads * g.head_dim) * kv_elem;
    kv_layer_bytes_ = kv_block_bytes_ * size_t(g.num_blocks + 1);  // + pad_block()
    conv_slot_bytes_ = size_t(g.conv_window * g.conv_dim) * sizeof(float);
    conv_layer_bytes_ = conv_slot_bytes_ * size_t(g.num_state_slots + 1);  // + pad_slot()
    ssm_slot_bytes_ = size_t(g.num_value_heads * g.key_head_dim * g.value_head_dim) * (ssm_bf16 ? 2 : 4);
    ssm_layer_bytes_ = ssm_slot_bytes_ * size_t(g.num_state_slots + 1);
    k_ = DeviceBuffer(kv_layer_bytes_ * size_t(g.num_kv_layers));
    v_ = DeviceBuffer(kv_layer_bytes_ * size_t(g.num_kv_layers));
    conv_ = DeviceBuffer(conv_layer_bytes_ * size_t(g.num_gdn_layers));
    ssm_ = DeviceBuffer(ssm_layer_bytes_ * size_t(g.num_gdn_layers));
    tokens_ = DeviceBuffer(size_t((g.num_blocks + 1) * g.block_size) * sizeof(int32_t));
    // Zero everything once: a page or slot is only read after it was written, but a defined
    // starting value keeps any bug reproducible.
    for (const DeviceBuffer* b : {&k_, &v_, &conv_, &ssm_, &tokens_})
        if (b->bytes() > 0) QS_CUDA_CHECK(cudaMemsetAsync(b->get(), 0, b->bytes(), stream_));
}

void CudaCacheStorage::reset_slot(int64_t slot) {
    for (int64_t l = 0; l < g_.num_gdn_layers; ++l) {
        QS_CUDA_CHECK(cudaMemsetAsync(bytes_at(conv_, size_t(l) * conv_layer_bytes_ + size_t(slot) * conv_slot_bytes_), 0,
                                      conv_slot_bytes_, stream_));
        QS_CUDA_CHECK(cudaMemsetAsync(bytes_at(ssm_, size_t(l) * ssm_layer_bytes_ + size_t(slot) * ssm_slot_bytes_), 0,
                                      ssm_slot_bytes_, stream_));
    }
}

void CudaCacheStorage::copy_slot(int64_t from, int64_t to) {
    for (int64_t l = 0; l < g_.num_gdn_layers; ++l) {
        const size_t conv_base = size_t(l) * conv_layer_bytes_, ssm_base = size_t(l) * ssm_layer_bytes_;
        QS_CUDA_CHECK(cudaMemcpyAsync(bytes_at(conv_, conv_base + size_t(to) * conv_slot_bytes_),
                                      bytes_at(conv_, conv_base + size_t(from) * conv_slot_bytes_), conv_slot_bytes_,
                                      cudaMemcpyDeviceToDevice, stream_));
        QS_CUDA_CHECK(cudaMemcpyAsync(bytes_at(ssm_, ssm_base + size_t(to) * ssm_slot_bytes_),
                                      bytes_at(ssm_, ssm_base + size_t(from) * ssm_slot_bytes_), ssm_slot_bytes_,
                                      cudaMemcpyDeviceToDevice, stream_));
    }
}

void CudaCacheStorage::copy_block(int64_t from, int64_t to) {
    for (int64_t l = 0; l < g_.num_kv_layers; ++l) {
        for (const DeviceBuffer* b : {&k_, &v_}) {
            const size_t base = size_t(l) * kv_layer_bytes_;
            QS_CUDA_CHECK(cudaMemcpyAsync(bytes_at(*b, base + size_t(to) * kv_block_bytes_),
                                          bytes_at(*b, base + size_t(from) * kv_block_bytes_), kv_block_bytes_,
                                          cudaMemcpyDeviceToDevice, stream_));
        }
    }
    const size_t tok_bytes = size_t(g_.block_size) * sizeof(int32_t);
    QS_CUDA_CHECK(cudaMemcpyAsync(bytes_at(tokens_, size_t(to) * tok_bytes), bytes_at(tokens_, size_t(from) * tok_bytes),
                                  tok_bytes, cudaMemcpyDeviceToDevice, stream_));
}

}  // namespace qs::cuda
