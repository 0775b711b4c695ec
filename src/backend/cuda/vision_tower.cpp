// VisionRunner (vision_tower.h): the tower's forward on its own stream, step for step as
// cpu::vision_tower (backend/cpu/cpu_vision.cpp).
#include "backend/cuda/vision_tower.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/vision_kernels.h"
#include "backend/vision_memory.h"
#include "core/check.h"
#include "core/dtype.h"

namespace qs::cuda {

namespace {

DeviceBuffer upload_floats(const std::vector<float>& h, cudaStream_t stream) {
    DeviceBuffer d(std::max<size_t>(h.size(), 1) * sizeof(float));
    if (!h.empty())
        QS_CUDA_CHECK(cudaMemcpyAsync(d.get(), h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
    return d;
}

template <class T>
T* copy_in(DeviceArena& arena, const T* host, size_t n, cudaStream_t stream) {
    auto* d = static_cast<T*>(arena.allocate(std::max<size_t>(n, 1) * sizeof(T)));
    if (n > 0) QS_CUDA_CHECK(cudaMemcpyAsync(d, host, n * sizeof(T), cudaMemcpyHostToDevice, stream));
    return d;
}

float* floats(DeviceArena& arena, int64_t n) {
    return static_cast<float*>(arena.allocate(size_t(std::max<int64_t>(n, 1)) * sizeof(float)));
}

}  // namespace

VisionRunner::VisionRunner(int device, bool reference_precision)
    : device_(device), reference_precision_(reference_precision) {
    QS_CUDA_CHECK(cudaSetDevice(device_));
    QS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    gemm_ = std::make_unique<Gemm>();
}

VisionRunner::~VisionRunner() {
    if (stream_) {
        cudaStreamSynchronize(stream_);
        cudaStreamDestroy(stream_);
    }
}

VisionRunner::Linear VisionRunner::upload_linear(const VisionLinear& l) {
    QS_CHECK(l.w.size() == size_t(l.in) * size_t(l.out) && l.b.size() == size_t(l.out));
    Linear d;
    d.dl.in = l.in;
    d.dl.out = l.out;
    if (reference_precision_) {
        d.dl.dtype = DeviceLinear::Dtype::kF32;
        d.w = upload_floats(l.w, stream_);
    } else {
        d.dl.dtype = DeviceLinear::Dtype::kBF16;
        std::vector<uint16_t> bits(l.w.size());
        for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(l.w[i]).bits;
        d.w = DeviceBuffer(bits.size() * sizeof(uint16_t));
        QS_CUDA_CHECK(cudaMemcpy(d.w.get(), bits.data(), bits.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
    }
    d.dl.w = d.w.get();
    d.b = upload_floats(l.b, stream_);
    return d;
}

VisionRunner::Norm VisionRunner::upload_norm(const VisionNorm& n) {
    return Norm{upload_floats(n.w, stream_), upload_floats(n.b, stream_)};
}

void VisionRunner::upload(const VisionWeights& w) {
    patch_embed_ = upload_linear(w.patch_embed);
    pos_embed_ = upload_floats(w.pos_embed, stream_);
    blocks_.clear();
    for (const VisionBlockWeights& b : w.blocks) {
        Block d;
        d.norm1 = upload_norm(b.norm1);
        d.norm2 = upload_norm(b.norm2);
        d.qkv = upload_linear(b.qkv);
        d.proj = upload_linear(b.proj);
        d.fc1 = upload_linear(b.fc1);
        d.fc2 = upload_linear(b.fc2);
        blocks_.push_back(std::move(d));
    }
    merger_norm_ = upload_norm(w.merger_norm);
    merger_fc1_ = upload_linear(w.merger_fc1);
    merger_fc2_ = upload_linear(w.merger_fc2);
    QS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    uploaded_ = &w;
    weight_bytes_ = vision_weight_bytes(w, reference_precision_);
}

size_t VisionRunner::reserve(const VisionWeights& w, int64_t max_rows) {
    std::lock_guard<std::mutex> lock(mu_);
    QS_CUDA_CHECK(cudaSetDevice(device_));
    if (uploaded_ != &w) upload(w);
    const size_t need = vision_arena_bytes(w.dims, max_rows, reference_precision_);
    if (need > arena_.reserved()) {
        // One chunk of exactly `need`: every block of a forward up to max_rows stacks in it.
        QS_CUDA_CHECK(cudaStreamSynchronize(stream_));
        arena_ = DeviceArena(need);
        arena_.allocate(need);
        arena_.reset();
    }
    return weight_bytes_ + arena_.reserved();
}

void VisionRunner::linear(const Linear& l, const float* x, int64_t T, float* y, int act) {
    const DeviceArena::Mark m = arena_.mark();
    gemm_->linear(l.dl, x, T, y, arena_, stream_);
    arena_.release_to(m);  // the GEMM's bf16 copy of x is dead once the GEMM is enqueued
    launch_vision_bias_act(y, l.b.as<float>(), T, l.dl.out, VisionAct(act), stream_);
}

void VisionRunner::forward(const VisionWeights& w, const float* patches, const std::vector<VisionGrid>& grids,
                           float* out, float* blocks_out) {
    std::lock_guard<std::mutex> lock(mu_);
    QS_CUDA_CHECK(cudaSetDevice(device_));
    if (uploaded_ != &w) upload(w);
    const VisionDims& dm = w.dims;
    const int H = dm.hidden, M = dm.merge, hd = dm.head_dim(), half = hd / 2, I = dm.intermediate;
    QS_CHECK_MSG(hd % 4 == 0 && hd <= 128, "vision tower: head_dim must be a multiple of 4 up to 128");
    int64_t rows = 0;
    for (const VisionGrid& g : grids) rows += g.rows();
    if (rows == 0) return;
    QS_CHECK(rows % (M * M) == 0);

    // Host tables: position taps, rotary cos/sin, attention tiles (per frame).
    std::vector<int32_t> tap_index(size_t(rows) * 4);
    std::vector<float> tap_weight(size_t(rows) * 4), cosv(size_t(rows) * size_t(half)), sinv(size_t(rows) * size_t(half));
    std::vector<int4> tiles;
    int64_t r0 = 0;
    for (const VisionGrid& g : grids) {
        cpu::vision_position_taps(g, M, dm.pos_side, tap_index.data() + r0 * 4, tap_weight.data() + r0 * 4);
        cpu::vision_rotary_tables(g, M, hd, dm.rope_theta, cosv.data() + r0 * half, sinv.data() + r0 * half);
        for (int t = 0; t < g.t; ++t) {
            const int64_t b0 = r0 + int64_t(t) * g.h * g.w, b1 = b0 + int64_t(g.h) * g.w;
            for (int64_t q = b0; q < b1; q += kVisionAttnTileRows)
                tiles.push_back(make_int4(int(q), int(std::min<int64_t>(q + kVisionAttnTileRows, b1)), int(b0), int(b1)));
        }
        r0 += g.rows();
    }
    QS_CHECK_MSG(rows < (int64_t(1) << 31) && tiles.size() < (size_t(1) << 31), "vision tower: too many patch rows");

    arena_.reset();
    const float* d_patches = copy_in(arena_, patches, size_t(rows) * size_t(dm.patch_dim), stream_);
    const int32_t* d_index = copy_in(arena_, tap_index.data(), tap_index.size(), stream_);
    const float* d_weight = copy_in(arena_, tap_weight.data(), tap_weight.size(), stream_);
    const float* d_cos = copy_in(arena_, cosv.data(), cosv.size(), stream_);
    const float* d_sin = copy_in(arena_, sinv.data(), sinv.size(), stream_);
    const int4* d_tiles = copy_in(arena_, tiles.data(), tiles.size(), stream_);
    float* x = floats(arena_, rows * H);
    float* h = floats(arena_, rows * H);
    float* qkv = floats(arena_, rows * 3 * H);
    float* att = floats(arena_, rows * H);
    float* tmp = floats(arena_, rows * H);
    float* mid = floats(arena_, rows * std::max(I, H));

    constexpr int kNone = int(VisionAct::kNone), kTanh = int(VisionAct::kGeluTanh), kErf = int(VisionAct::kGeluErf);
    linear(patch_embed_, d_patches, rows, x, kNone);
    launch_vision_pos_embed(x, pos_embed_.as<float>(), d_index, d_weight, rows, H, stream_);
    const float eps = float(dm.ln_eps);
    for (const Block& b : blocks_) {
        launch_vision_layer_norm(x, b.norm1.w.as<float>(), b.norm1.b.as<float>(), rows, H, eps, h, stream_);
        linear(b.qkv, h, rows, qkv, kNone);
        launch_vision_rope(qkv, d_cos, d_sin, rows, dm.heads, hd, stream_);
        launch_vision_attention(qkv, d_tiles, int(tiles.size()), dm.heads, hd, att, stream_);
        {
            const DeviceArena::Mark m = arena_.mark();
            gemm_->linear(b.proj.dl, att, rows, tmp, arena_, stream_);
            arena_.release_to(m);
        }
        launch_vision_residual_bias(x, tmp, b.proj.b.as<float>(), rows, H, stream_);
        launch_vision_layer_norm(x, b.norm2.w.as<float>(), b.norm2.b.as<float>(), rows, H, eps, h, stream_);
        linear(b.fc1, h, rows, mid, kTanh);
        {
            const DeviceArena::Mark m = arena_.mark();
            gemm_->linear(b.fc2.dl, mid, rows, tmp, arena_, stream_);
            arena_.release_to(m);
        }
        launch_vision_residual_bias(x, tmp, b.fc2.b.as<float>(), rows, H, stream_);
    }
    if (blocks_out != nullptr)
        QS_CUDA_CHECK(cudaMemcpyAsync(blocks_out, x, size_t(rows * H) * sizeof(float), cudaMemcpyDeviceToHost, stream_));

    // Merger: LayerNorm per patch row; M·M consecutive rows are one merged token ([rows/M², M²·H]).
    const int64_t merged = rows / (M * M);
    launch_vision_layer_norm(x, merger_norm_.w.as<float>(), merger_norm_.b.as<float>(), rows, H, eps, h, stream_);
    float* m1 = floats(arena_, merged * merger_fc1_.dl.out);
    float* o = floats(arena_, merged * merger_fc2_.dl.out);
    linear(merger_fc1_, h, merged, m1, kErf);
    linear(merger_fc2_, m1, merged, o, kNone);
    QS_CUDA_CHECK(cudaMemcpyAsync(out, o, size_t(merged * merger_fc2_.dl.out) * sizeof(float), cudaMemcpyDeviceToHost,
                                  stream_));
    QS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace qs::cuda
