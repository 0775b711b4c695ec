// Wall-clock timing helpers for benchmarks and metrics.
#pragma once

#include <chrono>

namespace qs {

inline double now_seconds() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

class Timer {
public:
    Timer() : start_(now_seconds()) {}
    double elapsed_s() const { return now_seconds() - start_; }
    void reset() { start_ = now_seconds(); }

private:
    double start_;
};

}  // namespace qs
