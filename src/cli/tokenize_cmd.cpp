// `qwenserve tokenize`: JSON lines in, JSON lines out, on the main thread.
//   --tokenizer PATH        tokenizer.json or a model directory (required)
//   (default)               each input line is a JSON string; prints a JSON array of ids
//   --decode                each input line is a JSON array of ids; prints a JSON string
//   --hex                   input lines are hex-encoded bytes instead of JSON strings (to pass
//                           text that is not valid UTF-8)
//   --add-special-tokens    HF's add_special_tokens (post-processor tokens; none for Qwen)
//   --skip-special-tokens   with --decode: drop special tokens
//   --chat                  each input line is {"messages": [...], "tools": [...],
//                           "add_generation_prompt", "enable_thinking", "preserve_thinking",
//                           "add_vision_id"}; prints {"text": prompt} or {"error": message}
//   --template NAME         with --chat: qwen3 or qwen3.6 instead of the model's own template
//   --benchmark             reads all lines, then times single-thread encode over them and
//                           prints MB/s (input UTF-8 bytes) instead of ids; --repeat N passes
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/args.h"
#include "server/tokenizer_text_pipeline.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qs::cli {

namespace {

using Json = nlohmann::json;

Status line_error(size_t line_no, const std::string& what) {
    return invalid_argument("input line " + std::to_string(line_no) + ": " + what);
}

bool parse_hex(const std::string& line, std::string& bytes) {
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    if (line.size() % 2 != 0) return false;
    bytes.clear();
    for (size_t i = 0; i < line.size(); i += 2) {
        const int hi = nibble(line[i]), lo = nibble(line[i + 1]);
        if (hi < 0 || lo < 0) return false;
        bytes.push_back(static_cast<char>(hi * 16 + lo));
    }
    return true;
}

Status run_encode(const tok::Tokenizer& t, bool add_special, bool hex) {
    std::string line, out, text;
    size_t line_no = 0;
    while (std::getline(std::cin, line)) {
        ++line_no;
        if (hex) {
            if (!parse_hex(line, text)) return line_error(line_no, "expected hex-encoded bytes");
        } else {
            Json j = Json::parse(line, nullptr, false);
            if (j.is_discarded() || !j.is_string()) return line_error(line_no, "expected a JSON string");
            text = j.get<std::string>();
        }
        const std::vector<int32_t> ids = t.encode(text, add_special);
        out.clear();
        out.push_back('[');
        for (size_t i = 0; i < ids.size(); ++i) {
            if (i) out.push_back(',');
            out += std::to_string(ids[i]);
        }
        out += "]\n";
        std::fwrite(out.data(), 1, out.size(), stdout);
    }
    return Status::ok();
}

Status run_decode(const tok::Tokenizer& t, bool skip_special) {
    std::string line;
    size_t line_no = 0;
    std::vector<int32_t> ids;
    while (std::getline(std::cin, line)) {
        ++line_no;
        Json j = Json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_array()) return line_error(line_no, "expected a JSON array of ids");
        ids.clear();
        for (const Json& id : j) {
            if (!id.is_number_integer()) return line_error(line_no, "an id is not an integer");
            ids.push_back(id.get<int32_t>());
        }
        const std::string text = t.decode(ids, skip_special);
        const std::string out = Json(text).dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
        std::fwrite(out.data(), 1, out.size(), stdout);
    }
    return Status::ok();
}

// The --chat modes read one JSON object per line and write {"text": ...} or {"error": ...}; a
// line that is not an object stops the run with its number.
template <typename Render>
Status for_each_chat_line(Render render) {
    using OJson = nlohmann::ordered_json;
    std::string line;
    size_t line_no = 0;
    while (std::getline(std::cin, line)) {
        ++line_no;
        OJson j = OJson::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_object()) return line_error(line_no, "expected a JSON object");
        const OJson messages = j.contains("messages") ? j["messages"] : OJson();
        const OJson tools = j.contains("tools") ? j["tools"] : OJson();
        auto text = render(j, messages, tools);
        OJson out;
        if (text.is_ok()) out["text"] = *text;
        else out["error"] = text.status().message();
        const std::string s = out.dump(-1, ' ', false, OJson::error_handler_t::replace) + "\n";
        std::fwrite(s.data(), 1, s.size(), stdout);
    }
    return Status::ok();
}

void read_flag(const nlohmann::ordered_json& j, const char* key, bool& slot) {
    if (j.contains(key) && j[key].is_boolean()) slot = j[key].get<bool>();
}

Status run_chat(const tok::ChatTemplate& chat) {
    using OJson = nlohmann::ordered_json;
    return for_each_chat_line([&](const OJson& j, const OJson& messages, const OJson& tools) {
        tok::ChatOptions options;
        read_flag(j, "add_generation_prompt", options.add_generation_prompt);
        read_flag(j, "enable_thinking", options.enable_thinking);
        read_flag(j, "preserve_thinking", options.preserve_thinking);
        read_flag(j, "add_vision_id", options.add_vision_id);
        return chat.render(messages, tools, options);
    });
}

// --chat through the server's text pipeline (--chat-template FILE or --template jinja): each
// line's messages, tools, add_generation_prompt, continue_final_message and
// chat_template_kwargs (every key a template variable) as a chat request sends them.
Status run_chat_pipeline(const TextPipeline& text) {
    using OJson = nlohmann::ordered_json;
    return for_each_chat_line([&](const OJson& j, const OJson& messages, const OJson& tools) {
        ChatRenderOptions ro;
        read_flag(j, "add_generation_prompt", ro.add_generation_prompt);
        read_flag(j, "continue_final_message", ro.continue_final_message);
        if (j.contains("chat_template_kwargs") && j["chat_template_kwargs"].is_object()) {
            ro.template_kwargs = j["chat_template_kwargs"];
            read_flag(ro.template_kwargs, "enable_thinking", ro.enable_thinking);
            read_flag(ro.template_kwargs, "preserve_thinking", ro.preserve_thinking);
        }
        return text.render_chat(messages, tools, ro);
    });
}

Status run_benchmark(const tok::Tokenizer& t, int64_t repeat) {
    std::vector<std::string> texts;
    std::string line;
    size_t num_bytes = 0;
    while (std::getline(std::cin, line)) {
        Json j = Json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.is_string()) return line_error(texts.size() + 1, "expected a JSON string");
        texts.push_back(j.get<std::string>());
        num_bytes += texts.back().size();
    }
    size_t num_ids = 0;
    double best = 1e30;
    for (int64_t r = 0; r < repeat; ++r) {
        const auto start = std::chrono::steady_clock::now();
        num_ids = 0;
        for (const std::string& s : texts) num_ids += t.encode(s).size();
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        best = std::min(best, secs);
        std::printf("pass %lld: %.3f s, %.2f MB/s\n", static_cast<long long>(r + 1), secs,
                    num_bytes / secs / 1e6);
    }
    std::printf("qwenserve encode: %zu strings, %zu bytes, %zu ids, best %.3f s, %.2f MB/s\n",
                texts.size(), num_bytes, num_ids, best, num_bytes / best / 1e6);
    return Status::ok();
}

}  // namespace

const CommandSpec& tokenize_spec() {
    static const CommandSpec spec = [] {
        CommandSpec c;
        c.name = "tokenize";
        c.summary = "JSON lines: strings to token ids, or ids to text with --decode";
        c.usage = "tokenize --tokenizer PATH [--decode | --chat | --benchmark] < in.jsonl > out.jsonl";
        c.description =
            "JSON lines on stdin, one line per input on stdout: by default each input line is a JSON string "
            "and the output its ids as a JSON array.";
        c.groups.push_back(
            {"Tokenize",
             {required("tokenizer", "PATH", "tokenizer.json or the directory that holds it"),
              flag("decode", "each input line is a JSON array of ids; prints a JSON string"),
              flag("add-special-tokens", "HF's add_special_tokens (post-processor tokens; none for Qwen)"),
              flag("skip-special-tokens", "with --decode: drop special tokens"),
              flag("hex", "input lines are hex-encoded bytes instead of JSON strings (text that is not UTF-8)"),
              flag("chat", "each input line is {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\", "
                           "\"enable_thinking\", ...}; prints {\"text\": prompt} or {\"error\": message}"),
              valued("template", "qwen3|qwen3.6|jinja",
                     "with --chat: this native renderer instead of the model's own template, or jinja: the "
                     "template (the model's or --chat-template's) rendered by the Jinja interpreter"),
              valued("chat-template", "FILE",
                     "with --chat: a Jinja chat template file, chosen as serve --chat-template chooses (native "
                     "renderer for a Qwen3 or Qwen3.5/3.6 template, else the Jinja interpreter); input lines then "
                     "take \"continue_final_message\" and \"chat_template_kwargs\" (every key a template variable)"),
              flag("benchmark", "read every line, then time single-thread encoding over them (MB/s) instead of "
                                "printing ids"),
              valued("repeat", "N", "--benchmark: passes (the best is reported)", "3")}});
        return c;
    }();
    return spec;
}

int run_tokenize(int argc, char** argv) {
    int code = 0;
    auto args = parse_command(tokenize_spec(), argc, argv, code);
    if (!args) return code;
    auto path = args->require("tokenizer");
    if (!path.is_ok()) return fail("tokenize", path.status());
    auto tokenizer = tok::Tokenizer::from_path(*path);
    if (!tokenizer.is_ok()) return fail("tokenize", tokenizer.status());
    std::ios::sync_with_stdio(false);
    Status status;
    if (args->has("chat") && (args->get("chat-template") || args->get_or("template", "") == "jinja")) {
        const ChatTemplateEngine engine =
            args->get_or("template", "") == "jinja" ? ChatTemplateEngine::kJinja : ChatTemplateEngine::kAuto;
        auto text = TokenizerTextPipeline::load(*path, args->get_or("chat-template", ""), engine);
        if (!text.is_ok()) return fail("tokenize", text.status());
        status = run_chat_pipeline(**text);
    } else if (args->has("chat")) {
        auto chat = args->get("template") ? tok::ChatTemplate::from_name(*args->get("template"))
                                          : tok::ChatTemplate::detect((*tokenizer)->chat_template());
        if (!chat.is_ok()) return fail("tokenize", chat.status());
        status = run_chat(*chat);
    } else if (args->has("benchmark")) {
        auto repeat = args->get_int("repeat", 3);
        if (!repeat.is_ok()) return fail("tokenize", repeat.status());
        status = run_benchmark(**tokenizer, *repeat);
    } else if (args->has("decode")) {
        status = run_decode(**tokenizer, args->has("skip-special-tokens"));
    } else {
        status = run_encode(**tokenizer, args->has("add-special-tokens"), args->has("hex"));
    }
    std::fflush(stdout);
    if (!status.is_ok()) return fail("tokenize", status);
    return 0;
}

}  // namespace qs::cli
