// Prompt runs of image and video pads (see media_runs.h).
#include "model/media_runs.h"

#include <fmt/format.h>

namespace qs {

Result<std::vector<MediaRun>> media_runs(const std::vector<int32_t>& prompt, int64_t image_token_id,
                                         int64_t video_token_id, const std::vector<const ImagePatches*>& media,
                                         int merge) {
    std::vector<MediaRun> runs;
    auto is_pad = [&](int32_t t) { return t == image_token_id || (video_token_id >= 0 && t == video_token_id); };
    auto name = [&](size_t m) {
        size_t k = 0;  // 1-based index among the media of its kind
        for (size_t j = 0; j <= m; ++j) k += media[j]->video == media[m]->video;
        return fmt::format("{} {}", media[m]->video ? "video" : "image", k);
    };
    size_t next = 0;     // next media to start
    int frames_left = 0;  // temporal patches of media[next - 1] still to place
    size_t i = 0;
    while (i < prompt.size()) {
        if (!is_pad(prompt[i])) {
            ++i;
            continue;
        }
        const int32_t tok = prompt[i];
        size_t end = i;
        while (end < prompt.size() && prompt[end] == tok) ++end;
        const bool video = tok == video_token_id;
        MediaRun run{i, end, 0, 0, video};
        if (video && frames_left > 0) {
            run.media = next - 1;
            run.frame = media[run.media]->grid_t - frames_left;
            --frames_left;
        } else {
            if (frames_left > 0)
                return invalid_argument(fmt::format("{} has {} of its {} frame placeholder runs in the prompt",
                                                    name(next - 1), media[next - 1]->grid_t - frames_left,
                                                    media[next - 1]->grid_t));
            if (next >= media.size())
                return invalid_argument(fmt::format("the prompt has more {} placeholder runs than the {} images and "
                                                    "videos given", video ? "video" : "image", media.size()));
            if (media[next]->video != video)
                return invalid_argument(fmt::format("{} is placed where the prompt has {} placeholders", name(next),
                                                    video ? "video" : "image"));
            run.media = next++;
            if (video) frames_left = media[run.media]->grid_t - 1;
        }
        const ImagePatches& m = *media[run.media];
        if (m.grid_h % merge != 0 || m.grid_w % merge != 0 || m.grid_h < merge || m.grid_w < merge || m.grid_t < 1)
            return invalid_argument(fmt::format("{} grid {}x{}x{} is not a multiple of the merge size {}",
                                                name(run.media), m.grid_t, m.grid_h, m.grid_w, merge));
        const size_t per_frame = size_t(m.grid_h / merge) * size_t(m.grid_w / merge);
        const size_t want = video ? per_frame : per_frame * size_t(m.grid_t);
        if (end - i != want)
            return invalid_argument(fmt::format("{} has {} placeholder tokens{}, its grid needs {}", name(run.media),
                                                end - i, video ? fmt::format(" in frame {}", run.frame + 1) : "", want));
        runs.push_back(run);
        i = end;
    }
    if (frames_left > 0)
        return invalid_argument(fmt::format("{} has {} of its {} frame placeholder runs in the prompt", name(next - 1),
                                            media[next - 1]->grid_t - frames_left, media[next - 1]->grid_t));
    if (next != media.size())
        return invalid_argument(fmt::format("{} images and videos given, {} placed in the prompt", media.size(), next));
    return runs;
}

}  // namespace qs
