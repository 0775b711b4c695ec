// Prefix-cache lookup cost per page: the chained page key (XXH3-128, seeded; and, for reference,
// the unseeded 64-bit mix it replaced), the verified lookup (hash map + the page's stored tokens
// and predecessor compared), a whole prompt's walk (hash + verified find per page, as
// CacheManager::apply_prefix_hit does) and the snapshot's prefix compare. A benchmark, never a test; single-threaded.
// Usage: build/bench/prefix_cache_bench [--pages 4096] [--block-size 16] [--reps 20]
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "core/args.h"
#include "core/timer.h"
#include "engine/block_pool.h"

using namespace qs;

namespace {

// The page hash before issue 17 (unseeded 64-bit, no verification), kept here as the baseline.
uint64_t old_chain_hash(uint64_t prev, const int32_t* tokens, int64_t n) {
    uint64_t h = prev ^ 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; ++i) {
        h ^= uint64_t(uint32_t(tokens[i])) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return h;
}

template <typename Fn>
double ns_per_page(int64_t pages, int64_t reps, Fn fn) {
    double best = 1e300;
    for (int64_t r = 0; r < reps; ++r) {
        Timer t;
        fn();
        best = std::min(best, t.elapsed_s() * 1e9 / double(pages));
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    auto args = Args::parse(argc, argv, {}, {"pages", "block-size", "reps"});
    if (!args.is_ok()) {
        std::fprintf(stderr, "%s\n", args.status().message().c_str());
        return 2;
    }
    auto pages_arg = args->get_int("pages", 4096), bs_arg = args->get_int("block-size", 16),
         reps_arg = args->get_int("reps", 20);
    if (!pages_arg.is_ok() || !bs_arg.is_ok() || !reps_arg.is_ok() || *pages_arg < 1 || *bs_arg < 1 || *reps_arg < 1) {
        std::fprintf(stderr, "prefix_cache_bench: --pages, --block-size and --reps take positive integers\n");
        return 2;
    }
    const int64_t pages = *pages_arg, bs = *bs_arg, reps = *reps_arg;
    std::mt19937 rng(1);
    std::vector<int32_t> tokens(size_t(pages * bs));
    for (auto& t : tokens) t = int32_t(rng() % 248320);

    // One long cached prompt: every page registered in a chain.
    BlockPool pool(pages, bs);
    const PageHasher hasher(random_page_hash_seed());
    std::vector<PageHash> keys;
    uint64_t parent = 0;
    PageHash h;
    for (int64_t i = 0; i < pages; ++i) {
        const int32_t b = *pool.allocate();
        h = hasher(h, tokens.data() + i * bs, bs);
        keys.push_back(h);
        parent = pool.register_page(b, h, parent, tokens.data() + i * bs);
    }

    // The request's tokens live in their own buffer (Sequence::tokens), not in the pool's copy.
    const std::vector<int32_t> request(tokens);
    volatile uint64_t sink = 0;
    const double t_old = ns_per_page(pages, reps, [&] {
        uint64_t x = 0;
        for (int64_t i = 0; i < pages; ++i) x = old_chain_hash(x, tokens.data() + i * bs, bs);
        sink = sink + x;
    });
    const double t_xxh = ns_per_page(pages, reps, [&] {
        PageHash x;
        for (int64_t i = 0; i < pages; ++i) x = hasher(x, tokens.data() + i * bs, bs);
        sink = sink + x.lo;
    });
    const double t_find = ns_per_page(pages, reps, [&] {
        uint64_t p = 0;
        for (int64_t i = 0; i < pages; ++i) p = pool.find(keys[size_t(i)], p, request.data() + i * bs)->serial;
        sink = sink + p;
    });
    const double t_cmp = ns_per_page(pages, reps, [&] {
        int64_t equal = 0;
        for (int64_t i = 0; i < pages; ++i)
            equal += std::equal(tokens.begin() + i * bs, tokens.begin() + (i + 1) * bs, request.begin() + i * bs);
        sink = sink + uint64_t(equal);
    });
    // A GDN snapshot hit compares the whole prefix once (SnapshotCache keeps it).
    const double t_snap = ns_per_page(pages, reps, [&] {
        sink = sink + uint64_t(std::equal(tokens.begin(), tokens.end(), request.begin()));
    });
    const double t_walk = ns_per_page(pages, reps, [&] {
        PageHash x;
        uint64_t p = 0;
        for (int64_t i = 0; i < pages; ++i) {
            x = hasher(x, request.data() + i * bs, bs);
            auto c = pool.find(x, p, request.data() + i * bs);
            if (!c) break;
            p = c->serial;
        }
        sink = sink + p;
    });
    std::printf("prefix cache, %lld pages of %lld tokens (best of %lld), ns per page:\n", (long long)pages,
                (long long)bs, (long long)reps);
    std::printf("| step | ns/page |\n|---|---|\n");
    std::printf("| old 64-bit chain hash (unseeded, baseline) | %.1f |\n", t_old);
    std::printf("| XXH3-128 chain hash (seeded) | %.1f |\n", t_xxh);
    std::printf("| verified find (map + tokens + predecessor) | %.1f |\n", t_find);
    std::printf("|   of which the token compare alone | %.1f |\n", t_cmp);
    std::printf("| whole walk: hash + verified find | %.1f |\n", t_walk);
    std::printf("| snapshot check: the whole prefix compared once, per page | %.1f |\n", t_snap);
    std::printf("| a %lld-token prompt's walk + snapshot check | %.1f us |\n", (long long)(pages * bs),
                (t_walk + t_snap) * double(pages) / 1e3);
    return sink == 42 ? 1 : 0;
}
