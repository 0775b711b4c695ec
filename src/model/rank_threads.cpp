// RankThreads (see rank_threads.h).
#include "model/rank_threads.h"

#include "core/check.h"

namespace qs {

RankThreads::RankThreads(int size) : jobs_(size_t(size)) {
    QS_CHECK_MSG(size >= 1, "RankThreads: size must be >= 1");
    for (int r = 0; r < size; ++r) threads_.emplace_back([this, r] { loop(r); });
}

RankThreads::~RankThreads() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
}

void RankThreads::run_all(const std::function<void(int)>& fn) {
    std::unique_lock<std::mutex> lock(mu_);
    QS_CHECK(pending_ == 0);
    for (int r = 0; r < size(); ++r) jobs_[size_t(r)] = [&fn, r] { fn(r); };
    pending_ = size();
    work_cv_.notify_all();
    done_cv_.wait(lock, [this] { return pending_ == 0; });
}

void RankThreads::run_on(int r, const std::function<void()>& fn) {
    QS_CHECK(r >= 0 && r < size());
    std::unique_lock<std::mutex> lock(mu_);
    QS_CHECK(pending_ == 0);
    jobs_[size_t(r)] = fn;
    pending_ = 1;
    work_cv_.notify_all();
    done_cv_.wait(lock, [this] { return pending_ == 0; });
}

void RankThreads::loop(int r) {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        work_cv_.wait(lock, [&] { return stop_ || jobs_[size_t(r)] != nullptr; });
        if (jobs_[size_t(r)] == nullptr) return;  // stopping, nothing left to run
        std::function<void()> job = std::move(jobs_[size_t(r)]);
        jobs_[size_t(r)] = nullptr;
        lock.unlock();
        job();
        lock.lock();
        if (--pending_ == 0) done_cv_.notify_all();
    }
}

}  // namespace qs
