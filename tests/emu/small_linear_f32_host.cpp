// The fp32 small-rows kernel's file compiled as host C++ for the emulator test (f32_linear_emu_smoke
// in tests/CMakeLists.txt; emu_prelude.h is force-included by the target's options).
#include "backend/cuda/small_linear_f32.cu"
