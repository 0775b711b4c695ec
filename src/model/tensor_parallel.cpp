// Tensor-parallel shards of the model's weights (see tensor_parallel.h; spec §2.3–§2.5 for the
// layouts: q_proj holds query then gate per head; in_proj_qkv and the conv taps hold the q, k
// and v channels one block after another; value head h reads key head h / (Nv / Nk)).
#include "model/tensor_parallel.h"

#include <fmt/format.h>

#include "model/weight_shard.h"

namespace qs {
namespace {

// The heads rank `rank` holds: [first, first + local).
struct HeadSplit {
    int64_t local = 0, first = 0;
};

// Split evenly; with may_replicate, fewer heads than ranks are shared by size/heads ranks each.
Result<HeadSplit> split_heads(int64_t heads, int rank, int size, const char* field, bool may_replicate) {
    if (heads % size == 0) return HeadSplit{heads / size, rank * (heads / size)};
    if (may_replicate && size % heads == 0) return HeadSplit{1, rank / (size / heads)};
    return invalid_argument(fmt::format("{} = {} does not split over {} tensor-parallel ranks (it must be a multiple "
                                        "of the tensor-parallel size{})",
                                        field, heads, size, may_replicate ? ", or divide it" : ""));
}

Result<int64_t> split_dim(int64_t n, int size, const char* field) {
    if (n % size == 0) return n / size;
    return invalid_argument(
        fmt::format("{} = {} does not split over {} tensor-parallel ranks (it must be a multiple of it)", field, n, size));
}

Result<AttentionWeights> shard_attention(const AttentionWeights& a, const ModelConfig& c, int rank, int size,
                                         const std::string& name) {
    QS_ASSIGN_OR_RETURN(const HeadSplit q, split_heads(c.num_attention_heads, rank, size, "num_attention_heads", false));
    QS_ASSIGN_OR_RETURN(const HeadSplit kv, split_heads(c.num_key_value_heads, rank, size, "num_key_value_heads", true));
    const int64_t D = c.head_dim, q_rows = c.q_proj_out() / c.num_attention_heads;  // query (+ gate) per head
    AttentionWeights s;
    QS_ASSIGN_OR_RETURN(s.q_proj, linear_rows(a.q_proj, {{q.first * q_rows, q.local * q_rows}}, name + ".q_proj"));
    QS_ASSIGN_OR_RETURN(s.k_proj, linear_rows(a.k_proj, {{kv.first * D, kv.local * D}}, name + ".k_proj"));
    QS_ASSIGN_OR_RETURN(s.v_proj, linear_rows(a.v_proj, {{kv.first * D, kv.local * D}}, name + ".v_proj"));
    QS_ASSIGN_OR_RETURN(s.o_proj, linear_columns(a.o_proj, {q.first * D, q.local * D}, name + ".o_proj"));
    s.q_norm = a.q_norm;
    s.k_norm = a.k_norm;
    return s;
}

Result<GdnWeights> shard_gdn(const GdnWeights& g, const ModelConfig& c, int rank, int size, const std::string& name) {
    QS_ASSIGN_OR_RETURN(const HeadSplit v, split_heads(c.linear_num_value_heads, rank, size, "linear_num_value_heads", false));
    QS_ASSIGN_OR_RETURN(const HeadSplit k, split_heads(c.linear_num_key_heads, rank, size, "linear_num_key_heads", true));
    const int64_t Dk = c.linear_key_head_dim, Dv = c.linear_value_head_dim, Kdim = c.linear_key_dim();
    const std::vector<IndexRange> channels = {
        {k.first * Dk, k.local * Dk}, {Kdim + k.first * Dk, k.local * Dk}, {2 * Kdim + v.first * Dv, v.local * Dv}};
    const std::vector<IndexRange> heads = {{v.first, v.local}};
    GdnWeights s;
    QS_ASSIGN_OR_RETURN(s.in_proj_qkv, linear_rows(g.in_proj_qkv, channels, name + ".in_proj_qkv"));
    QS_ASSIGN_OR_RETURN(s.in_proj_z, linear_rows(g.in_proj_z, {{v.first * Dv, v.local * Dv}}, name + ".in_proj_z"));
    QS_ASSIGN_OR_RETURN(s.in_proj_b, linear_rows(g.in_proj_b, heads, name + ".in_proj_b"));
    QS_ASSIGN_OR_RETURN(s.in_proj_a, linear_rows(g.in_proj_a, heads, name + ".in_proj_a"));
    QS_ASSIGN_OR_RETURN(s.out_proj, linear_columns(g.out_proj, {v.first * Dv, v.local * Dv}, name + ".out_proj"));
    s.conv1d = select_rows(g.conv1d, c.linear_conv_kernel_dim, channels);
    s.A_log = select_rows(g.A_log, 1, heads);
    s.dt_bias = select_rows(g.dt_bias, 1, heads);
    s.norm = g.norm;
    return s;
}

Result<ExpertWeights> shard_expert(const ExpertWeights& e, int64_t intermediate, int rank, int size,
                                   const std::string& name) {
    const int64_t local = intermediate / size;
    const IndexRange mine{rank * local, local};
    ExpertWeights s;
    QS_ASSIGN_OR_RETURN(s.gate_proj, linear_rows(e.gate_proj, {mine}, name + ".gate_proj"));
    QS_ASSIGN_OR_RETURN(s.up_proj, linear_rows(e.up_proj, {mine}, name + ".up_proj"));
    QS_ASSIGN_OR_RETURN(s.down_proj, linear_columns(e.down_proj, mine, name + ".down_proj"));
    return s;
}

Result<MoeWeights> shard_moe(const MoeWeights& m, const ModelConfig& c, int rank, int size, bool expert_parallel,
                             const std::string& name) {
    MoeWeights s;
    s.router = m.router;
    s.shared_expert_gate = m.shared_expert_gate;
    s.experts.reserve(m.experts.size());
    const size_t per_rank = m.experts.size() / size_t(size);
    for (size_t e = 0; e < m.experts.size(); ++e) {
        if (expert_parallel) {  // whole, or empty when another rank holds it
            s.experts.push_back(e / per_rank == size_t(rank) ? m.experts[e] : ExpertWeights{});
            continue;
        }
        QS_ASSIGN_OR_RETURN(ExpertWeights x, shard_expert(m.experts[e], c.moe_intermediate_size, rank, size,
                                                          fmt::format("{}.experts.{}", name, e)));
        s.experts.push_back(std::move(x));
    }
    QS_ASSIGN_OR_RETURN(s.shared_expert, shard_expert(m.shared_expert, c.shared_expert_intermediate_size, rank, size,
                                                      name + ".shared_expert"));
    return s;
}

Result<DecoderLayerWeights> shard_layer(const DecoderLayerWeights& l, const ModelConfig& c, int rank, int size,
                                        bool expert_parallel, const std::string& name) {
    DecoderLayerWeights s;
    s.type = l.type;
    s.input_layernorm = l.input_layernorm;
    s.post_attention_layernorm = l.post_attention_layernorm;
    if (l.type == LayerType::kFullAttention) {
        QS_ASSIGN_OR_RETURN(s.attn, shard_attention(l.attn, c, rank, size, name + ".self_attn"));
    } else {
        QS_ASSIGN_OR_RETURN(s.gdn, shard_gdn(l.gdn, c, rank, size, name + ".linear_attn"));
    }
    QS_ASSIGN_OR_RETURN(s.moe, shard_moe(l.moe, c, rank, size, expert_parallel, name + ".mlp"));
    return s;
}

}  // namespace

Result<ModelConfig> shard_config(const ModelConfig& full, int size, bool expert_parallel) {
    if (size < 1) return invalid_argument(fmt::format("the tensor-parallel size must be >= 1, got {}", size));
    ModelConfig s = full;
    QS_ASSIGN_OR_RETURN(const HeadSplit q, split_heads(full.num_attention_heads, 0, size, "num_attention_heads", false));
    QS_ASSIGN_OR_RETURN(const HeadSplit kv, split_heads(full.num_key_value_heads, 0, size, "num_key_value_heads", true));
    QS_ASSIGN_OR_RETURN(const HeadSplit v,
                        split_heads(full.linear_num_value_heads, 0, size, "linear_num_value_heads", false));
    QS_ASSIGN_OR_RETURN(const HeadSplit k, split_heads(full.linear_num_key_heads, 0, size, "linear_num_key_heads", true));
    s.num_attention_heads = q.local;
    s.num_key_value_heads = kv.local;
    s.linear_num_value_heads = v.local;
    s.linear_num_key_heads = k.local;
    if (expert_parallel) {
        QS_RETURN_IF_ERROR(split_dim(full.num_experts, size, "num_experts").status());
    } else {
        QS_ASSIGN_OR_RETURN(s.moe_intermediate_size, split_dim(full.moe_intermediate_size, size, "moe_intermediate_size"));
    }
    QS_ASSIGN_OR_RETURN(s.shared_expert_intermediate_size,
                        split_dim(full.shared_expert_intermediate_size, size, "shared_expert_intermediate_size"));
    QS_RETURN_IF_ERROR(split_dim(full.vocab_size, size, "vocab_size").status());
    return s;
}

Result<ModelWeights> shard_weights(const ModelWeights& full, int rank, int size, bool expert_parallel) {
    QS_ASSIGN_OR_RETURN(ModelConfig config, shard_config(full.config, size, expert_parallel));
    if (rank < 0 || rank >= size)
        return invalid_argument(fmt::format("tensor-parallel rank {} is outside 0..{}", rank, size - 1));
    const ModelConfig& c = full.config;
    ModelWeights s;
    s.config = std::move(config);
    s.embed_tokens = full.embed_tokens;
    s.norm = full.norm;
    for (size_t i = 0; i < full.layers.size(); ++i) {
        QS_ASSIGN_OR_RETURN(DecoderLayerWeights l,
                            shard_layer(full.layers[i], c, rank, size, expert_parallel, fmt::format("layers.{}", i)));
        s.layers.push_back(std::move(l));
    }
    const int64_t vocab = c.vocab_size / size;
    QS_ASSIGN_OR_RETURN(s.lm_head, linear_rows(full.lm_head, {{rank * vocab, vocab}}, "lm_head"));
    s.mtp.present = full.mtp.present;
    if (full.mtp.present) {
        const MtpWeights& m = full.mtp;
        s.mtp.pre_fc_norm_embedding = m.pre_fc_norm_embedding;
        s.mtp.pre_fc_norm_hidden = m.pre_fc_norm_hidden;
        s.mtp.fc = m.fc;
        s.mtp.norm = m.norm;
        QS_ASSIGN_OR_RETURN(s.mtp.layer, shard_layer(m.layer, c, rank, size, expert_parallel, "mtp.layers.0"));
    }
    return s;
}

}  // namespace qs
