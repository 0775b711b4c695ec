// ForwardGraphs (see forward_graphs.h).
#include "backend/cuda/forward_graphs.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "core/log.h"
#include "core/timer.h"

namespace qs::cuda {

namespace {
// Captured sizes: every size up to 4, then steps growing with the size so that from 16 up less
// than a third of a padded batch's rows are padding (25 graphs up to 512).
std::vector<int64_t> capture_sizes(int64_t max_batch) {
    std::vector<int64_t> sizes;
    for (int64_t n = 1; n <= max_batch;) {
        sizes.push_back(n);
        n += n < 4 ? 1 : n < 16 ? 4 : n < 64 ? 8 : n < 128 ? 16 : n < 256 ? 32 : 64;
    }
    if (max_batch > 0 && sizes.back() != max_batch) sizes.push_back(max_batch);
    return sizes;
}

// Bound on graphs kept (a new cache or arena layout makes new keys; old ones are never replayed).
constexpr size_t kMaxGraphs = 256;
}  // namespace

ForwardGraphs::ForwardGraphs(int64_t max_batch) : sizes_(capture_sizes(max_batch)) {}

ForwardGraphs::~ForwardGraphs() {
    for (auto& [key, e] : graphs_) cudaGraphExecDestroy(e.exec);
}

int64_t ForwardGraphs::padded_size(int64_t n) const {
    auto it = std::lower_bound(sizes_.begin(), sizes_.end(), n);
    return it == sizes_.end() ? 0 : *it;
}

void ForwardGraphs::clear(cudaStream_t stream) {
    if (graphs_.empty()) return;
    QS_CUDA_CHECK(cudaStreamSynchronize(stream));  // no replay of them still in flight
    for (auto& [key, e] : graphs_) QS_CUDA_CHECK(cudaGraphExecDestroy(e.exec));
    graphs_.clear();
}

float* ForwardGraphs::run(const Key& key, cudaStream_t stream, DeviceArena& arena,
                          const std::function<float*()>& layers) {
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
        if (graphs_.size() >= kMaxGraphs) clear(stream);
        Entry e;
        Timer timer;
        // Relaxed: the arena may cudaMalloc a new chunk while the layers are captured.
        QS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
        e.result = layers();
        cudaGraph_t graph = nullptr;
        QS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        QS_CUDA_CHECK(cudaGraphInstantiate(&e.exec, graph, 0));
        QS_CUDA_CHECK(cudaGraphDestroy(graph));
        e.arena_after = arena.state();
        it = graphs_.emplace(key, std::move(e)).first;
        ++captures_;
        // Graphs are captured on first use of each shape, not at start-up, so there is no total
        // to show a percentage of: one line per capture (--log-level debug) with what it cost.
        log_debug("CUDA graph {} captured: {} rows of {} per sequence{}, {:.1f} ms ({} kept)", captures_, key.rows,
                  key.seq_rows, key.short_spans ? ", short spans" : "", timer.elapsed_s() * 1e3, graphs_.size());
    } else {
        arena.restore(it->second.arena_after);
        ++replays_;
    }
    QS_CUDA_CHECK(cudaGraphLaunch(it->second.exec, stream));
    return it->second.result;
}

}  // namespace qs::cuda
