// The engine watchdog (--engine-stall-timeout-s) on the real engine's loop thread: a step held by
// the test hook (Engine::set_step_hook) makes healthy() false and stats().stalled true once the
// timeout passes; the requests in hand keep waiting and finish with their full output, equal to
// an unstalled run, when the step is let go; the stall is counted; an idle engine never stalls.
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

EngineConfig watchdog_config(double stall_s) {
    EngineConfig cfg;
    cfg.max_num_seqs = 4;
    cfg.cache_memory_mb = 16;
    cfg.engine_stall_timeout_s = stall_s;
    return cfg;
}

bool wait_until(const std::function<bool()>& done, double seconds = 20.0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return done();
}

}  // namespace

TEST(EngineWatchdog, AHeldStepIsAStallAndTheRequestsFinishAfterIt) {
    const ModelWeights w = make_dummy_weights(engine_test_config(), 83);
    const int V = int(w.config.vocab_size);
    std::mt19937 rng(5);
    std::vector<GenerationRequest> reqs = {greedy_request("a", random_prompt(rng, 9, V), 12),
                                           greedy_request("b", random_prompt(rng, 17, V), 12)};
    const auto expect = run_requests(w, 0, reqs);
    ASSERT_EQ(expect.size(), 2u);

    CpuOps ops;
    auto created = Engine::create(w, ops, watchdog_config(1.0), nullptr);
    ASSERT_TRUE(created.is_ok()) << created.status().message();
    Engine& engine = *created.value();
    // Hold the third step with a batch until the test lets it go.
    std::mutex mu;
    std::condition_variable cv;
    bool held = false, release = false;
    engine.set_step_hook([&](int64_t steps) {
        if (steps != 2) return;
        std::unique_lock<std::mutex> lock(mu);
        held = true;
        cv.notify_all();
        cv.wait(lock, [&] { return release; });
    });
    engine.start();
    EXPECT_TRUE(engine.healthy());

    std::mutex out_mu;
    Collector col;
    std::atomic<int> finished{0};
    for (const auto& r : reqs) {
        auto inner = col.sink_for(r.id);
        ASSERT_TRUE(engine
                        .submit(r, [&, inner](RequestOutput&& o) mutable {
                            std::lock_guard<std::mutex> lock(out_mu);
                            const bool final = o.finish_reason != FinishReason::kNone;
                            inner(std::move(o));
                            if (final) ++finished;
                        })
                        .is_ok());
    }
    {
        std::unique_lock<std::mutex> lock(mu);
        ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return held; }));
    }
    ASSERT_TRUE(wait_until([&] { return !engine.healthy(); }, 10.0)) << "no stall seen while a step is held";
    EngineStats st = engine.stats();
    EXPECT_TRUE(st.stalled);
    EXPECT_GE(st.last_step_age_s, 1.0);
    // Counted when the loop comes round (a slow step on a loaded machine may have counted before).
    const int64_t stalls_before = st.stalls_total;
    EXPECT_EQ(finished.load(), 0);
    // Still accepted while stalled: submit never waits on the loop.
    EXPECT_TRUE(engine
                    .submit(greedy_request("c", random_prompt(rng, 5, V), 3),
                            [&](RequestOutput&& o) {
                                if (o.finish_reason != FinishReason::kNone) ++finished;
                            })
                    .is_ok());
    {
        std::lock_guard<std::mutex> lock(mu);
        release = true;
    }
    cv.notify_all();
    ASSERT_TRUE(wait_until([&] { return finished.load() == 3; }));
    EXPECT_TRUE(engine.healthy());
    st = engine.stats();
    EXPECT_FALSE(st.stalled);
    EXPECT_EQ(st.stalls_total, stalls_before + 1);
    engine.stop();
    std::lock_guard<std::mutex> lock(out_mu);
    for (const auto& r : reqs) {
        const Completion& got = col.got[r.id][0];
        EXPECT_EQ(got.num_final, 1);
        EXPECT_EQ(got.finish, FinishReason::kLength);
        EXPECT_EQ(got.tokens, expect.at(r.id).at(0).tokens) << r.id << ": a stall must not change the output";
    }
    EXPECT_EQ(engine.num_blocks_in_use(), 0);
    EXPECT_EQ(engine.num_slots_in_use(), 0);
}

TEST(EngineWatchdog, AnIdleEngineNeverStalls) {
    const ModelWeights w = make_dummy_weights(engine_test_config(), 83);
    CpuOps ops;
    auto created = Engine::create(w, ops, watchdog_config(1.0), nullptr);
    ASSERT_TRUE(created.is_ok()) << created.status().message();
    Engine& engine = *created.value();
    engine.start();
    for (int i = 0; i < 15; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_TRUE(engine.healthy()) << "after " << (i + 1) * 100 << " ms idle";
    }
    EXPECT_EQ(engine.stats().stalls_total, 0);
    engine.stop();
}
