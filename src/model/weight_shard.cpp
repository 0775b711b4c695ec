// Row and column selections of weight tensors (see weight_shard.h).
#include "model/weight_shard.h"

#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "core/check.h"

namespace qs {
namespace {

WeightBuffer owned_buffer(DType dtype, std::vector<int64_t> shape) {
    WeightBuffer out;
    out.dtype = dtype;
    out.shape = std::move(shape);
    const size_t bytes = size_t(out.numel()) * dtype_size(dtype);
    std::shared_ptr<uint8_t[]> block(new uint8_t[bytes > 0 ? bytes : 1]);
    out.data = block.get();
    out.owner = std::shared_ptr<const void>(block, block.get());
    return out;
}

int64_t total_count(const std::vector<IndexRange>& ranges) {
    int64_t n = 0;
    for (const IndexRange& r : ranges) n += r.count;
    return n;
}

// FP8 blocks split only where a 128-element block starts; a range may end at the dimension's end.
Status check_block_aligned(IndexRange r, int64_t dim, const std::string& name, const char* what) {
    const bool aligned = r.begin % kFp8BlockSize == 0 && (r.count % kFp8BlockSize == 0 || r.begin + r.count == dim);
    if (aligned) return Status::ok();
    return invalid_argument(fmt::format("{}: an FP8 block-scaled weight splits only on {}-element block edges, and "
                                        "this split takes {} [{}, {}) of {}",
                                        name, kFp8BlockSize, what, r.begin, r.begin + r.count, dim));
}

IndexRange block_range(IndexRange r) {
    return {r.begin / kFp8BlockSize, fp8_num_blocks(r.begin + r.count) - r.begin / kFp8BlockSize};
}

}  // namespace

WeightBuffer select_rows(const WeightBuffer& b, const std::vector<IndexRange>& ranges) {
    QS_CHECK(b.shape.size() == 2);
    const int64_t rows = b.shape[0], cols = b.shape[1];
    for (const IndexRange& r : ranges) QS_CHECK(r.begin >= 0 && r.count >= 0 && r.begin + r.count <= rows);
    if (ranges.size() == 1) return b.slice(ranges[0].begin * cols, {ranges[0].count, cols});
    WeightBuffer out = owned_buffer(b.dtype, {total_count(ranges), cols});
    const size_t row_bytes = size_t(cols) * dtype_size(b.dtype);
    auto* dst = static_cast<uint8_t*>(const_cast<void*>(out.data));
    for (const IndexRange& r : ranges) {
        std::memcpy(dst, static_cast<const uint8_t*>(b.data) + size_t(r.begin) * row_bytes, size_t(r.count) * row_bytes);
        dst += size_t(r.count) * row_bytes;
    }
    return out;
}

WeightBuffer select_columns(const WeightBuffer& b, IndexRange c) {
    QS_CHECK(b.shape.size() == 2);
    const int64_t rows = b.shape[0], cols = b.shape[1];
    QS_CHECK(c.begin >= 0 && c.count >= 0 && c.begin + c.count <= cols);
    WeightBuffer out = owned_buffer(b.dtype, {rows, c.count});
    const size_t es = dtype_size(b.dtype);
    auto* dst = static_cast<uint8_t*>(const_cast<void*>(out.data));
    const auto* src = static_cast<const uint8_t*>(b.data);
    for (int64_t i = 0; i < rows; ++i)
        std::memcpy(dst + size_t(i * c.count) * es, src + size_t(i * cols + c.begin) * es, size_t(c.count) * es);
    return out;
}

std::vector<float> select_rows(const std::vector<float>& v, int64_t width, const std::vector<IndexRange>& ranges) {
    std::vector<float> out;
    out.reserve(size_t(total_count(ranges) * width));
    for (const IndexRange& r : ranges) {
        QS_CHECK(r.begin >= 0 && (r.begin + r.count) * width <= int64_t(v.size()));
        out.insert(out.end(), v.begin() + r.begin * width, v.begin() + (r.begin + r.count) * width);
    }
    return out;
}

Result<LinearWeight> linear_rows(const LinearWeight& w, const std::vector<IndexRange>& ranges, const std::string& name) {
    LinearWeight out = w;
    out.out_features = total_count(ranges);
    out.weight = select_rows(w.weight, ranges);
    if (w.format == WeightFormat::kFP8Block) {
        std::vector<IndexRange> blocks;
        for (const IndexRange& r : ranges) {
            QS_RETURN_IF_ERROR(check_block_aligned(r, w.out_features, name, "rows"));
            blocks.push_back(block_range(r));
        }
        out.scale_inv = select_rows(w.scale_inv, blocks);
    } else if (w.format != WeightFormat::kDense) {
        return invalid_argument(fmt::format("{}: tensor parallel cannot split weight format '{}'", name,
                                            weight_format_name(w.format)));
    }
    return out;
}

Result<LinearWeight> linear_columns(const LinearWeight& w, IndexRange cols, const std::string& name) {
    LinearWeight out = w;
    out.in_features = cols.count;
    out.weight = select_columns(w.weight, cols);
    if (w.format == WeightFormat::kFP8Block) {
        QS_RETURN_IF_ERROR(check_block_aligned(cols, w.in_features, name, "columns"));
        out.scale_inv = select_columns(w.scale_inv, block_range(cols));
    } else if (w.format != WeightFormat::kDense) {
        return invalid_argument(fmt::format("{}: tensor parallel cannot split weight format '{}'", name,
                                            weight_format_name(w.format)));
    }
    return out;
}

}  // namespace qs
