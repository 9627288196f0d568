#!/bin/sh
# build.sh regenerates kernels.ptx from kernels.cu (needs nvcc; run on the
# device machine, see docs/nvidia.md). PTX for compute capability 8.0: the
# driver compiles it for the GPU it runs on (sm_80 and later: A100, H100).
set -eu
cd "$(dirname "$0")"
nvcc --ptx -arch=compute_80 -O3 -ftz=false -prec-div=true -prec-sqrt=true -fmad=false \
	-o "${1:-kernels.ptx}" kernels.cu
