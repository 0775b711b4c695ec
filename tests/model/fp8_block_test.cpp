// The FP8 E4M3 128×128 block format against an independent implementation: torch's
// float8_e4m3fn cast and transformers' FP8 quantizer formula (tests/data/fp8, made by
// tools/make_fp8_block_fixture.py). qwenserve's quantiser must give the same codes and scales
// byte for byte, and LinearWeight's reference dequant the same float32 values; both for F32 and
// BF16 scales and for shapes that are not multiples of 128.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/linear_weight.h"
#include "io/safetensors.h"
#include "model/fp8_block.h"
#include "test_util.h"

using namespace qs;

namespace {

struct Case {
    const TensorInfo *w, *q, *scale_inv, *dequant;
};

WeightBuffer view(const TensorInfo& t, const std::shared_ptr<SafetensorsFile>& owner) {
    WeightBuffer b;
    b.dtype = t.dtype;
    b.shape = t.shape;
    b.data = t.data;
    b.owner = owner;
    return b;
}

class Fp8Fixture : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        auto f = SafetensorsFile::open(test::source_path("tests/data/fp8/fp8_block_fixture.safetensors"));
        ASSERT_TRUE(f.is_ok()) << f.status().message();
        file_ = *f;
        const std::string c = GetParam();
        c_ = {file_->find(c + ".w"), file_->find(c + ".q"), file_->find(c + ".scale_inv"), file_->find(c + ".dequant")};
        ASSERT_TRUE(c_.w && c_.q && c_.scale_inv && c_.dequant);
        ASSERT_EQ(c_.w->dtype, DType::kBF16);
        ASSERT_EQ(c_.q->dtype, DType::kF8E4M3);
        rows_ = c_.w->shape[0];
        cols_ = c_.w->shape[1];
    }
    std::shared_ptr<SafetensorsFile> file_;
    Case c_{};
    int64_t rows_ = 0, cols_ = 0;
};

}  // namespace

TEST_P(Fp8Fixture, QuantiserMatchesTorchByteForByte) {
    const DType sdt = c_.scale_inv->dtype;
    ASSERT_EQ(c_.scale_inv->shape, (std::vector<int64_t>{fp8_num_blocks(rows_), fp8_num_blocks(cols_)}));
    std::vector<uint8_t> q(size_t(rows_ * cols_));
    std::vector<uint8_t> scales(c_.scale_inv->nbytes);
    std::vector<float> block(size_t(kFp8BlockSize * cols_));
    for (int64_t r0 = 0; r0 < rows_; r0 += kFp8BlockSize) {
        const int64_t n = std::min(kFp8BlockSize, rows_ - r0);
        for (int64_t i = 0; i < n * cols_; ++i) block[size_t(i)] = load_as_f32(c_.w->data, DType::kBF16, size_t(r0 * cols_ + i));
        ASSERT_TRUE(quantize_fp8_block_row(block.data(), n, cols_, sdt, q.data() + r0 * cols_,
                                           scales.data() + (r0 / kFp8BlockSize) * fp8_num_blocks(cols_) * dtype_size(sdt)));
    }
    EXPECT_EQ(std::memcmp(scales.data(), c_.scale_inv->data, scales.size()), 0);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < rows_ * cols_; ++i) mismatches += q[size_t(i)] != c_.q->data[i];
    EXPECT_EQ(mismatches, 0);
}

TEST_P(Fp8Fixture, RowToF32MatchesTorchDequant) {
    LinearWeight w;
    w.format = WeightFormat::kFP8Block;
    w.out_features = rows_;
    w.in_features = cols_;
    w.weight = view(*c_.q, file_);
    w.scale_inv = view(*c_.scale_inv, file_);
    std::vector<float> row(static_cast<size_t>(cols_));
    for (int64_t r = 0; r < rows_; ++r) {
        w.row_to_f32(r, row.data());
        for (int64_t c = 0; c < cols_; ++c)
            ASSERT_EQ(row[size_t(c)], load_as_f32(c_.dequant->data, DType::kF32, size_t(r * cols_ + c))) << r << "," << c;
    }
    const std::vector<float> s = w.scale_inv_f32();
    ASSERT_EQ(int64_t(s.size()), fp8_num_blocks(rows_) * fp8_num_blocks(cols_));
    for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(s[i], load_as_f32(c_.scale_inv->data, c_.scale_inv->dtype, i));
    EXPECT_EQ(w.storage_bytes(), size_t(rows_ * cols_) + c_.scale_inv->nbytes);
}

INSTANTIATE_TEST_SUITE_P(Torch, Fp8Fixture, ::testing::Values("edge_f32", "edge_bf16", "even_f32"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Codes decoded by hand (spec §4.5): 0x7E = 448, 0x38 = 1, 0xB8 = −1, 0x01 = 2^-9, 0x08 = 2^-6,
// 0x3C = 1.5; block scales 2 (columns 0..127) and 1/4 (columns 128..129).
TEST(Fp8Block, HandComputedDequant) {
    static const uint8_t codes[2 * 130] = {};
    std::vector<uint8_t> q(codes, codes + 260);
    q[0] = 0x7e;    // 448
    q[1] = 0x38;    // 1.0
    q[2] = 0xb8;    // -1.0
    q[3] = 0x01;    // 2^-9 (smallest subnormal)
    q[129] = 0x08;  // 2^-6 (column 129: second block)
    q[130] = 0x3c;  // row 1, column 0: 1.5
    const float scales[2] = {2.0f, 0.25f};  // [1, 2]
    LinearWeight w;
    w.format = WeightFormat::kFP8Block;
    w.out_features = 2;
    w.in_features = 130;
    w.weight = {DType::kF8E4M3, {2, 130}, q.data(), nullptr};
    w.scale_inv = {DType::kF32, {1, 2}, scales, nullptr};
    std::vector<float> row(130);
    w.row_to_f32(0, row.data());
    EXPECT_EQ(row[0], 896.0f);
    EXPECT_EQ(row[1], 2.0f);
    EXPECT_EQ(row[2], -2.0f);
    EXPECT_EQ(row[3], std::ldexp(1.0f, -8));
    EXPECT_EQ(row[4], 0.0f);
    EXPECT_EQ(row[129], std::ldexp(1.0f, -8));
    w.row_to_f32(1, row.data());
    EXPECT_EQ(row[0], 3.0f);
    // An all-zero block quantises to zeros with scale 1.
    std::vector<float> zeros(3 * 5, 0.0f);
    std::vector<uint8_t> zq(15, 0xff);
    float s = -1.0f;
    ASSERT_TRUE(quantize_fp8_block_row(zeros.data(), 3, 5, DType::kF32, zq.data(), &s));
    EXPECT_EQ(s, 1.0f);
    for (uint8_t c : zq) EXPECT_EQ(c, 0);
    zeros[4] = NAN;
    EXPECT_FALSE(quantize_fp8_block_row(zeros.data(), 3, 5, DType::kF32, zq.data(), &s));
}

TEST(Fp8Block, ModuleRoles) {
    const std::string p = "model.language_model.layers.0.";
    for (const char* m : {"self_attn.q_proj", "self_attn.o_proj", "linear_attn.in_proj_qkv", "linear_attn.in_proj_z",
                          "linear_attn.out_proj", "mlp.shared_expert.down_proj", "mlp.experts.17.up_proj",
                          "mlp.experts.gate_up_proj", "mlp.experts.down_proj"})
        EXPECT_EQ(fp8_role(p + m), Fp8Role::kQuantized) << m;
    EXPECT_EQ(fp8_role("mtp.layers.0.self_attn.k_proj"), Fp8Role::kQuantized);
    for (const char* m : {"mlp.gate", "mlp.shared_expert_gate", "linear_attn.in_proj_a", "linear_attn.in_proj_b"})
        EXPECT_EQ(fp8_role(p + m), Fp8Role::kKeep) << m;
    EXPECT_EQ(fp8_role("lm_head"), Fp8Role::kKeep);
    EXPECT_EQ(fp8_role("model.language_model.embed_tokens"), Fp8Role::kKeep);
    EXPECT_EQ(fp8_role("mtp.fc"), Fp8Role::kOptional);
    for (const char* m : {"model.visual.blocks.0.attn.qkv", "model.language_model.norm", "mlp.experts.x.up_proj",
                          "model.language_model.layers.0.linear_attn.conv1d"})
        EXPECT_EQ(fp8_role(m), Fp8Role::kNotLinear) << m;
    const auto list = fp8_unconverted_modules({"lm_head.weight", p + "mlp.gate.weight", p + "self_attn.q_proj.weight",
                                               "mtp.fc.weight", "model.visual.merger.weight", p + "input_layernorm.weight"});
    EXPECT_EQ(list, (std::vector<std::string>{"lm_head", p + "mlp.gate", "mtp.fc", "model.visual"}));
}
