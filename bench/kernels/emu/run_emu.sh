#!/bin/sh
# Runs kernel correctness cases on the CPU, the kernels' own source executed by the host emulation
# in this folder (no GPU needed; slow: minutes). From the repository root:
#   sh bench/kernels/emu/run_emu.sh [gdn] [--quick-real|--quick-cpar|--quick-decode|--quick-slices|--quick-tc] [seed]
#                                                      GDN lab's --quick cases (default) or those named
#   sh bench/kernels/emu/run_emu.sh attention [seed] [--real]      attention cases (attention_emu.cpp)
#   sh bench/kernels/emu/run_emu.sh int4                            INT4 small-row linear (int4_emu.cpp)
#   sh bench/kernels/emu/run_emu.sh sampling [--quick]              the GPU sampler against cpu::sample_rows
#                                   (sampling_emu.cpp; links the CPU build's build/libqs_lib.a, or $QS_CPU_LIB)
#   sh bench/kernels/emu/run_emu.sh small_linear                    FP8 small-rows v2 (small_linear_emu.cpp)
#   sh bench/kernels/emu/run_emu.sh small_linear_mma                FP8 small-rows v3 on mma.sync (small_linear_mma_emu.cpp)
#   sh bench/kernels/emu/run_emu.sh router                          tensor-core router (router_emu.cpp)
#   sh bench/kernels/emu/run_emu.sh gemm_linears                    Gemm::linears' control flow: the real
#                                   gemm.cpp on host stand-ins for cuBLASLt and the kernels (gemm_linears_emu.cpp)
# The GDN emulation (prepare.py + gdn/cuda_runtime.h) and the attention one (emu_prelude.h + the
# emulated backend/cuda/ptx_helpers.cuh, with the real CUDA headers) are separate harnesses.
set -e
out=${EMU_OUT:-build-emu}
mkdir -p $out
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
if [ "$1" = attention ]; then
    shift
    objs=
    for f in src/backend/cuda/attention_*.cu bench/kernels/emu/attention_emu.cpp; do
        o=$out/$(basename $f).o
        g++ -std=c++20 -O2 -fopenmp -w -include bench/kernels/emu/emu_prelude.h -Ibench/kernels/emu -Ibench/kernels \
            -Isrc -I$cuda_inc -x c++ -c $f -o $o
        objs="$objs $o"
    done
    g++ -fopenmp $objs -o $out/attention_emu
    exec $out/attention_emu "$@"
fi
if [ "$1" = small_linear ]; then
    shift
    objs=
    for f in src/backend/cuda/small_linear_fp8.cu bench/kernels/emu/small_linear_emu.cpp; do
        o=$out/$(basename $f).o
        g++ -std=c++20 -O2 -w -include bench/kernels/emu/emu_prelude.h -Ibench/kernels/emu -Ibench/kernels \
            -Isrc -I$cuda_inc -x c++ -c $f -o $o
        objs="$objs $o"
    done
    g++ $objs -o $out/small_linear_emu
    exec $out/small_linear_emu "$@"
fi
if [ "$1" = small_linear_mma ]; then
    shift
    objs=
    for f in src/backend/cuda/small_linear_fp8.cu src/backend/cuda/small_linear_fp8_mma.cu \
             bench/kernels/emu/small_linear_mma_emu.cpp; do
        o=$out/$(basename $f).o
        g++ -std=c++20 -O2 -w -include bench/kernels/emu/emu_prelude.h -Ibench/kernels/emu -Ibench/kernels \
            -Isrc -I$cuda_inc -x c++ -c $f -o $o
        objs="$objs $o"
    done
    g++ $objs -o $out/small_linear_mma_emu
    exec $out/small_linear_mma_emu "$@"
fi
if [ "$1" = router ]; then
    shift
    objs=
    for f in src/backend/cuda/router_gemm.cu bench/kernels/emu/router_emu.cpp; do
        o=$out/$(basename $f).o
        g++ -std=c++20 -O2 -w -include bench/kernels/emu/emu_prelude.h -Ibench/kernels/emu -Ibench/kernels \
            -Isrc -I$cuda_inc -x c++ -c $f -o $o
        objs="$objs $o"
    done
    g++ $objs -o $out/router_emu
    exec $out/router_emu "$@"
fi
if [ "$1" = sampling ]; then
    shift
    objs=
    for f in src/backend/cuda/sampling_kernels.cu src/backend/cuda/sampling_chunked.cu bench/kernels/emu/sampling_emu.cpp; do
        o=$out/$(basename $f).o
        g++ -std=c++20 -O2 -w -include bench/kernels/emu/emu_prelude.h -Ibench/kernels/emu -Ibench/kernels \
            -Isrc -I$cuda_inc -x c++ -c $f -o $o
        objs="$objs $o"
    done
    g++ $objs ${QS_CPU_LIB:-build/libqs_lib.a} -lpthread -o $out/sampling_emu
    exec $out/sampling_emu "$@"
fi
if [ "$1" = int4 ]; then
    shift
    objs=
    for f in src/backend/cuda/int4_linear_kernels.cu bench/kernels/emu/int4_emu.cpp; do
        o=$out/$(basename $f).o
        g++ -std=c++20 -O2 -w -include bench/kernels/emu/emu_prelude.h -Ibench/kernels/emu -Ibench/kernels \
            -Isrc -I$cuda_inc -x c++ -c $f -o $o
        objs="$objs $o"
    done
    g++ $objs -o $out/int4_emu
    exec $out/int4_emu "$@"
fi
if [ "$1" = gemm_linears ]; then
    shift
    objs=
    for f in src/backend/cuda/gemm.cpp src/backend/cuda/device_memory.cpp src/core/dtype.cpp \
             bench/kernels/emu/gemm_linears_emu.cpp; do
        o=$out/$(basename $f).o
        g++ -std=c++20 -O2 -Wall -Wextra -Wno-unused-parameter -DFMT_HEADER_ONLY=1 -Isrc -isystem $cuda_inc \
            -c $f -o $o
        objs="$objs $o"
    done
    g++ $objs -o $out/gemm_linears_emu
    exec $out/gemm_linears_emu "$@"
fi
[ "$1" = gdn ] && shift
mkdir -p $out/backend/cuda  # prepared headers shadow src/ (quoted includes look beside the .cpp first)
python3 bench/kernels/emu/prepare.py src/backend/cuda/gdn_chunk_math.cuh $out/backend/cuda/gdn_chunk_math.cuh
for f in src/backend/cuda/gdn_*.cu bench/kernels/gdn_lab.cu; do
    python3 bench/kernels/emu/prepare.py $f $out/$(basename $f .cu)_emu.cpp
done
g++ -std=c++20 -O2 -w -Ibench/kernels/emu/gdn -I$out -Isrc -Isrc/backend/cuda -Ibench/kernels $out/gdn_*_emu.cpp -o $out/gdn_lab_emu
case "$1" in --quick-real|--quick-cpar|--quick-decode|--quick-slices|--quick-tc) ;; *) set -- --quick "$@" ;; esac
exec $out/gdn_lab_emu "$@"
