// gpu_forward_bench --mode mtp: what an MTP step costs against a plain decode step, offline (no
// HTTP, no prefill in the timed window), for issue 13's targets (k=1 at acceptance 0 ≤ 1.3× a
// k=0 step; at forced acceptance 0.8 ≥ 1.5× the k=0 tok/s for one stream and ≥ 1.1× at 512
// resident sequences). For each (k, acceptance) one Engine over the same weights (CUDA graphs
// captured as serve captures them), and for each resident count N: N requests with
// --mtp-prompt-token prompts decode until every one is past its prompt, then --mtp-steps engine
// steps are timed back to back (no request finishes inside the window). Per step: wall ms, the GPU
// timeline by phase (CudaOptions::step_timeline: forward, lm_head, sample, GDN commit, MTP head,
// MTP lm_head, draft argmax), completion tokens, syncs, graph launches, eager ops and copies.
// --mtp-profiler-range brackets each point's timed steps with cudaProfilerStart/Stop, so that
// `ncu --profile-from-start off` (or nsys --capture-range=cudaProfilerApi) sees those steps alone.
// Included once, by gpu_forward_bench.cpp.
#pragma once

#include <cuda_profiler_api.h>

#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "core/args.h"
#include "core/timer.h"
#include "engine/engine.h"

namespace qs::mtp_bench {

struct Point {
    int64_t k = 0;
    double acceptance = -1.0;  // -1: not forced
    bool overlap = true;       // EngineConfig::mtp_overlap
    int64_t spares = 0;        // EngineConfig::mtp_spare_slots (0: the commit of accepted drafts)
    int64_t seqs = 0;
    int64_t steps = 0;
    double wall_ms = 0.0, tokens = 0.0, host_ms = 0.0;
    std::map<std::string, double> phase_ms;
    cuda::StepTimeline::Counts counts;
};

inline std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> v;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty()) v.push_back(std::stoll(item));
    return v;
}

inline std::vector<double> parse_doubles(const std::string& s) {
    std::vector<double> v;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty()) v.push_back(std::stod(item));
    return v;
}

// N resident sequences in `engine`, then `steps` timed steps. Returns false (with a message) on
// an engine error.
inline bool measure(Engine& engine, cuda::CudaOps& ops, int64_t vocab, int64_t N, int64_t prompt, int64_t steps,
                    bool profiler_range, Point& p) {
    const int64_t k = engine.config().num_speculative_tokens;
    std::vector<int64_t> emitted(size_t(N), 0);
    std::vector<int> finished(size_t(N), 0);
    std::mt19937 rng(uint32_t(7 + N));
    for (int64_t i = 0; i < N; ++i) {
        GenerationRequest r;
        r.id = "m" + std::to_string(i);
        r.prompt_ids.resize(size_t(prompt));
        for (auto& t : r.prompt_ids) t = int32_t(rng() % uint32_t(std::min<int64_t>(vocab, 150000)));
        r.params.temperature = 0.0;
        // Past the warm-up and the window at up to 1 + k tokens a step.
        r.params.max_tokens = 64 + (steps + 8) * (k + 1);
        r.params.ignore_eos = true;
        const size_t at = size_t(i);
        auto sink = [&emitted, &finished, at](RequestOutput&& o) {
            emitted[at] += int64_t(o.token_ids.size());
            if (o.finish_reason != FinishReason::kNone) finished[at] = 1;
        };
        const Status st = engine.submit(std::move(r), sink);
        if (!st.is_ok()) {
            std::fprintf(stderr, "submit: %s\n", st.message().c_str());
            return false;
        }
    }
    // Warm-up: every prompt computed and two decode steps after (drafts in flight with MTP).
    auto all_past = [&](int64_t n) {
        for (int64_t e : emitted)
            if (e < n) return false;
        return true;
    };
    for (int64_t guard = 0; !all_past(2); ++guard) {
        if (guard > 100000 || !engine.step()) {
            std::fprintf(stderr, "mtp bench: the warm-up did not reach decode for all %lld sequences\n", (long long)N);
            return false;
        }
    }
    for (int i = 0; i < 2; ++i) engine.step();
    ops.take_step_timeline();
    engine.reset_profile();
    int64_t before = 0;
    for (int64_t e : emitted) before += e;
    p.seqs = N;
    p.steps = steps;
    // Back to back, as the serving loop runs them (a step may end with the draft argmax still in
    // flight: the next step's host work overlaps it); one sync at the end.
    if (profiler_range) QS_CUDA_CHECK(cudaProfilerStart());
    Timer t;
    for (int64_t s = 0; s < steps; ++s) engine.step();
    if (profiler_range) {
        QS_CUDA_CHECK(cudaDeviceSynchronize());
        QS_CUDA_CHECK(cudaProfilerStop());
    }
    const cuda::StepTimeline::Totals tt = ops.take_step_timeline();
    p.wall_ms = t.elapsed_s() * 1e3;
    p.phase_ms = tt.phase_ms;
    p.counts = tt.counts;
    int64_t after = 0, done = 0;
    for (int64_t e : emitted) after += e;
    for (int f : finished) done += f;
    if (done > 0) std::fprintf(stderr, "mtp bench: %lld requests finished inside the window\n", (long long)done);
    p.tokens = double(after - before);
    const EngineProfile& prof = engine.profile();
    p.host_ms = (prof.total_s - prof.forward_s - prof.sample_s) * 1e3;  // schedule, batch building, outputs
    // Leave nothing behind for the next point.
    for (int64_t i = 0; i < N; ++i) engine.abort("m" + std::to_string(i));
    engine.run_until_idle();
    return true;
}

inline void print(const std::vector<Point>& points) {
    const char* phases[] = {"forward", "lm_head", "sample", "GDN commit", "MTP head", "MTP lm_head", "draft argmax"};
    std::printf("\nMTP step cost (per engine step; GPU ms: the stream's timeline by phase, gaps included)\n\n");
    std::printf("| seqs | k | P | overlap | spare slots | wall ms/step | tok/step | tok/s | step cost vs k=0 | tok/s vs k=0 |");
    for (const char* ph : phases) std::printf(" %s |", ph);
    std::printf(" host other ms | syncs | graph launches | eager ops | copies |\n|");
    for (int i = 0; i < 10 + 7 + 5; ++i) std::printf("--:|");
    std::printf("\n");
    for (const Point& p : points) {
        const double n = double(p.steps);
        const Point* base = nullptr;
        for (const Point& q : points)
            if (q.k == 0 && q.seqs == p.seqs) base = &q;
        const double ms = p.wall_ms / n, tps = p.tokens / (p.wall_ms / 1e3);
        std::printf("| %lld | %lld | %s | %s | %lld | %.3f | %.3f | %.1f |", (long long)p.seqs, (long long)p.k,
                    p.acceptance < 0 ? "-" : std::to_string(p.acceptance).substr(0, 4).c_str(),
                    p.k == 0 ? "-" : p.overlap ? "on" : "off", (long long)p.spares, ms, p.tokens / n, tps);
        if (base) {
            std::printf(" %.3f | %.3f |", ms / (base->wall_ms / double(base->steps)),
                        tps / (base->tokens / (base->wall_ms / 1e3)));
        } else {
            std::printf(" - | - |");
        }
        for (const char* ph : phases) {
            auto it = p.phase_ms.find(ph);
            std::printf(" %.3f |", it == p.phase_ms.end() ? 0.0 : it->second / n);
        }
        std::printf(" %.3f | %.2f | %.2f | %.2f | %.2f |\n", p.host_ms / n, double(p.counts.syncs) / n,
                    double(p.counts.graph_launches) / n, double(p.counts.eager_ops) / n, double(p.counts.copies) / n);
    }
}

// The mode: options --mtp-k (list), --mtp-acceptance (list, applied to k > 0), --mtp-seqs (list),
// --mtp-steps, --mtp-prompt-tokens, --mtp-overlap (on, off or on,off: EngineConfig::mtp_overlap
// for k > 0), --mtp-profiler-range (see above), --mtp-spare-slots-list (EngineConfig::mtp_spare_slots values for k > 0, e.g. 0,512:
// the commit of accepted drafts against spare-slot mode in one run). `ec` carries the engine
// knobs parsed as serve parses them.
inline int run(const Args& args, const ModelWeights& w, cuda::CudaOps& ops, EngineConfig ec) {
    const std::vector<int64_t> ks = parse_list(args.get_or("mtp-k", "0,1,2"));
    const std::vector<double> accs = parse_doubles(args.get_or("mtp-acceptance", "0,0.8"));
    const std::vector<int64_t> seqs = parse_list(args.get_or("mtp-seqs", "1,512"));
    const int64_t steps = std::stoll(args.get_or("mtp-steps", "32"));
    const int64_t prompt = std::stoll(args.get_or("mtp-prompt-tokens", "128"));
    const std::string overlap_arg = args.get_or("mtp-overlap", "on");
    const bool profiler_range = args.has("mtp-profiler-range");
    const std::vector<int64_t> spare_list =
        parse_list(args.get_or("mtp-spare-slots-list", std::to_string(ec.mtp_spare_slots)));
    for (int64_t v : spare_list)
        if (v < 0) {
            std::fprintf(stderr, "--mtp-spare-slots-list takes counts >= 0\n");
            return 2;
        }
    std::vector<bool> overlaps;
    if (overlap_arg == "on" || overlap_arg == "on,off") overlaps.push_back(true);
    if (overlap_arg == "off" || overlap_arg == "on,off") overlaps.push_back(false);
    if (overlaps.empty()) {
        std::fprintf(stderr, "--mtp-overlap must be on, off or on,off\n");
        return 2;
    }
    if (!w.mtp.present) {
        std::fprintf(stderr, "--mode mtp needs the MTP block (drop --no-mtp)\n");
        return 2;
    }
    std::vector<Point> points;
    for (int64_t k : ks) {
        struct Variant {
            double acc;
            bool overlap;
            int64_t spares;
        };
        std::vector<Variant> these;
        if (k == 0) these.push_back({-1.0, true, 0});
        for (double acc : k == 0 ? std::vector<double>{} : accs)
            for (bool ov : overlaps)
                for (int64_t sp : spare_list) these.push_back({acc, ov, sp});
        for (const auto& [acc, overlap, spares] : these) {
            EngineConfig c = ec;
            c.num_speculative_tokens = k;
            c.benchmark_mtp_acceptance = acc;
            c.mtp_overlap = overlap;
            c.mtp_spare_slots = spares;
            Timer tc;
            auto engine = Engine::create(w, ops, c, nullptr);
            if (!engine.is_ok()) {
                std::fprintf(stderr, "engine (k=%lld): %s\n", (long long)k, engine.status().message().c_str());
                return 1;
            }
            const int64_t graphs = (*engine)->capture_graphs();
            std::printf("| engine k=%lld P=%.2f overlap %s spare slots %lld: create + %lld graph sizes | %.1f s |\n",
                        (long long)k, acc, overlap ? "on" : "off", (long long)spares, (long long)graphs, tc.elapsed_s());
            std::fflush(stdout);
            for (int64_t n : seqs) {
                Point p;
                p.k = k;
                p.acceptance = acc;
                p.overlap = overlap;
                p.spares = spares;
                if (!measure(**engine, ops, w.config.vocab_size, n, prompt, steps, profiler_range, p)) return 1;
                points.push_back(p);
            }
        }
    }
    print(points);
    return 0;
}

}  // namespace qs::mtp_bench
