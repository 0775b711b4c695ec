// FP8 block quantisation and the module table (see fp8_block.h).
#include "model/fp8_block.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <set>

#include "core/check.h"

namespace qs {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// `…mlp.experts.<digits>.{gate,up,down}_proj`
bool is_per_expert(std::string_view m) {
    for (std::string_view proj : {".gate_proj", ".up_proj", ".down_proj"}) {
        if (!ends_with(m, proj)) continue;
        std::string_view head = m.substr(0, m.size() - proj.size());
        size_t dot = head.rfind('.');
        if (dot == std::string_view::npos || dot + 1 == head.size()) return false;
        std::string_view index = head.substr(dot + 1);
        if (!std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
        return ends_with(head.substr(0, dot), "mlp.experts");
    }
    return false;
}

}  // namespace

Fp8Role fp8_role(std::string_view m) {
    if (m.rfind("model.visual.", 0) == 0) return Fp8Role::kNotLinear;
    static const std::string_view kQuantized[] = {
        "self_attn.q_proj",          "self_attn.k_proj",           "self_attn.v_proj",
        "self_attn.o_proj",          "linear_attn.in_proj_qkv",    "linear_attn.in_proj_z",
        "linear_attn.out_proj",      "mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj",
        "mlp.shared_expert.down_proj", "mlp.experts.gate_up_proj",  "mlp.experts.down_proj",
    };
    static const std::string_view kKeep[] = {
        "embed_tokens", "mlp.gate", "mlp.shared_expert_gate", "linear_attn.in_proj_a", "linear_attn.in_proj_b",
    };
    auto component_suffix = [&](std::string_view s) {
        return m == s || (ends_with(m, s) && m[m.size() - s.size() - 1] == '.');
    };
    for (std::string_view s : kQuantized)
        if (component_suffix(s)) return Fp8Role::kQuantized;
    if (is_per_expert(m)) return Fp8Role::kQuantized;
    if (m == "lm_head") return Fp8Role::kKeep;
    for (std::string_view s : kKeep)
        if (component_suffix(s)) return Fp8Role::kKeep;
    if (m == "mtp.fc") return Fp8Role::kOptional;
    return Fp8Role::kNotLinear;
}

std::vector<std::string> fp8_unconverted_modules(const std::vector<std::string>& tensor_names) {
    std::vector<std::string> out;
    std::set<std::string> seen;
    bool visual = false;
    for (const std::string& n : tensor_names) {
        if (n.rfind("model.visual.", 0) == 0) {
            visual = true;
            continue;
        }
        if (!ends_with(n, ".weight")) continue;
        const std::string module = n.substr(0, n.size() - 7);
        const Fp8Role role = fp8_role(module);
        if ((role == Fp8Role::kKeep || role == Fp8Role::kOptional) && seen.insert(module).second)
            out.push_back(module);
    }
    if (visual) out.push_back("model.visual");
    return out;
}

float fp8_block_scale(float amax, DType scale_dtype, float* scale_inv) {
    QS_CHECK(scale_dtype == DType::kF32 || scale_dtype == DType::kBF16);
    if (!(amax > 0.0f)) {  // all-zero block: scale 1 keeps the zeros (transformers does the same)
        *scale_inv = 1.0f;
        return 1.0f;
    }
    // transformers writes `448.0 / amax`; PyTorch evaluates a Python number divided by a tensor
    // as reciprocal(tensor) · number, which can differ from 448 / amax in the last bit. Same here,
    // so scales and codes match the reference byte for byte.
    float scale = kFp8E4M3Max * (1.0f / amax);
    float inv = 1.0f / scale;
    if (scale_dtype == DType::kBF16) {
        inv = round_to_bf16(inv);
        scale = 1.0f / inv;
    }
    *scale_inv = inv;
    return scale;
}

bool quantize_fp8_block_row(const float* w, int64_t num_rows, int64_t cols, DType scale_dtype, uint8_t* q,
                            void* scale_inv) {
    QS_CHECK(num_rows > 0 && num_rows <= kFp8BlockSize);
    const int64_t nb = fp8_num_blocks(cols);
    float amax[64];  // up to 8192 columns per chunk of blocks
    for (int64_t b0 = 0; b0 < nb; b0 += 64) {
        const int64_t b1 = std::min(nb, b0 + 64);
        std::fill(amax, amax + (b1 - b0), 0.0f);
        bool finite = true;
        for (int64_t r = 0; r < num_rows; ++r) {
            const float* row = w + r * cols;
            for (int64_t b = b0; b < b1; ++b) {
                const int64_t c0 = b * kFp8BlockSize, c1 = std::min(cols, c0 + kFp8BlockSize);
                float m = amax[b - b0];
                int bad = 0;
#pragma omp simd reduction(max : m) reduction(| : bad)
                for (int64_t c = c0; c < c1; ++c) {
                    const float a = std::fabs(row[c]);
                    m = std::max(m, a);
                    bad |= !(a <= FLT_MAX);  // inf and NaN (which max would skip)
                }
                amax[b - b0] = m;
                finite &= !bad;
            }
        }
        if (!finite) return false;
        for (int64_t b = b0; b < b1; ++b) {
            float inv = 0.0f;
            const float scale = fp8_block_scale(amax[b - b0], scale_dtype, &inv);
            if (scale_dtype == DType::kF32) {
                std::memcpy(static_cast<uint8_t*>(scale_inv) + 4 * b, &inv, 4);
            } else {
                const uint16_t bits = f32_to_bf16(inv).bits;
                std::memcpy(static_cast<uint8_t*>(scale_inv) + 2 * b, &bits, 2);
            }
            const int64_t c0 = b * kFp8BlockSize, c1 = std::min(cols, c0 + kFp8BlockSize);
            for (int64_t r = 0; r < num_rows; ++r) {
                const float* row = w + r * cols;
                uint8_t* dst = q + r * cols;
                // f32_to_fp8e4m3 saturates, which is the clamp to ±448.
#pragma omp simd
                for (int64_t c = c0; c < c1; ++c) dst[c] = f32_to_fp8e4m3(row[c] * scale).bits;
            }
        }
    }
    return true;
}

}  // namespace qs
