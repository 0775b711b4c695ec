// PromptImages: what one prompt's images and videos add to its forwards (spec §1.3, §2.3): the vision
// tower's embeddings for its <|image_pad|> and <|video_pad|> tokens and the prompt's M-RoPE positions. Made once per request
// (prepare_prompt_images: the tower runs once, however the prompt is chunked) and applied to every
// forward batch that covers the sequence (place_prompt_images: embedding rows for the pad tokens
// in the batch, rotary positions for every row, the per-sequence delta for tokens after the
// prompt). Immutable after preparation; read on the engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/forward_batch.h"
#include "core/status.h"
#include "image/image_processor.h"
#include "model/mrope_positions.h"
#include "model/vision_tower.h"

namespace qs {

struct PromptImages {
    int64_t hidden = 0;                // embedding width (the text model's hidden_size)
    std::vector<float> embeds;         // [image tokens, hidden]: the tower's output, images in order
    std::vector<int32_t> embed_index;  // [prompt tokens]: row of `embeds` for a pad token, else -1
    MropePositions positions;          // [3][prompt tokens] and the delta after the prompt

    int64_t prompt_tokens() const { return int64_t(embed_index.size()); }
};

// Runs the tower over `images` (images and videos, in prompt order) and lays the result over
// `prompt` as model/media_runs places them: every maximal run of `image_token_id` is the next
// image's merged tokens, a video (ImagePatches::video) is grid_t runs of `video_token_id`, one per
// temporal patch. A mismatch (more or fewer runs than media, a wrong run length) is
// kInvalidArgument naming it. The tower runs on `ops` (Ops::vision_tower; null: the host
// reference).
Result<PromptImages> prepare_prompt_images(const VisionTower& tower, const std::vector<int32_t>& prompt,
                                           int64_t image_token_id, const std::vector<const ImagePatches*>& images,
                                           Ops* ops = nullptr, int64_t video_token_id = -1);

// After every span of `batch` is in place: for each span s with images[s] non-null, sets its
// rope_delta, fills batch.mrope_positions (every row of the batch; rows of other spans get
// position + their rope_delta) and appends embedding rows for the span's pad tokens. A target
// forward's row i of span s holds token start_pos + i (token_offset 0); an MTP forward's row holds
// the next token, start_pos + i + 1 (token_offset 1), at the rotary position of start_pos + i.
void place_prompt_images(ForwardBatch& batch, const std::vector<const PromptImages*>& images, int token_offset = 0);

}  // namespace qs
