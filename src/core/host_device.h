// QS_HD: a function that compiles as host code and, under nvcc, as CUDA device code too (for
// the small pieces the CPU specification and the kernels must share).
#pragma once

#if defined(__CUDACC__)
#define QS_HD __host__ __device__ __forceinline__
#else
#define QS_HD inline
#endif
