#include "config/vision_config.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace qs {

namespace {

Status read_pos_int(const nlohmann::json& j, const char* key, int* out) {
    if (!j.contains(key) || j[key].is_null()) return Status::ok();
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < 1 || j[key].get<int64_t>() > (1 << 24)) {
        return invalid_argument(fmt::format("vision_config.{} must be a positive integer", key));
    }
    *out = j[key].get<int>();
    return Status::ok();
}

}  // namespace

Result<VisionConfig> parse_vision_config(const nlohmann::json& j) {
    if (!j.is_object()) return invalid_argument("vision_config must be an object");
    VisionConfig c;
    QS_RETURN_IF_ERROR(read_pos_int(j, "depth", &c.depth));
    QS_RETURN_IF_ERROR(read_pos_int(j, "hidden_size", &c.hidden_size));
    QS_RETURN_IF_ERROR(read_pos_int(j, "intermediate_size", &c.intermediate_size));
    QS_RETURN_IF_ERROR(read_pos_int(j, "num_heads", &c.num_heads));
    QS_RETURN_IF_ERROR(read_pos_int(j, "in_channels", &c.in_channels));
    QS_RETURN_IF_ERROR(read_pos_int(j, "patch_size", &c.patch_size));
    QS_RETURN_IF_ERROR(read_pos_int(j, "spatial_merge_size", &c.spatial_merge_size));
    QS_RETURN_IF_ERROR(read_pos_int(j, "temporal_patch_size", &c.temporal_patch_size));
    QS_RETURN_IF_ERROR(read_pos_int(j, "out_hidden_size", &c.out_hidden_size));
    QS_RETURN_IF_ERROR(read_pos_int(j, "num_position_embeddings", &c.num_position_embeddings));
    if (j.contains("hidden_act") && !j["hidden_act"].is_null()) {
        if (!j["hidden_act"].is_string()) return invalid_argument("vision_config.hidden_act must be a string");
        c.hidden_act = j["hidden_act"].get<std::string>();
    }
    if (c.hidden_act != "gelu_pytorch_tanh") {
        return unsupported(fmt::format("vision_config.hidden_act '{}' is not implemented (gelu_pytorch_tanh is)", c.hidden_act));
    }
    if (c.hidden_size % c.num_heads != 0 || c.head_dim() % 4 != 0) {
        return invalid_argument("vision_config: hidden_size / num_heads must be a multiple of 4 (2-D rotary halves)");
    }
    const int side = int(std::lround(std::sqrt(double(c.num_position_embeddings))));
    if (side * side != c.num_position_embeddings) {
        return invalid_argument("vision_config.num_position_embeddings must be a square (a side × side grid)");
    }
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
        const auto& r = j["rope_parameters"];
        if (r.contains("rope_type") && r["rope_type"] != "axial") {
            return unsupported("vision_config.rope_parameters.rope_type must be 'axial'");
        }
        if (r.contains("rope_theta")) {
            if (!r["rope_theta"].is_number() || !(r["rope_theta"].get<double>() > 0)) {
                return invalid_argument("vision_config.rope_parameters.rope_theta must be a positive number");
            }
            c.rope_theta = r["rope_theta"].get<double>();
        }
    }
    return c;
}

}  // namespace qs
