// InProcessGroup (see cpu_collective.h). Every call: each rank publishes its buffer and waits
// at the barrier; then each reads all published buffers into private scratch and waits again
// (after which no rank reads another's buffer); then each writes only its own output.
#include "backend/cpu/cpu_collective.h"

#include <algorithm>

#include "core/check.h"

namespace qs {

class InProcessGroup::Member final : public Collective {
public:
    Member(InProcessGroup& g, int r) : g_(g), rank_(r) {}
    int rank() const override { return rank_; }
    int size() const override { return g_.size_; }

    void all_reduce_sum(float* x, int64_t n) override {
        scratch_.assign(size_t(n), 0.0f);
        exchange(x, [&] {
            for (int r = 0; r < g_.size_; ++r) {
                const float* src = g_.published_[size_t(r)];
                for (int64_t i = 0; i < n; ++i) scratch_[size_t(i)] += src[i];
            }
        });
        std::copy(scratch_.begin(), scratch_.end(), x);
    }

    void all_gather_columns(const float* local, int64_t rows, int64_t cols, float* out) override {
        const int64_t width = cols * g_.size_;
        scratch_.resize(size_t(rows * width));
        exchange(local, [&] {
            for (int r = 0; r < g_.size_; ++r) {
                const float* src = g_.published_[size_t(r)];
                for (int64_t i = 0; i < rows; ++i)
                    std::copy(src + i * cols, src + (i + 1) * cols, scratch_.data() + i * width + r * cols);
            }
        });
        std::copy(scratch_.begin(), scratch_.end(), out);
    }

private:
    // Publishes `mine`, runs `read` once every rank has published, and returns once every rank
    // has finished reading (so the callers may then overwrite their buffers).
    template <typename Read>
    void exchange(const float* mine, Read read) {
        g_.published_[size_t(rank_)] = mine;
        g_.barrier_.arrive_and_wait();
        read();
        g_.barrier_.arrive_and_wait();
    }

    InProcessGroup& g_;
    int rank_;
    std::vector<float> scratch_;
};

InProcessGroup::InProcessGroup(int size) : size_(size), barrier_(size), published_(size_t(size), nullptr) {
    QS_CHECK_MSG(size >= 1, "InProcessGroup: size must be >= 1");
    for (int r = 0; r < size; ++r) members_.push_back(std::make_unique<Member>(*this, r));
}

InProcessGroup::~InProcessGroup() = default;

Collective& InProcessGroup::rank(int r) {
    QS_CHECK(r >= 0 && r < size_);
    return *members_[size_t(r)];
}

}  // namespace qs
