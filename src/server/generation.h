// POST /v1/chat/completions and /v1/completions: parse and validate (worker pool), render the
// chat template and tokenize (worker pool), check the prompt against max_model_len, submit to
// the engine and hand the request to a GenerationStream. Called on the connection strand.
#pragma once

#include <memory>

#include "server/http_types.h"
#include "server/openai_parse.h"
#include "server/server_state.h"

namespace qs {

void handle_generation(ServerState& state, ApiKind kind, HttpRequest request, std::shared_ptr<Exchange> exchange);

}  // namespace qs
