// RTN quantisers of compressed-tensors' INT4 (pack-quantized) and NVFP4 formats, and their
// module table (see low_bit_rtn.h).
#include "model/low_bit_rtn.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <set>

#include "core/check.h"
#include "core/dtype.h"
#include "model/fp8_block.h"

namespace qs {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Round to nearest integer, ties to even (torch.round), in the default FP environment.
float round_half_even(float x) { return std::nearbyint(x); }

// compressed-tensors' cast_to_fp4 magnitude buckets → E2M1 code 0..7 (0, .5, 1, 1.5, 2, 3, 4, 6);
// the boundaries' ties go to the even code. Counted as the thresholds m passes, without branches
// (the buckets of random weights mispredict: the branchy form cost ~5× the INT4 quantiser a value).
uint8_t e2m1_magnitude_code(float m) {
    return uint8_t(int(m > 0.25f) + int(m >= 0.75f) + int(m > 1.25f) + int(m >= 1.75f) + int(m > 2.5f) +
                   int(m >= 3.5f) + int(m > 5.0f));
}

}  // namespace

const char* low_bit_format_name(LowBitFormat f) {
    return f == LowBitFormat::kInt4W4A16 ? "int4-w4a16" : "nvfp4";
}

bool low_bit_quantized(std::string_view module) {
    return !starts_with(module, "mtp.") && fp8_role(module) == Fp8Role::kQuantized;
}

std::vector<std::string> low_bit_ignore(const std::vector<std::string>& tensor_names) {
    std::vector<std::string> out;
    std::set<std::string> seen;
    bool mtp = false, visual = false;
    for (const std::string& n : tensor_names) {
        if (starts_with(n, "mtp.")) {
            mtp = true;
            continue;
        }
        if (starts_with(n, "model.visual.")) {
            visual = true;
            continue;
        }
        if (!n.ends_with(".weight")) continue;
        const std::string module = n.substr(0, n.size() - 7);
        if (fp8_role(module) == Fp8Role::kKeep && !module.ends_with("embed_tokens") && seen.insert(module).second)
            out.push_back(module);
    }
    if (mtp) out.push_back("re:^mtp\\..*");
    if (visual) out.push_back("re:^model\\.visual\\..*");
    return out;
}

nlohmann::ordered_json low_bit_quantization_config(LowBitFormat format, int64_t group_size,
                                                   const std::vector<std::string>& ignore) {
    using json = nlohmann::ordered_json;
    const bool int4 = format == LowBitFormat::kInt4W4A16;
    const char* fmt = int4 ? "pack-quantized" : "nvfp4-pack-quantized";
    json weights = {{"num_bits", 4},
                    {"type", int4 ? "int" : "float"},
                    {"symmetric", true},
                    {"group_size", int4 ? group_size : kNvfp4RtnGroupSize},
                    {"strategy", int4 ? "group" : "tensor_group"},
                    {"dynamic", false}};
    if (!int4) weights["scale_dtype"] = "torch.float8_e4m3fn";
    json group = {{"targets", {"Linear"}},
                  {"weights", weights},
                  {"input_activations", nullptr},
                  {"output_activations", nullptr},
                  {"format", fmt}};
    return json{{"quant_method", "compressed-tensors"},
                {"format", fmt},
                {"quantization_status", "compressed"},
                {"config_groups", {{"group_0", group}}},
                {"ignore", ignore},
                {"kv_cache_scheme", nullptr},
                {"sparsity_config", json::object()}};
}

bool quantize_int4_rows(const float* w, int64_t rows, int64_t cols, int64_t group_size, uint32_t* packed,
                        uint16_t* scales) {
    QS_CHECK(group_size > 0 && group_size % 8 == 0 && cols % group_size == 0);
    const int64_t groups = cols / group_size;
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = w + r * cols;
        for (int64_t g = 0; g < groups; ++g) {
            const float* xg = x + g * group_size;
            float amax = 0.0f;
            for (int64_t i = 0; i < group_size; ++i) {
                const float v = round_to_bf16(xg[i]);
                if (!std::isfinite(v)) return false;
                amax = std::max(amax, std::fabs(v));
            }
            float s = round_to_bf16(amax / 7.5f);
            if (s == 0.0f) s = 0.0078125f;  // torch.finfo(bfloat16).eps
            scales[r * groups + g] = f32_to_bf16(s).bits;
            uint32_t* out = packed + (r * cols + g * group_size) / 8;
            for (int64_t k = 0; k < group_size / 8; ++k) {
                uint32_t word = 0;
                for (int64_t j = 0; j < 8; ++j) {
                    const float v = round_to_bf16(round_to_bf16(xg[k * 8 + j]) / s);
                    const float q = round_half_even(std::clamp(v, -8.0f, 7.0f));
                    word |= uint32_t(int32_t(q) + 8) << (4 * j);
                }
                out[k] = word;
            }
        }
    }
    return true;
}

float nvfp4_global_scale(float amax) {
    // E4M3 max 448 · E2M1 max 6 over amax, evaluated as torch evaluates `scalar / tensor`:
    // reciprocal, then product (each rounded to float32).
    const float g = (1.0f / std::max(amax, FLT_MIN)) * 2688.0f;
    return std::isfinite(g) ? g : 1.0f;
}

bool quantize_nvfp4_rows(const float* w, int64_t rows, int64_t cols, float global_scale, uint8_t* packed,
                         uint8_t* scales) {
    QS_CHECK(cols % kNvfp4RtnGroupSize == 0);
    const int64_t groups = cols / kNvfp4RtnGroupSize;
    const float* e4m3 = fp8e4m3_table();
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = w + r * cols;
        for (int64_t g = 0; g < groups; ++g) {
            const float* xg = x + g * kNvfp4RtnGroupSize;
            float amax = 0.0f;
            for (int64_t i = 0; i < kNvfp4RtnGroupSize; ++i) {
                if (!std::isfinite(xg[i])) return false;
                amax = std::max(amax, std::fabs(xg[i]));
            }
            const float local = global_scale * (amax / 6.0f);
            uint8_t code = f32_to_fp8e4m3(std::clamp(local, -448.0f, 448.0f)).bits;
            if (e4m3[code] == 0.0f) code = f32_to_fp8e4m3(0.125f).bits;
            scales[r * groups + g] = code;
            const float effective = e4m3[code] / global_scale;
            uint8_t* out = packed + (r * cols + g * kNvfp4RtnGroupSize) / 2;
            uint8_t nib[kNvfp4RtnGroupSize];  // the group's codes first (a loop the compiler vectorises), then packed
            for (int64_t j = 0; j < kNvfp4RtnGroupSize; ++j) {
                const float v = std::clamp(xg[j] / effective, -6.0f, 6.0f);
                nib[j] = uint8_t(e2m1_magnitude_code(std::fabs(v)) | (v < 0.0f ? 8u : 0u));
            }
            for (int64_t j = 0; j < kNvfp4RtnGroupSize; j += 2) out[j / 2] = uint8_t(nib[j] | (nib[j + 1] << 4));
        }
    }
    return true;
}

}  // namespace qs
