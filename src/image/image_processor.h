// The Qwen2-VL/Qwen3-VL image processor of transformers 5.17 (Qwen2VLImageProcessorPil, which
// Qwen3.5/3.6 checkpoints use), reproduced: smart_resize to a multiple of patch × merge within
// [min_pixels, max_pixels], Pillow-exact bicubic resize (image/resample), rescale (× 1/255 in
// double, then float), normalise ((x - mean) / std in float), and the patch flattening into
// (grid_t·grid_h·grid_w, C·T·P·P) rows ordered (merge block row, merge block column, row in
// block, column in block), each row (channel, temporal, patch row, patch column); a still image
// is repeated temporal_patch_size times. docs/VISION.md says how this compares with the
// torchvision backend. Any thread; no shared state.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "image/image.h"

namespace qs {

// preprocessor_config.json of the checkpoint (the fields the processor reads). Defaults are the
// Qwen3-VL / Qwen3.5 release values, used when a checkpoint has no such file.
struct ImageProcessorConfig {
    int64_t min_pixels = 65536;       // size.shortest_edge (or min_pixels)
    int64_t max_pixels = 16777216;    // size.longest_edge (or max_pixels)
    int patch_size = 16;
    int temporal_patch_size = 2;
    int merge_size = 2;
    double rescale_factor = 1.0 / 255.0;
    std::array<float, 3> image_mean = {0.5f, 0.5f, 0.5f};
    std::array<float, 3> image_std = {0.5f, 0.5f, 0.5f};
    bool do_resize = true, do_rescale = true, do_normalize = true;

    int factor() const { return patch_size * merge_size; }
};

// Parses the JSON text of preprocessor_config.json; every bad field is named.
Result<ImageProcessorConfig> parse_image_processor_config(const std::string& json_text);
// Reads DIR/preprocessor_config.json; the defaults above when the file does not exist.
Result<ImageProcessorConfig> load_image_processor_config(const std::string& model_dir);

struct ResizedSize {
    int height = 0;
    int width = 0;
};

// transformers' smart_resize: an aspect ratio above 200 is an error (kInvalidArgument).
Result<ResizedSize> smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels);

struct ImagePatches {
    int grid_t = 0, grid_h = 0, grid_w = 0;  // in patches
    int64_t patch_dim = 0;                   // C · T · P · P
    std::vector<float> values;               // [grid_t·grid_h·grid_w][patch_dim]
    // A video (image/video_processor): grid_t temporal patches, placed in the prompt as grid_t
    // runs of <|video_pad|> (one per temporal patch, each after its timestamp); else a still image.
    bool video = false;

    int64_t rows() const { return int64_t(grid_t) * grid_h * grid_w; }
    // Tokens the image occupies in the prompt after the merger.
    int64_t merged_tokens(int merge_size) const { return rows() / (int64_t(merge_size) * merge_size); }
};

Result<ImagePatches> preprocess_image(const RgbImage& image, const ImageProcessorConfig& cfg);

}  // namespace qs
