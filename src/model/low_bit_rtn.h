// Round-to-nearest (RTN) quantisers for the two compressed-tensors formats `qwenserve quantize`
// writes besides FP8 (tensor layouts in backend/linear_weight.h, loader quant_linear_loader.cpp):
//  * int4-w4a16, `pack-quantized`: symmetric INT4 per group of `group_size` inputs. As
//    compressed-tensors computes it for a BF16 weight (compute_dynamic_scales_and_zp, then
//    PackedQuantizationCompressor.compress), every step rounded to BF16 as torch's BF16 ops do:
//        scale = bf16(amax / 7.5)            (amax over the group; 0 becomes bf16 eps 2^-7)
//        q     = clamp(round_half_even(bf16(w / scale)), -8, 7)
//    stored as weight_packed I32 [out, in/8] (q + 8, eight per word, lowest bits first),
//    weight_scale BF16 [out, in/group_size], weight_shape I64 [2].
//  * nvfp4, `nvfp4-pack-quantized`: FP4 E2M1 per 16 inputs with an FP8 E4M3 group scale and a
//    float32 global scale per tensor, as compressed-tensors computes it (generate_gparam,
//    calculate_qparams, the CPU quantize + pack_fp4_to_uint8), in float32:
//        global = (1 / amax(tensor)) · 2688    (448 · 6 / amax as torch evaluates it; 1 if not finite)
//        scale  = e4m3(clamp(global · (amax(group) / 6), ±448))   (0 becomes 0.125)
//        q      = e2m1(clamp(w / (scale / global), ±6))  (ties to even; sign bit when < 0)
//    stored as weight_packed U8 [out, in/2] (element 2j in the low nibble), weight_scale
//    F8_E4M3 [out, in/16], weight_global_scale F32 [1].
// Inputs are float32 rows holding BF16 values (F32/F16 checkpoints are rounded to BF16 for
// INT4, whose arithmetic is BF16's). Which modules are quantised: low_bit_quantized. Pure
// functions, callable from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace qs {

enum class LowBitFormat : uint8_t { kInt4W4A16, kNvfp4 };

// "int4-w4a16" / "nvfp4".
const char* low_bit_format_name(LowBitFormat f);

constexpr int64_t kInt4DefaultGroupSize = 128;
constexpr int64_t kNvfp4RtnGroupSize = 16;  // fixed by the format

// The module table of both formats: the linears the FP8 block format quantises (fp8_role
// kQuantized: attention q/k/v/o, GDN in_proj_qkv/in_proj_z/out_proj, routed and shared experts)
// in the main model; everything under `mtp.` stays BF16 (as published INT4/NVFP4 Qwen3.5/3.6
// checkpoints keep it, and as tests/data/quant's fixtures do), and so do embeddings, lm_head,
// router, shared-expert gate, GDN in_proj_a/in_proj_b and the vision tower.
bool low_bit_quantized(std::string_view module);

// compressed-tensors `ignore` for a checkpoint with these tensor names: every linear module
// that stays BF16 (lm_head, routers, gates, in_proj_a/b) by name, "re:^mtp\." when there is an
// MTP block, "re:^model\.visual\." when there is a vision tower.
std::vector<std::string> low_bit_ignore(const std::vector<std::string>& tensor_names);

// The `quantization_config` a compressed-tensors checkpoint of `format` carries: one config
// group targeting Linear, the format, quant_method "compressed-tensors", status "compressed".
nlohmann::ordered_json low_bit_quantization_config(LowBitFormat format, int64_t group_size,
                                                   const std::vector<std::string>& ignore);

// INT4: `w` [rows, cols] (cols a multiple of group_size, group_size a multiple of 8) into
// `packed` [rows, cols/8] words and `scales` [rows, cols/group_size] BF16 bits. False if `w`
// holds a NaN or an infinity.
bool quantize_int4_rows(const float* w, int64_t rows, int64_t cols, int64_t group_size, uint32_t* packed,
                        uint16_t* scales);

// NVFP4: the global scale of a tensor whose absolute maximum is `amax` (finite, >= 0).
float nvfp4_global_scale(float amax);

// NVFP4: `w` [rows, cols] (cols a multiple of 16) into `packed` [rows, cols/2] bytes and
// `scales` [rows, cols/16] E4M3 codes. False if `w` holds a NaN or an infinity.
bool quantize_nvfp4_rows(const float* w, int64_t rows, int64_t cols, float global_scale, uint8_t* packed,
                         uint8_t* scales);

}  // namespace qs
