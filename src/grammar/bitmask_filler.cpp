// BitmaskFiller (see bitmask_filler.h).
#include "grammar/bitmask_filler.h"

#include <algorithm>

namespace qs::grammar {

BitmaskFiller::BitmaskFiller(int threads) {
    if (threads <= 0) threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

BitmaskFiller::~BitmaskFiller() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

void BitmaskFiller::work(std::span<MaskJob> jobs) {
    for (size_t i = next_.fetch_add(1, std::memory_order_relaxed); i < jobs.size();
         i = next_.fetch_add(1, std::memory_order_relaxed))
        jobs[i].num_allowed = jobs[i].matcher->fill_next_bitmask(jobs[i].words);
}

void BitmaskFiller::worker_loop() {
    uint64_t seen = 0;
    for (;;) {
        std::span<MaskJob> jobs;
        {
            std::unique_lock<std::mutex> lock(mu_);
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            jobs = jobs_;
        }
        work(jobs);
        std::lock_guard<std::mutex> lock(mu_);
        if (--busy_ == 0) done_.notify_one();
    }
}

void BitmaskFiller::start(std::span<MaskJob> jobs) {
    pooled_ = !workers_.empty() && jobs.size() >= kMinParallelJobs;
    if (!pooled_) {
        jobs_ = jobs;  // wait() fills them on the caller
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mu_);
        jobs_ = jobs;
        next_.store(0, std::memory_order_relaxed);
        busy_ = int(workers_.size());
        ++generation_;
    }
    wake_.notify_all();
}

void BitmaskFiller::wait() {
    const std::span<MaskJob> jobs = jobs_;  // only start() writes it; the workers read it too
    if (!pooled_) {
        for (MaskJob& j : jobs) j.num_allowed = j.matcher->fill_next_bitmask(j.words);
        return;
    }
    pooled_ = false;
    work(jobs);  // the rows the pool has not taken yet
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return busy_ == 0; });
}

}  // namespace qs::grammar
