// PromptImages (see prompt_images.h).
#include "model/prompt_images.h"

#include <fmt/format.h>

#include "core/check.h"
#include "model/media_runs.h"

namespace qs {

Result<PromptImages> prepare_prompt_images(const VisionTower& tower, const std::vector<int32_t>& prompt,
                                           int64_t image_token_id, const std::vector<const ImagePatches*>& images,
                                           Ops* ops, int64_t video_token_id) {
    const int merge = tower.config().spatial_merge_size;
    QS_ASSIGN_OR_RETURN(std::vector<MediaRun> runs, media_runs(prompt, image_token_id, video_token_id, images, merge));
    std::vector<uint8_t> kind(prompt.size(), 0);
    std::vector<ImageGrid> grids;
    for (const MediaRun& r : runs) {
        for (size_t i = r.begin; i < r.end; ++i) kind[i] = r.video ? 2 : 1;
        const ImagePatches& m = *images[r.media];
        grids.push_back({r.video ? 1 : m.grid_t, m.grid_h, m.grid_w});
    }
    QS_ASSIGN_OR_RETURN(MropePositions positions, mrope_positions(kind, grids, merge));
    QS_ASSIGN_OR_RETURN(std::vector<float> embeds, tower.forward(images, ops));
    PromptImages out;
    out.hidden = tower.config().out_hidden_size;
    out.embed_index.assign(prompt.size(), -1);
    int32_t next = 0;
    for (size_t i = 0; i < prompt.size(); ++i)
        if (kind[i] != 0) out.embed_index[i] = next++;
    if (int64_t(next) * out.hidden != int64_t(embeds.size()))
        return invalid_argument(fmt::format("the prompt has {} image and video tokens but its {} images and videos make "
                                            "{} embeddings", next, images.size(), int64_t(embeds.size()) / out.hidden));
    out.embeds = std::move(embeds);
    out.positions = std::move(positions);
    return out;
}

void place_prompt_images(ForwardBatch& batch, const std::vector<const PromptImages*>& images, int token_offset) {
    QS_CHECK(images.size() == batch.seqs.size());
    bool any = false;
    for (size_t s = 0; s < images.size(); ++s) {
        if (images[s] == nullptr) continue;
        any = true;
        batch.seqs[s].rope_delta = int32_t(images[s]->positions.delta);
    }
    if (!any) return;
    const int64_t T = batch.num_tokens();
    batch.mrope_positions = batch.rope_positions();  // position + rope_delta; prompt rows below
    for (size_t s = 0; s < images.size(); ++s) {
        const PromptImages* img = images[s];
        if (img == nullptr) continue;
        const SeqSpan& span = batch.seqs[s];
        const int64_t H = img->hidden;
        for (int32_t i = 0; i < span.num_tokens; ++i) {
            const int64_t row = span.row_begin + i, pos = int64_t(span.start_pos) + i;
            if (pos < img->prompt_tokens())
                for (size_t k = 0; k < 3; ++k)
                    batch.mrope_positions[size_t(int64_t(k) * T + row)] = img->positions.pos[k][size_t(pos)];
            const int64_t token = pos + token_offset;
            if (token >= img->prompt_tokens()) continue;
            const int32_t e = img->embed_index[size_t(token)];
            if (e < 0) continue;
            batch.embed_rows.push_back(int32_t(row));
            batch.embeds.insert(batch.embeds.end(), img->embeds.begin() + e * H, img->embeds.begin() + (e + 1) * H);
        }
    }
}

}  // namespace qs
