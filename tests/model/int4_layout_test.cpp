// The device INT4 layout (backend/int4_layout.h) round-trips: for symmetric 4-bit weights made by
// compressed-tensors (tests/data/quant/ct_int4, pack-quantized) and by auto-round's auto_gptq
// packer (autoround_int4, the transposed packing with stored zero points), every row dequantised
// from the device layout equals LinearWeight::row_to_f32 (itself equal bit for bit to the
// libraries' dequantisation, quant_formats_test.cpp) bit for bit; compressed-tensors' words are
// taken with every nibble u turned into the two's complement of u − 8 (int4b_t); weights the layout cannot hold (asymmetric, 8-bit) are refused with a reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/int4_layout.h"
#include "model/weights.h"
#include "test_util.h"

using namespace qs;

namespace {

std::string fixture(const std::string& name) { return test::source_path("tests/data/quant/" + name); }

// Every linear of the model with its name.
std::vector<std::pair<std::string, const LinearWeight*>> linears(const ModelWeights& w) {
    std::vector<std::pair<std::string, const LinearWeight*>> out;
    for (size_t i = 0; i < w.layers.size(); ++i) {
        const DecoderLayerWeights& l = w.layers[i];
        const std::string p = "layer " + std::to_string(i) + " ";
        if (l.type == LayerType::kFullAttention) {
            for (auto [n, x] : {std::pair{"q_proj", &l.attn.q_proj}, {"k_proj", &l.attn.k_proj},
                                {"v_proj", &l.attn.v_proj}, {"o_proj", &l.attn.o_proj}})
                out.push_back({p + n, x});
        } else {
            for (auto [n, x] : {std::pair{"in_proj_qkv", &l.gdn.in_proj_qkv}, {"in_proj_z", &l.gdn.in_proj_z},
                                {"out_proj", &l.gdn.out_proj}})
                out.push_back({p + n, x});
        }
        for (size_t e = 0; e < l.moe.experts.size(); ++e) {
            const ExpertWeights& x = l.moe.experts[e];
            const std::string q = p + "expert " + std::to_string(e) + " ";
            out.push_back({q + "gate", &x.gate_proj});
            out.push_back({q + "up", &x.up_proj});
            out.push_back({q + "down", &x.down_proj});
        }
        out.push_back({p + "shared gate", &l.moe.shared_expert.gate_proj});
    }
    return out;
}

// Checks every linear the layout takes; returns how many it took.
int check_round_trip(const ModelWeights& w) {
    int taken = 0;
    for (const auto& [name, l] : linears(w)) {
        if (!int4_layout_unsupported(*l).empty()) continue;
        ++taken;
        const Int4DeviceLayout d = int4_device_layout(*l);
        EXPECT_EQ(int64_t(d.codes.size()), l->out_features * l->in_features / 8) << name;
        std::vector<float> a(size_t(l->in_features)), b(a.size());
        int bad_rows = 0;
        for (int64_t r = 0; r < l->out_features; ++r) {
            l->row_to_f32(r, a.data());
            int4_layout_row(d, r, b.data());
            bad_rows += std::memcmp(a.data(), b.data(), a.size() * 4) != 0;
        }
        EXPECT_EQ(bad_rows, 0) << name;
        if (l->int_params.packing == IntPacking::kCompressed) {
            // Each nibble u (= q + 8) becomes q's two's complement nibble: (u − 8) mod 16.
            int bad_words = 0;
            for (size_t i = 0; i < d.codes.size(); ++i) {
                uint32_t in_word, want = 0;
                std::memcpy(&in_word, static_cast<const char*>(l->weight.data) + 4 * i, 4);
                for (int n = 0; n < 8; ++n) want |= ((((in_word >> (4 * n)) & 15u) + 16u - 8u) % 16u) << (4 * n);
                bad_words += d.codes[i] != want;
            }
            EXPECT_EQ(bad_words, 0) << name;
        }
    }
    return taken;
}

TEST(Int4Layout, CompressedTensorsRoundTrip) {
    auto w = load_model_dir(fixture("ct_int4"));
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    // Experts and shared experts are symmetric group 16 (taken); attention/GDN asymmetric (refused).
    EXPECT_GT(check_round_trip(*w), 0);
    const DecoderLayerWeights& l0 = w->layers[0];
    const LinearWeight& asym = l0.type == LayerType::kFullAttention ? l0.attn.q_proj : l0.gdn.in_proj_qkv;
    EXPECT_EQ(int4_layout_unsupported(asym), "asymmetric (zero points)");
    EXPECT_EQ(int4_layout_unsupported(l0.moe.experts[0].gate_proj), "");
}

TEST(Int4Layout, AutoGptqPackingWithFp16ScalesIsRefused) {
    // auto-round's fixture stores fp16 group scales that bf16 cannot hold exactly: the device
    // layout (bf16 scales) refuses those weights, which keep the dequantised BF16 path.
    auto w = load_model_dir(fixture("autoround_int4"));
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    const LinearWeight& g = w->layers[0].moe.experts[0].gate_proj;
    ASSERT_EQ(g.int_params.packing, IntPacking::kGptq);
    EXPECT_NE(int4_layout_unsupported(g).find("is not a bf16 value"), std::string::npos) << int4_layout_unsupported(g);
    // The 8-bit attention linears of layer 1 are refused for their width.
    EXPECT_EQ(int4_layout_unsupported(w->layers[1].attn.q_proj), "8 bits");
}

// A hand-made weight: input i of row o has code (o + i) % 16 and the scale of group g is 2^-g, so
// the layout's nibble order and scale index are pinned down independently of any packer.
TEST(Int4Layout, HandMadeValues) {
    const int64_t out = 3, in = 64, group = 16;
    std::vector<uint32_t> codes(size_t(out * in / 8), 0);
    std::vector<uint16_t> scales(size_t(out * in / group));
    for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) codes[size_t(o * in / 8 + i / 8)] |= uint32_t((o + i) % 16) << (4 * (i % 8));
        for (int64_t g = 0; g < in / group; ++g) scales[size_t(o * in / group + g)] = f32_to_bf16(std::ldexp(1.0f, -int(g))).bits;
    }
    LinearWeight w;
    w.format = WeightFormat::kIntGroup;
    w.out_features = out;
    w.in_features = in;
    w.int_params.packing = IntPacking::kCompressed;
    w.int_params.bits = 4;
    w.int_params.group_size = group;
    w.weight = WeightBuffer{DType::kI32, {out, in / 8}, codes.data(), nullptr, {}};
    w.scales = WeightBuffer{DType::kBF16, {out, in / group}, scales.data(), nullptr, {}};
    ASSERT_EQ(int4_layout_unsupported(w), "");
    const Int4DeviceLayout d = int4_device_layout(w);
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t o = 0; o < out; ++o) {
        int4_layout_row(d, o, row.data());
        for (int64_t i = 0; i < in; ++i) {
            const int q = int((o + i) % 16) - 8;
            ASSERT_EQ(row[size_t(i)], float(q) * std::ldexp(1.0f, -int(i / group))) << o << "," << i;
            // The stored nibble is q in 4-bit two's complement (CUTLASS's int4b_t).
            const uint32_t nibble = (d.codes[size_t(o * in / 8 + i / 8)] >> (4 * (i % 8))) & 15u;
            ASSERT_EQ(nibble, uint32_t(q < 0 ? q + 16 : q)) << o << "," << i;
        }
    }
    w.int_params.group_size = 12;  // not a multiple of 8
    EXPECT_NE(int4_layout_unsupported(w), "");
}

}  // namespace
