// The engine's own loop thread (Engine::start/stop) driven from several client threads at once:
// submits, aborts of running, waiting, finished and unknown requests, and stats()/healthy()
// polled concurrently, as the HTTP server's I/O and worker threads do. Every request must end
// with exactly one final output per completion, greedy outputs must equal the single-threaded
// run's, and every page and slot must come back. The TSan build (scripts/test_sanitizers.sh)
// runs this file for data races on the inbox, the stats and the sinks.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine_test_util.h"

using namespace qs;
using namespace qs::test;

namespace {

// Outputs of every request (one completion each), written by the engine thread and read by the
// test thread.
struct SharedCollector {
    std::mutex mu;
    std::condition_variable cv;
    Collector col;
    int num_done = 0;  // requests whose final output has arrived

    OutputSink sink_for(const std::string& id) {
        return [this, inner = col.sink_for(id)](RequestOutput&& o) {
            std::lock_guard<std::mutex> lock(mu);
            const bool final = o.finish_reason != FinishReason::kNone;
            inner(std::move(o));
            if (final) ++num_done;
            cv.notify_all();
        };
    }
};

}  // namespace

TEST(EngineThread, ConcurrentSubmitAbortAndStats) {
    const ModelWeights w = make_dummy_weights(engine_test_config(), 81);
    const int V = int(w.config.vocab_size);
    constexpr int kClients = 4;
    constexpr int kPerClient = 12;

    // Requests per client; every third is aborted by its client shortly after submitting.
    std::vector<std::vector<GenerationRequest>> reqs(kClients);
    std::vector<GenerationRequest> all;
    std::mt19937 rng(7);
    for (int c = 0; c < kClients; ++c) {
        for (int i = 0; i < kPerClient; ++i) {
            GenerationRequest r = greedy_request("c" + std::to_string(c) + "r" + std::to_string(i),
                                                 random_prompt(rng, 1 + int(rng() % 30), V), 1 + int(rng() % 12));
            reqs[size_t(c)].push_back(r);
            all.push_back(r);
        }
    }
    const auto expect = run_requests(w, 0, all);
    ASSERT_EQ(expect.size(), all.size());

    CpuOps ops;
    EngineConfig cfg;
    cfg.max_num_seqs = 8;
    cfg.cache_memory_mb = 16;
    cfg.max_waiting = 1000;
    auto created = Engine::create(w, ops, cfg, nullptr);
    ASSERT_TRUE(created.is_ok()) << created.status().message();
    Engine& engine = *created.value();
    engine.start();

    SharedCollector shared;
    std::atomic<bool> clients_done{false};
    std::atomic<int> submit_errors{0};
    std::vector<std::thread> threads;
    for (int c = 0; c < kClients; ++c) {
        threads.emplace_back([&, c] {
            std::mt19937 crng(uint32_t(100 + c));
            for (size_t i = 0; i < reqs[size_t(c)].size(); ++i) {
                const GenerationRequest& r = reqs[size_t(c)][i];
                if (!engine.submit(r, shared.sink_for(r.id)).is_ok()) ++submit_errors;
                if (i % 3 == 2) {
                    std::this_thread::sleep_for(std::chrono::microseconds(crng() % 2000));
                    engine.abort(r.id);
                }
                if (i % 5 == 0) engine.abort("never-submitted-" + std::to_string(c));
                if (i % 4 == 0) engine.abort(reqs[size_t(c)][i / 2].id);  // often already finished
            }
        });
    }
    threads.emplace_back([&] {
        while (!clients_done.load()) {
            const EngineStats s = engine.stats();
            EXPECT_GE(s.num_running, 0);
            EXPECT_GE(s.num_waiting, 0);
            EXPECT_TRUE(engine.healthy());
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    });
    for (int c = 0; c < kClients; ++c) threads[size_t(c)].join();
    {
        std::unique_lock<std::mutex> lock(shared.mu);
        const bool all_done = shared.cv.wait_for(lock, std::chrono::seconds(120),
                                                 [&] { return shared.num_done == int(all.size()); });
        EXPECT_TRUE(all_done) << shared.num_done << " of " << all.size() << " requests finished";
    }
    clients_done = true;
    threads.back().join();
    engine.stop();

    EXPECT_EQ(submit_errors.load(), 0);
    std::lock_guard<std::mutex> lock(shared.mu);
    for (const GenerationRequest& r : all) {
        ASSERT_EQ(shared.col.got[r.id].size(), 1u) << r.id;
        const Completion& got = shared.col.got[r.id][0];
        EXPECT_EQ(got.num_final, 1) << r.id;
        EXPECT_EQ(got.num_after_final, 0) << r.id;
        const std::vector<int32_t>& want = expect.at(r.id).at(0).tokens;
        if (got.finish == FinishReason::kAbort) {
            // Aborted mid-way: what came out is a prefix of the full greedy output.
            ASSERT_LE(got.tokens.size(), want.size()) << r.id;
            EXPECT_TRUE(std::equal(got.tokens.begin(), got.tokens.end(), want.begin())) << r.id;
        } else {
            EXPECT_EQ(got.tokens, want) << r.id;
        }
    }
    EXPECT_EQ(engine.num_blocks_in_use(), 0);
    EXPECT_EQ(engine.num_slots_in_use(), 0);
    EXPECT_EQ(engine.num_live_requests(), 0);
}
