// OpProfiler (see op_profile.h).
#include "backend/cuda/op_profile.h"

#include "backend/cuda/cuda_check.h"

namespace qs::cuda {

OpProfiler::~OpProfiler() {
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
}

cudaEvent_t OpProfiler::event() {
    if (next_ == pool_.size()) {
        cudaEvent_t e;
        QS_CUDA_CHECK(cudaEventCreate(&e));
        pool_.push_back(e);
    }
    return pool_[next_++];
}

OpProfiler::Scope::Scope(OpProfiler* p, const char* name, cudaStream_t s) : p_(p), s_(s) {
    if (!p_) return;
    if (p_->depth_++ > 0) {  // inside another op: counted there
        p_->depth_--;
        p_ = nullptr;
        return;
    }
    Record r{name, p_->event(), p_->event()};
    QS_CUDA_CHECK(cudaEventRecord(r.start, s_));
    p_->records_.push_back(r);
}

OpProfiler::Scope::~Scope() {
    if (!p_) return;
    QS_CUDA_CHECK(cudaEventRecord(p_->records_.back().stop, s_));
    p_->depth_--;
}

std::map<std::string, OpProfiler::Total> OpProfiler::take(cudaStream_t s) {
    QS_CUDA_CHECK(cudaStreamSynchronize(s));
    std::map<std::string, Total> totals;
    for (const Record& r : records_) {
        float ms = 0.0f;
        QS_CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
        Total& t = totals[r.name];
        t.calls += 1;
        t.ms += ms;
    }
    records_.clear();
    next_ = 0;
    return totals;
}

}  // namespace qs::cuda
