// `qwenserve generate --input prompts.jsonl --output out.jsonl`: offline batch generation
// through the batched Engine (CPU backend), stepped on the CLI's main thread. Writes one JSON
// line per completion in input order and prints a throughput summary.
#pragma once

#include <set>
#include <string>

#include "core/args.h"
#include "core/status.h"

namespace qs::cli {

Status run_batch_generate(const Args& args);

}  // namespace qs::cli
