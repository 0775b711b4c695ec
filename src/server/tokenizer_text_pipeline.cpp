// TokenizerTextPipeline (see tokenizer_text_pipeline.h): adapts src/tokenizer to the seam.
#include "server/tokenizer_text_pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/read_file.h"
#include "tokenizer/reasoning_parser.h"
#include "tokenizer/tool_call_parser.h"

namespace qs {

namespace {

// Reasoning first, then tool calls on the answer text. Calls come whole from ToolCallParser
// (an id+name chunk then the arguments), so they are reassembled per delta.
class TokenizerOutputParser final : public OutputParser {
public:
    TokenizerOutputParser(const OutputParserOptions& o, tok::ChatFormat format)
        : reasoning_(o.starts_in_reasoning), parse_reasoning_(o.parse_reasoning) {
        if (o.parse_tool_calls) {
            auto schemas = tok::ToolSchemas::from_json(o.tools);
            tools_.emplace(format == tok::ChatFormat::kQwen35 ? tok::ToolCallFormat::kQwen35Xml
                                                               : tok::ToolCallFormat::kQwen3Json,
                           schemas.is_ok() ? std::move(schemas).value() : tok::ToolSchemas());
        }
    }
    ParsedDelta feed(std::string_view text) override { return convert(split(text, false)); }
    // The reasoning parser's held text first, then the tool parser's.
    ParsedDelta finish() override {
        ParsedDelta d = convert(split("", true));
        if (tools_) add(d, tools_->finish());
        return d;
    }

private:
    tok::ReasoningDelta split(std::string_view text, bool final) {
        if (!parse_reasoning_) return tok::ReasoningDelta{"", std::string(text)};
        return final ? reasoning_.finish() : reasoning_.feed(text);
    }
    ParsedDelta convert(tok::ReasoningDelta r) {
        ParsedDelta d;
        d.reasoning = std::move(r.reasoning);
        if (!tools_) {
            d.content = std::move(r.content);
            return d;
        }
        add(d, tools_->feed(r.content));
        return d;
    }
    void add(ParsedDelta& d, tok::ToolParseDelta t) {
        d.content += t.content;
        for (auto& c : t.tool_calls) {
            if (!c.id.empty()) {
                d.tool_calls.push_back(ToolCall{c.id, c.name, c.arguments});
            } else if (!d.tool_calls.empty()) {
                d.tool_calls.back().arguments += c.arguments;
            }
        }
    }

private:
    tok::ReasoningParser reasoning_;
    bool parse_reasoning_;
    std::optional<tok::ToolCallParser> tools_;
};

}  // namespace

Result<std::unique_ptr<TokenizerTextPipeline>> TokenizerTextPipeline::load(const std::string& path,
                                                                          const std::string& template_file,
                                                                          ChatTemplateEngine engine) {
    QS_ASSIGN_OR_RETURN(std::unique_ptr<tok::Tokenizer> tok, tok::Tokenizer::from_path(path));
    std::string text = tok->chat_template();
    std::string origin = path;
    if (!template_file.empty()) {
        auto file = read_file(template_file);
        if (!file.is_ok()) return file.status().with_context("--chat-template");
        text = std::move(file).value();
        origin = "--chat-template " + template_file;
    }
    auto make = [&](tok::ChatFormat format, bool qwen, std::optional<JinjaChatTemplate> jinja) {
        return std::unique_ptr<TokenizerTextPipeline>(
            new TokenizerTextPipeline(std::move(tok), format, qwen, std::move(jinja)));
    };
    if (text.empty()) {
        if (!template_file.empty()) return invalid_argument(origin + ": the file is empty");
        // No template in the model directory: Qwen3.6's (the model this server runs).
        if (engine == ChatTemplateEngine::kAuto) return make(tok::ChatFormat::kQwen35, true, std::nullopt);
        return not_found(path + ": the model has no chat template");
    }
    Result<tok::ChatTemplate> native = tok::ChatTemplate::detect(text);
    const tok::ChatFormat format = native.is_ok() ? native.value().format() : tok::ChatFormat::kQwen35;
    if (native.is_ok() && engine == ChatTemplateEngine::kAuto) return make(format, true, std::nullopt);
    nlohmann::ordered_json special = nlohmann::ordered_json::object();
    auto add = [&](const char* name, std::optional<int32_t> id) {
        if (!id) return;
        if (auto t = tok->id_to_token(*id)) special[name] = *t;
    };
    add("bos_token", tok->bos_token_id());
    add("eos_token", tok->eos_token_id());
    add("pad_token", tok->pad_token_id());
    Result<JinjaChatTemplate> jinja = JinjaChatTemplate::load(text, std::move(special));
    if (!jinja.is_ok()) return jinja.status().with_context(origin);
    return make(format, native.is_ok(), std::move(jinja).value());
}

Result<std::string> TokenizerTextPipeline::render_chat(const nlohmann::ordered_json& messages,
                                                       const nlohmann::ordered_json& tools,
                                                       const ChatRenderOptions& options) const {
    if (jinja_) return jinja_->render(messages, tools, options);
    tok::ChatOptions o;
    o.add_generation_prompt = options.add_generation_prompt;
    o.enable_thinking = options.enable_thinking;
    o.preserve_thinking = options.preserve_thinking;
    o.continue_final_message = options.continue_final_message;
    return tok::ChatTemplate(format_).render(messages, tools, o);
}

bool TokenizerTextPipeline::prompt_opens_reasoning(const ChatRenderOptions& options) const {
    // Qwen3.5/3.6's generation prompt opens <think>; Qwen3's lets the model write it. Another
    // family's template is not known to open it: the parser then finds <think> in the output.
    return options.add_generation_prompt && options.enable_thinking && qwen_template_ &&
           format_ == tok::ChatFormat::kQwen35;
}

std::unique_ptr<OutputParser> TokenizerTextPipeline::make_output_parser(const OutputParserOptions& options) const {
    return std::make_unique<TokenizerOutputParser>(options, format_);
}

std::vector<int32_t> TokenizerTextPipeline::eos_token_ids() const {
    std::vector<int32_t> ids;
    if (auto e = tok_->eos_token_id()) ids.push_back(*e);
    for (const char* name : {"<|im_end|>", "<|endoftext|>"})
        if (auto id = tok_->token_to_id(name))
            if (std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
    return ids;
}

}  // namespace qs
