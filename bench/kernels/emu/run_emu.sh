#!/bin/sh
# Runs the GDN lab's quick correctness cases on the CPU, the kernels' own source executed by the
# host emulation in this folder (no GPU needed; slow: a few minutes). From the repository root:
#   sh bench/kernels/emu/run_emu.sh [--quick-real] [seed]   (default: the lab's --quick cases)
set -e
out=build-emu
mkdir -p $out
python3 bench/kernels/emu/prepare.py src/backend/cuda/gdn_kernels.cu $out/gdn_kernels_emu.cpp
python3 bench/kernels/emu/prepare.py bench/kernels/gdn_lab.cu $out/gdn_lab_emu.cpp
g++ -std=c++20 -O2 -w -Ibench/kernels/emu -Isrc -Isrc/backend/cuda $out/gdn_kernels_emu.cpp $out/gdn_lab_emu.cpp -o $out/gdn_lab_emu
case "$1" in --quick-real) ;; *) set -- --quick "$@" ;; esac
$out/gdn_lab_emu "$@"
