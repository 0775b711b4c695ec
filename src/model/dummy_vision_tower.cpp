#include "model/dummy_vision_tower.h"

#include <cmath>
#include <functional>
#include <numeric>

#include "core/check.h"
#include "model/dummy_values.h"

namespace qs {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

VisionTower make_dummy_vision_tower(const VisionConfig& cfg, uint64_t seed) {
    auto read = [seed](const std::string& name, const std::vector<int64_t>& shape) -> Result<std::vector<float>> {
        const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<>());
        // Uniform in [lo, hi): a matrix's fan-in is every dimension after the first (the Conv3d's C·T·P·P).
        float lo = -0.02f, hi = 0.02f;  // biases, the position table
        const bool norm = name.find("norm") != std::string::npos;
        if (norm && ends_with(name, ".weight")) {
            lo = 0.9f;
            hi = 1.1f;
        } else if (!norm && ends_with(name, ".weight") && shape.size() >= 2 && name != "pos_embed.weight") {
            const float a = std::sqrt(3.0f / float(n / shape[0]));  // std 1/sqrt(fan-in)
            lo = -a;
            hi = a;
        }
        std::vector<float> v(static_cast<size_t>(n));
        const uint64_t key = dummy::splitmix64(seed ^ dummy::name_hash("model.visual." + name));
        const int64_t chunks = (n + dummy::kChunk - 1) / dummy::kChunk;
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < chunks; ++c) {
            const int64_t first = c * dummy::kChunk;
            dummy::fill_stream(key, first, std::min(dummy::kChunk, n - first), lo, hi, v.data() + first);
        }
        return v;
    };
    Result<VisionTower> t = VisionTower::build(cfg, read);
    QS_CHECK(t.is_ok());  // the reader makes every shape asked for
    return std::move(t).value();
}

}  // namespace qs
