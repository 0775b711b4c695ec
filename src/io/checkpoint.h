// Checkpoint: a model directory's tensors by name, across a single model.safetensors or the
// shards listed by model.safetensors.index.json. Owns the mmaps; TensorInfo pointers stay valid
// as long as the Checkpoint lives.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace qs {

class Checkpoint {
public:
    // dir holds config.json and model.safetensors or model.safetensors.index.json (+ shards), or
    // several *.safetensors without an index; dir may also be one .safetensors file. A tensor
    // present in two files, or mapped by the index to a shard that lacks it, is an error.
    static Result<std::shared_ptr<Checkpoint>> open(const std::string& dir);

    const std::string& dir() const { return dir_; }
    const TensorInfo* find(const std::string& name) const;
    // All tensor names, sorted.
    std::vector<std::string> names() const;
    size_t num_tensors() const { return index_.size(); }
    // The opened files, in the order they were opened.
    const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }

private:
    Checkpoint() = default;
    // Adds every tensor of `file` to index_; a name already indexed is an error.
    Status add_file(std::shared_ptr<SafetensorsFile> file);

    std::string dir_;
    std::vector<std::shared_ptr<SafetensorsFile>> files_;
    std::map<std::string, const TensorInfo*> index_;
};

}  // namespace qs
