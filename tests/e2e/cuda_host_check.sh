#!/bin/sh
# cuda_host_check.sh - run build/cuda-host-check (tests/cuda_host_check.cu):
# the CUDA backend's conversions, weight decoders, activation rounding
# points and MoE router, compiled by nvcc as host code, against the CPU's
# definitions bit for bit. The part of the CUDA code that needs no GPU.
set -u
bin="$BUILD/cuda-host-check"
[ -x "$bin" ] || { echo "not built: nvcc not found or CUDA=0"; exit 77; }
out=$("$bin") || { echo "FAIL:"; echo "$out"; exit 1; }
echo "$out" | grep -Eq '^[0-9]+ checks passed$' || { echo "FAIL: unexpected output: $out"; exit 1; }
exit 0
