// The tensor-core 4-bit small-rows linear kernel's file compiled as host C++ for the emulator test
// (int4_emu_smoke in tests/CMakeLists.txt; emu_prelude.h is force-included by the target's options).
#include "backend/cuda/int4_linear_mma.cu"
