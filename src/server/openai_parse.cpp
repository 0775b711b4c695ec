// Validation of /v1/chat/completions and /v1/completions bodies (see openai_parse.h). Fields
// that are null count as absent, as in OpenAI's API. A field that OpenAI's or vLLM's API defines
// and this server does not implement is refused (400, code unsupported_value, param = the
// field) unless its value asks for nothing (server/unsupported_fields.h); fields that neither
// API defines are ignored, as vLLM does. docs/API.md lists every field and its fate.
#include "server/openai_parse.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "server/request_json.h"
#include "server/structured_output_parse.h"
#include "server/mm_processor_kwargs.h"
#include "server/unsupported_fields.h"

namespace qs {

namespace {

using J = nlohmann::ordered_json;
using MaybeError = std::optional<ApiError>;

#define QS_TRY_API(expr)                  \
    do {                                  \
        if (auto qs_e_ = (expr)) return qs_e_; \
    } while (0)

using request_json::bad;
using request_json::field;
using request_json::unsupported;

const char* type_name(const J& v) {
    if (v.is_string()) return "string";
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_array()) return "array";
    if (v.is_object()) return "object";
    return "null";
}

MaybeError opt_double(const J& o, const char* name, double lo, double hi, bool lo_open, double& out) {
    const J* v = field(o, name);
    if (!v) return std::nullopt;
    if (!v->is_number()) return bad(name, fmt::format("'{}' must be a number, got {}", name, type_name(*v)));
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
        return bad(name, fmt::format("'{}' must be in {}{}, {}], got {}", name, lo_open ? "(" : "[", lo, hi, x));
    out = x;
    return std::nullopt;
}

MaybeError opt_int(const J& o, const char* name, int64_t lo, int64_t hi, int64_t& out, bool* present = nullptr) {
    const J* v = field(o, name);
    if (!v) return std::nullopt;
    if (!v->is_number_integer() && !v->is_number_unsigned())
        return bad(name, fmt::format("'{}' must be an integer, got {}", name, type_name(*v)));
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        return bad(name, fmt::format("'{}' is out of range", name));
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) return bad(name, fmt::format("'{}' must be in [{}, {}], got {}", name, lo, hi, x));
    out = x;
    if (present) *present = true;
    return std::nullopt;
}

// Whether o's "type" is the string `want` (absent, or not a string: false; json::value would throw).
bool type_is(const J& o, const char* want) {
    const auto it = o.find("type");
    return it != o.end() && it->is_string() && it->get_ref<const std::string&>() == want;
}

MaybeError opt_bool(const J& o, const char* name, bool& out) {
    const J* v = field(o, name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return bad(name, fmt::format("'{}' must be a boolean, got {}", name, type_name(*v)));
    out = v->get<bool>();
    return std::nullopt;
}

MaybeError parse_stop(const J& o, SamplingParams& p) {
    const J* v = field(o, "stop");
    if (!v) return std::nullopt;
    if (v->is_string()) {
        if (v->get<std::string>().empty()) return bad("stop", "'stop' must not be empty");
        p.stop.push_back(v->get<std::string>());
        return std::nullopt;
    }
    if (!v->is_array()) return bad("stop", fmt::format("'stop' must be a string or an array of strings, got {}", type_name(*v)));
    if (v->size() > 16) return bad("stop", fmt::format("'stop' takes at most 16 strings, got {}", v->size()));
    for (const auto& s : *v) {
        if (!s.is_string() || s.get<std::string>().empty()) return bad("stop", "'stop' entries must be non-empty strings");
        p.stop.push_back(s.get<std::string>());
    }
    return std::nullopt;
}

// A decimal token id (leading zeros allowed, as Python's int() reads them); -1 if not one.
int64_t token_id_of(const std::string& key) {
    if (key.empty()) return -1;
    int64_t id = 0;
    for (char c : key) {
        if (c < '0' || c > '9') return -1;
        id = id * 10 + (c - '0');
        if (id > std::numeric_limits<int32_t>::max()) return -1;
    }
    return id;
}

// OpenAI: {"token id": bias}, ids as decimal strings, biases in [-100, 100]. Duplicates ("7"
// and "07") and the entry count are SamplingParams::validate's checks; ids < vocab the engine's.
MaybeError parse_logit_bias(const J& o, SamplingParams& p) {
    const J* v = field(o, "logit_bias");
    if (!v) return std::nullopt;
    if (!v->is_object())
        return bad("logit_bias",
                   fmt::format("'logit_bias' must be an object mapping token ids to biases, got {}", type_name(*v)));
    for (auto it = v->begin(); it != v->end(); ++it) {
        const int64_t id = token_id_of(it.key());
        if (id < 0)
            return bad("logit_bias",
                       fmt::format("'logit_bias' keys must be token ids (integers >= 0), got \"{}\"", it.key()));
        if (!it->is_number())
            return bad("logit_bias", fmt::format("'logit_bias' values must be numbers in [-100, 100], got {} for token {}",
                                                 type_name(*it), id));
        const double b = it->get<double>();
        if (!std::isfinite(b) || b < -100 || b > 100)
            return bad("logit_bias",
                       fmt::format("'logit_bias' values must be in [-100, 100], got {} for token {}", b, id));
        p.logit_bias.push_back({int32_t(id), float(b)});
    }
    return std::nullopt;
}

MaybeError parse_sampling(const J& o, ApiKind kind, GenerationSpec& s) {
    SamplingParams& p = s.params;
    QS_TRY_API(opt_double(o, "temperature", 0.0, 2.0, false, p.temperature));
    QS_TRY_API(opt_double(o, "top_p", 0.0, 1.0, true, p.top_p));
    int64_t top_k = 0;
    QS_TRY_API(opt_int(o, "top_k", -1, 1 << 20, top_k));
    p.top_k = top_k < 0 ? 0 : top_k;  // -1 (vLLM) and 0 both mean off
    QS_TRY_API(opt_double(o, "min_p", 0.0, 1.0, false, p.min_p));
    QS_TRY_API(opt_double(o, "presence_penalty", -2.0, 2.0, false, p.presence_penalty));
    QS_TRY_API(opt_double(o, "frequency_penalty", -2.0, 2.0, false, p.frequency_penalty));
    QS_TRY_API(opt_double(o, "repetition_penalty", 0.0, 2.0, true, p.repetition_penalty));
    QS_TRY_API(opt_int(o, "n", 1, 64, p.n));
    const int64_t kMaxTokens = int64_t(1) << 30;
    bool given = false;
    QS_TRY_API(opt_int(o, "max_tokens", 1, kMaxTokens, p.max_tokens, &given));
    if (kind == ApiKind::kChat) QS_TRY_API(opt_int(o, "max_completion_tokens", 1, kMaxTokens, p.max_tokens, &given));
    s.max_tokens_given = given;
    if (const J* seed = field(o, "seed")) {
        int64_t x = 0;
        QS_TRY_API(opt_int(o, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), x));
        (void)seed;
        p.seed = uint64_t(x);
    }
    QS_TRY_API(opt_int(o, "min_tokens", 0, kMaxTokens, p.min_tokens));
    QS_TRY_API(parse_logit_bias(o, p));
    QS_TRY_API(parse_stop(o, p));
    QS_TRY_API(opt_bool(o, "ignore_eos", p.ignore_eos));
    QS_TRY_API(opt_bool(o, "skip_special_tokens", p.skip_special_tokens));
    QS_TRY_API(opt_bool(o, "include_stop_str_in_output", p.include_stop_str_in_output));
    if (const J* ids = field(o, "stop_token_ids")) {
        if (!ids->is_array()) return bad("stop_token_ids", "'stop_token_ids' must be an array of integers");
        for (const auto& id : *ids) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max())
                return bad("stop_token_ids", "'stop_token_ids' must hold token ids");
            p.stop_token_ids.push_back(int32_t(id.get<int64_t>()));
        }
    }
    // Logprobs: chat has a boolean plus top_logprobs; completions an integer count.
    if (kind == ApiKind::kChat) {
        QS_TRY_API(opt_bool(o, "logprobs", s.logprobs));
        int64_t top = 0;
        bool top_given = false;
        QS_TRY_API(opt_int(o, "top_logprobs", 0, 20, top, &top_given));
        if (top_given && !s.logprobs) return bad("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
        p.logprobs = s.logprobs ? top : -1;
    } else {
        int64_t k = -1;
        bool given_lp = false;
        QS_TRY_API(opt_int(o, "logprobs", 0, 20, k, &given_lp));
        s.logprobs = given_lp;
        p.logprobs = given_lp ? k : -1;
    }
    // Stream.
    QS_TRY_API(opt_bool(o, "stream", s.stream));
    if (const J* so = field(o, "stream_options")) {
        if (!so->is_object()) return bad("stream_options", "'stream_options' must be an object");
        if (!s.stream) return bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
        QS_TRY_API(opt_bool(*so, "include_usage", s.include_usage));
        bool obfuscation = false;
        QS_TRY_API(opt_bool(*so, "continuous_usage_stats", s.continuous_usage));
        QS_TRY_API(opt_bool(*so, "include_obfuscation", obfuscation));
        if (s.continuous_usage && !s.include_usage)
            return bad("stream_options.continuous_usage_stats",
                       "'stream_options.continuous_usage_stats' needs 'stream_options.include_usage' set to true");
        if (obfuscation)
            return unsupported("stream_options.include_obfuscation",
                               "'stream_options.include_obfuscation' is not supported: chunks carry no obfuscation "
                               "padding");
    }
    // best_of: that many completions are generated and the n with the highest cumulative
    // logprob returned (so the engine computes the sampled tokens' logprobs).
    int64_t best_of = p.n;
    QS_TRY_API(opt_int(o, "best_of", 1, 64, best_of));
    if (best_of < p.n) return bad("best_of", fmt::format("'best_of' ({}) must be at least n ({})", best_of, p.n));
    if (best_of > p.n) {
        if (s.stream)
            return unsupported("best_of", "'best_of' greater than n cannot be streamed (the best completions are "
                                          "known only at the end)");
        s.n_returned = p.n;
        p.n = best_of;
        if (p.logprobs < 0) p.logprobs = 0;
    }
    int64_t priority = 0;
    QS_TRY_API(opt_int(o, "priority", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), priority));
    s.priority = int32_t(priority);
    // vLLM: -1 = max_model_len, 0 = no truncation (Python's ids[-0:] is the whole list).
    QS_TRY_API(opt_int(o, "truncate_prompt_tokens", -1, kMaxTokens, s.truncate_prompt_tokens));
    if (kind == ApiKind::kCompletion) {
        QS_TRY_API(opt_bool(o, "echo", s.echo));
        if (s.echo && s.logprobs)
            return unsupported("echo", "'echo' with 'logprobs' is not supported: it needs the prompt's logprobs, which "
                                       "this server does not compute (echo without logprobs is)");
    }
    // Without max_tokens the limit is the context left after the prompt, known only after
    // tokenizing: min_tokens is checked against it at submit.
    SamplingParams checked = p;
    if (!s.max_tokens_given) checked.max_tokens = kMaxTokens;
    const Status st = checked.validate();
    if (!st.is_ok()) {
        const std::string& m = st.message();
        return bad(m.substr(0, m.find(' ')), m);
    }
    return std::nullopt;
}

MaybeError parse_tools(const J& o, GenerationSpec& s) {
    if (const J* tools = field(o, "tools")) {
        if (!tools->is_array()) return bad("tools", "'tools' must be an array");
        for (size_t i = 0; i < tools->size(); ++i) {
            const J& t = (*tools)[i];
            const std::string param = fmt::format("tools[{}]", i);
            if (!t.is_object() || !type_is(t, "function"))
                return bad(param, fmt::format("{} must be an object with type 'function'", param));
            if (!t.contains("function") || !t["function"].is_object())
                return bad(param, fmt::format("{}.function must be an object", param));
            const J& f = t["function"];
            if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
                return bad(param + ".function.name", fmt::format("{}.function.name must be a non-empty string", param));
            if (f.contains("parameters") && !f["parameters"].is_null() && !f["parameters"].is_object())
                return bad(param + ".function.parameters", fmt::format("{}.function.parameters must be an object", param));
            if (f.contains("strict") && !f["strict"].is_null() && !f["strict"].is_boolean())
                return bad(param + ".function.strict", fmt::format("{}.function.strict must be a boolean", param));
        }
        if (!tools->empty()) s.tools = *tools;
    }
    if (const J* tc = field(o, "tool_choice")) {
        if (tc->is_string()) {
            const std::string v = tc->get<std::string>();
            if (v == "none") {
                s.tool_choice_none = true;
            } else if (v == "required") {
                s.tool_choice_required = true;
            } else if (v != "auto") {
                return bad("tool_choice",
                           fmt::format("tool_choice must be 'none', 'auto', 'required' or a function, got '{}'", v));
            }
        } else if (tc->is_object()) {
            // {"type": "function", "function": {"name": NAME}}; the name is checked against the
            // tools when the grammar is built.
            const J* fn = field(*tc, "function");
            if (!type_is(*tc, "function") || !fn || !fn->is_object() || !fn->contains("name") ||
                !(*fn)["name"].is_string() || (*fn)["name"].get<std::string>().empty())
                return bad("tool_choice",
                           "a tool_choice object must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
            s.tool_choice_function = (*fn)["name"].get<std::string>();
        } else {
            return bad("tool_choice", "'tool_choice' must be a string or an object");
        }
        if (!s.tool_choice_none && s.tools.is_null())
            return bad("tool_choice", "'tool_choice' needs 'tools'");
    }
    QS_TRY_API(opt_bool(o, "parallel_tool_calls", s.parallel_tool_calls));
    // strict: the arguments follow the schema. Only constrained tool calls guarantee that.
    if (s.tools.is_array() && !s.tool_choice_required && s.tool_choice_function.empty())
        for (size_t i = 0; i < s.tools.size(); ++i)
            if (const J* strict = field(s.tools[i]["function"], "strict"); strict && *strict == true)
                return unsupported(fmt::format("tools[{}].function.strict", i),
                                   fmt::format("tools[{}].function.strict is only supported with tool_choice 'required' "
                                               "or a named function (with 'auto' or 'none' the arguments are not "
                                               "constrained to the schema)", i));
    return std::nullopt;
}

// Text, image_url and video_url parts ({"type": "image_url", "image_url": {"url": URL}} or the URL
// as a string; video_url alike); the URLs are collected in order (fetched and checked later, on
// the worker pool) and each video_url part becomes {"type": "video"}, which the chat templates
// render as <|vision_start|><|video_pad|><|vision_end|>.
MaybeError check_content_parts(J& parts, const std::string& param, std::vector<MediaUrl>& media) {
    for (size_t k = 0; k < parts.size(); ++k) {
        J& part = parts[k];
        const std::string where = fmt::format("{}.content[{}]", param, k);
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
            return bad(where + ".type", fmt::format("{} must be an object with a string 'type'", where));
        const std::string type = part["type"].get<std::string>();
        if (type == "image_url" || type == "video_url") {
            const J* u = field(part, type.c_str());
            if (u && u->is_object()) u = field(*u, "url");
            if (!u || !u->is_string())
                return bad(where + "." + type, fmt::format("{}.{}.url must be a string", where, type));
            media.push_back({type == "video_url", u->get<std::string>()});
            if (type == "video_url") part = J{{"type", "video"}};
            continue;
        }
        if (type != "text")
            return unsupported(where + ".type", fmt::format("{} has type '{}'; only 'text', 'image_url' and 'video_url' "
                                                            "parts are supported", where, type));
        if (!part.contains("text") || !part["text"].is_string())
            return bad(where + ".text", fmt::format("{}.text must be a string", where));
    }
    return std::nullopt;
}

MaybeError parse_messages(const J& o, bool any_template_kwargs, GenerationSpec& s) {
    const J* m = field(o, "messages");
    if (!m) return bad("messages", "'messages' is required");
    if (!m->is_array()) return bad("messages", fmt::format("'messages' must be an array, got {}", type_name(*m)));
    if (m->empty()) return bad("messages", "'messages' must not be empty");
    s.messages = *m;
    for (size_t i = 0; i < s.messages.size(); ++i) {
        J& msg = s.messages[i];
        const std::string param = fmt::format("messages[{}]", i);
        if (!msg.is_object()) return bad(param, fmt::format("{} must be an object", param));
        if (!msg.contains("role") || !msg["role"].is_string())
            return bad(param + ".role", fmt::format("{}.role must be a string", param));
        const std::string role = msg["role"].get<std::string>();
        if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
            return bad(param + ".role", fmt::format("{}.role '{}' is not one of system, developer, user, assistant, tool", param, role));
        if (msg.contains("content")) {
            J& c = msg["content"];
            if (!c.is_null() && !c.is_string() && !c.is_array())
                return bad(param + ".content", fmt::format("{}.content must be a string, an array of parts or null", param));
            if (c.is_array()) QS_TRY_API(check_content_parts(c, param, s.media));
        } else if (role != "assistant") {
            return bad(param + ".content", fmt::format("{}.content is required", param));
        }
    }
    QS_TRY_API(parse_chat_render_options(o, any_template_kwargs, s.chat_render));
    return std::nullopt;
}

MaybeError parse_prompt(const J& o, GenerationSpec& s) {
    const J* p = field(o, "prompt");
    if (!p) return bad("prompt", "'prompt' is required");
    // One prompt: a non-empty string or a non-empty array of token ids.
    auto one = [&](const J& v, const std::string& param) -> MaybeError {
        GenerationSpec::Prompt pr;
        if (v.is_string()) {
            if (v.get_ref<const std::string&>().empty()) return bad("prompt", fmt::format("{} must not be empty", param));
            pr.text = v.get<std::string>();
        } else if (v.is_array()) {
            if (v.empty()) return bad("prompt", fmt::format("{} must not be empty", param));
            for (const auto& id : v) {
                if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max())
                    return bad("prompt", fmt::format("{}: token arrays must hold non-negative integers", param));
                pr.ids.push_back(int32_t(id.get<int64_t>()));
            }
        } else {
            return bad("prompt", fmt::format("{} must be a string or an array of token ids, got {}", param, type_name(v)));
        }
        s.prompts.push_back(std::move(pr));
        return std::nullopt;
    };
    if (p->is_string()) return one(*p, "'prompt'");
    if (!p->is_array()) return bad("prompt", fmt::format("'prompt' must be a string or an array, got {}", type_name(*p)));
    if (p->empty()) return bad("prompt", "'prompt' must not be empty");
    if ((*p)[0].is_number()) return one(*p, "'prompt'");  // one prompt of token ids
    // A batch: strings or token-id arrays (vLLM takes both kinds in one list).
    if (p->size() > kMaxBatchedPrompts)
        return bad("prompt", fmt::format("'prompt' batches {} prompts; at most {} are allowed in one request", p->size(),
                                         kMaxBatchedPrompts));
    for (size_t i = 0; i < p->size(); ++i) QS_TRY_API(one((*p)[i], fmt::format("prompt[{}]", i)));
    return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_chat_render_options(const J& o, bool any_template_kwargs, ChatRenderOptions& out) {
    // The variables Qwen's templates read (enable_thinking: both; preserve_thinking: 3.5/3.6;
    // add_vision_id numbers image parts, which are refused, so it changes nothing). For the
    // native renderers a key the templates do not read would be a silent no-op in jinja:
    // refused instead. A Jinja-rendered template (any_template_kwargs) sees every key.
    if (const J* kw = field(o, "chat_template_kwargs")) {
        if (!kw->is_object()) return bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        QS_TRY_API(opt_bool(*kw, "enable_thinking", out.enable_thinking));
        QS_TRY_API(opt_bool(*kw, "preserve_thinking", out.preserve_thinking));
        bool vision_id = false;
        QS_TRY_API(opt_bool(*kw, "add_vision_id", vision_id));
        out.template_kwargs = *kw;
        for (auto it = kw->begin(); it != kw->end(); ++it)
            if (!any_template_kwargs && it.key() != "enable_thinking" && it.key() != "preserve_thinking" &&
                it.key() != "add_vision_id" && !it->is_null())
                return unsupported("chat_template_kwargs." + it.key(),
                                   fmt::format("chat_template_kwargs '{}' is not read by the chat template (it reads "
                                               "enable_thinking, preserve_thinking, add_vision_id)",
                                               it.key()));
    }
    QS_TRY_API(opt_bool(o, "add_generation_prompt", out.add_generation_prompt));
    QS_TRY_API(opt_bool(o, "continue_final_message", out.continue_final_message));
    if (out.continue_final_message) {
        if (out.add_generation_prompt && field(o, "add_generation_prompt"))
            return bad("continue_final_message",
                       "'continue_final_message' and 'add_generation_prompt' cannot both be true");
        out.add_generation_prompt = false;  // vLLM's default of true yields to it
    }
    return std::nullopt;
}

std::optional<ApiError> parse_json_object(std::string_view body, J& out) {
    out = J::parse(body, nullptr, /*allow_exceptions=*/false);
    if (out.is_discarded()) return bad("", "the request body is not valid JSON");
    if (!out.is_object()) return bad("", "the request body must be a JSON object");
    return std::nullopt;
}

std::optional<ApiError> parse_generation_request(ApiKind kind, std::string_view body,
                                                 const std::vector<std::string>& model_names,
                                                 GenerationSpec& s, bool any_template_kwargs) {
    J o;
    QS_TRY_API(parse_json_object(body, o));
    s.kind = kind;
    const J* model = field(o, "model");
    if (!model) return bad("model", "'model' is required");
    if (!model->is_string()) return bad("model", "'model' must be a string");
    s.model = model->get<std::string>();
    bool known = false;
    for (const auto& n : model_names) known |= n == s.model;
    if (!known) {
        ApiError e;
        e.http_status = 404;
        e.message = fmt::format("The model '{}' does not exist", s.model);
        e.param = "model";
        e.code = "model_not_found";
        return e;
    }
    QS_TRY_API(check_unsupported_fields(o, kind));
    if (const J* kw = field(o, "mm_processor_kwargs")) {
        auto mk = parse_mm_processor_kwargs(nlohmann::json::parse(kw->dump()));
        if (!mk.is_ok() && mk.status().kind() == ErrorKind::kUnsupported)
            return unsupported("mm_processor_kwargs", mk.status().message());
        if (!mk.is_ok()) return ApiError::bad_request(mk.status().message(), "mm_processor_kwargs");
        s.media_kwargs = mk.value();
    }
    if (kind == ApiKind::kChat) {
        QS_TRY_API(parse_messages(o, any_template_kwargs, s));
        QS_TRY_API(parse_tools(o, s));
    } else {
        QS_TRY_API(parse_prompt(o, s));
    }
    QS_TRY_API(parse_sampling(o, kind, s));
    QS_TRY_API(parse_structured_outputs(o, s));
    return std::nullopt;
}

}  // namespace qs
