#!/bin/sh
# backend_registry.sh - the registry's run-time loading of GPU backends
# (backends/backend.c), with stand-in libraries built here:
#   - a library without dsr1_backend_entry is "not a dsr1 backend";
#   - one built for another interface version is refused by the version check;
#   - one that loads but whose probe finds no device is listed as not
#     available with the probe's reason, and `auto` passes it by, saying why;
#   - `--backend cuda` naming an unusable backend is an error with the
#     reason, never a silent fallback; an unknown name is refused.
set -u
command -v cc >/dev/null 2>&1 || { echo "skip: no C compiler to build stand-in backends"; exit 77; }
root=$(cd "$(dirname "$0")/../.." && pwd)
L1=$TMPDIR/libs1 L2=$TMPDIR/libs2
mkdir -p "$L1" "$L2"
fail=0
# no entry point (hip), and a table of another version (cuda)
echo 'int dsr1_not_a_backend(void) { return 1; }' >"$TMPDIR/none.c"
cat >"$TMPDIR/old.c" <<'C'
#include "backends/backend.h"
static const dsr1_backend_ops t = {.version = DSR1_BACKEND_VERSION - 1, .size = sizeof t, .name = "cuda"};
const dsr1_backend_ops *dsr1_backend_entry(int version) { (void)version; return &t; }
C
# the right version, but no device
cat >"$TMPDIR/nodev.c" <<'C'
#include <stdio.h>
#include "backends/backend.h"
static int probe(char *why, size_t n) { snprintf(why, n, "no device (stand-in backend)"); return 0; }
static const dsr1_backend_ops t = {.version = DSR1_BACKEND_VERSION, .size = sizeof t,
                                   .name = "cuda", .priority = 10, .probe = probe};
const dsr1_backend_ops *dsr1_backend_entry(int version)
{
    return version == DSR1_BACKEND_VERSION ? &t : NULL;
}
C
cc -shared -fPIC -I"$root" -o "$L1/libdsr1-hip.so" "$TMPDIR/none.c" &&
cc -shared -fPIC -I"$root" -o "$L1/libdsr1-cuda.so" "$TMPDIR/old.c" &&
cc -shared -fPIC -I"$root" -o "$L2/libdsr1-cuda.so" "$TMPDIR/nodev.c" ||
    { echo "FAIL: building the stand-in libraries"; exit 1; }

DSR1_BACKEND_PATH=$L1 "$DSR1" info --hw >"$TMPDIR/h1" 2>&1 || { echo "FAIL: info --hw exit"; fail=1; }
grep -q "cuda  not available (.*libdsr1-cuda.so: built for another backend interface" "$TMPDIR/h1" ||
    { echo "FAIL: version check not reported:"; cat "$TMPDIR/h1"; fail=1; }
grep -q "hip   not available (.*libdsr1-hip.so: not a dsr1 backend" "$TMPDIR/h1" ||
    { echo "FAIL: missing entry point not reported:"; cat "$TMPDIR/h1"; fail=1; }
grep -q "cpu   available (.* kernels)" "$TMPDIR/h1" || { echo "FAIL: cpu line:"; cat "$TMPDIR/h1"; fail=1; }
grep -q "backend:    cpu (what --backend auto picks)" "$TMPDIR/h1" || { echo "FAIL: auto pick"; fail=1; }

DSR1_BACKEND_PATH=$L2 "$DSR1" info --hw --json >"$TMPDIR/j2" 2>&1
grep -q '{"name":"cuda","available":false,"reason":"no device (stand-in backend)"}' "$TMPDIR/j2" ||
    { echo "FAIL: probe's reason not in the JSON:"; cat "$TMPDIR/j2"; fail=1; }

# a model command: named unusable backend is an error; auto says why it took the cpu
. "$root/tests/e2e/lib/tiny_model.sh"
DSR1_BACKEND_PATH=$L2 "$DSR1" run -m "$M" --backend cuda --max-tokens 2 "hi" >"$TMPDIR/o" 2>"$TMPDIR/e"
rc=$?
[ "$rc" -eq 1 ] && grep -q "backend cuda: no device (stand-in backend)" "$TMPDIR/e" ||
    { echo "FAIL: --backend cuda: exit $rc"; cat "$TMPDIR/e"; fail=1; }
DSR1_BACKEND_PATH=$L2 "$DSR1" run -m "$M" --max-tokens 2 --temperature 0 "hi" >"$TMPDIR/o" 2>"$TMPDIR/e"
rc=$?
[ "$rc" -eq 0 ] && grep -q "dsr1: backend auto: cpu (cuda: no device (stand-in backend); hip: " "$TMPDIR/e" ||
    { echo "FAIL: auto: exit $rc"; cat "$TMPDIR/e"; fail=1; }
"$DSR1" run -m "$M" --backend tpu --max-tokens 2 "hi" >"$TMPDIR/o" 2>"$TMPDIR/e"
rc=$?
# refused with the names it takes: by the registry, or earlier by run's own
# option check (a usage error since main's run changes)
[ "$rc" -ne 0 ] && grep -Eq "backend tpu: (unknown \()?expected auto, cpu, cuda or hip" "$TMPDIR/e" ||
    { echo "FAIL: unknown backend: exit $rc"; cat "$TMPDIR/e"; fail=1; }
exit $fail
