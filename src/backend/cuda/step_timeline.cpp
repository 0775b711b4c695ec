// StepTimeline (see step_timeline.h).
#include "backend/cuda/step_timeline.h"

#include "backend/cuda/cuda_check.h"

namespace qs::cuda {

StepTimeline::~StepTimeline() {
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
}

cudaEvent_t StepTimeline::event() {
    if (next_ == pool_.size()) {
        cudaEvent_t e;
        QS_CUDA_CHECK(cudaEventCreate(&e));
        pool_.push_back(e);
    }
    return pool_[next_++];
}

void StepTimeline::mark(const char* phase, cudaStream_t stream) {
    if (!enabled_) return;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    QS_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
    if (capturing != cudaStreamCaptureStatusNone) return;
    Mark m{phase, event()};
    QS_CUDA_CHECK(cudaEventRecord(m.event, stream));
    marks_.push_back(m);
}

StepTimeline::Totals StepTimeline::take(cudaStream_t stream) {
    Totals t;
    if (!marks_.empty()) {
        cudaEvent_t end = event();
        QS_CUDA_CHECK(cudaEventRecord(end, stream));
        QS_CUDA_CHECK(cudaStreamSynchronize(stream));
        for (size_t i = 0; i < marks_.size(); ++i) {
            float ms = 0.0f;
            QS_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[i].event, i + 1 < marks_.size() ? marks_[i + 1].event : end));
            t.phase_ms[marks_[i].phase] += double(ms);
            t.phase_calls[marks_[i].phase] += 1;
        }
    }
    t.counts = counts_;
    counts_ = {};
    marks_.clear();
    next_ = 0;
    return t;
}

}  // namespace qs::cuda
