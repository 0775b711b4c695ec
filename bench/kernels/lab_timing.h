// Timing for the kernel labs: the median of single launches bracketed by CUDA events, and the mean
// call of a CUDA graph of calls replayed (launches back to back, as a step's graph runs them).
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"

namespace qs::lab {

// `warmup` untimed calls, then `reps` calls timed one by one on `stream`; launch(i) gets the call's
// index (0, 1, ... over warm-up and timed calls), e.g. to rotate its inputs past L2. Milliseconds.
template <typename F>
float median_event_ms(F&& launch, int reps, int warmup = 3, cudaStream_t stream = nullptr) {
    int i = 0;
    for (; i < warmup; ++i) launch(i);
    QS_CUDA_CHECK(cudaDeviceSynchronize());  // whatever stream the warm-up used
    cudaEvent_t e0, e1;
    QS_CUDA_CHECK(cudaEventCreate(&e0));
    QS_CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> ts;
    for (int r = 0; r < reps; ++r, ++i) {
        QS_CUDA_CHECK(cudaEventRecord(e0, stream));
        launch(i);
        QS_CUDA_CHECK(cudaEventRecord(e1, stream));
        QS_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        QS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        ts.push_back(ms);
    }
    QS_CUDA_CHECK(cudaEventDestroy(e0));
    QS_CUDA_CHECK(cudaEventDestroy(e1));
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
}

// µs per call of `call(i)` (i = 0, 1, ...) replayed as a CUDA graph of kCalls calls (warmed up eagerly
// first, so that cuBLASLt plans and scratch exist before the capture).
inline double graph_us_per_call(cudaStream_t st, const std::function<void(int)>& call) {
    constexpr int kCalls = 24, kReplays = 10;
    for (int i = 0; i < kCalls; ++i) call(i);
    QS_CUDA_CHECK(cudaStreamSynchronize(st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    QS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < kCalls; ++i) call(i);
    QS_CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    QS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    QS_CUDA_CHECK(cudaEventCreate(&e0));
    QS_CUDA_CHECK(cudaEventCreate(&e1));
    QS_CUDA_CHECK(cudaGraphLaunch(exec, st));
    QS_CUDA_CHECK(cudaEventRecord(e0, st));
    for (int r = 0; r < kReplays; ++r) QS_CUDA_CHECK(cudaGraphLaunch(exec, st));
    QS_CUDA_CHECK(cudaEventRecord(e1, st));
    QS_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms;
    QS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    QS_CUDA_CHECK(cudaEventDestroy(e0));
    QS_CUDA_CHECK(cudaEventDestroy(e1));
    QS_CUDA_CHECK(cudaGraphExecDestroy(exec));
    QS_CUDA_CHECK(cudaGraphDestroy(graph));
    return double(ms) * 1e3 / (kCalls * kReplays);
}

}  // namespace qs::lab
