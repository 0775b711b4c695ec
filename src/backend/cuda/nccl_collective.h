// NCCL for a tensor-parallel group on the GPUs of this process (issue 22): NcclGroup makes one
// communicator per GPU (ncclCommInitAll; rank r on device r), and NcclCollective is rank r's
// Collective (backend/collective.h), enqueuing ncclAllReduce / ncclAllGather on the rank's
// stream (CudaOps::stream()) so they order with its kernels. libnccl.so.2 is loaded at run time
// (dlopen: QS_NCCL_LIBRARY names the file, else the loader's search path), so binaries that never
// run a group do not need it; only nccl.h is needed to compile (CMake finds it in the CUDA
// toolkit or the nvidia-nccl-cu13 wheel, else leaves this file out and says so). Not yet wired to
// serving: no multi-GPU machine has run a group (docs/ARCHITECTURE.md, "Tensor parallel").
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/collective.h"
#include "core/status.h"

namespace qs::cuda {

class NcclGroup {
public:
    // Communicators over devices 0..size-1 (each must be visible). Errors: libnccl.so.2 not found
    // (the message says how to point at it), fewer devices than `size`, an NCCL error.
    static Result<std::unique_ptr<NcclGroup>> create(int size);
    ~NcclGroup();
    int size() const { return int(comms_.size()); }
    // Rank r's Collective over `stream` (a stream of device r). Made once per rank; owned by the
    // group. The caller's thread must have device r current when it calls the Collective.
    Collective& rank(int r, cudaStream_t stream);
    // NCCL's version (e.g. 22803 for 2.28.3).
    int version() const { return version_; }

private:
    struct Api;
    class Member;
    NcclGroup() = default;
    static Result<std::shared_ptr<Api>> load_api();
    std::shared_ptr<const Api> api_;
    std::vector<void*> comms_;  // ncclComm_t, one per rank
    std::vector<std::unique_ptr<Member>> members_;
    int version_ = 0;
};

}  // namespace qs::cuda
