// StepTimeline: what one engine step costs on the GPU side, for gpu_forward_bench --mode mtp
// (issue 13: the price of an MTP step against a plain decode step). Two things:
//  - counts, always kept (a few integer adds per call): stream synchronisations, graph launches
//    (captures included), ops enqueued outside a graph (each is one to three kernel launches),
//    and host↔device copies;
//  - with enable(true), a CUDA event on the stream at the start of every phase (a forward's
//    upload, the lm_head, the sampler, the draft argmax): take() attributes the GPU time from one
//    phase's event to the next (or to the event take() records last) to the earlier phase, so the
//    phases add up to the step's GPU timeline from the first upload to the end, gaps included (a
//    gap while the GPU waits for the host counts for the phase before it). Events are never
//    recorded while a graph is being captured. Engine thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace qs::cuda {

class StepTimeline {
public:
    ~StepTimeline();
    void enable(bool on) { enabled_ = on; }
    bool enabled() const { return enabled_; }

    struct Counts {
        int64_t syncs = 0;           // cudaStreamSynchronize of the ops' stream
        int64_t graph_launches = 0;  // cudaGraphLaunch (replays and first launches)
        int64_t eager_ops = 0;       // Ops calls enqueued outside any graph
        int64_t copies = 0;          // cudaMemcpyAsync host↔device
    };
    void count_sync() { ++counts_.syncs; }
    void count_graph_launch() { ++counts_.graph_launches; }
    void count_eager_op() { ++counts_.eager_ops; }
    void count_copy() { ++counts_.copies; }

    // Records the start of `phase` (a string literal) on `stream` (enabled and not capturing).
    void mark(const char* phase, cudaStream_t stream);

    struct Totals {
        Counts counts;
        std::map<std::string, double> phase_ms;  // GPU timeline ms by phase
        std::map<std::string, int64_t> phase_calls;
    };
    // Synchronises `stream`, returns everything since the last take() and starts afresh.
    Totals take(cudaStream_t stream);

private:
    cudaEvent_t event();  // from the pool
    struct Mark {
        const char* phase;
        cudaEvent_t event;
    };
    bool enabled_ = false;
    Counts counts_;
    std::vector<cudaEvent_t> pool_;
    size_t next_ = 0;
    std::vector<Mark> marks_;
};

}  // namespace qs::cuda
