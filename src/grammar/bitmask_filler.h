// BitmaskFiller: the grammar masks of all constrained rows of a step, filled in parallel. Each
// matcher writes its own row (GrammarMatcher::fill_next_bitmask), so rows are independent; a
// small pool of persistent threads (plus the caller) takes them from a shared counter. With
// one thread it is the serial loop. start() hands the rows to the pool and returns, so the
// caller can run the step's forward meanwhile; wait() joins in and returns when every row is
// filled (fill() is both). Called from one thread at a time (the engine thread); the pool's
// threads only run between a start() and its wait().
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "grammar/grammar_matcher.h"

namespace qs::grammar {

struct MaskJob {
    GrammarMatcher* matcher;
    uint32_t* words;          // bitmask_words(vocab) words of this row
    int64_t num_allowed = 0;  // out: fill_next_bitmask's count (0: nothing allowed)
};

class BitmaskFiller {
public:
    // threads: the threads that fill, the caller's included (1: serial; 0: the hardware's, at
    // most 16).
    explicit BitmaskFiller(int threads);
    ~BitmaskFiller();
    BitmaskFiller(const BitmaskFiller&) = delete;
    BitmaskFiller& operator=(const BitmaskFiller&) = delete;

    // The jobs (and the matchers and rows they point to) must stay untouched until wait()
    // returns. A start() must be followed by a wait() before the next start().
    void start(std::span<MaskJob> jobs);
    void wait();
    void fill(std::span<MaskJob> jobs) {
        start(jobs);
        wait();
    }
    int threads() const { return int(workers_.size()) + 1; }

    // Rows a job batch needs before the pool is used (fewer run on the caller alone).
    static constexpr size_t kMinParallelJobs = 2;

private:
    void work(std::span<MaskJob> jobs);
    void worker_loop();

    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable wake_, done_;
    std::span<MaskJob> jobs_;  // of the last start() (written under mu_ when the pool runs)
    bool pooled_ = false;      // the current start() woke the pool
    std::atomic<size_t> next_{0};
    uint64_t generation_ = 0;  // bumped per fill: wakes the workers
    int busy_ = 0;             // workers still inside the current fill
    bool stop_ = false;
};

}  // namespace qs::grammar
