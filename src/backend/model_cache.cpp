// ModelCache storage (see model_cache.h).
#include "backend/model_cache.h"

#include <algorithm>

#include "core/check.h"

namespace qs {

CacheGeometry CacheGeometry::for_model(const ModelConfig& c, int64_t num_blocks, int64_t block_size,
                                       int64_t num_state_slots, bool with_mtp, KvCacheDtype kv_dtype) {
    CacheGeometry g;
    g.num_kv_layers = c.num_full_attention_layers() + (with_mtp ? 1 : 0);
    g.num_kv_heads = c.num_key_value_heads;
    g.head_dim = c.head_dim;
    g.block_size = block_size;
    g.num_blocks = num_blocks;
    g.num_gdn_layers = c.num_linear_attention_layers();
    g.num_state_slots = num_state_slots;
    g.conv_dim = c.linear_conv_dim();
    g.conv_window = c.linear_conv_kernel_dim - 1;
    g.num_value_heads = c.linear_num_value_heads;
    g.key_head_dim = c.linear_key_head_dim;
    g.value_head_dim = c.linear_value_head_dim;
    g.kv_dtype = kv_dtype;
    return g;
}

size_t CacheGeometry::kv_bytes_per_block() const {
    size_t elem = kv_dtype == KvCacheDtype::kF32 ? 4 : kv_dtype == KvCacheDtype::kBF16 ? 2 : 1;
    return size_t(num_kv_layers * 2 * block_size * num_kv_heads * head_dim) * elem;
}

size_t CacheGeometry::state_bytes_per_slot() const {
    // conv window in fp32; recurrent state in fp32, or bf16 where the CUDA backend stores it so.
    return size_t(num_gdn_layers) * (size_t(conv_window * conv_dim) * 4 +
                                     size_t(num_value_heads * key_head_dim * value_head_dim) * (state_bf16 ? 2 : 4));
}

ModelCache::ModelCache(const CacheGeometry& g, bool with_storage) : g_(g), storage_(with_storage) {
    if (!storage_) return;
    const size_t kv = size_t(g.num_blocks * g.block_size * g.num_kv_heads * g.head_dim);
    k_.assign(size_t(g.num_kv_layers), std::vector<float>(kv, 0.0f));
    tokens_.assign(size_t(g.num_blocks * g.block_size), 0);
    v_.assign(size_t(g.num_kv_layers), std::vector<float>(kv, 0.0f));
    conv_.assign(size_t(g.num_gdn_layers), std::vector<float>(size_t(g.num_state_slots * g.conv_window * g.conv_dim), 0.0f));
    ssm_.assign(size_t(g.num_gdn_layers),
                std::vector<float>(size_t(g.num_state_slots * g.num_value_heads * g.key_head_dim * g.value_head_dim), 0.0f));
}

ModelCache::ModelCache(const CacheGeometry& g, std::unique_ptr<CacheStorage> external)
    : g_(g), storage_(false), external_(std::move(external)) {
    QS_CHECK(external_ != nullptr);
}

void ModelCache::reset_slot(int64_t slot) {
    QS_CHECK(slot >= 0 && slot < g_.num_state_slots);
    if (external_) return external_->reset_slot(slot);
    if (!storage_) return;
    const size_t conv_n = size_t(g_.conv_window * g_.conv_dim);
    const size_t ssm_n = size_t(g_.num_value_heads * g_.key_head_dim * g_.value_head_dim);
    for (auto& c : conv_) std::fill_n(c.begin() + ptrdiff_t(size_t(slot) * conv_n), conv_n, 0.0f);
    for (auto& s : ssm_) std::fill_n(s.begin() + ptrdiff_t(size_t(slot) * ssm_n), ssm_n, 0.0f);
}

void ModelCache::copy_slot(int64_t from, int64_t to) {
    QS_CHECK(from >= 0 && from < g_.num_state_slots && to >= 0 && to < g_.num_state_slots);
    if (external_) return external_->copy_slot(from, to);
    if (!storage_) return;
    const size_t conv_n = size_t(g_.conv_window * g_.conv_dim);
    const size_t ssm_n = size_t(g_.num_value_heads * g_.key_head_dim * g_.value_head_dim);
    for (auto& c : conv_) std::copy_n(c.begin() + ptrdiff_t(size_t(from) * conv_n), conv_n, c.begin() + ptrdiff_t(size_t(to) * conv_n));
    for (auto& s : ssm_) std::copy_n(s.begin() + ptrdiff_t(size_t(from) * ssm_n), ssm_n, s.begin() + ptrdiff_t(size_t(to) * ssm_n));
}

void ModelCache::copy_block(int64_t from, int64_t to) {
    QS_CHECK(from >= 0 && from < g_.num_blocks && to >= 0 && to < g_.num_blocks);
    if (external_) return external_->copy_block(from, to);
    if (!storage_) return;
    const size_t n = size_t(g_.block_size * g_.num_kv_heads * g_.head_dim);
    for (auto* pool : {&k_, &v_})
        for (auto& layer : *pool)
            std::copy_n(layer.begin() + ptrdiff_t(size_t(from) * n), n, layer.begin() + ptrdiff_t(size_t(to) * n));
    const size_t bs = size_t(g_.block_size);
    std::copy_n(tokens_.begin() + ptrdiff_t(size_t(from) * bs), bs, tokens_.begin() + ptrdiff_t(size_t(to) * bs));
}

}  // namespace qs
