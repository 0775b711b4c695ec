// A vision tower of random weights (`--load-format dummy --dummy-vision`): the config's shapes,
// values from the dummy weights' streams (model/dummy_values.h, keyed by seed and tensor name),
// scaled so activations stay O(1) through the blocks: linears uniform with std ≈ 1/sqrt(in),
// biases and the position table small, LayerNorm weights near 1. For benchmarks of image load;
// its embeddings mean nothing.
#pragma once

#include <cstdint>

#include "config/vision_config.h"
#include "model/vision_tower.h"

namespace qs {

VisionTower make_dummy_vision_tower(const VisionConfig& cfg, uint64_t seed);

}  // namespace qs
