// libFuzzer harness: chat-template rendering (tokenizer/chat_template, both native renderers).
// Input: flags byte (bit 0: add_generation_prompt, 1: enable_thinking, 2: preserve_thinking,
// 3: add_vision_id) + JSON, either {"messages": [...], "tools": [...]} or the messages array
// itself. Whatever the messages hold, a render must give a prompt or a Status naming the
// problem, never a crash.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const qs::fuzz::FuzzInput in = qs::fuzz::split_input(data, size);
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(in.text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return 0;
    nlohmann::ordered_json messages = j;
    nlohmann::ordered_json tools = nullptr;
    if (j.is_object()) {
        messages = j.contains("messages") ? j["messages"] : nlohmann::ordered_json(nullptr);
        if (j.contains("tools")) tools = j["tools"];
    }
    qs::tok::ChatOptions options;
    options.add_generation_prompt = in.flags & 1;
    options.enable_thinking = in.flags & 2;
    options.preserve_thinking = in.flags & 4;
    options.add_vision_id = in.flags & 8;
    for (qs::tok::ChatFormat format : {qs::tok::ChatFormat::kQwen3, qs::tok::ChatFormat::kQwen35}) {
        // An empty prompt is a valid result: jinja renders nothing for a lone unknown role.
        (void)qs::tok::ChatTemplate(format).render(messages, tools, options);
    }
    return 0;
}
