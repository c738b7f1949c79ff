#!/bin/sh
# run_kv_oom.sh - a KV cache that cannot be allocated is a one-line error
# that says what to do, exit 1, never a crash (issue 13: engine cleanup
# once dereferenced NULL after the allocation failed):
#   - `--ctx 1073741824`: a cache far larger than the machine;
#   - many slots under `ulimit -v`: allocation fails for real.
# Expected: exit status 1, no signal, one line saying what to do. The huge
# --ctx is refused by the memory check before loading (cli/common_mem.c,
# mem_check.sh: "not enough memory: the KV cache ... lower --ctx"); the
# ulimit case passes that check and fails the allocation itself: "not
# enough memory for a KV cache of N GB; lower --ctx or --parallel".
set -u
. "$(dirname "$0")/lib/tiny_model.sh"
# Under ASan an impossible malloc must return NULL as it does in a normal
# build (ASan aborts by default instead).
ASAN_OPTIONS=${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}allocator_may_return_null=1
export ASAN_OPTIONS
fail=0
# check NAME STATUS ERRFILE PATTERN
check() {
    [ "$2" -eq 1 ] || { echo "FAIL: $1: exit $2, expected 1"; cat "$3"; fail=1; }
    grep -q "$4" "$3" || { echo "FAIL: $1: message:"; cat "$3"; fail=1; }
    [ "$(wc -l <"$3")" -eq 1 ] || { echo "FAIL: $1: not one line"; fail=1; }
}
"$DSR1" run -m "$M" -q --ctx 1073741824 --max-tokens 2 "hello" >"$TMPDIR/o1" 2>"$TMPDIR/e1"
check "--ctx 1073741824" $? "$TMPDIR/e1" \
    "not enough memory: the KV cache for --ctx 1073741824 takes .*; lower --ctx"
# 16 slots of 300K tokens (800 B each: 3.8 GB of cache) under a 3 GB
# address-space limit; the model and the binary need far less
echo '{"id": 1, "prompt": "hello"}' >"$TMPDIR/in.jsonl"
[ -n "${DSR1_SANITIZED:-}" ] && exit $fail # ASan's shadow memory does not fit under a limit
( ulimit -v 3000000 2>/dev/null || exit 77
  exec "$DSR1" run -m "$M" -q -j 16 --ctx 300000 --max-tokens 2 --in "$TMPDIR/in.jsonl" \
      --out "$TMPDIR/o2.jsonl" ) >"$TMPDIR/o2" 2>"$TMPDIR/e2"
rc=$?
if [ "$rc" -eq 77 ]; then echo "skip: ulimit -v not permitted here"; exit 77; fi
check "-j 16 under ulimit -v" $rc "$TMPDIR/e2" \
    "not enough memory for a KV cache of [0-9.]* GB; lower --ctx or --parallel"
exit $fail
