// WeightHandle: which entry of a backend's own weight tables holds its copy of a weight view.
// Building a WeightSet (backend/weight_set.h) numbers every view it lists — one counter per kind
// of view, in the set's order — and writes the number into the view; a backend that keeps copies
// (CUDA) files each copy at that number and an op reads its copy straight from the view it is
// handed: no lookup by host address. The number depends only on the set's order, so several
// backends may prepare the same weights. The CPU backend reads the host data and ignores it.
// ParamVector: a small fp32 parameter vector (norm weights, A_log, dt_bias, conv taps) with
// its handle. Written on the thread that builds the set, before any forward.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace qs {

struct WeightHandle {
    int32_t index = -1;  // -1: not in a prepared WeightSet
    bool valid() const { return index >= 0; }
};

// A std::vector<float> (the CPU backend and the loaders use it as one) that carries its handle.
struct ParamVector : std::vector<float> {
    using std::vector<float>::vector;
    ParamVector() = default;
    ParamVector(std::vector<float> values) : std::vector<float>(std::move(values)) {}  // NOLINT: a vector is one
    WeightHandle handle{};
};

}  // namespace qs
