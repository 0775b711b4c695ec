// The weight handles a WeightSet writes (backend/weight_handle.h), checked on the CPU: a backend
// that files a copy of each view at its handle (as CudaOps does) must find, from the view an op is
// handed, the copy of exactly that view — for every weight a forward and an MTP step pass to the
// ops. HandleCheckingOps records which view each handle names when the weights are prepared and
// checks every op's views against that record while the CPU computes as usual.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <utility>

#include "backend/cpu/cpu_ops.h"
#include "model/single_sequence.h"
#include "test_util.h"

using namespace qs;

namespace {

class HandleCheckingOps final : public CpuOps {
public:
    void prepare_weights(const WeightSet& w) override {
        for (const WeightSet::Entry& entry : w.entries()) {
            if (auto* t = std::get_if<const WeightBuffer*>(&entry)) file(tables_, (*t)->handle, *t, w.num_tables());
            if (auto* v = std::get_if<const ParamVector*>(&entry)) file(vectors_, (*v)->handle, *v, w.num_vectors());
            if (auto* l = std::get_if<const LinearWeight*>(&entry)) file(linears_, (*l)->handle, *l, w.num_linears());
            if (auto* g = std::get_if<const GdnWeights*>(&entry)) {
                const GdnWeights& gdn = **g;
                for (const LinearWeight* l : {&gdn.in_proj_qkv, &gdn.in_proj_z, &gdn.in_proj_b, &gdn.in_proj_a,
                                              &gdn.out_proj})
                    file(linears_, l->handle, l, w.num_linears());
                for (const ParamVector* v : {&gdn.conv1d, &gdn.A_log, &gdn.dt_bias, &gdn.norm})
                    file(vectors_, v->handle, v, w.num_vectors());
            }
            if (auto* m = std::get_if<const MoeWeights*>(&entry)) {
                file(linears_, (*m)->router.handle, &(*m)->router, w.num_linears());
                file(linears_, (*m)->shared_expert_gate.handle, &(*m)->shared_expert_gate, w.num_linears());
                file(experts_, (*m)->experts_handle, *m, w.num_expert_tables());
            }
        }
        EXPECT_EQ(int32_t(tables_.size()), w.num_tables());
        EXPECT_EQ(int32_t(vectors_.size()), w.num_vectors());
        EXPECT_EQ(int32_t(linears_.size()), w.num_linears());
        EXPECT_EQ(int32_t(experts_.size()), w.num_expert_tables());
    }

    void embed(const WeightBuffer& table, const int32_t* ids, int64_t T, float* x) override {
        expect_filed(tables_, table.handle, &table, "embed");
        CpuOps::embed(table, ids, T, x);
    }
    void rms_norm_zc(const float* x, const ParamVector& w, int64_t T, int64_t n, double eps, float* y) override {
        expect_filed(vectors_, w.handle, &w, "rms_norm_zc");
        CpuOps::rms_norm_zc(x, w, T, n, eps, y);
    }
    void linear(const float* x, int64_t T, const LinearWeight& w, float* y) override {
        expect_filed(linears_, w.handle, &w, "linear");
        CpuOps::linear(x, T, w, y);
    }
    void gated_attention(const float* qg, float* k, const float* v, const ParamVector& q_norm,
                         const ParamVector& k_norm, const AttentionDims& d, const ForwardBatch& batch,
                         const int32_t* positions, ModelCache& cache, int64_t kv_layer, float* out) override {
        expect_filed(vectors_, q_norm.handle, &q_norm, "q_norm");
        expect_filed(vectors_, k_norm.handle, &k_norm, "k_norm");
        CpuOps::gated_attention(qg, k, v, q_norm, k_norm, d, batch, positions, cache, kv_layer, out);
    }
    void gated_delta_net(const float* qkv, const float* z, const float* b, const float* a, const GdnWeights& w,
                         const GdnDims& d, const ForwardBatch& batch, ModelCache& cache, int64_t gdn_layer,
                         float* out) override {
        for (const ParamVector* v : {&w.conv1d, &w.A_log, &w.dt_bias, &w.norm})
            expect_filed(vectors_, v->handle, v, "gated_delta_net");
        CpuOps::gated_delta_net(qkv, z, b, a, w, d, batch, cache, gdn_layer, out);
    }
    void moe(const float* x, int64_t T, const MoeWeights& w, int64_t top_k, bool norm_topk_prob, float* y) override {
        expect_filed(linears_, w.router.handle, &w.router, "moe router");
        expect_filed(linears_, w.shared_expert_gate.handle, &w.shared_expert_gate, "moe shared_expert_gate");
        expect_filed(experts_, w.experts_handle, &w, "moe experts");
        CpuOps::moe(x, T, w, top_k, norm_topk_prob, y);
    }

    int64_t checks() const { return checks_; }

private:
    // Files `view` at its handle: each handle names one view, and lies in [0, count).
    template <class T>
    static void file(std::map<int32_t, const T*>& table, WeightHandle h, const T* view, int32_t count) {
        ASSERT_TRUE(h.valid() && h.index < count) << "handle " << h.index << " of " << count;
        auto [it, inserted] = table.emplace(h.index, view);
        EXPECT_TRUE(inserted || it->second == view) << "handle " << h.index << " names two views";
    }
    template <class T>
    void expect_filed(const std::map<int32_t, const T*>& table, WeightHandle h, const T* view, const char* op) {
        ++checks_;
        auto it = table.find(h.index);
        ASSERT_TRUE(it != table.end()) << op << ": a view without a copy (handle " << h.index << ")";
        EXPECT_EQ(it->second, view) << op << ": handle " << h.index << " is another view's copy";
    }

    std::map<int32_t, const WeightBuffer*> tables_;
    std::map<int32_t, const ParamVector*> vectors_;
    std::map<int32_t, const LinearWeight*> linears_;
    std::map<int32_t, const MoeWeights*> experts_;
    int64_t checks_ = 0;
};

std::vector<int32_t> ids(int n, int64_t vocab) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) v[size_t(i)] = int32_t((i * 7919 + 3) % vocab);
    return v;
}

}  // namespace

TEST(WeightHandles, EveryViewAForwardAndMtpStepPassFindsItsOwnCopy) {
    ModelWeights w = make_dummy_weights(tiny_model_config(), 5, /*with_mtp=*/true);
    ASSERT_TRUE(w.mtp.present);
    HandleCheckingOps ops;
    ops.prepare_weights(weight_set(w));
    Qwen36Model model(w, ops);
    SingleSequence seq(model, 64);
    seq.feed(ids(20, w.config.vocab_size), false);
    seq.feed(ids(1, w.config.vocab_size), false);
    const int64_t forward_checks = ops.checks();
    EXPECT_GT(forward_checks, 0);
    seq.mtp_over_history(0);
    EXPECT_GT(ops.checks(), forward_checks) << "the MTP step passed no weights";
}

// The numbers depend only on the set's order: the same weights numbered twice (two backends
// prepared on them) get the same handles, and each kind is numbered 0..count-1 without gaps.
TEST(WeightHandles, SameWeightsNumberedTheSameTwice) {
    ModelWeights w = make_dummy_weights(tiny_model_config(), 6, /*with_mtp=*/true);
    const WeightSet first = weight_set(w);
    std::vector<int32_t> before;
    for (const DecoderLayerWeights& l : w.layers)
        before.insert(before.end(), {l.input_layernorm.handle.index, l.moe.router.handle.index,
                                     l.moe.experts_handle.index, l.gdn.in_proj_a.handle.index,
                                     l.attn.q_proj.handle.index, l.attn.k_norm.handle.index});
    const WeightSet second = weight_set(w);
    std::vector<int32_t> after;
    for (const DecoderLayerWeights& l : w.layers)
        after.insert(after.end(), {l.input_layernorm.handle.index, l.moe.router.handle.index,
                                   l.moe.experts_handle.index, l.gdn.in_proj_a.handle.index,
                                   l.attn.q_proj.handle.index, l.attn.k_norm.handle.index});
    EXPECT_EQ(before, after);
    EXPECT_EQ(first.num_linears(), second.num_linears());
    EXPECT_EQ(first.num_vectors(), second.num_vectors());
    // A layer of each type, with MTP: one table, and one expert table per MoE block.
    EXPECT_EQ(first.num_tables(), 1);
    EXPECT_EQ(first.num_expert_tables(), int32_t(w.layers.size()) + 1);
    std::set<int32_t> linears;
    for (const DecoderLayerWeights& l : w.layers)
        for (const LinearWeight* p : {&l.moe.router, &l.moe.shared_expert_gate})
            EXPECT_TRUE(linears.insert(p->handle.index).second) << "two linears share handle " << p->handle.index;
    EXPECT_TRUE(linears.insert(w.lm_head.handle.index).second);
    EXPECT_TRUE(linears.insert(w.mtp.fc.handle.index).second);
    for (int32_t h : linears) EXPECT_TRUE(h >= 0 && h < first.num_linears()) << h;
    // Expert linears are reached through their block's table, never by a handle of their own.
    EXPECT_FALSE(w.layers[0].moe.experts[0].gate_proj.handle.valid());
}
