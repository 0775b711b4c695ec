// ModelCache: the per-sequence memory of the model on the CPU backend, in the same layouts the
// CUDA backend uses. Full-attention layers (and the MTP layer) keep K and V in a paged pool;
// GDN layers keep one state slot per running sequence: the conv window (the last kernel-1
// pre-conv qkv rows) and the fp32 recurrent state. Owned by the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "config/model_config.h"

namespace qs {

// How K/V values are stored. The CPU stores floats but rounds them exactly as the GPU's
// bf16 / fp8 storage would, so results match.
enum class KvCacheDtype : uint8_t { kF32, kBF16, kFP8E4M3 };

struct CacheGeometry {
    int64_t num_kv_layers = 0;   // full-attention layers + the MTP layer (if any)
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;
    int64_t block_size = 16;
    int64_t num_blocks = 0;
    int64_t num_gdn_layers = 0;
    int64_t num_state_slots = 0;
    int64_t conv_dim = 0;        // 2*Kdim + Vdim
    int64_t conv_window = 0;     // linear_conv_kernel_dim - 1
    int64_t num_value_heads = 0; // linear_num_value_heads
    int64_t key_head_dim = 0;
    int64_t value_head_dim = 0;
    KvCacheDtype kv_dtype = KvCacheDtype::kF32;
    // The recurrent state stored in bf16 (math in fp32; CUDA only, --gdn-state-dtype bf16): half
    // the state bytes per slot. The conv window stays fp32.
    bool state_bf16 = false;

    static CacheGeometry for_model(const ModelConfig& c, int64_t num_blocks, int64_t block_size,
                                   int64_t num_state_slots, bool with_mtp, KvCacheDtype kv_dtype);
    // Bytes per KV page (all layers, K and V) and per state slot, at GPU storage sizes.
    size_t kv_bytes_per_block() const;
    size_t state_bytes_per_slot() const;
};

class Ops;

// Cache storage that lives outside host memory (the CUDA backend's device buffers). The
// ModelCache checks ids and delegates the slot/page copies to it. The backend that made it
// (Ops::make_cache) names itself as its owner and reads its own storage type through
// ModelCache::external_storage() after checking the owner (CudaOps::storage): only that backend
// makes storage it owns, so its type is known without a dynamic_cast.
class CacheStorage {
public:
    explicit CacheStorage(const Ops* owner = nullptr) : owner_(owner) {}
    virtual ~CacheStorage() = default;
    const Ops* owner() const { return owner_; }
    virtual void reset_slot(int64_t slot) = 0;
    virtual void copy_slot(int64_t from, int64_t to) = 0;
    virtual void copy_block(int64_t from, int64_t to) = 0;

private:
    const Ops* owner_;
};

class ModelCache {
public:
    // with_storage false: bookkeeping only (slot and page ids are checked, nothing is stored and
    // k()/v()/conv()/ssm() return null); for backends that compute nothing (NullOps).
    explicit ModelCache(const CacheGeometry& g, bool with_storage = true);
    // Storage owned by a backend (k()/v()/conv()/ssm() return null; host code never touches it).
    ModelCache(const CacheGeometry& g, std::unique_ptr<CacheStorage> external);

    CacheStorage* external_storage() { return external_.get(); }

    const CacheGeometry& geometry() const { return g_; }
    // [num_blocks, block_size, num_kv_heads, head_dim]
    float* k(int64_t kv_layer) { return storage_ ? k_[size_t(kv_layer)].data() : nullptr; }
    float* v(int64_t kv_layer) { return storage_ ? v_[size_t(kv_layer)].data() : nullptr; }
    // [num_state_slots, conv_window, conv_dim] (token-major window, oldest first)
    float* conv(int64_t gdn_layer) { return storage_ ? conv_[size_t(gdn_layer)].data() : nullptr; }
    // [num_state_slots, num_value_heads, key_head_dim, value_head_dim]
    float* ssm(int64_t gdn_layer) { return storage_ ? ssm_[size_t(gdn_layer)].data() : nullptr; }
    // [num_blocks, block_size]: the token id at each cached position (the sampler's penalties
    // read a sequence's history here, so it never travels with the batch).
    int32_t* token_pages() { return storage_ ? tokens_.data() : nullptr; }

    // Zeroes a slot's conv window and recurrent state (a new sequence starts from zero state).
    void reset_slot(int64_t slot);
    // Copies a slot's whole GDN state (all layers) to another slot (snapshots, rollback).
    void copy_slot(int64_t from, int64_t to);
    // Copies one KV page (all layers, K and V, and its token ids) to another page (forking a
    // partial page).
    void copy_block(int64_t from, int64_t to);

private:
    CacheGeometry g_;
    bool storage_;
    std::unique_ptr<CacheStorage> external_;
    std::vector<std::vector<float>> k_, v_, conv_, ssm_;
    std::vector<int32_t> tokens_;
};

}  // namespace qs
