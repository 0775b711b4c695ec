// The GPU sampler's kernel file compiled as host C++ for the emulator test (sampling_emu_smoke in
// tests/CMakeLists.txt; emu_prelude.h is force-included by the target's options).
#include "backend/cuda/sampling_kernels.cu"
