// NcclGroup and NcclCollective (see nccl_collective.h). all_gather_columns: ncclAllGather puts
// the ranks' [rows, cols] blocks one after another ([size, rows, cols]) into a scratch buffer;
// one strided copy per rank then lays them side by side ([rows, size · cols]).
#include "backend/cuda/nccl_collective.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstdlib>

#include "backend/cuda/cuda_check.h"
#include "core/check.h"

namespace qs::cuda {

// The NCCL functions this file calls, resolved from libnccl.so.2.
struct NcclGroup::Api {
    void* lib = nullptr;
    decltype(&ncclGetVersion) get_version = nullptr;
    decltype(&ncclGetErrorString) error_string = nullptr;
    decltype(&ncclCommInitAll) comm_init_all = nullptr;
    decltype(&ncclCommDestroy) comm_destroy = nullptr;
    decltype(&ncclAllReduce) all_reduce = nullptr;
    decltype(&ncclAllGather) all_gather = nullptr;

    ~Api() {
        if (lib) dlclose(lib);
    }
    void check(ncclResult_t r, const char* what) const {
        if (r == ncclSuccess) return;
        std::fprintf(stderr, "NCCL error in %s: %s\n", what, error_string(r));
        std::abort();
    }
};

namespace {

template <typename F>
bool resolve(void* lib, const char* name, F& out) {
    out = reinterpret_cast<F>(dlsym(lib, name));
    return out != nullptr;
}

}  // namespace

class NcclGroup::Member final : public Collective {
public:
    Member(const Api& api, ncclComm_t comm, int rank, int size, cudaStream_t stream)
        : api_(api), comm_(comm), rank_(rank), size_(size), stream_(stream) {}
    ~Member() override {
        if (scratch_) cudaFree(scratch_);
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }

    void all_reduce_sum(float* x, int64_t n) override {
        api_.check(api_.all_reduce(x, x, size_t(n), ncclFloat32, ncclSum, comm_, stream_), "ncclAllReduce");
    }

    void all_gather_columns(const float* local, int64_t rows, int64_t cols, float* out) override {
        if (rows == 1) {  // [1, cols] blocks side by side are the gather's own layout
            api_.check(api_.all_gather(local, out, size_t(cols), ncclFloat32, comm_, stream_), "ncclAllGather");
            return;
        }
        const size_t block = size_t(rows * cols);
        if (scratch_n_ < block * size_t(size_)) {
            if (scratch_) QS_CUDA_CHECK(cudaFree(scratch_));
            scratch_n_ = block * size_t(size_);
            QS_CUDA_CHECK(cudaMalloc(&scratch_, scratch_n_ * sizeof(float)));
        }
        api_.check(api_.all_gather(local, scratch_, block, ncclFloat32, comm_, stream_), "ncclAllGather");
        for (int r = 0; r < size_; ++r)
            QS_CUDA_CHECK(cudaMemcpy2DAsync(out + r * cols, size_t(size_ * cols) * sizeof(float),
                                            scratch_ + size_t(r) * block, size_t(cols) * sizeof(float),
                                            size_t(cols) * sizeof(float), size_t(rows), cudaMemcpyDeviceToDevice,
                                            stream_));
    }

private:
    const Api& api_;
    ncclComm_t comm_;
    int rank_, size_;
    cudaStream_t stream_;
    float* scratch_ = nullptr;  // [size, rows, cols] of the widest gather so far
    size_t scratch_n_ = 0;
};

Result<std::shared_ptr<NcclGroup::Api>> NcclGroup::load_api() {
    const char* env = std::getenv("QS_NCCL_LIBRARY");
    const std::string path = env && *env ? env : "libnccl.so.2";
    auto api = std::make_shared<NcclGroup::Api>();
    api->lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!api->lib)
        return not_found(fmt::format("NCCL: cannot load {} ({}): set QS_NCCL_LIBRARY to its path or add its directory "
                                     "to LD_LIBRARY_PATH (the nvidia-nccl-cu13 wheel has it in nvidia/nccl/lib)",
                                     path, dlerror()));
    const bool ok = resolve(api->lib, "ncclGetVersion", api->get_version) &&
                    resolve(api->lib, "ncclGetErrorString", api->error_string) &&
                    resolve(api->lib, "ncclCommInitAll", api->comm_init_all) &&
                    resolve(api->lib, "ncclCommDestroy", api->comm_destroy) &&
                    resolve(api->lib, "ncclAllReduce", api->all_reduce) &&
                    resolve(api->lib, "ncclAllGather", api->all_gather);
    if (!ok) return not_found(fmt::format("NCCL: {} lacks a function this build calls ({})", path, dlerror()));
    return api;
}

Result<std::unique_ptr<NcclGroup>> NcclGroup::create(int size) {
    if (size < 1) return invalid_argument(fmt::format("NCCL group: size must be >= 1, got {}", size));
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
    if (devices < size)
        return invalid_argument(fmt::format("NCCL group of {} ranks needs {} GPUs; {} visible", size, size, devices));
    QS_ASSIGN_OR_RETURN(std::shared_ptr<Api> api, load_api());
    std::unique_ptr<NcclGroup> g(new NcclGroup());
    g->api_ = api;
    api->check(api->get_version(&g->version_), "ncclGetVersion");
    std::vector<ncclComm_t> comms(static_cast<size_t>(size), nullptr);
    std::vector<int> devs(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) devs[size_t(r)] = r;
    api->check(api->comm_init_all(comms.data(), size, devs.data()), "ncclCommInitAll");
    for (ncclComm_t c : comms) g->comms_.push_back(c);
    g->members_.resize(size_t(size));
    return g;
}

NcclGroup::~NcclGroup() {
    members_.clear();
    for (void* c : comms_) api_->comm_destroy(static_cast<ncclComm_t>(c));
}

Collective& NcclGroup::rank(int r, cudaStream_t stream) {
    QS_CHECK(r >= 0 && r < size());
    std::unique_ptr<Member>& m = members_[size_t(r)];
    QS_CHECK_MSG(m == nullptr, "NcclGroup::rank: one Collective per rank");
    m = std::make_unique<Member>(*api_, static_cast<ncclComm_t>(comms_[size_t(r)]), r, size(), stream);
    return *m;
}

}  // namespace qs::cuda
