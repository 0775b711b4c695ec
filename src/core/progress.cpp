// Progress lines (see progress.h).
#include "core/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/log.h"
#include "core/log_format.h"

namespace qs {

namespace {
std::string amount(double v, ProgressUnit u) {
    return *u.name ? fmt::format("{:.1f}", v / u.scale) : fmt::format("{:.0f}", v / u.scale);
}
std::string unit_suffix(ProgressUnit u) { return *u.name ? std::string(" ") + u.name : std::string(); }
}  // namespace

std::string format_progress(std::string_view what, double done, double total, double elapsed_s, ProgressUnit unit) {
    const double share = total > 0 ? std::clamp(done / total, 0.0, 1.0) : 1.0;
    std::string line = fmt::format("{}: {:.0f}% ({} of {}{}), {:.1f} s", what, share * 100, amount(done, unit),
                                   amount(total, unit), unit_suffix(unit), elapsed_s);
    if (done > 0 && done < total) line += fmt::format(", ETA {:.1f} s", elapsed_s * (total - done) / done);
    return line;
}

std::string format_progress_done(std::string_view what, double total, double elapsed_s, ProgressUnit unit) {
    return fmt::format("{}: 100% ({}{}) in {:.1f} s", what, amount(total, unit), unit_suffix(unit), elapsed_s);
}

Progress::Progress(std::string what, double total, ProgressUnit unit, double interval_s, Clock clock, Sink sink)
    : what_(std::move(what)), total_(total), unit_(unit), interval_s_(interval_s), clock_(std::move(clock)),
      sink_(std::move(sink)) {
    start_s_ = now();
    last_line_s_ = start_s_;
}

double Progress::now() const {
    if (clock_) return clock_();
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Progress::write(double done, double elapsed_s, bool final) {
    ++lines_;
    const std::string line = final ? format_progress_done(what_, total_, elapsed_s, unit_)
                                   : format_progress(what_, done, total_, elapsed_s, unit_);
    if (sink_) return sink_(line);
    if (log_format() != LogFormat::kJson) return log_info("{}", line);
    // JSON lines: the numbers as fields, for whoever reads the log by machine.
    std::vector<LogField> fields = {log_field_real("percent", total_ > 0 ? 100 * done / total_ : 100),
                                    log_field_real("done", done / unit_.scale),
                                    log_field_real("total", total_ / unit_.scale),
                                    log_field_real("elapsed_s", elapsed_s)};
    if (*unit_.name) fields.push_back(log_field("unit", unit_.name));
    if (!final && done > 0 && done < total_) fields.push_back(log_field_real("eta_s", elapsed_s * (total_ - done) / done));
    log_fields(LogLevel::kInfo, line, fields);
}

void Progress::advance(double amount) {
    const double done = done_.fetch_add(amount) + amount;
    const double t = now();
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock() || finished_ || t - last_line_s_ < interval_s_ || done >= total_) return;
    last_line_s_ = t;
    write(done, t - start_s_, /*final=*/false);
}

void Progress::finish() {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    if (lines_ > 0) write(total_, now() - start_s_, /*final=*/true);
}

}  // namespace qs
