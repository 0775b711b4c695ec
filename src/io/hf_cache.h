// Hugging Face model ids in the local hub cache: `--model ORG/NAME` names the snapshot that
// huggingface_hub (`hf download ORG/NAME`) left in the cache, as vLLM and transformers accept it.
// Cache root: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub. Inside:
// models--ORG--NAME/refs/main holds the revision, models--ORG--NAME/snapshots/REV the files.
// Nothing is downloaded. Any thread (reads the environment and the file system).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace qs {

// ORG/NAME: two non-empty parts of letters, digits, '-', '_', '.', neither starting with '.'.
bool is_hf_model_id(std::string_view model);

// The hub cache directory from the environment (see above); empty when not even HOME is set.
std::string hf_hub_cache_dir();

// The snapshot directory of `id` under `hub` (refs/main → snapshots/REV). NotFound naming the
// path looked at and the `hf download` command when it is not there.
Result<std::string> resolve_hf_snapshot(std::string_view id, const std::string& hub);

// What `--model` names, as a directory to read: an existing local path (it wins) or anything
// that is not an ORG/NAME id (builtin:..., a missing path: its reader reports it) as given; an
// ORG/NAME id that is not a local path, its snapshot in hf_hub_cache_dir().
Result<std::string> resolve_model_path(const std::string& model);

}  // namespace qs
