#!/bin/sh
# gpu_nolink.sh - the dsr1 binary starts on a machine without a GPU, driver
# or CUDA/HIP libraries because it links none of them: GPU backends are
# shared libraries the registry dlopens. Checks with readelf that dsr1 names
# no libcuda/libcudart/libcublas/libamdhip64/libhipblas, and that each GPU
# library that was built (libdsr1-cuda.so, libdsr1-hip.so next to dsr1)
# needs no CUDA runtime or BLAS library either (cudart is linked statically;
# the driver is opened at run time) and exports dsr1_backend_entry.
set -u
command -v readelf >/dev/null 2>&1 || { echo "readelf not installed (binutils)"; exit 77; }
fail=0
gpu_re='libcuda|libcudart|libcublas|libnvrtc|libamdhip64|libhipblas|librocblas|libhsa'
if readelf -d "$DSR1" | grep NEEDED | grep -Eq "$gpu_re"; then
    echo "FAIL: dsr1 links a GPU library:"
    readelf -d "$DSR1" | grep NEEDED
    fail=1
fi
dir=$(dirname "$DSR1")
for lib in "$dir/libdsr1-cuda.so" "$dir/libdsr1-hip.so"; do
    [ -f "$lib" ] || continue
    if readelf -d "$lib" | grep NEEDED | grep -Eq 'libcudart|libcublas|libnvrtc'; then
        echo "FAIL: $lib needs a CUDA runtime library (cudart must be static):"
        readelf -d "$lib" | grep NEEDED
        fail=1
    fi
    readelf --dyn-syms -W "$lib" | grep -q ' dsr1_backend_entry$' ||
        { echo "FAIL: $lib does not export dsr1_backend_entry"; fail=1; }
done
exit $fail
