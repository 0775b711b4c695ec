// Row and column selections of weight tensors: the pieces a tensor-parallel rank keeps
// (model/tensor_parallel.h). Dense formats split anywhere; FP8 blocks only on 128-element block
// edges (their scales are per 128×128 block), else an error naming the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/linear_weight.h"
#include "core/status.h"

namespace qs {

struct IndexRange {
    int64_t begin = 0, count = 0;
};

// The rows `ranges` of a row-major [rows, cols] buffer, one range after another: a view when
// there is one range, else a copy.
WeightBuffer select_rows(const WeightBuffer& b, const std::vector<IndexRange>& ranges);
// The columns [cols.begin, cols.begin + cols.count) of a row-major [rows, cols] buffer (a copy).
WeightBuffer select_columns(const WeightBuffer& b, IndexRange cols);
// Rows (elements of width `width`) of a float vector, one range after another.
std::vector<float> select_rows(const std::vector<float>& v, int64_t width, const std::vector<IndexRange>& ranges);

// W restricted to the output features `ranges` (rows of W), resp. to the input features `cols`.
Result<LinearWeight> linear_rows(const LinearWeight& w, const std::vector<IndexRange>& ranges, const std::string& name);
Result<LinearWeight> linear_columns(const LinearWeight& w, IndexRange cols, const std::string& name);

}  // namespace qs
