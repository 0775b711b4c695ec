// PageHash: the prefix cache's index key of a full KV page. XXH3-128 (libxxhash) of the previous
// page's key followed by the page's tokens, seeded: the chain makes a page's key depend on its
// whole prefix, and a per-process random seed (EngineConfig::prefix_cache_seed, fixed only when
// asked for) keeps keys unpredictable to clients, so one tenant cannot aim collisions or probe
// another's prompts through hit timing. The key only indexes the cache: a hit is taken only after
// the page's stored tokens and its predecessor compare equal (BlockPool), so even a colliding
// hash cannot serve another prompt's pages. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qs {

struct PageHash {
    uint64_t lo = 0;
    uint64_t hi = 0;
    bool operator==(const PageHash&) const = default;
};

// For unordered containers: the low word is already uniformly distributed.
struct PageHashHasher {
    size_t operator()(const PageHash& h) const { return size_t(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull)); }
};

// A page key function: (seed, previous page's key ({0, 0} before the first page), the page's
// tokens [n]) → key. Tests inject weak ones to force collisions.
using PageHashFn = PageHash (*)(uint64_t seed, const PageHash& prev, const int32_t* tokens, int64_t n);

// XXH3_128bits_withSeed over the 16 bytes of prev (lo, hi, little-endian) then the tokens as
// little-endian int32.
PageHash xxh3_page_hash(uint64_t seed, const PageHash& prev, const int32_t* tokens, int64_t n);

// A seed from std::random_device (the per-process default).
uint64_t random_page_hash_seed();

class PageHasher {
public:
    explicit PageHasher(uint64_t seed, PageHashFn fn = xxh3_page_hash) : seed_(seed), fn_(fn) {}
    PageHash operator()(const PageHash& prev, const int32_t* tokens, int64_t n) const {
        return fn_(seed_, prev, tokens, n);
    }
    uint64_t seed() const { return seed_; }

private:
    uint64_t seed_;
    PageHashFn fn_;
};

}  // namespace qs
