// RankThreads: one long-lived thread per rank of a tensor-parallel group, each running the jobs
// handed to it in order. A backend may tie state to the thread that made it (CUDA's current
// device), so everything a rank owns — its backend, model, cache — is made, used and destroyed
// on its own thread. Calls come from one thread at a time (the engine's) and block until done.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qs {

class RankThreads {
public:
    explicit RankThreads(int size);
    ~RankThreads();  // joins the threads (after their current job)
    RankThreads(const RankThreads&) = delete;
    RankThreads& operator=(const RankThreads&) = delete;

    int size() const { return int(threads_.size()); }
    // Runs fn(r) on thread r for every rank at once; returns when every one has returned.
    void run_all(const std::function<void(int)>& fn);
    // Runs fn() on thread r alone; returns when it has returned.
    void run_on(int r, const std::function<void()>& fn);

private:
    void loop(int r);

    std::mutex mu_;
    std::condition_variable work_cv_, done_cv_;
    std::vector<std::function<void()>> jobs_;  // [size]: thread r's pending job, or empty
    int pending_ = 0;                          // jobs handed out and not yet finished
    bool stop_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace qs
