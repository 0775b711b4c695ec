// A fixed pool of threads running posted jobs in FIFO order: chat-template rendering and
// tokenization happen here, never on the I/O threads. The queue is bounded by the server's
// in-flight request limit (routes.cpp), not here. Destruction runs what is queued, then joins.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qs {

class WorkerPool {
public:
    explicit WorkerPool(int num_threads);
    ~WorkerPool();
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    void post(std::function<void()> job);

private:
    void run();

    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    bool stop_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace qs
