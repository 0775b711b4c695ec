// libFuzzer harness: the tokenizer.json loader (tokenizer/tokenizer_loader) on arbitrary text.
// Input: a tokenizer.json. It must load or give a Status; a loaded tokenizer must then encode and
// decode a fixed text (special tokens, invalid UTF-8, combining marks) without a sanitizer report,
// and every id it produces must be in its vocabulary.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_input.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    auto loaded = qs::tok::Tokenizer::from_json_text(text);
    if (!loaded.is_ok()) return 0;
    const qs::tok::Tokenizer& tok = *loaded.value();
    static const std::string kProbe =
        "<|im_start|>user\nHello, wörld! e\xcc\x81 \xff\xfe 123  \t\n<think>x</think><|im_end|>";
    const std::vector<int32_t> ids = tok.encode(kProbe);
    for (int32_t id : ids) QS_FUZZ_ASSERT(id >= 0 && id < tok.vocab_size());
    (void)tok.decode(ids);
    (void)tok.decode(ids, /*skip_special_tokens=*/true);
    const std::vector<int32_t> odd = {-1, 0, 1, tok.vocab_size() - 1, tok.vocab_size(), 1 << 30};
    (void)tok.decode(odd);
    for (int32_t id : odd) {
        (void)tok.id_to_token(id);
        (void)tok.token_bytes(id);
        (void)tok.is_special(id);
    }
    return 0;
}
