#!/bin/sh
# Runs kernel correctness cases on the CPU, the kernels' own source executed by the host emulation
# in this folder (no GPU needed; slow: minutes). From the repository root:
#   sh bench/kernels/emu/run_emu.sh [gdn] [--quick-real|--quick-cpar|--quick-decode|--quick-slices|--quick-tc] [seed]
#                                                      GDN lab's --quick cases (default) or those named
#   sh bench/kernels/emu/run_emu.sh attention [seed] [--real]      attention cases (attention_emu.cpp)
#   sh bench/kernels/emu/run_emu.sh int4                            INT4 small-row linear (int4_emu.cpp)
#   sh bench/kernels/emu/run_emu.sh sampling [--quick]              the GPU sampler against cpu::sample_rows
#                                   (sampling_emu.cpp; links the CPU build's build/libqs_lib.a, or $QS_CPU_LIB)
#   sh bench/kernels/emu/run_emu.sh small_linear                    FP8 small-rows v2, and both versions' fused norms (small_linear_emu.cpp)
#   sh bench/kernels/emu/run_emu.sh small_linear_mma                FP8 small-rows v3 on mma.sync (small_linear_mma_emu.cpp)
#   sh bench/kernels/emu/run_emu.sh router                          tensor-core router (router_emu.cpp)
#   sh bench/kernels/emu/run_emu.sh f32_linear [--quick]            fp32 linears: small rows and tiles (f32_linear_emu.cpp)
#   sh bench/kernels/emu/run_emu.sh gemm_linears                    Gemm::linears' control flow: the real
#                                   gemm.cpp on host stand-ins for cuBLASLt and the kernels (gemm_linears_emu.cpp)
# The GDN emulation (prepare.py + gdn/cuda_runtime.h) and the attention one (emu_prelude.h + the
# emulated backend/cuda/ptx_helpers.cuh, with the real CUDA headers) are separate harnesses.
set -e
out=${EMU_OUT:-build-emu}
mkdir -p $out
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
# emulate NAME "SOURCES" [LINK_EXTRA] [COMPILE_FLAGS]: compiles each source as C++ (by default with the
# emulation prelude in front) and links $out/NAME.
prelude_flags="-O2 -w -include bench/kernels/emu/emu_prelude.h -Ibench/kernels/emu -Ibench/kernels -Isrc -I$cuda_inc -x c++"
emulate() {
    name=$1 sources=$2 link_extra=$3 flags=${4:-$prelude_flags}
    objs=
    for f in $sources; do
        o=$out/$(basename $f).o
        g++ -std=c++20 $flags -c $f -o $o
        objs="$objs $o"
    done
    g++ $objs $link_extra -o $out/$name
}
case "$1" in
    attention) shift
               prelude_flags="-fopenmp $prelude_flags"
               emulate attention_emu "src/backend/cuda/attention_*.cu bench/kernels/emu/attention_emu.cpp" -fopenmp
               exec $out/attention_emu "$@" ;;
    small_linear) shift
                  emulate small_linear_emu "src/backend/cuda/small_linear_fp8.cu src/backend/cuda/small_linear_fp8_mma.cu
                                                bench/kernels/emu/small_linear_emu.cpp"
                  exec $out/small_linear_emu "$@" ;;
    small_linear_mma) shift
                      emulate small_linear_mma_emu "src/backend/cuda/small_linear_fp8.cu src/backend/cuda/small_linear_fp8_mma.cu
                                                    bench/kernels/emu/small_linear_mma_emu.cpp"
                      exec $out/small_linear_mma_emu "$@" ;;
    router) shift
            emulate router_emu "src/backend/cuda/router_gemm.cu bench/kernels/emu/router_emu.cpp"
            exec $out/router_emu "$@" ;;
    sampling) shift
              emulate sampling_emu "src/backend/cuda/sampling_kernels.cu src/backend/cuda/sampling_chunked.cu
                                    bench/kernels/emu/sampling_emu.cpp" "${QS_CPU_LIB:-build/libqs_lib.a} -lpthread"
              exec $out/sampling_emu "$@" ;;
    f32_linear) shift
                emulate f32_linear_emu "src/backend/cuda/small_linear_f32.cu src/backend/cuda/f32_linear_tiles.cu
                                        bench/kernels/emu/f32_linear_emu.cpp"
                exec $out/f32_linear_emu "$@" ;;
    int4) shift
          emulate int4_emu "src/backend/cuda/int4_linear_kernels.cu src/backend/cuda/int4_linear_mma.cu bench/kernels/emu/int4_emu.cpp"
          exec $out/int4_emu "$@" ;;
    gemm_linears) shift  # the real gemm.cpp, compiled as itself (no prelude), on host stand-ins
                  emulate gemm_linears_emu "src/backend/cuda/gemm.cpp src/backend/cuda/device_memory.cpp src/core/dtype.cpp
                                            bench/kernels/emu/gemm_linears_emu.cpp" "" \
                      "-O2 -Wall -Wextra -Wno-unused-parameter -DFMT_HEADER_ONLY=1 -Isrc -isystem $cuda_inc"
                  exec $out/gemm_linears_emu "$@" ;;
esac
[ "$1" = gdn ] && shift
mkdir -p $out/backend/cuda  # prepared headers shadow src/ (quoted includes look beside the .cpp first)
python3 bench/kernels/emu/prepare.py src/backend/cuda/gdn_chunk_math.cuh $out/backend/cuda/gdn_chunk_math.cuh
for f in src/backend/cuda/gdn_*.cu bench/kernels/gdn_lab.cu; do
    python3 bench/kernels/emu/prepare.py $f $out/$(basename $f .cu)_emu.cpp
done
g++ -std=c++20 -O2 -w -Ibench/kernels/emu/gdn -I$out -Isrc -Isrc/backend/cuda -Ibench/kernels $out/gdn_*_emu.cpp -o $out/gdn_lab_emu
case "$1" in --quick-real|--quick-cpar|--quick-decode|--quick-slices|--quick-tc) ;; *) set -- --quick "$@" ;; esac
exec $out/gdn_lab_emu "$@"
