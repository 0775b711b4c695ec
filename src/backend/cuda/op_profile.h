// OpProfiler: GPU time per Ops call, for finding where a forward's time goes (gpu_forward_bench
// --mode profile). Each top-level op call is bracketed by two CUDA events on the stream (ops
// called from inside another op, like the router linear inside moe, count for the outer one);
// take() waits for the stream and sums the elapsed times by op name. Only with CUDA graphs off
// (a replayed graph has no per-op events). Off, a scope costs one branch. Engine thread only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <cuda_runtime.h>

namespace qs::cuda {

class OpProfiler {
public:
    ~OpProfiler();
    void enable(bool on) { enabled_ = on; }
    bool enabled() const { return enabled_; }

    class Scope {
    public:
        Scope(OpProfiler* p, const char* name, cudaStream_t s);
        ~Scope();
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

    private:
        OpProfiler* p_;  // null when not recording
        cudaStream_t s_;
    };
    Scope scope(const char* name, cudaStream_t s) { return Scope(enabled_ ? this : nullptr, name, s); }

    struct Total {
        int64_t calls = 0;
        double ms = 0.0;
    };
    // Synchronises `s`, returns the totals by op name since the last take() and starts afresh.
    std::map<std::string, Total> take(cudaStream_t s);

private:
    cudaEvent_t event();  // from the pool
    struct Record {
        const char* name;
        cudaEvent_t start, stop;
    };
    bool enabled_ = false;
    int depth_ = 0;
    std::vector<cudaEvent_t> pool_;
    size_t next_ = 0;
    std::vector<Record> records_;
};

}  // namespace qs::cuda
