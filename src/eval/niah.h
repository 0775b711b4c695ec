// Needle in a haystack (`eval niah`): a prompt of a target length in tokens made of deterministic
// filler text (seeded sentences from fixed word lists: no corpus file, no licence question, and
// the same seed gives the same bytes), with one needle sentence — "The special magic number for
// <key> is <7 digits>." — inserted at a depth (0 = the start, 1 = the end, at the nearest sentence
// boundary), followed by the question. Scoring is exact: the first run of digits in the reply
// (reasoning removed) must equal the answer.
// Lengths are tokens of the whole chat prompt as the server counts them (usage.prompt_tokens):
// the text is sized with a linear fit tokens = overhead + chars / chars_per_token, which the
// runner calibrates against the server with two probe requests (or is given).
// Pure functions except run_niah (the load generator); main thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/loadgen.h"
#include "core/status.h"

namespace qs::eval {

struct NiahCase {
    int64_t target_tokens = 0;
    double depth = 0;  // [0, 1]
    int64_t sample = 0;
    std::string key;     // "Lisbon"
    std::string answer;  // "4821907"
};

// Deterministic filler of exactly `chars` bytes (ASCII, whole sentences but the last, which is
// cut) for a seed.
std::string filler_text(int64_t chars, uint64_t seed);
// The case's key and answer for (length index, depth index, sample, seed).
NiahCase make_case(int64_t target_tokens, double depth, int64_t sample, uint64_t seed);
std::string needle_sentence(const NiahCase& c, const std::string& needle_template);
std::string question(const NiahCase& c);

struct TokenFit {
    double overhead_tokens = 40;  // template + question
    double chars_per_token = 4.0;
};
// The user message: haystack of the size the fit gives for the case's target, needle at its depth,
// then the question. needle_template: "{key}" and "{answer}" are replaced; empty: the default.
std::string niah_prompt(const NiahCase& c, const TokenFit& fit, uint64_t seed,
                        const std::string& needle_template = "");
// The needle's position in the haystack as a fraction of the haystack's characters.
double needle_position(const std::string& prompt, const NiahCase& c,
                       const std::string& needle_template = "");

// First maximal digit run of the reply after reasoning is removed ("" if none) and the verdict.
std::string first_number(const std::string& reply);
bool niah_correct(const std::string& reply, const std::string& answer);

struct NiahOptions {
    bench::Url url;
    std::string api_key;
    std::string model = "qwen3.6-35b-a3b";
    std::vector<int64_t> lengths;  // target prompt tokens
    std::vector<double> depths;
    int64_t samples = 1;
    int64_t max_model_len = 262144;
    int64_t max_tokens = 32;
    int64_t concurrency = 1;
    uint64_t seed = 1;
    bool calibrate = true;  // else `fit` is used as given
    TokenFit fit;
    std::string needle_template;
    double timeout_s = 0;
};

struct NiahResult {
    NiahCase c;
    int64_t prompt_tokens = 0;  // as the server counted
    std::string reply;          // content, reasoning removed, at most 200 bytes
    std::string found;          // first number in the reply
    bool passed = false;
    std::string error;  // transport or stream failure; empty if the reply arrived
    double latency_s = 0, ttft_s = -1;
};

// Errors: bad options (a length past max_model_len - max_tokens), calibration failure,
// the endpoint unreachable.
Result<std::vector<NiahResult>> run_niah(const NiahOptions& o, TokenFit* fit_used = nullptr);

nlohmann::ordered_json niah_result_json(const NiahResult& r);
Status write_niah_results(const std::string& path, const std::vector<NiahResult>& results);
Result<std::vector<NiahResult>> read_niah_results(const std::string& path);

}  // namespace qs::eval
