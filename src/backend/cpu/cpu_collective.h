// InProcessGroup: a Collective for ranks that are threads of one process on the CPU backend —
// the tensor-parallel forward's specification and its test bed without GPUs (issue 22). The
// ranks meet at a barrier in every call, so each rank must make the same calls in the same order
// (as the model does); a rank that stops calling blocks the others.
#pragma once

#include <barrier>
#include <memory>
#include <vector>

#include "backend/collective.h"

namespace qs {

class InProcessGroup {
public:
    explicit InProcessGroup(int size);
    ~InProcessGroup();
    int size() const { return size_; }
    // The Collective of rank r (0 ≤ r < size), owned by the group.
    Collective& rank(int r);

private:
    class Member;
    friend class Member;
    int size_;
    std::barrier<> barrier_;
    std::vector<const float*> published_;  // [size]: each rank's buffer in the current call
    std::vector<std::unique_ptr<Member>> members_;
};

}  // namespace qs
