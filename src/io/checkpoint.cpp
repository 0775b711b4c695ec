// Checkpoint: opens a model directory's safetensors files and builds one name → tensor index.
// Layouts, tried in this order:
//   1. model.safetensors.index.json: `weight_map` {tensor: shard file}; every listed shard must
//      exist and hold every tensor mapped to it. Tensors a shard holds but the index does not
//      list are indexed too (the index is a map, not a filter).
//   2. otherwise every *.safetensors in the directory (covers a lone model.safetensors).
// A tensor name found in two files is an error in both layouts. `dir` may also be a path to one
// .safetensors file. Runs on the loading thread; the result is immutable afterwards.
#include "io/checkpoint.h"
#include "core/read_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace qs {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kIndexName = "model.safetensors.index.json";

// Reads the index's weight_map into (tensor → shard file name).
Status read_index(const std::string& index_path, std::map<std::string, std::string>* weight_map) {
    QS_ASSIGN_OR_RETURN(std::string text, read_file(index_path));
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return corrupt_data(fmt::format("{}: not valid JSON", index_path));
    if (!j.is_object()) return corrupt_data(fmt::format("{}: not a JSON object", index_path));
    auto wm = j.find("weight_map");
    if (wm == j.end()) return corrupt_data(fmt::format("{}: missing field weight_map", index_path));
    if (!wm->is_object())
        return corrupt_data(fmt::format("{}: weight_map is not an object", index_path));
    for (auto it = wm->begin(); it != wm->end(); ++it) {
        if (!it->is_string())
            return corrupt_data(fmt::format("{}: weight_map entry for tensor '{}' is not a string",
                                            index_path, it.key()));
        const std::string& shard = it->get_ref<const std::string&>();
        // Shards live in the checkpoint directory; refuse paths that would leave it.
        fs::path p(shard);
        bool escapes = shard.empty() || p.is_absolute() ||
                       std::any_of(p.begin(), p.end(), [](const fs::path& c) { return c == ".."; });
        if (escapes)
            return corrupt_data(
                fmt::format("{}: tensor '{}' maps to shard '{}', which is not a file name inside "
                            "the checkpoint",
                            index_path, it.key(), shard));
        (*weight_map)[it.key()] = shard;
    }
    return Status::ok();
}

}  // namespace

const TensorInfo* Checkpoint::find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::names() const {
    std::vector<std::string> out;
    out.reserve(index_.size());
    for (const auto& [name, info] : index_) out.push_back(name);
    return out;
}

Status Checkpoint::add_file(std::shared_ptr<SafetensorsFile> file) {
    for (const auto& [name, info] : file->tensors()) {
        auto [it, inserted] = index_.emplace(name, &info);
        if (!inserted)
            return corrupt_data(fmt::format("{}: tensor '{}' is present in two files: {} and {}",
                                            dir_, name, it->second->file, file->path()));
    }
    files_.push_back(std::move(file));
    return Status::ok();
}

Result<std::shared_ptr<Checkpoint>> Checkpoint::open(const std::string& dir) {
    std::shared_ptr<Checkpoint> ck(new Checkpoint());
    ck->dir_ = dir;
    std::error_code ec;
    if (fs::is_regular_file(dir, ec)) {
        QS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(dir));
        QS_RETURN_IF_ERROR(ck->add_file(std::move(file)));
        return ck;
    }
    if (!fs::is_directory(dir, ec))
        return not_found(fmt::format("{}: no such checkpoint directory", dir));

    fs::path index_path = fs::path(dir) / kIndexName;
    if (fs::exists(index_path, ec)) {
        std::map<std::string, std::string> weight_map;  // tensor → shard
        QS_RETURN_IF_ERROR(read_index(index_path.string(), &weight_map));
        std::set<std::string> shards;
        for (const auto& [tensor, shard] : weight_map) shards.insert(shard);
        std::map<std::string, const SafetensorsFile*> by_shard;
        for (const std::string& shard : shards) {
            fs::path p = fs::path(dir) / shard;
            if (!fs::is_regular_file(p, ec))
                return not_found(
                    fmt::format("{}: shard '{}' listed in the index does not exist ({})",
                                index_path.string(), shard, p.string()));
            QS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(p.string()));
            by_shard[shard] = file.get();
            QS_RETURN_IF_ERROR(ck->add_file(std::move(file)));
        }
        for (const auto& [tensor, shard] : weight_map)
            if (!by_shard.at(shard)->find(tensor))
                return corrupt_data(fmt::format(
                    "{}: tensor '{}' is mapped to shard '{}' but {} does not contain it",
                    index_path.string(), tensor, shard, by_shard.at(shard)->path()));
        return ck;
    }

    std::vector<fs::path> files;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == ".safetensors" && it->is_regular_file(ec))
            files.push_back(it->path());
    if (ec) return io_error(fmt::format("{}: cannot list directory: {}", dir, ec.message()));
    if (files.empty())
        return not_found(fmt::format("{}: no {}, model.safetensors or other *.safetensors file",
                                     dir, kIndexName));
    std::sort(files.begin(), files.end());
    for (const fs::path& p : files) {
        QS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(p.string()));
        QS_RETURN_IF_ERROR(ck->add_file(std::move(file)));
    }
    return ck;
}

}  // namespace qs
