#!/bin/sh
# run_kv_oom.sh - a KV cache that cannot be allocated is a one-line error
# that says what to do, exit 1, never a crash (issue 13: engine cleanup
# once dereferenced NULL after the allocation failed):
#   - `--ctx 1073741824`: a cache far larger than the machine;
#   - many slots under `ulimit -v`: allocation fails for real.
# Expected: "not enough memory for a KV cache of N GB; lower --ctx or
# --parallel", exit status 1, no signal.
set -u
. "$(dirname "$0")/lib/tiny_model.sh"
# Under ASan an impossible malloc must return NULL as it does in a normal
# build (ASan aborts by default instead).
ASAN_OPTIONS=${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}allocator_may_return_null=1
export ASAN_OPTIONS
fail=0
# check NAME STATUS ERRFILE
check() {
    [ "$2" -eq 1 ] || { echo "FAIL: $1: exit $2, expected 1"; cat "$3"; fail=1; }
    grep -q "not enough memory for a KV cache of [0-9.]* GB; lower --ctx or --parallel" "$3" ||
        { echo "FAIL: $1: message:"; cat "$3"; fail=1; }
}
# Since the memory check before loading (core/memcheck.c), a cache this far
# beyond the machine is refused before the model loads, with the sizes; the
# allocation-failure path itself is exercised by the ulimit case below.
"$DSR1" run -m "$M" -q --ctx 1073741824 --max-tokens 2 "hello" >"$TMPDIR/o1" 2>"$TMPDIR/e1"
rc=$?
[ "$rc" -eq 1 ] || { echo "FAIL: --ctx 1073741824: exit $rc, expected 1"; cat "$TMPDIR/e1"; fail=1; }
grep -Eq "not enough memory( for a KV cache of [0-9.]* GB; lower --ctx or --parallel|: the KV cache for --ctx 1073741824 takes .*lower --ctx)" "$TMPDIR/e1" ||
    { echo "FAIL: --ctx 1073741824: message:"; cat "$TMPDIR/e1"; fail=1; }
# 16 slots of 300K tokens (800 B each: 3.8 GB of cache) under a 3 GB
# address-space limit; the model and the binary need far less
echo '{"id": 1, "prompt": "hello"}' >"$TMPDIR/in.jsonl"
[ -n "${DSR1_SANITIZED:-}" ] && exit $fail # ASan's shadow memory does not fit under a limit
( ulimit -v 3000000 2>/dev/null || exit 77
  exec "$DSR1" run -m "$M" -q -j 16 --ctx 300000 --max-tokens 2 --in "$TMPDIR/in.jsonl" \
      --out "$TMPDIR/o2.jsonl" ) >"$TMPDIR/o2" 2>"$TMPDIR/e2"
rc=$?
if [ "$rc" -eq 77 ]; then echo "skip: ulimit -v not permitted here"; exit 77; fi
check "-j 16 under ulimit -v" $rc "$TMPDIR/e2"
exit $fail
