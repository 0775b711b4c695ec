// A chat template rendered by the Jinja interpreter (src/jinja) the way transformers'
// apply_chat_template calls it: variables messages, tools (null when the request has none),
// documents (null), add_generation_prompt, the tokenizer's special tokens (bos_token,
// eos_token, ...) and every chat_template_kwargs key (which override the special tokens).
// Before rendering, tool-call `arguments` sent as JSON strings are parsed into objects, as vLLM
// does. continue_final_message cuts the prompt after the final message's text, as transformers
// does. Parse errors are reported at load (server start); render errors, including the
// template's raise_exception(msg), are kInvalidArgument (HTTP 400). Immutable; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "jinja/template.h"
#include "server/text_pipeline.h"

namespace qs {

class JinjaChatTemplate {
public:
    // special_tokens: {"bos_token": "<s>", ...} (only the tokens the tokenizer has).
    static Result<JinjaChatTemplate> load(const std::string& text, nlohmann::ordered_json special_tokens);

    Result<std::string> render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                               const ChatRenderOptions& options) const;

private:
    JinjaChatTemplate(jinja::Template t, nlohmann::ordered_json special)
        : template_(std::move(t)), special_tokens_(std::move(special)) {}
    jinja::Template template_;
    nlohmann::ordered_json special_tokens_;
};

}  // namespace qs
