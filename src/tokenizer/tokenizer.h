// The text <-> token-id boundary of qwenserve: a byte-level BPE tokenizer loaded from a
// Hugging Face tokenizer.json (vocab, merges, added tokens, NFC normaliser, Split regex
// pre-tokenizer, ByteLevel decoder), with the encode/decode semantics of the `tokenizers`
// library. Invalid UTF-8 input is first repaired (each maximal invalid subpart becomes U+FFFD,
// as Python's errors="replace" does), so encode(bytes) == HF encode(bytes.decode(errors="replace")).
// Immutable after loading (apart from an internal thread-safe cache): share one instance
// across the tokenizer worker threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"

namespace qs::tok {

class Tokenizer {
public:
    // A tokenizer.json file.
    static Result<std::unique_ptr<Tokenizer>> from_file(const std::string& path);
    // A model directory: tokenizer.json, plus tokenizer_config.json (special-token roles and
    // chat template) when present.
    static Result<std::unique_ptr<Tokenizer>> from_dir(const std::string& dir);
    // Either of the two, by what `path` is.
    static Result<std::unique_ptr<Tokenizer>> from_path(const std::string& path);
    // The tokenizer.json text itself (tests, tools).
    static Result<std::unique_ptr<Tokenizer>> from_json_text(const std::string& text);

    // add_special_tokens: whether the post-processor adds its tokens (HF meaning; a no-op for
    // Qwen, whose post-processor is ByteLevel). Special tokens written in `text` are always
    // recognised, as in HF with split_special_tokens=false.
    std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
    // Unknown ids are skipped (as HF does); invalid UTF-8 in the result is replaced by U+FFFD.
    std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

    // Raw bytes a token contributes to decoded text (before UTF-8 repair); empty for unknown
    // ids, and for special tokens when skip_special_tokens.
    std::string_view token_bytes(int32_t id, bool skip_special_tokens = false) const;

    std::optional<int32_t> token_to_id(std::string_view token) const;
    std::optional<std::string> id_to_token(int32_t id) const;
    bool is_special(int32_t id) const;
    // Vocabulary size including added tokens (HF get_vocab_size(with_added_tokens=True)).
    int32_t vocab_size() const;
    const std::vector<AddedToken>& added_tokens() const { return added_; }

    // Roles from tokenizer_config.json (from_dir), falling back to Qwen's names.
    std::optional<int32_t> eos_token_id() const { return eos_id_; }
    std::optional<int32_t> pad_token_id() const { return pad_id_; }
    std::optional<int32_t> bos_token_id() const { return bos_id_; }
    // The chat template text found in the model directory (tokenizer_config.json or
    // chat_template.jinja), empty if none.
    const std::string& chat_template() const { return chat_template_; }
    const std::string& pretokenizer_regex() const { return splitter_->pattern(); }

private:
    friend class TokenizerLoader;
    Tokenizer() = default;
    void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
    void encode_normalized(std::string_view text, std::vector<int32_t>& out) const;

    std::unique_ptr<BpeModel> model_;
    std::unique_ptr<RegexSplitter> splitter_;
    std::vector<AddedToken> added_;
    std::unordered_map<std::string, int32_t> added_ids_;
    std::unordered_map<int32_t, size_t> added_index_;  // id -> index in added_
    std::vector<std::string> added_bytes_;             // per added_ entry: decoded bytes
    AddedTokenMatcher raw_matcher_;                    // tokens with normalized=false
    AddedTokenMatcher normalized_matcher_;             // tokens with normalized=true
    bool nfc_ = false;
    // TemplateProcessing for single sequences: ids before and after the text.
    std::vector<int32_t> prefix_ids_;
    std::vector<int32_t> suffix_ids_;
    std::optional<int32_t> eos_id_, pad_id_, bos_id_;
    std::string chat_template_;
};

}  // namespace qs::tok
