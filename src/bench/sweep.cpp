// A sweep point through its gates (see sweep.h).
#include "bench/sweep.h"

#include <chrono>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "bench/loadgen.h"
#include "bench/output_screen.h"
#include "bench/server_process.h"

namespace qs::bench {

std::string point_config(const std::string& label, int64_t clients) {
    return fmt::format("{}@c{}", label, clients);
}

bool serves_dummy_weights(const std::vector<std::string>& serve_args) {
    for (size_t i = 0; i < serve_args.size(); ++i) {
        if (serve_args[i] == "--load-format=dummy") return true;
        if (serve_args[i] == "--load-format" && i + 1 < serve_args.size() && serve_args[i + 1] == "dummy")
            return true;
    }
    return false;
}

namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// Runs the gates of one started server; records them in `out`. False at the first failure.
class PointRun {
   public:
    PointRun(const SweepOptions& o, const std::vector<FixtureRequest>& fixture, PointOutcome& out,
             ServerProcess& server, int port, bool judge_content, std::FILE* progress)
        : o_(o),
          fixture_(fixture),
          out_(out),
          server_(server),
          port_(port),
          judge_content_(judge_content),
          progress_(progress) {}

    bool gate(const std::string& name, bool passed, const std::string& detail) {
        out_.gates.push_back({name, passed, detail});
        std::fprintf(progress_, "  %-10s %s  %s\n", name.c_str(), passed ? "pass" : "FAIL",
                     detail.c_str());
        std::fflush(progress_);
        if (!passed && out_.reason.empty()) out_.reason = name + ": " + first_line(detail);
        return passed;
    }

    bool gates() {
        if (!functional()) return false;
        if (o_.warmup_requests > 0) {
            std::string why;
            auto s = pass(o_.clients.back(), o_.warmup_requests, false, why);
            if (!gate("warmup", s.has_value(),
                      s ? fmt::format("{} requests at {} clients completed", o_.warmup_requests,
                                      o_.clients.back())
                        : why))
                return false;
        }
        std::string detail, screen_notes;
        for (int64_t c : o_.clients) {
            for (int rep = 1; rep <= kMeasuredReplicates; ++rep) {
                std::string why;
                auto s = pass(c, o_.requests, o_.screen_measured, why);
                if (s && !why.empty()) screen_notes += fmt::format("; c={} #{}: {}", c, rep, why);
                if (!s) return gate("measured", false, fmt::format("c={} #{}: {}", c, rep, why));
                std::fprintf(progress_,
                             "  measured c=%lld #%d: %lld/%lld completed, %.1f tok/s steady "
                             "(%.1f overall), TTFT median %.1f ms p99 %.1f ms\n",
                             (long long)c, rep, (long long)s->num_completed,
                             (long long)s->num_requests, s->steady_output_throughput,
                             s->output_throughput, s->ttft.median * 1e3, s->ttft.p99 * 1e3);
                detail += fmt::format("{}c={} #{} {:.1f} tok/s", detail.empty() ? "" : ", ", c, rep,
                                      s->steady_output_throughput);
                out_.measured.push_back({c, rep, *s});
            }
        }
        if (!gate("measured", true,
                  detail + (o_.screen_measured ? "; " + screen_summary() + screen_notes : "")))
            return false;
        if (o_.endurance_requests > 0) {
            std::string why;
            auto s = pass(o_.clients.back(), o_.endurance_requests, true, why);
            if (!gate("endurance", s.has_value(),
                      s ? fmt::format("{} requests at {} clients completed; {}{}", o_.endurance_requests,
                                      o_.clients.back(), screen_summary(), why.empty() ? "" : ": " + why)
                        : why))
                return false;
        }
        return true;
    }

   private:
    LoadgenOptions loadgen(int64_t clients, int64_t requests, bool keep_text) const {
        LoadgenOptions l;
        l.url = {"127.0.0.1", port_};
        l.api_key = o_.api_key;
        l.clients = clients;
        l.requests = requests;
        l.threads = o_.threads;
        l.pass_timeout_s = o_.pass_timeout_s;
        l.keep_text = keep_text;
        return l;
    }

    std::string screen_summary() const {
        return judge_content_ ? "output screen clean"
                              : "output screen: streams intact (content not judged: dummy weights)";
    }

    std::string server_note() {
        return server_.running() ? "" : "; server " + server_.exit_description();
    }

    // The first fixture request, alone: the server answers a real request correctly.
    bool functional() {
        LoadgenOptions l = loadgen(1, 1, true);
        if (l.pass_timeout_s <= 0) l.pass_timeout_s = o_.start_timeout_s;  // never hang here
        auto r = run_pass(l, {fixture_.front()});
        if (!r.is_ok()) return gate("functional", false, r.status().message());
        if (r->records.empty())
            return gate("functional", false, "no request was sent" + server_note());
        const RequestRecord& rec = r->records.front();
        ScreenVerdict v = screen_record(rec);
        if (v.verdict == Verdict::kUnscreened || v.verdict == Verdict::kMalformed ||
            (judge_content_ && v.verdict == Verdict::kBlank))
            return gate("functional", false, v.why + server_note());
        if (rec.completion_tokens <= 0)
            return gate("functional", false, "usage reports no completion tokens");
        return gate("functional", true,
                    fmt::format("{} tokens in {:.2f} s, ends \"{}\"", rec.completion_tokens,
                                rec.latency_s, escaped_tail(rec.text_tail, 40)));
    }

    // One pass; nullopt (and why) unless every request completed and, with screen, the output
    // screen passed. A passing pass whose unjudged content verdicts were not all ok leaves
    // their description in `why`.
    std::optional<Summary> pass(int64_t clients, int64_t requests, bool screen, std::string& why) {
        if (interrupted()) {
            why = "interrupted";
            return std::nullopt;
        }
        auto r = run_pass(loadgen(clients, requests, screen), fixture_);
        if (!r.is_ok()) {
            why = r.status().message();
            return std::nullopt;
        }
        Summary s = summarize(r->records, clients);
        if (interrupted()) {
            why = "interrupted";
            return std::nullopt;
        }
        if (s.num_completed != requests) {
            std::string errors;
            for (const auto& [kind, n] : s.errors)
                errors += fmt::format("{}{} {}", errors.empty() ? "" : ", ", n, kind);
            why = fmt::format("{} of {} requests not completed ({} incomplete{}{}){}",
                              requests - s.num_completed, requests, s.num_incomplete,
                              errors.empty() ? "" : ", errors: ", errors, server_note());
            return std::nullopt;
        }
        if (screen) {
            ScreenReport rep = screen_records(r->records);
            if (!rep.passed(judge_content_)) {
                why = "output screen: " + rep.describe();
                return std::nullopt;
            }
            if (rep.num_ok + rep.num_unscreened != rep.num_requests) why = "not judged: " + rep.describe();
        }
        return s;
    }

    const SweepOptions& o_;
    const std::vector<FixtureRequest>& fixture_;
    PointOutcome& out_;
    ServerProcess& server_;
    int port_;
    bool judge_content_;  // false with dummy weights (serves_dummy_weights)
    std::FILE* progress_;
};

}  // namespace

PointOutcome run_point(const SweepOptions& o, const GridPoint& point, int index,
                       const std::vector<FixtureRequest>& fixture, std::FILE* progress) {
    PointOutcome out;
    out.experiment = fmt::format("{}-p{}", o.sweep_id, index);
    out.point = point;
    out.log_path = o.log_dir + "/" + out.experiment + ".server.log";
    std::fprintf(progress, "%s  %s\n", out.experiment.c_str(), point.label.c_str());
    auto fail_start = [&](const std::string& why) {
        out.gates.push_back({"start", false, why});
        out.reason = "start: " + first_line(why);
        std::fprintf(progress, "  %-10s FAIL  %s\n", "start", why.c_str());
        std::fflush(progress);
        return out;
    };
    if (interrupted()) return fail_start("interrupted before the server was started");

    int port = o.port;
    if (port == 0) {
        auto p = pick_free_port();
        if (!p.is_ok()) return fail_start(p.status().message());
        port = *p;
    }
    std::vector<std::string> argv = {o.binary, "serve",     "--model", o.model,
                                     "--host", "127.0.0.1", "--port",  std::to_string(port)};
    argv.insert(argv.end(), point.serve_args.begin(), point.serve_args.end());
    argv.insert(argv.end(), o.serve_args.begin(), o.serve_args.end());
    {
        std::ofstream log(out.log_path, std::ios::trunc);
        log << "# campaign sweep " << out.experiment << " (" << point.label << "):";
        for (const auto& a : argv) log << ' ' << a;
        log << '\n';
        if (!log) return fail_start("cannot write the server log '" + out.log_path + "'");
    }
    auto spawned = ServerProcess::spawn(argv, out.log_path);
    if (!spawned.is_ok()) return fail_start(spawned.status().message());
    ServerProcess& server = **spawned;
    std::fprintf(progress, "  server pid %d port %d, log %s\n", int(server.pid()), port,
                 out.log_path.c_str());
    std::fflush(progress);

    const auto t0 = std::chrono::steady_clock::now();
    HealthWait h = wait_healthy(server, port, o.start_timeout_s);
    const double up_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    PointRun run(o, fixture, out, server, port, !serves_dummy_weights(argv), progress);
    bool ok = false;
    switch (h) {
        case HealthWait::kHealthy:
            run.gate("start", true, fmt::format("/health 200 after {:.1f} s", up_s));
            ok = run.gates();
            break;
        case HealthWait::kExited:
            run.gate("start", false,
                     fmt::format("server {} before /health answered 200: {}",
                                 server.exit_description(), log_tail(out.log_path, 2)));
            break;
        case HealthWait::kTimeout:
            run.gate("start", false,
                     fmt::format("/health not 200 within {:.0f} s: {}", o.start_timeout_s,
                                 log_tail(out.log_path, 2)));
            break;
        case HealthWait::kInterrupted:
            run.gate("start", false, "interrupted while waiting for /health");
            break;
    }
    const bool was_running = server.running();
    ServerProcess::StopResult stop = server.stop(o.stop_timeout_s);
    if (was_running) ok = run.gate("stop", stop.graceful, stop.how) && ok;
    if (ok && interrupted()) {
        ok = false;
        out.reason = "interrupted";
    }
    out.ok = ok;
    if (!ok) out.measured.clear();  // a failed point's numbers are not results
    std::fprintf(progress, "  => %s\n", ok ? "ok" : ("FAILED: " + out.reason).c_str());
    std::fflush(progress);
    return out;
}

std::vector<LedgerEntry> ledger_entries(const PointOutcome& out, const SweepOptions& o) {
    LedgerEntry base;
    base.experiment = out.experiment;
    base.knobs = out.point.knobs;
    base.gates = out.gates;
    base.gpu_hourly_cost = o.gpu_hourly_cost;
    if (!out.ok) {
        base.config = out.point.label;
        base.run = out.experiment;
        base.status = "failed";
        base.reason = out.reason;
        return {base};
    }
    std::vector<LedgerEntry> v;
    for (const auto& m : out.measured) {
        LedgerEntry e = base;
        const Summary& s = m.summary;
        e.config = point_config(out.point.label, m.clients);
        e.run = fmt::format("{}/c{}/{}", out.experiment, m.clients, m.replicate);
        e.fresh_start = true;  // every point has a server started for it alone
        e.clients = m.clients;
        e.steady_output_throughput = s.steady_output_throughput;
        e.output_throughput = s.output_throughput;
        e.num_requests = s.num_requests;
        e.completed = s.num_completed;
        e.incomplete = s.num_incomplete;
        for (const auto& [kind, n] : s.errors) e.errors += n;
        e.ttft = {s.ttft.mean, s.ttft.median, s.ttft.p90, s.ttft.p99};
        if (o.gpu_hourly_cost > 0 && s.steady_valid)
            e.usd_per_m_steady =
                cost_per_million_tokens(o.gpu_hourly_cost, s.steady_output_throughput);
        v.push_back(std::move(e));
    }
    return v;
}

}  // namespace qs::bench
