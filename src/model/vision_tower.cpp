#include "model/vision_tower.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/cpu/cpu_ops.h"
#include "core/dtype.h"

namespace qs {

namespace {

Result<std::vector<float>> read_tensor(const Checkpoint& ckpt, const std::string& name,
                                       const std::vector<int64_t>& shape) {
    const TensorInfo* t = ckpt.find(name);
    if (t == nullptr) return not_found(fmt::format("vision tower tensor {} is missing", name));
    if (t->shape != shape) {
        return corrupt_data(fmt::format("vision tower tensor {} has shape [{}], want [{}]", name,
                                        fmt::join(t->shape, ", "), fmt::join(shape, ", ")));
    }
    std::vector<float> v(size_t(t->numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_f32(t->data, t->dtype, i);
    return v;
}

}  // namespace

Result<VisionTower> VisionTower::load(const Checkpoint& ckpt, const VisionConfig& cfg, const std::string& prefix) {
    return build(cfg, [&](const std::string& name, const std::vector<int64_t>& shape) {
        return read_tensor(ckpt, prefix + name, shape);
    });
}

Result<VisionTower> VisionTower::build(const VisionConfig& cfg, const TensorReader& read) {
    VisionTower t;
    t.cfg_ = cfg;
    const int H = cfg.hidden_size, I = cfg.intermediate_size, M2 = cfg.spatial_merge_size * cfg.spatial_merge_size;
    auto lin = [&](const std::string& name, int in, int out, VisionLinear* l) -> Status {
        l->in = in;
        l->out = out;
        QS_ASSIGN_OR_RETURN(l->w, read(name + ".weight", {out, in}));
        QS_ASSIGN_OR_RETURN(l->b, read(name + ".bias", {out}));
        return Status::ok();
    };
    auto norm = [&](const std::string& name, VisionNorm* n) -> Status {
        QS_ASSIGN_OR_RETURN(n->w, read(name + ".weight", {H}));
        QS_ASSIGN_OR_RETURN(n->b, read(name + ".bias", {H}));
        return Status::ok();
    };
    {
        // Conv3d weight [H, C, T, P, P]: flattened, a [H][C·T·P·P] linear map in the patch row's order.
        QS_ASSIGN_OR_RETURN(t.w_.patch_embed.w, read("patch_embed.proj.weight",
                                                          {H, cfg.in_channels, cfg.temporal_patch_size,
                                                           cfg.patch_size, cfg.patch_size}));
        QS_ASSIGN_OR_RETURN(t.w_.patch_embed.b, read("patch_embed.proj.bias", {H}));
        t.w_.patch_embed.in = cfg.patch_dim();
        t.w_.patch_embed.out = H;
    }
    QS_ASSIGN_OR_RETURN(t.w_.pos_embed, read("pos_embed.weight", {cfg.num_position_embeddings, H}));
    t.w_.blocks.resize(size_t(cfg.depth));
    for (int i = 0; i < cfg.depth; ++i) {
        const std::string b = fmt::format("blocks.{}.", i);
        VisionBlockWeights& blk = t.w_.blocks[size_t(i)];
        QS_RETURN_IF_ERROR(norm(b + "norm1", &blk.norm1));
        QS_RETURN_IF_ERROR(norm(b + "norm2", &blk.norm2));
        QS_RETURN_IF_ERROR(lin(b + "attn.qkv", H, 3 * H, &blk.qkv));
        QS_RETURN_IF_ERROR(lin(b + "attn.proj", H, H, &blk.proj));
        QS_RETURN_IF_ERROR(lin(b + "mlp.linear_fc1", H, I, &blk.fc1));
        QS_RETURN_IF_ERROR(lin(b + "mlp.linear_fc2", I, H, &blk.fc2));
    }
    QS_RETURN_IF_ERROR(norm("merger.norm", &t.w_.merger_norm));
    QS_RETURN_IF_ERROR(lin("merger.linear_fc1", H * M2, H * M2, &t.w_.merger_fc1));
    QS_RETURN_IF_ERROR(lin("merger.linear_fc2", H * M2, cfg.out_hidden_size, &t.w_.merger_fc2));
    VisionDims& d = t.w_.dims;
    d.hidden = H;
    d.heads = cfg.num_heads;
    d.intermediate = I;
    d.patch_dim = cfg.patch_dim();
    d.pos_side = int(std::lround(std::sqrt(double(cfg.num_position_embeddings))));
    d.merge = cfg.spatial_merge_size;
    d.out_hidden = cfg.out_hidden_size;
    d.rope_theta = cfg.rope_theta;
    return t;
}

Result<std::vector<float>> VisionTower::forward(const std::vector<const ImagePatches*>& images, Ops* ops,
                                                std::vector<float>* blocks_out) const {
    const int M = cfg_.spatial_merge_size;
    int64_t rows = 0;
    std::vector<VisionGrid> grids;
    std::vector<float> patches;
    for (const ImagePatches* im : images) {
        if (im->patch_dim != cfg_.patch_dim()) {
            return invalid_argument(fmt::format("image patch rows have {} values, the tower takes {}", im->patch_dim,
                                                cfg_.patch_dim()));
        }
        if (im->grid_h % M != 0 || im->grid_w % M != 0) return invalid_argument("image grid not a multiple of the merge size");
        grids.push_back({im->grid_t, im->grid_h, im->grid_w});
        rows += im->rows();
    }
    patches.reserve(size_t(rows) * size_t(cfg_.patch_dim()));
    for (const ImagePatches* im : images) patches.insert(patches.end(), im->values.begin(), im->values.end());
    std::vector<float> out(size_t(rows / (M * M)) * size_t(cfg_.out_hidden_size));
    if (blocks_out != nullptr) blocks_out->assign(size_t(rows) * size_t(cfg_.hidden_size), 0.0f);
    float* blocks = blocks_out != nullptr ? blocks_out->data() : nullptr;
    if (ops != nullptr) ops->vision_tower(w_, patches.data(), grids, out.data(), blocks);
    else cpu::vision_tower(w_, patches.data(), grids, out.data(), blocks);
    return out;
}

}  // namespace qs
