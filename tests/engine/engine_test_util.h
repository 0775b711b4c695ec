// Shared pieces of the engine tests: a tiny dummy model, a fake text decoder, an output collector
// and the single-sequence greedy reference the engine must reproduce.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "engine/engine.h"
#include "model/single_sequence.h"

namespace qs::test {

inline ModelConfig engine_test_config() {
    ModelConfig c = tiny_model_config();
    c.num_hidden_layers = 5;
    c.layer_types = {LayerType::kLinearAttention, LayerType::kFullAttention, LayerType::kLinearAttention,
                     LayerType::kLinearAttention, LayerType::kFullAttention};
    c.max_position_embeddings = 4096;
    return c;
}

// Token t decodes to a short string so stop strings can span tokens: "<letter><digit>".
class FakeDecoder final : public TextDecoder {
public:
    static std::string text_of(int32_t t) { return std::string(1, char('a' + t % 26)) + char('0' + t % 10); }
    std::unique_ptr<StreamDecoder> start(bool) const override {
        struct S final : StreamDecoder {
            std::string push(int32_t t) override { return text_of(t); }
            std::string finish() override { return ""; }
        };
        return std::make_unique<S>();
    }
};

struct Completion {
    std::vector<int32_t> tokens;
    std::string text;
    std::vector<float> logprobs;
    FinishReason finish = FinishReason::kNone;
    std::string stop_reason;
    int num_final = 0;       // outputs with a finish reason (must end at exactly 1)
    int num_after_final = 0; // outputs after the final one (must stay 0)
    RequestTiming timing;    // from the final output
};

// Collects every request's outputs, by request id and completion index. Engine thread writes.
struct Collector {
    std::map<std::string, std::map<int, Completion>> got;
    OutputSink sink_for(const std::string& id) {
        return [this, id](RequestOutput&& o) {
            Completion& c = got[id][o.index];
            if (c.num_final) ++c.num_after_final;
            c.tokens.insert(c.tokens.end(), o.token_ids.begin(), o.token_ids.end());
            c.text += o.text;
            for (const auto& lp : o.logprobs) c.logprobs.push_back(lp.logprob);
            if (o.finish_reason != FinishReason::kNone) {
                ++c.num_final;
                c.finish = o.finish_reason;
                c.stop_reason = o.stop_reason;
                c.timing = o.timing;
            }
        };
    }
};

inline std::vector<int32_t> random_prompt(std::mt19937& rng, int len, int vocab) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (auto& t : p) t = int32_t(rng() % uint32_t(vocab));
    return p;
}

// Greedy continuation of `prompt` computed alone with SingleSequence (the reference).
inline std::vector<int32_t> greedy_reference(Qwen36Model& model, const std::vector<int32_t>& prompt, int max_tokens,
                                             KvCacheDtype kv) {
    SingleSequence seq(model, int64_t(prompt.size()) + max_tokens + 1, kv);
    std::vector<float> logits = seq.feed(prompt, false);
    std::vector<int32_t> out;
    for (int i = 0; i < max_tokens; ++i) {
        const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        out.push_back(next);
        if (i + 1 < max_tokens) logits = seq.feed({next}, false);
    }
    return out;
}

// Runs `reqs` to completion on a CPU engine (8 resident sequences, 16 MB cache) with `spec` MTP
// proposals; returns every completion by request id and index (empty on an engine error).
inline std::map<std::string, std::map<int, Completion>> run_requests(const ModelWeights& w, int spec,
                                                                    const std::vector<GenerationRequest>& reqs) {
    CpuOps ops;
    EngineConfig cfg;
    cfg.num_speculative_tokens = spec;
    cfg.max_num_seqs = 8;
    cfg.cache_memory_mb = 16;
    auto engine = Engine::create(w, ops, cfg, nullptr);
    if (!engine.is_ok()) return {};
    Collector col;
    for (const auto& r : reqs)
        if (!(*engine)->submit(r, col.sink_for(r.id)).is_ok()) return {};
    (*engine)->run_until_idle();
    if ((*engine)->num_blocks_in_use() != 0) return {};
    return col.got;
}

inline GenerationRequest greedy_request(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
    GenerationRequest r;
    r.id = id;
    r.prompt_ids = std::move(prompt);
    r.params.temperature = 0.0;
    r.params.max_tokens = max_tokens;
    return r;
}

}  // namespace qs::test
