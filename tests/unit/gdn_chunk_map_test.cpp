// The chunked GDN kernels' block map (src/backend/cuda/gdn_chunk_map.h, host code, no GPU): it must
// list exactly the blocks of the search grid (a block per key, each searching the sequences) that
// find a chunk to work on, each once, in key order, and refuse (-1) where the search and the keys
// disagree, so that the kernels keep the search there; the state pass's list of chunked sequences;
// and the serial kernel's list of short ones.
#include "backend/cuda/gdn_chunk_map.h"

#include <vector>

#include <gtest/gtest.h>

namespace qs::cuda {
namespace {

// Sequences laid out as the engine does: rows back to back, in order.
std::vector<DeviceSeq> packed(const std::vector<int32_t>& lens) {
    std::vector<DeviceSeq> seqs;
    int32_t row = 0;
    for (int32_t n : lens) {
        seqs.push_back(DeviceSeq{row, n, 0, 0, 0, 0, 0, -1});
        row += n;
    }
    return seqs;
}

int64_t rows_of(const std::vector<DeviceSeq>& seqs) {
    return seqs.empty() ? 0 : seqs.back().row_begin + seqs.back().num_tokens;
}

// The search grid's blocks that have work, as the kernels decide it (cp_chunk_of without a map).
std::vector<GdnChunk> search_grid_chunks(const std::vector<DeviceSeq>& seqs, int32_t chunk_min) {
    std::vector<GdnChunk> out;
    const int64_t keys = gdn_chunk_keys(int64_t(seqs.size()), rows_of(seqs));
    for (int32_t x = 0; x < keys; ++x) {
        const GdnChunk k = gdn_chunk_by_search(seqs.data(), int32_t(seqs.size()), x);
        if (k.num_tokens >= chunk_min && k.chunk >= 0 && 64 * k.chunk < k.num_tokens) out.push_back(k);
    }
    return out;
}

void expect_map_is_search_grid(const std::vector<int32_t>& lens, int32_t chunk_min, int32_t chunks) {
    const std::vector<DeviceSeq> seqs = packed(lens);
    std::vector<GdnChunk> map(size_t(gdn_chunk_keys(int64_t(seqs.size()), rows_of(seqs))));
    const int32_t n = fill_gdn_chunk_map(seqs.data(), int32_t(seqs.size()), rows_of(seqs), chunk_min, map.data());
    const std::vector<GdnChunk> want = search_grid_chunks(seqs, chunk_min);
    ASSERT_EQ(n, chunks) << "chunk_min " << chunk_min;
    ASSERT_EQ(size_t(n), want.size());
    for (int32_t i = 0; i < n; ++i) {
        EXPECT_EQ(map[size_t(i)].key, want[size_t(i)].key) << "entry " << i;
        EXPECT_EQ(map[size_t(i)].chunk, want[size_t(i)].chunk) << "entry " << i;
        EXPECT_EQ(map[size_t(i)].row_begin, want[size_t(i)].row_begin) << "entry " << i;
        EXPECT_EQ(map[size_t(i)].num_tokens, want[size_t(i)].num_tokens) << "entry " << i;
    }
}

TEST(GdnChunkMap, ListsTheSearchGridsChunks) {
    // Chunk boundaries +-1, a sequence below the threshold between long ones.
    expect_map_is_search_grid({64, 2, 65, 130, 63, 1}, 64, 1 + 2 + 3);
    // Every sequence chunked (the labs' "tc-all" threshold).
    expect_map_is_search_grid({64, 2, 65, 130, 63, 1}, 1, 1 + 1 + 2 + 3 + 1 + 1);
    // One long prompt.
    expect_map_is_search_grid({16384}, 64, 256);
}

TEST(GdnChunkMap, ServingStepListsOnlyThePromptChunks) {
    // 4 prompt chunks of 1,024 rows among 200 decoding sequences of one row: 64 blocks, not 200 + ~77.
    std::vector<int32_t> lens;
    for (int i = 0; i < 200; ++i) {
        lens.push_back(1);
        if (i % 50 == 0) lens.push_back(1024);
    }
    expect_map_is_search_grid(lens, 64, 4 * 16);
}

// A list of n sequence indices written into list (filled with -7 beforehand): exactly want, and
// nothing written after it.
void expect_list(const std::vector<int32_t>& list, int32_t n, const std::vector<int32_t>& want, int32_t chunk_min) {
    ASSERT_EQ(n, int32_t(want.size())) << "chunk_min " << chunk_min;
    for (int32_t i = 0; i < n; ++i) EXPECT_EQ(list[size_t(i)], want[size_t(i)]) << "entry " << i;
    EXPECT_EQ(list[size_t(n)], -7) << "written past the count";
}

// The state pass's list (fill_gdn_chunked_seqs): a block per sequence that the per-sequence kernels
// do not return from at once (num_tokens >= chunk_min), in order; each is the sequence of exactly one
// chunk 0 of the map (key - chunk - row_begin / 64 is its index), so the two grids cover the same
// sequences.
void expect_list_is_maps_sequences(const std::vector<int32_t>& lens, int32_t chunk_min,
                                   const std::vector<int32_t>& want) {
    const std::vector<DeviceSeq> seqs = packed(lens);
    std::vector<int32_t> list(seqs.size() + 1, -7);
    const int32_t n = fill_gdn_chunked_seqs(seqs.data(), int32_t(seqs.size()), chunk_min, list.data());
    expect_list(list, n, want, chunk_min);
    if (::testing::Test::HasFatalFailure()) return;
    std::vector<GdnChunk> map(size_t(gdn_chunk_keys(int64_t(seqs.size()), rows_of(seqs))));
    const int32_t chunks = fill_gdn_chunk_map(seqs.data(), int32_t(seqs.size()), rows_of(seqs), chunk_min, map.data());
    std::vector<int32_t> firsts;
    for (int32_t i = 0; i < chunks; ++i)
        if (map[size_t(i)].chunk == 0) firsts.push_back(map[size_t(i)].key - map[size_t(i)].row_begin / 64);
    EXPECT_EQ(firsts, std::vector<int32_t>(list.begin(), list.begin() + n));
}

TEST(GdnChunkMap, StatePassListsTheChunkedSequences) {
    expect_list_is_maps_sequences({64, 2, 65, 130, 63, 1}, 64, {0, 2, 3});
    expect_list_is_maps_sequences({64, 2, 65, 130, 63, 1}, 1, {0, 1, 2, 3, 4, 5});
    expect_list_is_maps_sequences({16384}, 64, {0});
    expect_list_is_maps_sequences({1, 1, 63}, 64, {});
    // A serving step: 4 prompts of 1,024 rows among 200 one-row decodes: 4 sequences, not 204.
    std::vector<int32_t> lens, want;
    for (int i = 0; i < 200; ++i) {
        lens.push_back(1);
        if (i % 50 == 0) {
            want.push_back(int32_t(lens.size()));
            lens.push_back(1024);
        }
    }
    expect_list_is_maps_sequences(lens, 64, want);
    // No threshold: no list (the kernels then take a block per sequence).
    const std::vector<DeviceSeq> seqs = packed({130, 70});
    int32_t list[2] = {-7, -7};
    EXPECT_EQ(fill_gdn_chunked_seqs(seqs.data(), 2, 0, list), 0);
}

// The serial kernel's list beside the warp slices (fill_gdn_short_seqs): the sequences of 2 ..
// chunk_min - 1 rows, in order, so that with the one-row ones (the slices kernel's) and the chunked
// list every sequence is served by exactly one kernel.
void expect_short_list(const std::vector<int32_t>& lens, int32_t chunk_min, const std::vector<int32_t>& want) {
    const std::vector<DeviceSeq> seqs = packed(lens);
    std::vector<int32_t> list(seqs.size() + 1, -7), chunked(seqs.size() + 1, -7);
    const int32_t n = fill_gdn_short_seqs(seqs.data(), int32_t(seqs.size()), chunk_min, list.data());
    expect_list(list, n, want, chunk_min);
    if (::testing::Test::HasFatalFailure()) return;
    const int32_t nc = fill_gdn_chunked_seqs(seqs.data(), int32_t(seqs.size()), chunk_min, chunked.data());
    std::vector<int> served(seqs.size(), 0);
    for (int32_t i = 0; i < n; ++i) ++served[size_t(list[size_t(i)])];
    for (int32_t i = 0; i < nc; ++i) ++served[size_t(chunked[size_t(i)])];
    for (size_t s = 0; s < seqs.size(); ++s)
        if (lens[s] == 1) ++served[s];
    for (size_t s = 0; s < seqs.size(); ++s) EXPECT_EQ(served[s], 1) << "sequence " << s << " of " << lens[s] << " rows";
}

TEST(GdnChunkMap, SerialKernelListsTheShortSequences) {
    expect_short_list({64, 2, 65, 130, 63, 1, 5}, 64, {1, 4, 6});
    expect_short_list({64, 2, 65, 130, 63, 1, 5}, 3, {1});
    expect_short_list({16384}, 64, {});
    expect_short_list({1, 1, 1}, 64, {});
    // A serving step: 4 prompts of 1,024 rows and a 17-row tail among 200 one-row decodes.
    std::vector<int32_t> lens, want;
    for (int i = 0; i < 200; ++i) {
        lens.push_back(1);
        if (i % 50 == 0) lens.push_back(1024);
        if (i == 120) {
            want.push_back(int32_t(lens.size()));
            lens.push_back(17);
        }
    }
    expect_short_list(lens, 64, want);
    // No threshold: no list (fill returns 0; the launcher then keeps a block per sequence).
    const std::vector<DeviceSeq> seqs = packed({5, 7});
    int32_t list[2] = {-7, -7};
    EXPECT_EQ(fill_gdn_short_seqs(seqs.data(), 2, 0, list), 0);
    EXPECT_EQ(list[0], -7);
}

TEST(GdnChunkMap, RefusesWhatTheSearchWouldNotFind) {
    std::vector<DeviceSeq> seqs = packed({130, 70});
    // Rows out of order: the second sequence's rows before the first's.
    std::swap(seqs[0].row_begin, seqs[1].row_begin);
    std::vector<GdnChunk> map(size_t(gdn_chunk_keys(2, 200)));
    EXPECT_EQ(fill_gdn_chunk_map(seqs.data(), 2, 200, 64, map.data()), -1);
    // No threshold: nothing is chunked by a map.
    const std::vector<DeviceSeq> ok = packed({130, 70});
    EXPECT_EQ(fill_gdn_chunk_map(ok.data(), 2, 200, 0, map.data()), -1);
    EXPECT_EQ(fill_gdn_chunk_map(ok.data(), 2, 200, 64, map.data()), 3 + 2);
}

}  // namespace
}  // namespace qs::cuda
