// The device NVFP4 layout (backend/nvfp4_layout.h): the exactness it rests on (every E2M1 code
// times every E4M3 scale byte is a bf16 value, and every E4M3 value widens to bf16 exactly), and
// the round trip on the weights ModelOpt and compressed-tensors wrote (tests/data/quant/
// modelopt_nvfp4, ct_nvfp4): the codes are the checkpoint's bytes unchanged, and every row
// dequantised from the layout is within one fp32 ulp (ModelOpt's multiplied global) or two
// (compressed-tensors' divided one: the layout's reciprocal rounds once more) of
// LinearWeight::row_to_f32 (itself equal bit for bit to the libraries' dequantisation,
// quant_formats_test.cpp) — the layout applies the global scale after the exact code × scale
// product, the libraries before. Weights it cannot
// hold are refused with a reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/nvfp4_layout.h"
#include "config/model_config.h"
#include "core/dtype.h"
#include "model/weights.h"
#include "test_util.h"

using namespace qs;

namespace {

std::string fixture(const std::string& name) { return test::source_path("tests/data/quant/" + name); }

TEST(Nvfp4Layout, CodeTimesScaleIsExactInBf16) {
    const float* e4m3 = fp8e4m3_table();
    int checked = 0;
    for (int s = 0; s < 256; ++s) {
        const float scale = e4m3[s];
        if (std::isnan(scale)) {  // 0x7F, 0xFF: NaN widens to a bf16 NaN
            EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(scale)))) << s;
            continue;
        }
        ASSERT_EQ(round_to_bf16(scale), scale) << "e4m3 byte " << s << " is not a bf16 value";
        for (int c = 0; c < 16; ++c) {
            const double exact = double(fp4e2m1_to_f32(uint8_t(c))) * double(scale);
            ASSERT_EQ(double(nvfp4_code_times_scale(uint8_t(c), uint8_t(s))), exact) << "code " << c << " scale " << s;
            ASSERT_EQ(double(round_to_bf16(float(exact))), exact) << "code " << c << " scale " << s;
            ++checked;
        }
    }
    EXPECT_EQ(checked, 16 * 254);
}

// Every NVFP4 linear of a fixture round-trips; returns how many there were.
int check_round_trip(const ModelWeights& w) {
    std::vector<const LinearWeight*> all;
    for (const DecoderLayerWeights& l : w.layers) {
        if (l.type == LayerType::kFullAttention) {
            for (const LinearWeight* x : {&l.attn.q_proj, &l.attn.k_proj, &l.attn.v_proj, &l.attn.o_proj}) all.push_back(x);
        } else {
            for (const LinearWeight* x : {&l.gdn.in_proj_qkv, &l.gdn.in_proj_z, &l.gdn.out_proj}) all.push_back(x);
        }
        for (const ExpertWeights& e : l.moe.experts)
            for (const LinearWeight* x : {&e.gate_proj, &e.up_proj, &e.down_proj}) all.push_back(x);
        for (const LinearWeight* x : {&l.moe.shared_expert.gate_proj, &l.moe.shared_expert.up_proj,
                                      &l.moe.shared_expert.down_proj})
            all.push_back(x);
    }
    int taken = 0;
    for (const LinearWeight* l : all) {
        if (l->format != WeightFormat::kNvfp4) continue;
        EXPECT_EQ(nvfp4_layout_unsupported(*l), "");
        ++taken;
        const Nvfp4DeviceLayout d = nvfp4_device_layout(*l);
        EXPECT_EQ(int64_t(d.codes.size()), l->out_features * l->in_features / 8);
        if (int64_t(d.codes.size()) != l->out_features * l->in_features / 8) continue;
        EXPECT_EQ(std::memcmp(d.codes.data(), l->weight.data, d.codes.size() * 4), 0);
        EXPECT_EQ(int64_t(d.scales.size()), l->out_features * l->in_features / 16);
        if (int64_t(d.scales.size()) != l->out_features * l->in_features / 16) continue;
        EXPECT_EQ(std::memcmp(d.scales.data(), l->scales.data, d.scales.size()), 0);  // the E4M3 bytes unchanged
        // ModelOpt multiplies by the global: one rounding each way, at most one ulp apart.
        // compressed-tensors divides: the layout's reciprocal rounds once more, at most two.
        const float max_ulps = l->nvfp4_global == Nvfp4Global::kMultiply ? 1.0f : 2.0f;
        std::vector<float> a(size_t(l->in_features)), b(a.size());
        int64_t differ = 0, worse = 0;
        for (int64_t r = 0; r < l->out_features; ++r) {
            l->row_to_f32(r, a.data());
            nvfp4_layout_row(d, r, b.data());
            for (size_t i = 0; i < a.size(); ++i) {
                if (a[i] == b[i]) continue;
                const float ulp = std::nextafter(std::fabs(a[i]), INFINITY) - std::fabs(a[i]);
                ++differ;
                worse += std::fabs(a[i] - b[i]) > max_ulps * ulp;
            }
        }
        EXPECT_EQ(worse, 0) << l->out_features << "x" << l->in_features << " (" << differ << " differ)";
    }
    return taken;
}

TEST(Nvfp4Layout, ModelOptRoundTrip) {
    auto w = load_model_dir(fixture("modelopt_nvfp4"));
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    EXPECT_GT(check_round_trip(*w), 0);
}

TEST(Nvfp4Layout, CompressedTensorsRoundTrip) {
    auto w = load_model_dir(fixture("ct_nvfp4"));
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    EXPECT_GT(check_round_trip(*w), 0);
    const LinearWeight& g = w->layers[0].moe.experts[0].gate_proj;
    ASSERT_EQ(g.nvfp4_global, Nvfp4Global::kDivide);
    EXPECT_EQ(nvfp4_device_layout(g).global, 1.0f / g.global_scale);
}

// A hand-made weight: input i of row o has code (o + i) % 16 and block b's scale byte is
// 0x38 + 8·b (e4m3 1, 2, 4, 8: 2^b), global 0.25 multiplied: the nibble order, the scale index
// and the global pinned down independently of any packer. Then the refusals (a NaN scale byte
// among them: the kernels widen scale bytes by placing their bits).
TEST(Nvfp4Layout, HandMadeValuesAndRefusals) {
    const int64_t out = 3, in = 64;
    std::vector<uint8_t> codes(size_t(out * in / 2), 0), scales(size_t(out * in / 16));
    for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) codes[size_t((o * in + i) / 2)] |= uint8_t(((o + i) % 16) << (4 * (i % 2)));
        for (int64_t b = 0; b < in / 16; ++b) scales[size_t(o * in / 16 + b)] = uint8_t(0x38 + 8 * b);
    }
    LinearWeight w;
    w.format = WeightFormat::kNvfp4;
    w.out_features = out;
    w.in_features = in;
    w.weight = WeightBuffer{DType::kU8, {out, in / 2}, codes.data(), nullptr, {}};
    w.scales = WeightBuffer{DType::kF8E4M3, {out, in / 16}, scales.data(), nullptr, {}};
    w.global_scale = 0.25f;
    w.nvfp4_global = Nvfp4Global::kMultiply;
    ASSERT_EQ(nvfp4_layout_unsupported(w), "");
    const Nvfp4DeviceLayout d = nvfp4_device_layout(w);
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t o = 0; o < out; ++o) {
        nvfp4_layout_row(d, o, row.data());
        for (int64_t i = 0; i < in; ++i)
            ASSERT_EQ(row[size_t(i)], fp4e2m1_to_f32(uint8_t((o + i) % 16)) * std::ldexp(0.25f, int(i / 16)))
                << o << "," << i;
    }
    w.nvfp4_global = Nvfp4Global::kDivide;
    EXPECT_EQ(nvfp4_device_layout(w).global, 4.0f);
    w.global_scale = 0.0f;
    EXPECT_EQ(nvfp4_layout_unsupported(w), "global scale 0");
    w.global_scale = 1.0f;
    w.in_features = 48;
    EXPECT_EQ(nvfp4_layout_unsupported(w), "in_features 48 not a multiple of 32");
    w.in_features = in;
    for (const size_t at : {size_t(5), size_t(10)}) {  // in the scan's 8-byte steps and in its tail (12 bytes)
        const uint8_t kept = scales[at];
        for (const uint8_t nan : {uint8_t(0x7F), uint8_t(0xFF)}) {  // the kernels would read it as a finite scale
            scales[at] = nan;
            EXPECT_EQ(nvfp4_layout_unsupported(w), "a NaN block scale") << at;
        }
        for (const uint8_t finite : {uint8_t(0x7E), uint8_t(0xFE), uint8_t(0x80), uint8_t(0x00)}) {
            scales[at] = finite;
            EXPECT_EQ(nvfp4_layout_unsupported(w), "") << at << " " << int(finite);
        }
        scales[at] = kept;
    }
    EXPECT_EQ(nvfp4_layout_unsupported(w), "");
    w.format = WeightFormat::kIntGroup;
    EXPECT_EQ(nvfp4_layout_unsupported(w), "format int-group");
}

// `--dummy-format nvfp4` (make_dummy_weights kNvfp4): the modules `quantize --format nvfp4` quantises
// are NVFP4 that the device layout takes, and they dequantise to the BF16 dummy weights of the same
// seed within NVFP4's rounding (RTN on uniform values: ~8 % RMS; bound 0.15).
TEST(Nvfp4Layout, DummyWeightsAreTheQuantisedBf16Ones) {
    const ModelConfig c = tiny_model_config();
    const ModelWeights q = make_dummy_weights(c, 7, false, WeightFormat::kNvfp4);
    const ModelWeights d = make_dummy_weights(c, 7, false, WeightFormat::kDense);
    EXPECT_TRUE(q.config.quantization.quantized());
    std::vector<std::pair<const LinearWeight*, const LinearWeight*>> pairs;
    for (size_t i = 0; i < q.layers.size(); ++i) {
        const MoeWeights &a = q.layers[i].moe, &b = d.layers[i].moe;
        pairs.push_back({&a.experts[1].gate_proj, &b.experts[1].gate_proj});
        pairs.push_back({&a.experts[2].up_proj, &b.experts[2].up_proj});
        pairs.push_back({&a.experts[3].down_proj, &b.experts[3].down_proj});
        pairs.push_back({&a.shared_expert.down_proj, &b.shared_expert.down_proj});
        if (q.layers[i].type == LayerType::kFullAttention) pairs.push_back({&q.layers[i].attn.q_proj, &d.layers[i].attn.q_proj});
        else pairs.push_back({&q.layers[i].gdn.in_proj_qkv, &d.layers[i].gdn.in_proj_qkv});
    }
    for (const auto& [n, b] : pairs) {
        ASSERT_EQ(n->format, WeightFormat::kNvfp4);
        EXPECT_EQ(nvfp4_layout_unsupported(*n), "");
        std::vector<float> x(size_t(n->in_features)), y(x.size());
        double num = 0, den = 0;
        for (int64_t r = 0; r < n->out_features; ++r) {
            n->row_to_f32(r, x.data());
            b->row_to_f32(r, y.data());
            for (size_t i = 0; i < x.size(); ++i) num += double(x[i] - y[i]) * (x[i] - y[i]), den += double(y[i]) * y[i];
        }
        EXPECT_LT(std::sqrt(num / den), 0.15) << n->out_features << "x" << n->in_features;
        EXPECT_GT(num, 0.0);  // quantised, not a copy
    }
}

}  // namespace
