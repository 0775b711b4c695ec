// The deferred GDN state of MTP verification on the CPU specification (SeqSpan::defer_state,
// Ops::gdn_commit): a verify forward over [last token, d_1..d_k] per sequence writes each slot's
// state and conv window after the first row only, and Qwen36Model::commit_deferred_state of the
// accepted drafts (rows 1..a; none for a sequence that accepted none) then leaves every GDN slot
// as an ordinary forward of rows 0..a leaves it. The reference is that ordinary forward on a
// second cache; the verify's logits of rows 0..a equal the ordinary forward's too. A commit that
// replayed row 0 again (the contract before), skipped a row or read another span's stash rows
// changes the state and fails. Spare-slot mode (SeqSpan::spare_slot) also writes the state
// after every row into a second slot.
#include <gtest/gtest.h>

#include <random>

#include "backend/cpu/cpu_ops.h"
#include "model/qwen36.h"
#include "test_util.h"

using namespace qs;

namespace {

ModelConfig gdn_heavy_config() {
    ModelConfig c = tiny_model_config();
    c.num_hidden_layers = 4;
    c.layer_types = {LayerType::kLinearAttention, LayerType::kLinearAttention, LayerType::kFullAttention,
                     LayerType::kLinearAttention};
    return c;
}

struct Seqs {
    std::vector<std::vector<int32_t>> tables;
    std::vector<int32_t> length;
    SeqSpan span(size_t s, int32_t row_begin, int32_t n, int32_t start) const {
        SeqSpan sp;
        sp.row_begin = row_begin;
        sp.num_tokens = n;
        sp.start_pos = start;
        sp.state_slot = int32_t(s);
        sp.block_table = tables[s];
        return sp;
    }
};

// Largest |a − b| over every GDN layer's conv windows and recurrent states.
float gdn_state_diff(ModelCache& a, ModelCache& b) {
    const CacheGeometry& g = a.geometry();
    const size_t nc = size_t(g.num_state_slots * g.conv_window * g.conv_dim);
    const size_t ns = size_t(g.num_state_slots * g.num_value_heads * g.key_head_dim * g.value_head_dim);
    float worst = 0.0f;
    for (int64_t l = 0; l < g.num_gdn_layers; ++l) {
        worst = std::max(worst, test::max_abs_diff(std::vector<float>(a.conv(l), a.conv(l) + nc),
                                                   std::vector<float>(b.conv(l), b.conv(l) + nc)));
        worst = std::max(worst, test::max_abs_diff(std::vector<float>(a.ssm(l), a.ssm(l) + ns),
                                                   std::vector<float>(b.ssm(l), b.ssm(l) + ns)));
    }
    return worst;
}

}  // namespace

TEST(DeferredGdnCommit, VerifyThenCommitEqualsOrdinaryForward) {
    const ModelConfig c = gdn_heavy_config();
    ASSERT_TRUE(c.validate().is_ok()) << c.validate().message();
    const ModelWeights w = make_dummy_weights(c, 21);
    CpuOps ops;
    Qwen36Model model(w, ops);
    const int V = int(c.vocab_size);
    constexpr int S = 4, kPages = 6, kBlock = 16;
    const CacheGeometry g = CacheGeometry::for_model(c, S * kPages, kBlock, S, false, KvCacheDtype::kF32);
    ModelCache verified(g), reference(g);
    Seqs seqs;
    seqs.tables.resize(S);
    for (int p = 0; p < kPages; ++p)
        for (int s = 0; s < S; ++s) seqs.tables[size_t(s)].push_back(int32_t(p * S + s));
    seqs.length.assign(S, 0);
    std::mt19937 rng(5);

    // Prompts of different lengths into both caches (non-zero states to start from).
    {
        ForwardBatch b;
        for (int s = 0; s < S; ++s) {
            const int32_t n = 3 + 4 * s;
            b.seqs.push_back(seqs.span(size_t(s), int32_t(b.token_ids.size()), n, 0));
            for (int32_t i = 0; i < n; ++i) b.token_ids.push_back(int32_t(rng() % uint32_t(V)));
            seqs.length[size_t(s)] = n;
        }
        model.forward(b, verified);
        model.forward(b, reference);
    }
    ASSERT_EQ(gdn_state_diff(verified, reference), 0.0f);

    for (int step = 0; step < 6; ++step) {
        const int32_t q = 4 - step % 3;  // 1 + k rows: 4, 3, 2, ...
        ForwardBatch verify, ordinary, commit;
        std::vector<int32_t> deferred_rows;
        const bool in_place = step % 2 == 0;  // the commit at the verify rows, or packed
        for (int s = 0; s < S; ++s) {
            // Accepted drafts: every count from none to all over the steps and sequences.
            const auto accepted = int32_t((step + s) % q);
            const int32_t start = seqs.length[size_t(s)];
            SeqSpan v = seqs.span(size_t(s), s * q, q, start);
            v.defer_state = true;
            verify.seqs.push_back(v);
            ordinary.seqs.push_back(seqs.span(size_t(s), int32_t(ordinary.token_ids.size()), accepted + 1, start));
            for (int32_t r = 0; r < q; ++r) {
                const auto id = int32_t(rng() % uint32_t(V));
                verify.token_ids.push_back(id);
                verify.logits_rows.push_back(s * q + r);
                if (r <= accepted) {
                    ordinary.logits_rows.push_back(int32_t(ordinary.token_ids.size()));
                    ordinary.token_ids.push_back(id);
                }
            }
            if (accepted > 0) {
                const int32_t row = in_place ? s * q + 1 : int32_t(commit.token_ids.size());
                commit.seqs.push_back(seqs.span(size_t(s), row, accepted, start + 1));
                commit.token_ids.resize(size_t(row + accepted), 0);
                deferred_rows.push_back(s * q);
            }
            seqs.length[size_t(s)] += accepted + 1;
        }
        const std::string what = "step " + std::to_string(step) + " (q=" + std::to_string(q) + ")";
        // The ordinary forward first: the backend keeps the stash of its last GDN forward only.
        const std::vector<float> ol = model.forward(ordinary, reference).logits;
        const std::vector<float> vl = model.forward(verify, verified).logits;
        // The verify's kept rows give the ordinary forward's logits.
        size_t o = 0;
        for (int s = 0; s < S; ++s)
            for (int32_t r = 0; r <= int32_t((step + s) % q); ++r, ++o) {
                const auto vr = vl.begin() + (int64_t(s) * q + r) * V;
                const auto orow = ol.begin() + int64_t(o) * V;
                EXPECT_LT(test::max_abs_diff(std::vector<float>(vr, vr + V), std::vector<float>(orow, orow + V)), 1e-5f)
                    << what << " sequence " << s << " row " << r;
            }
        model.commit_deferred_state(commit, deferred_rows, verified);
        EXPECT_LT(gdn_state_diff(verified, reference), 1e-5f) << what;
    }

    // A decode step reads every committed window and state.
    ForwardBatch b;
    for (int s = 0; s < S; ++s) {
        b.seqs.push_back(seqs.span(size_t(s), s, 1, seqs.length[size_t(s)]));
        b.token_ids.push_back(int32_t(rng() % uint32_t(V)));
        b.logits_rows.push_back(s);
    }
    EXPECT_LT(test::max_abs_diff(model.forward(b, verified).logits, model.forward(b, reference).logits), 1e-5f);
}

// The verify forward alone already holds the first row: with no draft accepted anywhere there
// is nothing to commit (an empty commit), and the state equals an ordinary one-row forward.
TEST(DeferredGdnCommit, NothingAcceptedNeedsNoCommit) {
    const ModelConfig c = gdn_heavy_config();
    const ModelWeights w = make_dummy_weights(c, 22);
    CpuOps ops;
    Qwen36Model model(w, ops);
    const int V = int(c.vocab_size);
    const CacheGeometry g = CacheGeometry::for_model(c, 4, 16, 1, false, KvCacheDtype::kF32);
    ModelCache verified(g), reference(g);
    Seqs seqs;
    seqs.tables = {{0, 1, 2, 3}};
    std::mt19937 rng(6);
    std::vector<int32_t> prompt(9);
    for (auto& id : prompt) id = int32_t(rng() % uint32_t(V));
    ForwardBatch p;
    p.seqs.push_back(seqs.span(0, 0, 9, 0));
    p.token_ids = prompt;
    model.forward(p, verified);
    model.forward(p, reference);
    ForwardBatch verify, one;
    SeqSpan v = seqs.span(0, 0, 3, 9);
    v.defer_state = true;
    verify.seqs.push_back(v);
    verify.token_ids = {int32_t(rng() % uint32_t(V)), 1, 2};
    one.seqs.push_back(seqs.span(0, 0, 1, 9));
    one.token_ids = {verify.token_ids[0]};
    model.forward(one, reference);
    model.forward(verify, verified);
    model.commit_deferred_state(ForwardBatch{}, {}, verified);
    EXPECT_LT(gdn_state_diff(verified, reference), 1e-5f);
}

namespace {

// Largest |a − b| between slot sa of cache a and slot sb of cache b, over every GDN layer's conv
// window and recurrent state.
float slot_diff(ModelCache& a, int32_t sa, ModelCache& b, int32_t sb) {
    const CacheGeometry& g = a.geometry();
    const int64_t nc = g.conv_window * g.conv_dim, ns = g.num_value_heads * g.key_head_dim * g.value_head_dim;
    float worst = 0.0f;
    for (int64_t l = 0; l < g.num_gdn_layers; ++l) {
        const float* ca = a.conv(l) + sa * nc;
        const float* cb = b.conv(l) + sb * nc;
        const float* xa = a.ssm(l) + sa * ns;
        const float* xb = b.ssm(l) + sb * ns;
        worst = std::max(worst, test::max_abs_diff(std::vector<float>(ca, ca + nc), std::vector<float>(cb, cb + nc)));
        worst = std::max(worst, test::max_abs_diff(std::vector<float>(xa, xa + ns), std::vector<float>(xb, xb + ns)));
    }
    return worst;
}

}  // namespace

// Spare-slot mode (SeqSpan::spare_slot): the verify forward leaves each sequence's slot after its
// first row, as before, and writes the state after its LAST row (every draft accepted) into the
// spare slot; the spare slot's state equals an ordinary forward over all the rows, the slot's an
// ordinary forward over the first row. A spare written after the wrong row (the first, or one
// short of the last), or not at all, fails; so does a slot that the spare-slot write disturbed.
TEST(DeferredGdnCommit, SpareSlotHoldsTheStateAfterEveryRow) {
    const ModelConfig c = gdn_heavy_config();
    const ModelWeights w = make_dummy_weights(c, 23);
    CpuOps ops;
    Qwen36Model model(w, ops);
    const int V = int(c.vocab_size);
    constexpr int S = 3, kPages = 4, kBlock = 16;
    // Slots 0..S-1 the sequences', S..2S-1 their spares.
    const CacheGeometry g = CacheGeometry::for_model(c, S * kPages, kBlock, 2 * S, false, KvCacheDtype::kF32);
    ModelCache verified(g), first_row(g), all_rows(g);
    Seqs seqs;
    seqs.tables.resize(S);
    for (int p = 0; p < kPages; ++p)
        for (int s = 0; s < S; ++s) seqs.tables[size_t(s)].push_back(int32_t(p * S + s));
    std::mt19937 rng(8);
    ForwardBatch prompt;
    for (int s = 0; s < S; ++s) {
        const int32_t n = 5 + 3 * s;
        prompt.seqs.push_back(seqs.span(size_t(s), int32_t(prompt.token_ids.size()), n, 0));
        for (int32_t i = 0; i < n; ++i) prompt.token_ids.push_back(int32_t(rng() % uint32_t(V)));
        seqs.length.push_back(n);
    }
    for (ModelCache* m : {&verified, &first_row, &all_rows}) model.forward(prompt, *m);

    ForwardBatch verify, one, all;
    const int32_t q[S] = {2, 3, 4};  // k = 1, 2, 3
    for (int s = 0; s < S; ++s) {
        const int32_t start = seqs.length[size_t(s)];
        SeqSpan v = seqs.span(size_t(s), int32_t(verify.token_ids.size()), q[s], start);
        v.defer_state = true;
        v.spare_slot = S + s;
        verify.seqs.push_back(v);
        one.seqs.push_back(seqs.span(size_t(s), int32_t(one.token_ids.size()), 1, start));
        all.seqs.push_back(seqs.span(size_t(s), int32_t(all.token_ids.size()), q[s], start));
        for (int32_t r = 0; r < q[s]; ++r) {
            const auto id = int32_t(rng() % uint32_t(V));
            verify.token_ids.push_back(id);
            all.token_ids.push_back(id);
            if (r == 0) one.token_ids.push_back(id);
        }
    }
    model.forward(one, first_row);
    model.forward(all, all_rows);
    model.forward(verify, verified);
    for (int s = 0; s < S; ++s) {
        EXPECT_LT(slot_diff(verified, s, first_row, s), 1e-5f) << "sequence " << s << ": its slot after row 0";
        EXPECT_LT(slot_diff(verified, S + s, all_rows, s), 1e-5f) << "sequence " << s << ": the spare after every row";
        // The rows differ, so the two states must too (the check above can fail).
        EXPECT_GT(slot_diff(verified, S + s, first_row, s), 1e-4f) << "sequence " << s;
    }
}
