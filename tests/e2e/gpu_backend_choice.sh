#!/bin/sh
# gpu_backend_choice.sh - on a machine without a usable GPU: `--backend
# cuda` and `--backend hip` fail with one line giving the reason (the
# backend library's probe when it was built: "no CUDA driver", "no CUDA
# device", or for HIP the missing ROCm runtime; else "not found"), exit 1, nothing on stdout; `--backend auto`
# runs on the CPU; `dsr1 info --hw` says why CUDA is not used. Where a GPU
# is present the CUDA backend is covered by test_backend_ops and the suite
# run with DSR1_TEST_BACKEND=cuda instead.
set -u
if [ -e /dev/nvidia0 ] || [ -e /dev/kfd ]; then
    echo "a GPU device node is present: covered by DSR1_TEST_BACKEND=cuda/hip runs"
    exit 77
fi
. tests/e2e/lib/tiny_model.sh
fail=0
dir=$(dirname "$DSR1")
for be in cuda hip; do
    "$DSR1" run -m "$M" --backend $be --max-tokens 2 --temperature 0 "hi" >"$TMPDIR/o" 2>"$TMPDIR/e"
    rc=$?
    [ $rc -eq 1 ] || { echo "FAIL: --backend $be exit $rc, expected 1"; cat "$TMPDIR/e"; fail=1; }
    [ -s "$TMPDIR/o" ] && { echo "FAIL: --backend $be wrote to stdout"; fail=1; }
    [ "$(grep -c . "$TMPDIR/e")" -eq 1 ] || { echo "FAIL: --backend $be: not one line:"; cat "$TMPDIR/e"; fail=1; }
    if [ -f "$dir/libdsr1-$be.so" ]; then
        # its probe answered, or (HIP) the ROCm runtime it links is absent
        grep -Eq "backend $be: (no (CUDA|HIP) (device|driver)|the CUDA driver is too old|.*libamdhip64.*cannot open)" "$TMPDIR/e" ||
            { echo "FAIL: --backend $be: no probe reason:"; cat "$TMPDIR/e"; fail=1; }
    else
        grep -q "backend $be: libdsr1-$be.so not found" "$TMPDIR/e" ||
            { echo "FAIL: --backend $be: no 'not found' reason:"; cat "$TMPDIR/e"; fail=1; }
    fi
done
"$DSR1" run -m "$M" --backend auto --max-tokens 2 --temperature 0 "hi" >"$TMPDIR/o" 2>"$TMPDIR/e" ||
    { echo "FAIL: --backend auto failed:"; cat "$TMPDIR/e"; fail=1; }
grep -q " on cpu (" "$TMPDIR/e" || { echo "FAIL: --backend auto did not say it runs on the cpu:"; cat "$TMPDIR/e"; fail=1; }
# ... and why: each GPU backend with its reason (the probe's when built)
grep -Eq "backend auto: cpu \(cuda: (no CUDA|the CUDA driver|libdsr1-cuda.so not found)" "$TMPDIR/e" ||
    { echo "FAIL: --backend auto does not say why not cuda:"; cat "$TMPDIR/e"; fail=1; }
"$DSR1" info --hw >"$TMPDIR/h" 2>&1 || { echo "FAIL: info --hw exit"; fail=1; }
grep -Eq '(backends:)? +cuda +not available \(.+\)' "$TMPDIR/h" ||
    { echo "FAIL: info --hw gives no reason for cuda:"; cat "$TMPDIR/h"; fail=1; }
exit $fail
