// Error checking for every CUDA and cuBLAS call: a failure aborts with file:line and the
// library's message (a broken device is not a user error; design.md §5). Host code only.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define QS_CUDA_CHECK(expr)                                                                          \
    do {                                                                                             \
        cudaError_t qs_err_ = (expr);                                                                \
        if (qs_err_ != cudaSuccess) {                                                                \
            std::fprintf(stderr, "%s:%d: CUDA error %s: %s (%s)\n", __FILE__, __LINE__,              \
                         cudaGetErrorName(qs_err_), cudaGetErrorString(qs_err_), #expr);             \
            std::abort();                                                                            \
        }                                                                                            \
    } while (0)

// After a kernel launch: catches bad launch configurations at once.
#define QS_CUDA_CHECK_LAUNCH() QS_CUDA_CHECK(cudaGetLastError())
