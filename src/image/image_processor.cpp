#include "image/image_processor.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "image/resample.h"
#include "core/read_file.h"

namespace qs {

namespace {

Status read_int(const nlohmann::json& j, const char* key, int64_t lo, int64_t* out) {
    if (!j.contains(key) || j[key].is_null()) return Status::ok();
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < lo) {
        return invalid_argument(fmt::format("preprocessor_config.json: '{}' must be an integer >= {}", key, lo));
    }
    *out = j[key].get<int64_t>();
    return Status::ok();
}

Status read_triple(const nlohmann::json& j, const char* key, bool positive, std::array<float, 3>* out) {
    if (!j.contains(key) || j[key].is_null()) return Status::ok();
    const auto& v = j[key];
    if (v.is_number()) {
        out->fill(v.get<float>());
    } else if (v.is_array() && v.size() == 3 && v[0].is_number() && v[1].is_number() && v[2].is_number()) {
        for (size_t i = 0; i < 3; ++i) (*out)[i] = v[i].get<float>();
    } else {
        return invalid_argument(fmt::format("preprocessor_config.json: '{}' must be a number or 3 numbers", key));
    }
    if (positive) {
        for (float x : *out) {
            if (!(x > 0)) return invalid_argument(fmt::format("preprocessor_config.json: '{}' must be positive", key));
        }
    }
    return Status::ok();
}

Status read_bool(const nlohmann::json& j, const char* key, bool* out) {
    if (!j.contains(key) || j[key].is_null()) return Status::ok();
    if (!j[key].is_boolean()) return invalid_argument(fmt::format("preprocessor_config.json: '{}' must be a boolean", key));
    *out = j[key].get<bool>();
    return Status::ok();
}

}  // namespace

Result<ImageProcessorConfig> parse_image_processor_config(const std::string& json_text) {
    nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        return invalid_argument("preprocessor_config.json: not a JSON object");
    }
    ImageProcessorConfig c;
    int64_t patch = c.patch_size, tpatch = c.temporal_patch_size, merge = c.merge_size;
    QS_RETURN_IF_ERROR(read_int(j, "patch_size", 1, &patch));
    QS_RETURN_IF_ERROR(read_int(j, "temporal_patch_size", 1, &tpatch));
    QS_RETURN_IF_ERROR(read_int(j, "merge_size", 1, &merge));
    c.patch_size = int(patch);
    c.temporal_patch_size = int(tpatch);
    c.merge_size = int(merge);
    // As the processor's __init__: size {shortest_edge, longest_edge}, overridden by the
    // top-level min_pixels / max_pixels when present.
    if (j.contains("size") && j["size"].is_object()) {
        QS_RETURN_IF_ERROR(read_int(j["size"], "shortest_edge", 1, &c.min_pixels));
        QS_RETURN_IF_ERROR(read_int(j["size"], "longest_edge", 1, &c.max_pixels));
    }
    QS_RETURN_IF_ERROR(read_int(j, "min_pixels", 1, &c.min_pixels));
    QS_RETURN_IF_ERROR(read_int(j, "max_pixels", 1, &c.max_pixels));
    if (c.min_pixels > c.max_pixels) {
        return invalid_argument("preprocessor_config.json: min_pixels (size.shortest_edge) exceeds max_pixels");
    }
    if (j.contains("rescale_factor") && !j["rescale_factor"].is_null()) {
        if (!j["rescale_factor"].is_number()) {
            return invalid_argument("preprocessor_config.json: 'rescale_factor' must be a number");
        }
        c.rescale_factor = j["rescale_factor"].get<double>();
    }
    QS_RETURN_IF_ERROR(read_triple(j, "image_mean", false, &c.image_mean));
    QS_RETURN_IF_ERROR(read_triple(j, "image_std", true, &c.image_std));
    QS_RETURN_IF_ERROR(read_bool(j, "do_resize", &c.do_resize));
    QS_RETURN_IF_ERROR(read_bool(j, "do_rescale", &c.do_rescale));
    QS_RETURN_IF_ERROR(read_bool(j, "do_normalize", &c.do_normalize));
    if (j.contains("resample") && !(j["resample"].is_number_integer() && j["resample"].get<int>() == 3)) {
        return unsupported("preprocessor_config.json: only 'resample': 3 (bicubic) is implemented");
    }
    return c;
}

Result<ImageProcessorConfig> load_image_processor_config(const std::string& model_dir) {
    const std::filesystem::path path = std::filesystem::path(model_dir) / "preprocessor_config.json";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return ImageProcessorConfig{};
    QS_ASSIGN_OR_RETURN(std::string text, read_file(path.string()));
    auto r = parse_image_processor_config(text);
    if (!r.is_ok()) return r.status().with_context(path.string());
    return r;
}

Result<ResizedSize> smart_resize(int height, int width, int factor, int64_t min_pixels, int64_t max_pixels) {
    if (height <= 0 || width <= 0) return invalid_argument("image has an empty size");
    const double ratio = double(std::max(height, width)) / double(std::min(height, width));
    if (ratio > 200) {
        return invalid_argument(fmt::format("image aspect ratio {}x{} is above 200 (the processor's limit)", width, height));
    }
    // Python's round() is round-half-to-even: std::nearbyint under the default rounding mode.
    int64_t h_bar = int64_t(std::nearbyint(double(height) / factor)) * factor;
    int64_t w_bar = int64_t(std::nearbyint(double(width) / factor)) * factor;
    if (h_bar * w_bar > max_pixels) {
        const double beta = std::sqrt(double(height) * double(width) / double(max_pixels));
        h_bar = std::max<int64_t>(factor, int64_t(std::floor(double(height) / beta / factor)) * factor);
        w_bar = std::max<int64_t>(factor, int64_t(std::floor(double(width) / beta / factor)) * factor);
    } else if (h_bar * w_bar < min_pixels) {
        const double beta = std::sqrt(double(min_pixels) / (double(height) * double(width)));
        h_bar = int64_t(std::ceil(double(height) * beta / factor)) * factor;
        w_bar = int64_t(std::ceil(double(width) * beta / factor)) * factor;
    }
    return ResizedSize{int(h_bar), int(w_bar)};
}

Result<ImagePatches> preprocess_image(const RgbImage& image, const ImageProcessorConfig& cfg) {
    RgbImage resized;
    const RgbImage* img = &image;
    if (cfg.do_resize) {
        QS_ASSIGN_OR_RETURN(ResizedSize sz, smart_resize(image.height, image.width, cfg.factor(), cfg.min_pixels,
                                                         cfg.max_pixels));
        resized = resize_bicubic_pil(image, sz.width, sz.height);
        img = &resized;
    }
    const int P = cfg.patch_size, M = cfg.merge_size, T = cfg.temporal_patch_size;
    if (img->height % (P * M) != 0 || img->width % (P * M) != 0) {
        return invalid_argument(fmt::format("image of {}x{} is not a multiple of patch × merge = {}", img->width,
                                            img->height, P * M));
    }
    // Pixel values in float as transformers computes them: float32(double(u8) · scale), then
    // (x - mean) / std in float32.
    std::array<std::array<float, 256>, 3> lut;
    for (int c = 0; c < 3; ++c) {
        for (int v = 0; v < 256; ++v) {
            float x = cfg.do_rescale ? float(double(v) * cfg.rescale_factor) : float(v);
            if (cfg.do_normalize) x = (x - cfg.image_mean[size_t(c)]) / cfg.image_std[size_t(c)];
            lut[size_t(c)][size_t(v)] = x;
        }
    }
    ImagePatches out;
    out.grid_t = 1;
    out.grid_h = img->height / P;
    out.grid_w = img->width / P;
    out.patch_dim = int64_t(3) * T * P * P;
    out.values.resize(size_t(out.rows()) * size_t(out.patch_dim));
    float* dst = out.values.data();
    for (int bh = 0; bh < out.grid_h / M; ++bh) {
        for (int bw = 0; bw < out.grid_w / M; ++bw) {
            for (int mh = 0; mh < M; ++mh) {
                for (int mw = 0; mw < M; ++mw) {
                    const int y0 = (bh * M + mh) * P, x0 = (bw * M + mw) * P;
                    for (int c = 0; c < 3; ++c) {
                        for (int t = 0; t < T; ++t) {
                            for (int py = 0; py < P; ++py) {
                                const uint8_t* src = img->row(y0 + py) + size_t(x0) * 3 + size_t(c);
                                for (int px = 0; px < P; ++px) *dst++ = lut[size_t(c)][src[size_t(px) * 3]];
                            }
                        }
                    }
                }
            }
        }
    }
    return out;
}

}  // namespace qs
