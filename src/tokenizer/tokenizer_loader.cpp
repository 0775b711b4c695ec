// Loading and validating tokenizer.json (and tokenizer_config.json) into a Tokenizer. Every
// unsupported component or missing field is an error that names it. Runs once at start-up.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/read_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace qs::tok {

namespace {

using Json = nlohmann::json;

// GPT-2's pattern, used by a ByteLevel pre-tokenizer with use_regex=true.
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string type_of(const Json& j) {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) return "";
    return j["type"].get<std::string>();
}

bool flag(const Json& j, const char* key) {
    return j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

// Token ids index dense tables (BpeModel's, the logits' vocabulary axis), so an id is bounded:
// the largest published vocabularies are near 2^18; 2^22 leaves room and keeps a hostile file
// from asking for gigabytes. `what` names the token in the error.
constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;

Result<int32_t> token_id(const Json& id, const std::string& what) {
    if (!id.is_number_integer()) return corrupt_data(what + " has no integer id");
    const int64_t v = id.is_number_unsigned() && id.get<uint64_t>() > uint64_t{INT64_MAX}
                          ? INT64_MAX
                          : id.get<int64_t>();
    if (v < 0) return corrupt_data(what + " has a negative id");
    if (v > kMaxTokenId)
        return corrupt_data(what + " has id " + id.dump() + ", above the supported maximum " +
                            std::to_string(kMaxTokenId));
    return static_cast<int32_t>(v);
}

}  // namespace

class TokenizerLoader {
public:
    static Status load_normalizer(const Json& j, Tokenizer& t) {
        if (j.is_null()) return Status::ok();
        const std::string type = type_of(j);
        if (type == "NFC") {
            t.nfc_ = true;
            return Status::ok();
        }
        if (type == "Sequence") {
            if (!j.contains("normalizers") || !j["normalizers"].is_array())
                return corrupt_data("normalizer Sequence has no \"normalizers\" array");
            for (const Json& n : j["normalizers"]) QS_RETURN_IF_ERROR(load_normalizer(n, t));
            return Status::ok();
        }
        return unsupported("normalizer type '" + type + "' is not supported (only NFC)");
    }

    static Status load_pretokenizer(const Json& j, std::vector<std::string>& regexes) {
        if (j.is_null()) return Status::ok();
        const std::string type = type_of(j);
        if (type == "Sequence") {
            if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
                return corrupt_data("pre_tokenizer Sequence has no \"pretokenizers\" array");
            for (const Json& p : j["pretokenizers"]) QS_RETURN_IF_ERROR(load_pretokenizer(p, regexes));
            return Status::ok();
        }
        if (type == "ByteLevel") {
            if (flag(j, "add_prefix_space"))
                return unsupported("ByteLevel pre-tokenizer with add_prefix_space is not supported");
            if (flag(j, "use_regex")) regexes.push_back(kGpt2Regex);
            return Status::ok();
        }
        if (type == "Split") {
            const std::string behavior = j.value("behavior", "");
            if (behavior != "Isolated")
                return unsupported("Split pre-tokenizer behavior '" + behavior +
                                   "' is not supported (only Isolated)");
            if (flag(j, "invert")) return unsupported("Split pre-tokenizer with invert is not supported");
            if (!j.contains("pattern") || !j["pattern"].is_object())
                return corrupt_data("Split pre-tokenizer has no \"pattern\"");
            const Json& p = j["pattern"];
            if (p.contains("Regex") && p["Regex"].is_string()) {
                regexes.push_back(p["Regex"].get<std::string>());
            } else if (p.contains("String") && p["String"].is_string()) {
                regexes.push_back("\\Q" + p["String"].get<std::string>() + "\\E");
            } else {
                return corrupt_data("Split pattern has neither \"Regex\" nor \"String\"");
            }
            return Status::ok();
        }
        return unsupported("pre_tokenizer type '" + type + "' is not supported");
    }

    static Status load_post_processor(const Json& j, Tokenizer& t) {
        if (j.is_null()) return Status::ok();
        const std::string type = type_of(j);
        if (type == "ByteLevel") return Status::ok();  // offsets only
        if (type == "Sequence") {
            if (!j.contains("processors") || !j["processors"].is_array())
                return corrupt_data("post_processor Sequence has no \"processors\" array");
            for (const Json& p : j["processors"]) QS_RETURN_IF_ERROR(load_post_processor(p, t));
            return Status::ok();
        }
        if (type == "TemplateProcessing") {
            if (!j.contains("single") || !j["single"].is_array())
                return corrupt_data("TemplateProcessing has no \"single\" template");
            const Json specials = j.value("special_tokens", Json::object());
            bool after = false;
            for (const Json& piece : j["single"]) {
                if (piece.contains("Sequence")) {
                    after = true;
                } else if (piece.contains("SpecialToken")) {
                    const std::string name = piece["SpecialToken"].value("id", "");
                    if (!specials.contains(name) || !specials[name].contains("ids") ||
                        !specials[name]["ids"].is_array())
                        return corrupt_data("TemplateProcessing special token '" + name + "' has no ids");
                    for (const Json& id : specials[name]["ids"]) {
                        QS_ASSIGN_OR_RETURN(const int32_t value,
                                            token_id(id, "TemplateProcessing special token '" + name + "'"));
                        (after ? t.suffix_ids_ : t.prefix_ids_).push_back(value);
                    }
                } else {
                    return corrupt_data("TemplateProcessing piece is neither Sequence nor SpecialToken");
                }
            }
            return Status::ok();
        }
        return unsupported("post_processor type '" + type + "' is not supported");
    }

    static Status load_decoder(const Json& j) {
        const std::string type = type_of(j);
        if (type == "ByteLevel") return Status::ok();
        if (j.is_null()) return unsupported("tokenizer.json has no decoder (ByteLevel is required)");
        return unsupported("decoder type '" + type + "' is not supported (only ByteLevel)");
    }

    static Result<std::unique_ptr<BpeModel>> load_model(const Json& m) {
        if (!m.is_object()) return corrupt_data("tokenizer.json has no \"model\" object");
        const std::string type = type_of(m);
        if (type.empty() && !m.contains("merges"))
            return corrupt_data("tokenizer.json model has no \"type\"");
        if (!type.empty() && type != "BPE")
            return unsupported("tokenizer model type '" + type + "' is not supported (only BPE)");
        if (m.contains("dropout") && !m["dropout"].is_null() &&
            (!m["dropout"].is_number() || m["dropout"].get<double>() != 0.0))
            return unsupported("BPE dropout is not supported");
        if (!m.value("continuing_subword_prefix", Json("")).is_null() &&
            !m.value("continuing_subword_prefix", std::string()).empty())
            return unsupported("BPE continuing_subword_prefix is not supported");
        if (!m.value("end_of_word_suffix", Json("")).is_null() &&
            !m.value("end_of_word_suffix", std::string()).empty())
            return unsupported("BPE end_of_word_suffix is not supported");
        if (flag(m, "byte_fallback")) return unsupported("BPE byte_fallback is not supported");
        if (!m.contains("vocab") || !m["vocab"].is_object())
            return corrupt_data("tokenizer.json model has no \"vocab\" object");
        if (!m.contains("merges") || !m["merges"].is_array())
            return corrupt_data("tokenizer.json model has no \"merges\" array");
        std::vector<std::pair<std::string, int32_t>> vocab;
        vocab.reserve(m["vocab"].size());
        for (const auto& [token, id] : m["vocab"].items()) {
            QS_ASSIGN_OR_RETURN(const int32_t value, token_id(id, "vocab entry '" + token + "'"));
            vocab.emplace_back(token, value);
        }
        std::vector<std::pair<std::string, std::string>> merges;
        merges.reserve(m["merges"].size());
        for (const Json& merge : m["merges"]) {
            if (merge.is_string()) {  // older format: "left right"
                const std::string s = merge.get<std::string>();
                const size_t space = s.find(' ', 1);
                if (space == std::string::npos) return corrupt_data("merge '" + s + "' has no space");
                merges.emplace_back(s.substr(0, space), s.substr(space + 1));
            } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
                       merge[1].is_string()) {
                merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
            } else {
                return corrupt_data("a merge is neither \"a b\" nor [\"a\", \"b\"]: " + merge.dump());
            }
        }
        return BpeModel::create(vocab, merges, flag(m, "ignore_merges"));
    }

    // nlohmann::json throws on a field of the wrong type; that is a corrupt file, not a crash.
    static Result<std::unique_ptr<Tokenizer>> load(const std::string& text) {
        try {
            return load_unchecked(text);
        } catch (const nlohmann::json::exception& e) {
            return corrupt_data(std::string("tokenizer.json has a field of the wrong type: ") + e.what());
        }
    }

    static Result<std::unique_ptr<Tokenizer>> load_unchecked(const std::string& text) {
        Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded()) return corrupt_data("tokenizer.json is not valid JSON");
        if (!j.is_object()) return corrupt_data("tokenizer.json is not a JSON object");
        std::unique_ptr<Tokenizer> t(new Tokenizer());
        if (!j.contains("model")) return corrupt_data("tokenizer.json has no \"model\"");
        QS_ASSIGN_OR_RETURN(t->model_, load_model(j["model"]));
        QS_RETURN_IF_ERROR(load_normalizer(j.value("normalizer", Json()), *t).with_context("normalizer"));
        std::vector<std::string> regexes;
        QS_RETURN_IF_ERROR(load_pretokenizer(j.value("pre_tokenizer", Json()), regexes));
        if (regexes.size() > 1) return unsupported("more than one splitting pre-tokenizer is not supported");
        QS_ASSIGN_OR_RETURN(t->splitter_, RegexSplitter::create(regexes.empty() ? "(?s).+" : regexes[0]));
        QS_RETURN_IF_ERROR(load_post_processor(j.value("post_processor", Json()), *t));
        QS_RETURN_IF_ERROR(load_decoder(j.value("decoder", Json())));
        const Json added = j.value("added_tokens", Json::array());
        if (!added.is_array()) return corrupt_data("\"added_tokens\" is not an array");
        for (const Json& a : added) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
                !a.contains("content") || !a["content"].is_string())
                return corrupt_data("an added token lacks an integer \"id\" or a string \"content\"");
            AddedToken token;
            token.content = a["content"].get<std::string>();
            QS_ASSIGN_OR_RETURN(token.id, token_id(a["id"], "added token '" + token.content + "'"));
            token.special = flag(a, "special");
            token.normalized = flag(a, "normalized");
            if (flag(a, "lstrip") || flag(a, "rstrip") || flag(a, "single_word"))
                return unsupported("added token '" + token.content +
                                   "' uses lstrip/rstrip/single_word, which is not supported");
            if (!is_valid_utf8(token.content)) return corrupt_data("an added token is not valid UTF-8");
            t->added_index_[token.id] = t->added_.size();
            t->added_ids_[token.content] = token.id;
            // ByteLevel decoding of an added token: its alphabet characters map back to bytes;
            // if any character is outside the alphabet, its UTF-8 text is used as is.
            std::string bytes;
            if (!byte_level_to_bytes(token.content, bytes)) bytes = token.content;
            t->added_bytes_.push_back(bytes);
            t->added_.push_back(std::move(token));
        }
        std::vector<const AddedToken*> raw, normalized;
        for (const AddedToken& a : t->added_) (a.normalized && t->nfc_ ? normalized : raw).push_back(&a);
        t->raw_matcher_.build(raw);
        t->normalized_matcher_.build(normalized);
        // Qwen's roles, used unless tokenizer_config.json names others.
        if (auto id = t->token_to_id("<|im_end|>")) t->eos_id_ = id;
        else if (auto eot = t->token_to_id("<|endoftext|>")) t->eos_id_ = eot;
        if (auto id = t->token_to_id("<|endoftext|>")) t->pad_id_ = id;
        return t;
    }

    static Status load_config(const std::string& path, Tokenizer& t) {
        try {
            return load_config_unchecked(path, t);
        } catch (const nlohmann::json::exception& e) {
            return corrupt_data(path + " has a field of the wrong type: " + e.what());
        }
    }

    static Status load_config_unchecked(const std::string& path, Tokenizer& t) {
        QS_ASSIGN_OR_RETURN(std::string text, read_file(path));
        Json j = Json::parse(text, nullptr, false);
        if (j.is_discarded() || !j.is_object()) return corrupt_data(path + " is not a JSON object");
        auto role = [&](const char* key, std::optional<int32_t>& slot) -> Status {
            if (!j.contains(key) || j[key].is_null()) return Status::ok();
            const Json& v = j[key];
            std::string content;
            if (v.is_string()) content = v.get<std::string>();
            else if (v.is_object() && v.contains("content") && v["content"].is_string())
                content = v["content"].get<std::string>();
            else return corrupt_data(path + ": \"" + key + "\" is neither a string nor a token object");
            auto id = t.token_to_id(content);
            if (!id) return corrupt_data(path + ": " + key + " '" + content + "' is not in the vocabulary");
            slot = id;
            return Status::ok();
        };
        QS_RETURN_IF_ERROR(role("eos_token", t.eos_id_));
        QS_RETURN_IF_ERROR(role("pad_token", t.pad_id_));
        QS_RETURN_IF_ERROR(role("bos_token", t.bos_id_));
        if (j.contains("chat_template")) {
            const Json& c = j["chat_template"];
            if (c.is_string()) {
                t.chat_template_ = c.get<std::string>();
            } else if (c.is_array()) {
                for (const Json& entry : c)
                    if (entry.value("name", "") == "default") t.chat_template_ = entry.value("template", "");
            }
        }
        return Status::ok();
    }
};

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json_text(const std::string& text) {
    return TokenizerLoader::load(text);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_file(const std::string& path) {
    QS_ASSIGN_OR_RETURN(std::string text, read_file(path));
    auto result = TokenizerLoader::load(text);
    if (!result.is_ok()) return result.status().with_context(path);
    return result;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_dir(const std::string& dir) {
    namespace fs = std::filesystem;
    const fs::path root(dir);
    QS_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> t, from_file((root / "tokenizer.json").string()));
    const fs::path config = root / "tokenizer_config.json";
    if (fs::exists(config)) QS_RETURN_IF_ERROR(TokenizerLoader::load_config(config.string(), *t));
    const fs::path jinja = root / "chat_template.jinja";
    if (fs::exists(jinja)) {
        QS_ASSIGN_OR_RETURN(t->chat_template_, read_file(jinja.string()));
    }
    return t;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_path(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return from_dir(path);
    return from_file(path);
}

}  // namespace qs::tok
