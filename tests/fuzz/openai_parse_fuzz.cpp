// libFuzzer harness: the OpenAI request parser (server/openai_parse) on arbitrary bodies.
// Input: flags byte (bit 0: completions instead of chat) + the request body. Any body must give
// either a validated GenerationSpec or an ApiError, never a crash or a sanitizer report.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.h"
#include "server/openai_parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const qs::fuzz::FuzzInput in = qs::fuzz::split_input(data, size);
    static const std::vector<std::string> kModels = {"qwen", "Qwen/Qwen3.6-35B-A3B"};
    const qs::ApiKind kind = (in.flags & 1) ? qs::ApiKind::kCompletion : qs::ApiKind::kChat;
    qs::GenerationSpec spec;
    std::optional<qs::ApiError> err = qs::parse_generation_request(kind, in.text, kModels, spec);
    if (!err) {
        // An accepted request is well formed where later stages rely on it.
        QS_FUZZ_ASSERT(spec.kind == kind);
        if (kind == qs::ApiKind::kChat) {
            QS_FUZZ_ASSERT(spec.messages.is_array() && !spec.messages.empty());
        } else {
            // One prompt or a bounded batch; each a non-empty text or non-empty token ids, not both.
            QS_FUZZ_ASSERT(!spec.prompts.empty() && spec.prompts.size() <= qs::kMaxBatchedPrompts);
            for (const auto& p : spec.prompts) {
                QS_FUZZ_ASSERT(p.text.has_value() != !p.ids.empty());
                QS_FUZZ_ASSERT(!p.text || !p.text->empty());
            }
        }
    }
    return 0;
}
