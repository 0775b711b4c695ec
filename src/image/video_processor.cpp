// The Qwen3-VL video processor (see video_processor.h).
#include "image/video_processor.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/read_file.h"
#include "image/resample.h"

namespace qs {

namespace {

constexpr const char* kFile = "video_preprocessor_config.json";

Status read_positive(const nlohmann::json& j, const char* key, double* out) {
    if (!j.contains(key) || j[key].is_null()) return Status::ok();
    if (!j[key].is_number() || !(j[key].get<double>() > 0))
        return invalid_argument(fmt::format("{}: '{}' must be a positive number", kFile, key));
    *out = j[key].get<double>();
    return Status::ok();
}

Status read_count(const nlohmann::json& j, const char* key, int64_t* out) {
    if (!j.contains(key) || j[key].is_null()) return Status::ok();
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 1)
        return invalid_argument(fmt::format("{}: '{}' must be an integer >= 1", kFile, key));
    *out = j[key].get<int64_t>();
    return Status::ok();
}

}  // namespace

Result<VideoProcessorConfig> parse_video_processor_config(const std::string& json_text) {
    nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return invalid_argument(fmt::format("{}: not a JSON object", kFile));
    VideoProcessorConfig c;
    // The image fields (size, patch sizes, rescale, mean, std, do_*) parse as in
    // preprocessor_config.json; the video defaults of size stay when the file has none.
    nlohmann::json image_fields = j;
    if (!j.contains("size") && !j.contains("min_pixels") && !j.contains("max_pixels")) {
        image_fields["size"] = {{"shortest_edge", c.image.min_pixels}, {"longest_edge", c.image.max_pixels}};
    }
    auto image = parse_image_processor_config(image_fields.dump());
    if (!image.is_ok()) {
        std::string m = image.status().message();
        const std::string prefix = "preprocessor_config.json: ";
        if (m.rfind(prefix, 0) == 0) m = m.substr(prefix.size());
        return Status(image.status().kind(), fmt::format("{}: {}", kFile, m));
    }
    c.image = image.value();
    QS_RETURN_IF_ERROR(read_positive(j, "fps", &c.fps));
    QS_RETURN_IF_ERROR(read_count(j, "min_frames", &c.min_frames));
    QS_RETURN_IF_ERROR(read_count(j, "max_frames", &c.max_frames));
    if (c.min_frames > c.max_frames)
        return invalid_argument(fmt::format("{}: 'min_frames' exceeds 'max_frames'", kFile));
    if (j.contains("do_sample_frames") && !j["do_sample_frames"].is_null()) {
        if (!j["do_sample_frames"].is_boolean())
            return invalid_argument(fmt::format("{}: 'do_sample_frames' must be a boolean", kFile));
        c.do_sample_frames = j["do_sample_frames"].get<bool>();
    }
    if (j.contains("cap_pixels_per_frame") && j["cap_pixels_per_frame"].is_boolean() &&
        j["cap_pixels_per_frame"].get<bool>())
        return unsupported(fmt::format("{}: 'cap_pixels_per_frame': true is not implemented", kFile));
    return c;
}

Result<VideoProcessorConfig> load_video_processor_config(const std::string& model_dir) {
    const std::filesystem::path path = std::filesystem::path(model_dir) / kFile;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return VideoProcessorConfig{};
    QS_ASSIGN_OR_RETURN(std::string text, read_file(path.string()));
    auto r = parse_video_processor_config(text);
    if (!r.is_ok()) return r.status().with_context(path.string());
    return r;
}

Result<std::vector<int64_t>> sample_frame_indices(int64_t total_frames, std::optional<double> video_fps,
                                                  std::optional<int64_t> num_frames, std::optional<double> fps,
                                                  const VideoProcessorConfig& cfg) {
    if (total_frames < 1) return invalid_argument("the video has no frames");
    if (fps && num_frames) return invalid_argument("'num_frames' and 'fps' are mutually exclusive");
    if (fps && !(*fps > 0)) return invalid_argument("'fps' must be positive");
    if (num_frames && *num_frames < 1) return invalid_argument("'num_frames' must be at least 1");
    int64_t n = 0;
    if (num_frames) {
        n = *num_frames;
    } else {
        const double rate = fps ? *fps : cfg.fps;
        const double src = video_fps && *video_fps > 0 ? *video_fps : 24.0;
        // int(total / metadata.fps * fps): truncation toward zero of a positive double.
        n = int64_t(double(total_frames) / src * rate);
        n = std::min({std::max(n, cfg.min_frames), cfg.max_frames, total_frames});
    }
    // np.linspace(0, total - 1, n).round(): i * step (step = (total - 1) / (n - 1)), the last
    // exactly total - 1, rounded half to even.
    std::vector<int64_t> out(size_t(n), 0);
    const double stop = double(total_frames - 1);
    if (n > 1) {
        const double step = stop / double(n - 1);
        for (int64_t i = 0; i < n; ++i) {
            const double y = step == 0 ? 0.0 : double(i) * step;
            out[size_t(i)] = int64_t(std::nearbyint(y));
        }
        out.back() = int64_t(std::nearbyint(stop));
    }
    return out;
}

Result<ResizedSize> smart_resize_video(int64_t num_frames, int height, int width, int temporal_factor, int factor,
                                       int64_t min_pixels, int64_t max_pixels) {
    if (num_frames < temporal_factor)
        return invalid_argument(fmt::format("a video needs at least {} frames (temporal_patch_size), got {}",
                                            temporal_factor, num_frames));
    if (height <= 0 || width <= 0) return invalid_argument("the video's frames have an empty size");
    double h = height, w = width;
    if (height < factor || width < factor) {
        const double scale = std::max(double(factor) / height, double(factor) / width);
        h = std::trunc(height * scale);
        w = std::trunc(width * scale);
    }
    if (std::max(h, w) / std::min(h, w) > 200)
        return invalid_argument(fmt::format("video frame aspect ratio {}x{} is above 200 (the processor's limit)",
                                            width, height));
    int64_t h_bar = int64_t(std::nearbyint(h / factor)) * factor;
    int64_t w_bar = int64_t(std::nearbyint(w / factor)) * factor;
    const int64_t t_bar = int64_t(std::nearbyint(double(num_frames) / temporal_factor)) * temporal_factor;
    if (t_bar * h_bar * w_bar > max_pixels) {
        const double beta = std::sqrt(double(num_frames) * h * w / double(max_pixels));
        h_bar = std::max<int64_t>(factor, int64_t(std::floor(h / beta / factor)) * factor);
        w_bar = std::max<int64_t>(factor, int64_t(std::floor(w / beta / factor)) * factor);
    } else if (t_bar * h_bar * w_bar < min_pixels) {
        const double beta = std::sqrt(double(min_pixels) / (double(num_frames) * h * w));
        h_bar = int64_t(std::ceil(h * beta / factor)) * factor;
        w_bar = int64_t(std::ceil(w * beta / factor)) * factor;
    }
    return ResizedSize{int(h_bar), int(w_bar)};
}

std::vector<double> frame_timestamps(std::vector<int64_t> indices, double video_fps, int temporal_patch) {
    std::vector<double> out;
    if (indices.empty() || temporal_patch < 1) return out;
    while (indices.size() % size_t(temporal_patch) != 0) indices.push_back(indices.back());
    for (size_t i = 0; i < indices.size(); i += size_t(temporal_patch)) {
        const double a = double(indices[i]) / video_fps, b = double(indices[i + size_t(temporal_patch) - 1]) / video_fps;
        out.push_back((a + b) / 2);
    }
    return out;
}

std::string timestamp_text(double seconds) { return fmt::format("<{:.1f} seconds>", seconds); }

Result<ImagePatches> preprocess_video(const std::vector<RgbImage>& frames, const VideoProcessorConfig& cfg) {
    const ImageProcessorConfig& ic = cfg.image;
    if (frames.empty()) return invalid_argument("the video has no frames");
    for (size_t k = 1; k < frames.size(); ++k)
        if (frames[k].width != frames[0].width || frames[k].height != frames[0].height)
            return invalid_argument(fmt::format("video frame {} is {}x{} but frame 1 is {}x{}; all frames must have "
                                                "one size", k + 1, frames[k].width, frames[k].height, frames[0].width,
                                                frames[0].height));
    const int P = ic.patch_size, M = ic.merge_size, T = ic.temporal_patch_size;
    std::vector<RgbImage> resized;
    std::vector<const RgbImage*> src;
    int H = frames[0].height, W = frames[0].width;
    if (ic.do_resize) {
        QS_ASSIGN_OR_RETURN(ResizedSize sz, smart_resize_video(int64_t(frames.size()), H, W, T, ic.factor(),
                                                               ic.min_pixels, ic.max_pixels));
        if (sz.height != H || sz.width != W) {
            resized.reserve(frames.size());
            for (const RgbImage& f : frames) resized.push_back(resize_bicubic_pil(f, sz.width, sz.height));
            for (const RgbImage& f : resized) src.push_back(&f);
        }
        H = sz.height;
        W = sz.width;
    }
    if (src.empty())
        for (const RgbImage& f : frames) src.push_back(&f);
    if (H % (P * M) != 0 || W % (P * M) != 0)
        return invalid_argument(fmt::format("video frames of {}x{} are not a multiple of patch × merge = {}", W, H,
                                            P * M));
    while (src.size() % size_t(T) != 0) src.push_back(src.back());
    // The torchvision backend fuses rescale into normalise: mean and std divided by the rescale
    // factor (float32 tensors times a Python float), then (float(v) - mean) / std in float32.
    std::array<std::array<float, 256>, 3> lut;
    const float inv_scale = float(1.0 / ic.rescale_factor);
    for (size_t c = 0; c < 3; ++c) {
        const float mean = ic.image_mean[c] * inv_scale, stdv = ic.image_std[c] * inv_scale;
        for (int v = 0; v < 256; ++v) {
            float x = float(v);
            if (ic.do_normalize && ic.do_rescale) x = (x - mean) / stdv;
            else if (ic.do_normalize) x = (x - ic.image_mean[c]) / ic.image_std[c];
            else if (ic.do_rescale) x = x * float(ic.rescale_factor);
            lut[c][size_t(v)] = x;
        }
    }
    ImagePatches out;
    out.video = true;
    out.grid_t = int(src.size()) / T;
    out.grid_h = H / P;
    out.grid_w = W / P;
    out.patch_dim = int64_t(3) * T * P * P;
    out.values.resize(size_t(out.rows()) * size_t(out.patch_dim));
    float* dst = out.values.data();
    for (int gt = 0; gt < out.grid_t; ++gt)
        for (int bh = 0; bh < out.grid_h / M; ++bh)
            for (int bw = 0; bw < out.grid_w / M; ++bw)
                for (int mh = 0; mh < M; ++mh)
                    for (int mw = 0; mw < M; ++mw) {
                        const int y0 = (bh * M + mh) * P, x0 = (bw * M + mw) * P;
                        for (int c = 0; c < 3; ++c)
                            for (int t = 0; t < T; ++t) {
                                const RgbImage& f = *src[size_t(gt * T + t)];
                                for (int py = 0; py < P; ++py) {
                                    const uint8_t* s = f.row(y0 + py) + size_t(x0) * 3 + size_t(c);
                                    for (int px = 0; px < P; ++px) *dst++ = lut[size_t(c)][s[size_t(px) * 3]];
                                }
                            }
                    }
    return out;
}

}  // namespace qs
