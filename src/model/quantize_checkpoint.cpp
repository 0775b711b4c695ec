// `quantize`: BF16/F16/F32 checkpoint → FP8 block-scaled, INT4 W4A16 or NVFP4 checkpoint (see
// quantize_checkpoint.h).
// Streaming: the output is planned tensor by tensor from the input's headers, then made one shard
// at a time (quantised tensors in memory only for the shard being written; copied tensors are
// written straight from the input's mmap), so memory stays around one shard whatever the model.
#include "model/quantize_checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/model_config.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/read_file.h"
#include "core/timer.h"
#include "io/checkpoint.h"
#include "model/fp8_block.h"
#include "model/low_bit_rtn.h"
#include "model/weights.h"

namespace qs {

namespace {

namespace fs = std::filesystem;

// One output tensor (kCopy) or one quantised linear `name` = "X.weight" (kQuantize) made from
// the matrix [rows, cols] that starts `offset` elements into the source tensor; its output
// tensors are out_tensors() (fp8-block: `name` + `scale_name`).
struct OutItem {
    enum Kind { kCopy, kQuantize } kind = kCopy;
    std::string name, scale_name;
    const TensorInfo* src = nullptr;
    int64_t offset = 0, rows = 0, cols = 0;
    size_t bytes = 0;
};

bool low_bit(QuantizeFormat f) { return f != QuantizeFormat::kFp8Block; }

std::string module_of(const OutItem& it) { return it.name.substr(0, it.name.size() - 7); }  // − ".weight"

// Bytes of the quantised codes of a kQuantize item (what the per-row progress counts).
size_t code_bytes(const OutItem& it, QuantizeFormat f) {
    return low_bit(f) ? size_t(it.rows * it.cols / 2) : size_t(it.rows * it.cols);
}

// Bytes of everything a kQuantize item writes.
size_t quantized_bytes(const OutItem& it, const QuantizeOptions& o) {
    switch (o.format) {
        case QuantizeFormat::kFp8Block:
            return size_t(it.rows * it.cols) +
                   size_t(fp8_num_blocks(it.rows) * fp8_num_blocks(it.cols)) * dtype_size(o.scale_dtype);
        case QuantizeFormat::kInt4W4A16: return code_bytes(it, o.format) + size_t(it.rows * it.cols / o.group_size) * 2 + 16;
        case QuantizeFormat::kNvfp4: return code_bytes(it, o.format) + size_t(it.rows * it.cols / kNvfp4RtnGroupSize) + 4;
    }
    return 0;
}

// The names of the tensors a kQuantize item writes.
std::vector<std::string> out_tensors(const OutItem& it, QuantizeFormat f) {
    const std::string m = module_of(it);
    switch (f) {
        case QuantizeFormat::kFp8Block: return {it.name, it.scale_name};
        case QuantizeFormat::kInt4W4A16: return {m + ".weight_packed", m + ".weight_scale", m + ".weight_shape"};
        case QuantizeFormat::kNvfp4: return {m + ".weight_packed", m + ".weight_scale", m + ".weight_global_scale"};
    }
    return {};
}

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
    QS_ASSIGN_OR_RETURN(std::string text, read_file(path));
    auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
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
    // The module table: fp8_role for fp8-block, low_bit_quantized for the compressed-tensors formats.
    auto selected = [&](std::string_view module) {
        return low_bit(o.format) ? low_bit_quantized(module) : fp8_role(module) == Fp8Role::kQuantized;
    };
    auto quantized = [&](std::string name, const TensorInfo* t, int64_t offset, int64_t rows, int64_t cols) {
        OutItem it;
        it.kind = OutItem::kQuantize;
        it.scale_name = name + "_scale_inv";
        it.name = std::move(name);
        it.src = t;
        it.offset = offset;
        it.rows = rows;
        it.cols = cols;
        it.bytes = quantized_bytes(it, o);
        items.push_back(std::move(it));
    };
    for (const std::string& n : ckpt.names()) {
        const TensorInfo* t = ckpt.find(n);
        const bool fused_gate_up = n.ends_with("mlp.experts.gate_up_proj");
        const bool fused_down = n.ends_with("mlp.experts.down_proj");
        if ((fused_gate_up || fused_down) && t->shape.size() == 3 && selected(n)) {
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
        if (n.ends_with(".weight") && t->shape.size() == 2 && selected(n.substr(0, n.size() - 7))) {
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

// Quantises the kQuantize items of one shard (in parallel over 128-row chunks) into owned
// buffers and writes the shard. NVFP4 first finds each tensor's global scale (its amax).
// `progress` advances by the output bytes made: the codes as each chunk is quantised, the
// copied tensors and the scales when the shard is written.
Status write_shard(const std::string& path, const std::vector<const OutItem*>& items, const QuantizeOptions& o,
                   Progress& progress) {
    struct Made {
        std::vector<uint8_t> codes, scales;
        float global_scale = 1.0f;  // nvfp4
        int64_t shape[2] = {0, 0};  // int4-w4a16: weight_shape
    };
    const QuantizeFormat f = o.format;
    const int64_t group = f == QuantizeFormat::kNvfp4 ? kNvfp4RtnGroupSize : o.group_size;
    std::vector<Made> made(items.size());
    std::vector<std::pair<size_t, int64_t>> tasks;  // (item, 128-row chunk)
    for (size_t i = 0; i < items.size(); ++i) {
        const OutItem& it = *items[i];
        if (it.kind != OutItem::kQuantize) continue;
        made[i].codes.resize(code_bytes(it, f));
        const size_t num_scales = low_bit(f) ? size_t(it.rows * (it.cols / group))
                                             : size_t(fp8_num_blocks(it.rows) * fp8_num_blocks(it.cols));
        made[i].scales.resize(num_scales * (f == QuantizeFormat::kFp8Block ? dtype_size(o.scale_dtype)
                                            : f == QuantizeFormat::kInt4W4A16 ? 2 : 1));
        made[i].shape[0] = it.rows;
        made[i].shape[1] = it.cols;
        for (int64_t b = 0; b < fp8_num_blocks(it.rows); ++b) tasks.emplace_back(i, b);
    }
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::string bad;
    auto fail = [&](const OutItem& it) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failed.exchange(true)) bad = it.src->name;
    };
    if (f == QuantizeFormat::kNvfp4) {
        std::vector<size_t> todo;
        for (size_t i = 0; i < items.size(); ++i)
            if (items[i]->kind == OutItem::kQuantize) todo.push_back(i);
#pragma omp parallel
        {
            std::vector<float> rows;
#pragma omp for schedule(dynamic, 1)
            for (size_t k = 0; k < todo.size(); ++k) {
                const OutItem& it = *items[todo[k]];
                float amax = 0.0f;
                for (int64_t r0 = 0; r0 < it.rows; r0 += kFp8BlockSize) {
                    const int64_t n = std::min(kFp8BlockSize, it.rows - r0);
                    rows.resize(size_t(n * it.cols));
                    load_rows(*it.src, it.offset, it.cols, r0, n, rows.data());
                    for (float v : rows) amax = std::max(amax, std::fabs(v));  // NaN is caught below
                }
                if (!std::isfinite(amax)) fail(it);
                made[todo[k]].global_scale = nvfp4_global_scale(std::isfinite(amax) ? amax : 0.0f);
            }
        }
    }
#pragma omp parallel
    {
        std::vector<float> rows;
#pragma omp for schedule(dynamic, 1)
        for (size_t k = 0; k < tasks.size(); ++k) {
            if (failed.load(std::memory_order_relaxed)) continue;
            const auto [i, b] = tasks[k];
            const OutItem& it = *items[i];
            Made& m = made[i];
            const int64_t r0 = b * kFp8BlockSize, n = std::min(kFp8BlockSize, it.rows - r0);
            rows.resize(size_t(n * it.cols));
            load_rows(*it.src, it.offset, it.cols, r0, n, rows.data());
            bool ok = false;
            switch (f) {
                case QuantizeFormat::kFp8Block: {
                    const size_t scale_at = size_t(b * fp8_num_blocks(it.cols)) * dtype_size(o.scale_dtype);
                    ok = quantize_fp8_block_row(rows.data(), n, it.cols, o.scale_dtype, m.codes.data() + r0 * it.cols,
                                                m.scales.data() + scale_at);
                    break;
                }
                case QuantizeFormat::kInt4W4A16:
                    ok = quantize_int4_rows(rows.data(), n, it.cols, group,
                                            reinterpret_cast<uint32_t*>(m.codes.data()) + r0 * it.cols / 8,
                                            reinterpret_cast<uint16_t*>(m.scales.data()) + r0 * (it.cols / group));
                    break;
                case QuantizeFormat::kNvfp4:
                    ok = quantize_nvfp4_rows(rows.data(), n, it.cols, m.global_scale, m.codes.data() + r0 * it.cols / 2,
                                             m.scales.data() + r0 * (it.cols / group));
                    break;
            }
            if (!ok) fail(it);
            progress.advance(double(f == QuantizeFormat::kFp8Block ? n * it.cols : n * it.cols / 2));
        }
    }
    if (failed) return invalid_argument(fmt::format("tensor {} holds NaN or infinite values; it cannot be quantised", bad));

    std::vector<TensorToWrite> views;
    for (size_t i = 0; i < items.size(); ++i) {
        const OutItem& it = *items[i];
        Made& m = made[i];
        if (it.kind == OutItem::kCopy) {
            views.push_back({it.name, it.src->dtype, it.src->shape, it.src->data});
            continue;
        }
        const std::vector<std::string> names = out_tensors(it, f);
        switch (f) {
            case QuantizeFormat::kFp8Block:
                views.push_back({names[0], DType::kF8E4M3, {it.rows, it.cols}, m.codes.data()});
                views.push_back({names[1], o.scale_dtype, {fp8_num_blocks(it.rows), fp8_num_blocks(it.cols)},
                                 m.scales.data()});
                break;
            case QuantizeFormat::kInt4W4A16:
                views.push_back({names[0], DType::kI32, {it.rows, it.cols / 8}, m.codes.data()});
                views.push_back({names[1], DType::kBF16, {it.rows, it.cols / group}, m.scales.data()});
                views.push_back({names[2], DType::kI64, {2}, m.shape});
                break;
            case QuantizeFormat::kNvfp4:
                views.push_back({names[0], DType::kU8, {it.rows, it.cols / 2}, m.codes.data()});
                views.push_back({names[1], DType::kF8E4M3, {it.rows, it.cols / group}, m.scales.data()});
                views.push_back({names[2], DType::kF32, {1}, &m.global_scale});
                break;
        }
    }
    // Largest element first: every tensor stays aligned to its element size.
    std::stable_sort(views.begin(), views.end(), [](const TensorToWrite& a, const TensorToWrite& b) {
        return dtype_size(a.dtype) > dtype_size(b.dtype);
    });
    QS_RETURN_IF_ERROR(write_safetensors(path, views, {{"format", "pt"}}));
    size_t rest = 0;
    for (const OutItem* it : items) rest += it->kind == OutItem::kCopy ? it->bytes : it->bytes - code_bytes(*it, f);
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
    if (low_bit(o.format)) {
        const int64_t group = o.format == QuantizeFormat::kNvfp4 ? kNvfp4RtnGroupSize : o.group_size;
        for (const OutItem& it : items)
            if (it.kind == OutItem::kQuantize && it.cols % group != 0)
                return invalid_argument(fmt::format(
                    "{} ({}): in_features {} is not a multiple of the group size {}{}", it.name, it.src->name, it.cols,
                    group, o.format == QuantizeFormat::kNvfp4 ? " (fixed by nvfp4)" : " (--group-size)"));
    }
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
        QS_RETURN_IF_ERROR(write_shard((fs::path(tmp) / file).string(), shards[s], o, progress));
        for (const OutItem* it : shards[s]) {
            for (const std::string& n :
                 it->kind == OutItem::kQuantize ? out_tensors(*it, o.format) : std::vector<std::string>{it->name}) {
                weight_map[n] = file;
                out_names.push_back(n);
            }
        }
        log_info("quantize: wrote {} ({} of {})", file, s + 1, shards.size());
    }
    progress.finish();
    if (shards.size() > 1) {
        nlohmann::ordered_json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
        QS_RETURN_IF_ERROR(write_text((fs::path(tmp) / "model.safetensors.index.json").string(), index.dump(2) + "\n"));
    }

    if (o.format == QuantizeFormat::kFp8Block)
        raw_config["quantization_config"] =
            quantization_config_to_json(fp8_block_quantization(fp8_unconverted_modules(out_names)));
    else
        raw_config["quantization_config"] = low_bit_quantization_config(
            o.format == QuantizeFormat::kInt4W4A16 ? LowBitFormat::kInt4W4A16 : LowBitFormat::kNvfp4, o.group_size,
            low_bit_ignore(out_names));
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

    // The result must load as the quantised model it claims to be.
    auto check = load_model_dir(tmp);
    if (!check.is_ok()) return Status(ErrorKind::kInternal, "the written checkpoint does not load: " + check.status().message());
    const std::string what = o.format == QuantizeFormat::kFp8Block
                                 ? fmt::format("FP8 ({} scales)", dtype_name(o.scale_dtype))
                                 : o.format == QuantizeFormat::kNvfp4
                                       ? std::string("NVFP4 (compressed-tensors nvfp4-pack-quantized)")
                                       : fmt::format("INT4 W4A16 group {} (compressed-tensors pack-quantized)", o.group_size);
    log_info("quantize: {} linears to {}, {:.2f} GB in {} shard(s), {:.1f} s", num_quantized, what,
             double(total_bytes) / 1e9, shards.size(), timer.elapsed_s());
    return Status::ok();
}

}  // namespace

Status quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& o) {
    if (o.scale_dtype != DType::kF32 && o.scale_dtype != DType::kBF16)
        return invalid_argument("the scale dtype must be F32 or BF16");
    if (o.max_shard_bytes <= 0) return invalid_argument("the shard size must be positive");
    if (o.format == QuantizeFormat::kInt4W4A16 && (o.group_size <= 0 || o.group_size % 8 != 0))
        return invalid_argument(fmt::format("the group size must be a positive multiple of 8, got {}", o.group_size));
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
