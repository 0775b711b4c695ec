// FP8 E4M3 weights with one scale per 128×128 block: the format of Qwen's official FP8
// checkpoints (spec §4.2). A quantised linear X is `X.weight` F8_E4M3 [out, in] plus
// `X.weight_scale_inv` [⌈out/128⌉, ⌈in/128⌉] (F32 or BF16); despite its name the scale multiplies:
//     W[i][j] = fp8(Wq[i][j]) · scale_inv[i / 128][j / 128]
// Quantisation (what `qwenserve quantize` and the FP8 dummy weights do) follows transformers'
// FP8 quantizer (integrations/finegrained_fp8.py, Fp8Quantize): per block amax over the valid
// elements, scale = 448 / amax (evaluated as 448 · (1 / amax), as PyTorch does), stored
// scale_inv = 1 / scale, Wq = e4m3(clamp(W · scale, ±448))
// with round-to-nearest-even; an all-zero block gets scale 1. Edge blocks (shapes that are not
// multiples of 128) cover only the valid rows/columns.
// Also: which linear modules the format quantises (one table for loader, writer, converter and
// dummy weights). Pure functions, callable from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "backend/linear_weight.h"  // kFp8BlockSize, fp8_num_blocks
#include "core/dtype.h"

namespace qs {

constexpr float kFp8E4M3Max = 448.0f;

// How the FP8 block format treats a linear module (tensor name without ".weight"; the fused
// expert tensors `…mlp.experts.gate_up_proj` / `…down_proj` count as modules).
enum class Fp8Role : uint8_t {
    kNotLinear,  // not a linear weight (norms, conv1d, A_log, ...) or not part of the text model
    kQuantized,  // FP8 in Qwen's official FP8 checkpoints and in ours: attention q/k/v/o,
                 // GDN in_proj_qkv/in_proj_z/out_proj, routed experts, shared expert (main + MTP)
    kOptional,   // mtp.fc: BF16 in the official release (1,560 MTP tensors = 19 − 2 fused experts +
                 // 1,536 per-expert + 7 scales for q/k/v/o and the shared expert), accepted as FP8
    kKeep,       // never FP8: embed_tokens, lm_head, router mlp.gate, mlp.shared_expert_gate,
                 // linear_attn.in_proj_a/in_proj_b (32 rows; also BF16 in the official release)
};
Fp8Role fp8_role(std::string_view module);

// The modules_to_not_convert our converter and writers declare, from the tensor names of a
// checkpoint: every kKeep/kOptional linear module, and "model.visual" when there are visual tensors.
std::vector<std::string> fp8_unconverted_modules(const std::vector<std::string>& tensor_names);

// The scale for a block with absolute maximum `amax` (finite, >= 0): returns the factor that
// multiplies W before rounding and writes the stored scale_inv (rounded to `scale_dtype`, F32 or
// BF16; with BF16 the factor is 1 / that rounded value, so dequantisation is consistent).
float fp8_block_scale(float amax, DType scale_dtype, float* scale_inv);

// Quantises one block row: `w` [num_rows, cols] float32 (num_rows <= 128) into `q` [num_rows, cols]
// E4M3 codes and ⌈cols/128⌉ scale_inv values of `scale_dtype` written to `scale_inv` (any
// alignment). Returns false (writing nothing useful) if `w` holds a NaN or an infinity.
bool quantize_fp8_block_row(const float* w, int64_t num_rows, int64_t cols, DType scale_dtype, uint8_t* q,
                            void* scale_inv);

}  // namespace qs
