// A progress line for long operations (making or uploading weights): at most one line every
// `interval_s`, through the log (so it obeys --log-level and --log-format), each with the share
// done, the amount, the time so far and the time left at the rate so far:
//   "uploading weights: 42% (29.4 of 70.0 GB), 31.0 s, ETA 42.8 s"
// and, when any line was written, a last one from finish(): "uploading weights: 100% (70.0 GB)
// in 73.6 s". Under --log-format json the numbers are also fields of the line (percent, done,
// total, unit, elapsed_s, eta_s). advance() may be called from any thread (OpenMP workers); one
// of them writes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>

namespace qs {

struct ProgressUnit {
    const char* name;  // "GB"; "" for a plain count
    double scale;      // amount per unit: 1e9 for bytes shown as GB
};
inline constexpr ProgressUnit kProgressGB{"GB", 1e9};
inline constexpr ProgressUnit kProgressCount{"", 1};

// "what: 42% (29.4 of 70.0 GB), 31.0 s, ETA 42.8 s"; without an ETA while nothing is done.
std::string format_progress(std::string_view what, double done, double total, double elapsed_s, ProgressUnit unit);
// "what: 100% (70.0 GB) in 73.6 s".
std::string format_progress_done(std::string_view what, double total, double elapsed_s, ProgressUnit unit);

class Progress {
public:
    using Clock = std::function<double()>;               // monotonic seconds
    using Sink = std::function<void(const std::string&)>;  // default: log_info

    Progress(std::string what, double total, ProgressUnit unit = kProgressGB, double interval_s = 5.0,
             Clock clock = {}, Sink sink = {});

    // Adds `amount` to what is done; writes a line when interval_s has passed since the last.
    void advance(double amount);
    // The last line, if any line was written. Idempotent.
    void finish();
    int64_t lines_written() const { return lines_; }

private:
    double now() const;
    void write(double done, double elapsed_s, bool final);

    const std::string what_;
    const double total_;
    const ProgressUnit unit_;
    const double interval_s_;
    Clock clock_;
    Sink sink_;
    double start_s_ = 0;
    std::atomic<double> done_{0};
    std::mutex mu_;            // guards what follows and the writing
    double last_line_s_ = 0;
    int64_t lines_ = 0;
    bool finished_ = false;
};

}  // namespace qs
