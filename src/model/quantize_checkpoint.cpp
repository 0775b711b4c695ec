// `quantize`: BF16/F16/F32 checkpoint → FP8 block-scaled checkpoint (see quantize_checkpoint.h).
// Streaming: the output is planned tensor by tensor from the input's headers, then made one shard
// at a time (quantised tensors in memory only for the shard being written; copied tensors are
// written straight from the input's mmap), so memory stays around one shard whatever the model.
#include "model/quantize_checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/model_config.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/timer.h"
#include "io/checkpoint.h"
#include "model/fp8_block.h"
#include "model/weights.h"

namespace qs {

namespace {

namespace fs = std::filesystem;

// One output tensor (kCopy) or one quantised pair `name` + `scale_name` (kQuantize) made from
// the matrix [rows, cols] that starts `offset` elements into the source tensor.
struct OutItem {
    enum Kind { kCopy, kQuantize } kind = kCopy;
    std::string name, scale_name;
    const TensorInfo* src = nullptr;
    int64_t offset = 0, rows = 0, cols = 0;
    size_t bytes = 0;
};

// Rows [r0, r0 + n) of a [rows, cols] matrix starting `offset` elements into `src`, as float32.
void load_rows(const TensorInfo& src, int64_t offset, int64_t cols, int64_t r0, int64_t n, float* out) {
    const size_t first = size_t(offset + r0 * cols), count = size_t(n * cols);
    const uint8_t* p = src.data + first * dtype_size(src.dtype);
    switch (src.dtype) {
        case DType::kF32: std::memcpy(out, p, count * 4); return;
        case DType::kBF16:
            for (size_t i = 0; i < count; ++i) {
                uint16_t b;
                std::memcpy(&b, p + 2 * i, 2);
                out[i] = bits_to_f32(uint32_t(b) << 16);
            }
            return;
        default:
            for (size_t i = 0; i < count; ++i) out[i] = load_as_f32(p, src.dtype, i);
    }
}

Result<nlohmann::ordered_json> read_json(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return not_found(path + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    auto j = nlohmann::ordered_json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return corrupt_data(path + ": not a JSON object");
    return j;
}

Status write_text(const std::string& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) return io_error(path + ": write failed");
    return Status::ok();
}

// Plans the output tensors of the checkpoint (see the header for the rules).
std::vector<OutItem> plan(const Checkpoint& ckpt, const QuantizeOptions& o) {
    std::vector<OutItem> items;
    auto quantized = [&](std::string name, const TensorInfo* t, int64_t offset, int64_t rows, int64_t cols) {
        OutItem it;
        it.kind = OutItem::kQuantize;
        it.scale_name = name + "_scale_inv";
        it.name = std::move(name);
        it.src = t;
        it.offset = offset;
        it.rows = rows;
        it.cols = cols;
        it.bytes = size_t(rows * cols) + size_t(fp8_num_blocks(rows) * fp8_num_blocks(cols)) * dtype_size(o.scale_dtype);
        items.push_back(std::move(it));
    };
    for (const std::string& n : ckpt.names()) {
        const TensorInfo* t = ckpt.find(n);
        const bool fused_gate_up = n.ends_with("mlp.experts.gate_up_proj");
        const bool fused_down = n.ends_with("mlp.experts.down_proj");
        if ((fused_gate_up || fused_down) && t->shape.size() == 3 && fp8_role(n) == Fp8Role::kQuantized) {
            const std::string p = n.substr(0, n.size() - (fused_gate_up ? 12 : 9));  // "…mlp.experts."
            const int64_t E = t->shape[0], R = t->shape[1], C = t->shape[2];
            for (int64_t e = 0; e < E; ++e) {
                const std::string q = fmt::format("{}{}.", p, e);
                if (fused_gate_up) {
                    quantized(q + "gate_proj.weight", t, e * R * C, R / 2, C);
                    quantized(q + "up_proj.weight", t, e * R * C + (R / 2) * C, R / 2, C);
                } else {
                    quantized(q + "down_proj.weight", t, e * R * C, R, C);
                }
            }
            continue;
        }
        if (n.ends_with(".weight") && t->shape.size() == 2 && fp8_role(n.substr(0, n.size() - 7)) == Fp8Role::kQuantized) {
            quantized(n, t, 0, t->shape[0], t->shape[1]);
            continue;
        }
        OutItem it;
        it.name = n;
        it.src = t;
        it.bytes = t->nbytes;
        items.push_back(std::move(it));
    }
    return items;
}

// Quantises the kQuantize items of one shard (in parallel over 128-row block rows) into owned
// buffers and writes the shard.
// `progress` advances by the output bytes made: the FP8 codes as each block row is quantised,
// the copied tensors and the scales when the shard is written.
Status write_shard(const std::string& path, const std::vector<const OutItem*>& items, DType scale_dtype,
                   Progress& progress) {
    struct Made {
        std::vector<uint8_t> codes, scales;
    };
    std::vector<Made> made(items.size());
    std::vector<std::pair<size_t, int64_t>> tasks;  // (item, block row)
    for (size_t i = 0; i < items.size(); ++i) {
        const OutItem& it = *items[i];
        if (it.kind != OutItem::kQuantize) continue;
        made[i].codes.resize(size_t(it.rows * it.cols));
        made[i].scales.resize(size_t(fp8_num_blocks(it.rows) * fp8_num_blocks(it.cols)) * dtype_size(scale_dtype));
        for (int64_t b = 0; b < fp8_num_blocks(it.rows); ++b) tasks.emplace_back(i, b);
    }
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::string bad;
#pragma omp parallel
    {
        std::vector<float> rows;
#pragma omp for schedule(dynamic, 1)
        for (size_t k = 0; k < tasks.size(); ++k) {
            if (failed.load(std::memory_order_relaxed)) continue;
            const auto [i, b] = tasks[k];
            const OutItem& it = *items[i];
            const int64_t r0 = b * kFp8BlockSize, n = std::min(kFp8BlockSize, it.rows - r0);
            rows.resize(size_t(n * it.cols));
            load_rows(*it.src, it.offset, it.cols, r0, n, rows.data());
            const size_t scale_at = size_t(b * fp8_num_blocks(it.cols)) * dtype_size(scale_dtype);
            if (!quantize_fp8_block_row(rows.data(), n, it.cols, scale_dtype, made[i].codes.data() + r0 * it.cols,
                                        made[i].scales.data() + scale_at)) {
                std::lock_guard<std::mutex> lock(mu);
                if (!failed.exchange(true)) bad = it.src->name;
            }
            progress.advance(double(n * it.cols));
        }
    }
    if (failed) return invalid_argument(fmt::format("tensor {} holds NaN or infinite values; it cannot be quantised", bad));

    std::vector<TensorToWrite> views;
    for (size_t i = 0; i < items.size(); ++i) {
        const OutItem& it = *items[i];
        if (it.kind == OutItem::kCopy) {
            views.push_back({it.name, it.src->dtype, it.src->shape, it.src->data});
        } else {
            views.push_back({it.name, DType::kF8E4M3, {it.rows, it.cols}, made[i].codes.data()});
            views.push_back({it.scale_name, scale_dtype, {fp8_num_blocks(it.rows), fp8_num_blocks(it.cols)},
                             made[i].scales.data()});
        }
    }
    // Largest element first: every tensor stays aligned to its element size.
    std::stable_sort(views.begin(), views.end(), [](const TensorToWrite& a, const TensorToWrite& b) {
        return dtype_size(a.dtype) > dtype_size(b.dtype);
    });
    QS_RETURN_IF_ERROR(write_safetensors(path, views, {{"format", "pt"}}));
    size_t rest = 0;
    for (const OutItem* it : items) rest += it->kind == OutItem::kCopy ? it->bytes : it->bytes - size_t(it->rows * it->cols);
    progress.advance(double(rest));
    return Status::ok();
}

Status convert(const std::string& in_dir, const std::string& tmp, const QuantizeOptions& o) {
    Timer timer;
    QS_ASSIGN_OR_RETURN(nlohmann::ordered_json raw_config, read_json((fs::path(in_dir) / "config.json").string()));
    QS_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(in_dir));
    if (config.quantization.quantized())
        return invalid_argument(in_dir + " is already quantised (config.json has a quantization_config)");
    QS_ASSIGN_OR_RETURN(std::shared_ptr<Checkpoint> ckpt, Checkpoint::open(in_dir));
    for (const std::string& n : ckpt->names())
        if (ckpt->find(n)->dtype == DType::kF8E4M3)
            return invalid_argument(fmt::format("{} is already quantised (tensor {} is F8_E4M3)", in_dir, n));
    {
        // The input must be a complete model: names, shapes and dtypes as the loader wants them.
        auto loaded = load_model_weights(ckpt, config);
        if (!loaded.is_ok()) return loaded.status().with_context(in_dir + " is not a loadable checkpoint");
    }

    const std::vector<OutItem> items = plan(*ckpt, o);
    std::vector<std::vector<const OutItem*>> shards(1);
    size_t shard_bytes = 0, total_bytes = 0, num_quantized = 0;
    for (const OutItem& it : items) {
        if (!shards.back().empty() && shard_bytes + it.bytes > size_t(o.max_shard_bytes)) {
            shards.emplace_back();
            shard_bytes = 0;
        }
        shards.back().push_back(&it);
        shard_bytes += it.bytes;
        total_bytes += it.bytes;
        num_quantized += it.kind == OutItem::kQuantize;
    }

    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    std::vector<std::string> out_names;
    Progress progress("quantizing", double(total_bytes), kProgressGB, o.progress_interval_s, {}, o.progress_sink);
    for (size_t s = 0; s < shards.size(); ++s) {
        const std::string file = shards.size() == 1 ? "model.safetensors"
                                                    : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
        QS_RETURN_IF_ERROR(write_shard((fs::path(tmp) / file).string(), shards[s], o.scale_dtype, progress));
        for (const OutItem* it : shards[s]) {
            weight_map[it->name] = file;
            out_names.push_back(it->name);
            if (it->kind == OutItem::kQuantize) {
                weight_map[it->scale_name] = file;
                out_names.push_back(it->scale_name);
            }
        }
        log_info("quantize: wrote {} ({} of {})", file, s + 1, shards.size());
    }
    progress.finish();
    if (shards.size() > 1) {
        nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
        QS_RETURN_IF_ERROR(write_text((fs::path(tmp) / "model.safetensors.index.json").string(), index.dump(2) + "\n"));
    }

    raw_config["quantization_config"] = quantization_config_to_json(fp8_block_quantization(fp8_unconverted_modules(out_names)));
    QS_RETURN_IF_ERROR(write_text((fs::path(tmp) / "config.json").string(), raw_config.dump(2) + "\n"));

    // Everything else (tokenizer, generation_config, README, ...) is copied.
    std::error_code ec;
    for (fs::directory_iterator d(in_dir, ec), end; !ec && d != end; d.increment(ec)) {
        const std::string name = d->path().filename().string();
        if (name == "config.json" || name == "model.safetensors.index.json" || d->path().extension() == ".safetensors")
            continue;
        fs::copy(d->path(), fs::path(tmp) / name, fs::copy_options::recursive, ec);
        if (ec) return io_error(fmt::format("{}: cannot copy to {}: {}", d->path().string(), tmp, ec.message()));
    }
    if (ec) return io_error(fmt::format("{}: cannot list directory: {}", in_dir, ec.message()));

    // The result must load as the FP8 model it claims to be.
    auto check = load_model_dir(tmp);
    if (!check.is_ok()) return Status(ErrorKind::kInternal, "the written checkpoint does not load: " + check.status().message());
    log_info("quantize: {} linears to FP8 ({} scales), {:.2f} GB in {} shard(s), {:.1f} s", num_quantized,
             dtype_name(o.scale_dtype), double(total_bytes) / 1e9, shards.size(), timer.elapsed_s());
    return Status::ok();
}

}  // namespace

Status quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& o) {
    if (o.scale_dtype != DType::kF32 && o.scale_dtype != DType::kBF16)
        return invalid_argument("the scale dtype must be F32 or BF16");
    if (o.max_shard_bytes <= 0) return invalid_argument("the shard size must be positive");
    std::error_code ec;
    if (!fs::is_directory(in_dir, ec)) return not_found(in_dir + ": no such model directory");
    if (fs::exists(out_dir, ec) || fs::is_symlink(out_dir, ec))
        return invalid_argument(out_dir + " already exists; quantize writes a new directory and never overwrites");
    fs::path out = fs::absolute(out_dir, ec);
    if (out.filename().empty()) out = out.parent_path();  // "dir/" → "dir"
    if (!fs::is_directory(out.parent_path(), ec))
        return not_found(out.parent_path().string() + ": the output's parent directory does not exist");
    const fs::path tmp = out.parent_path() / fmt::format(".{}.partial-{}", out.filename().string(), ::getpid());
    fs::remove_all(tmp, ec);
    if (!fs::create_directory(tmp, ec) || ec)
        return io_error(fmt::format("{}: cannot create: {}", tmp.string(), ec ? ec.message() : "exists"));
    Status s = convert(in_dir, tmp.string(), o);
    if (s.is_ok()) {
        fs::rename(tmp, out, ec);
        if (ec) s = io_error(fmt::format("cannot rename {} to {}: {}", tmp.string(), out.string(), ec.message()));
    }
    if (!s.is_ok()) fs::remove_all(tmp, ec);
    return s;
}

}  // namespace qs
