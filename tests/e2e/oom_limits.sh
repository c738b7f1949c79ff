#!/bin/sh
# oom_limits.sh - running out of memory is an error message, never a crash
# and never a wrong diagnosis (issue 13, item 14 and "make it last").
#  - tokenize under address-space limits (ulimit -v) from the least the
#    binary starts under to 60 MB more: the 7.8 MB tokenizer.json's parse
#    fails somewhere in there; it must say
#    "out of memory", never "invalid JSON" (cJSON returns NULL for both);
#  - `dsr1 run` on the tiny model under limits from 100 to 700 MB: every
#    run exits 0 (answered) or 1 with a last stderr line "dsr1: ..." (out of
#    memory, cannot mmap, cannot start a thread); none dies on a signal (a
#    segfault in engine cleanup, an abort on a failed allocation). At least
#    one limit must fail and one succeed, so the sweep covers the boundary.
# Skipped under the sanitizers (ASan reserves terabytes of address space).
set -u
[ "${DSR1_SANITIZED:-0}" = 1 ] && { echo "ulimit -v cannot be used under ASan"; exit 77; }
fail=0
TOK=$FIXTURES/tokenizer/tokenizer.json

# The smallest limit the binary starts under (its shared libraries need some).
base=0
for mb in 10 20 30 40 60 80 100 130 160 200; do
    if (ulimit -v $((mb * 1024)); exec "$DSR1" version) >/dev/null 2>&1; then base=$mb; break; fi
done
[ $base -gt 0 ] || { echo "FAIL: dsr1 does not start under 200 MB"; exit 1; }
oom=0
for mb in $(seq "$base" 5 $((base + 60))); do
    (ulimit -v $((mb * 1024)); exec "$DSR1" tokenize -m "$TOK" hello) >/dev/null 2>"$TMPDIR/err"
    rc=$?
    if grep -q "invalid JSON" "$TMPDIR/err" || [ $rc -gt 1 ]; then
        echo "FAIL: tokenize under ${mb} MB: exit $rc:"; cat "$TMPDIR/err"; fail=1
    fi
    grep -q "out of memory parsing" "$TMPDIR/err" && oom=1
done
[ $oom = 1 ] || { echo "FAIL: no limit from $base to $((base + 60)) MB ran the JSON parse out of memory"; fail=1; }

M=$TMPDIR/m.dsr1
. "$(dirname "$0")/lib/tiny_model.sh"
echo '{"id": 1, "prompt": "hi"}' >"$TMPDIR/in.jsonl"
ok=0 refused=0
mb=100
while [ $mb -le 700 ]; do
    (ulimit -v $((mb * 1024)); exec timeout 60 "$DSR1" run -m "$M" --in "$TMPDIR/in.jsonl" \
        --max-tokens 2) >"$TMPDIR/out" 2>"$TMPDIR/err"
    rc=$?
    last=$(tail -n 1 "$TMPDIR/err")
    if [ $rc -eq 0 ]; then
        ok=1
    elif [ $rc -eq 1 ] && echo "$last" | grep -q '^dsr1'; then
        refused=1 # "out of memory", "cannot allocate", "cannot start thread": all fine
    elif [ $rc -gt 128 ]; then
        echo "FAIL: run under ${mb} MB: killed by signal $((rc - 128)); last line: $last"; fail=1
    else
        echo "FAIL: run under ${mb} MB: exit $rc, last line: $last"; fail=1
    fi
    mb=$((mb + 20))
done
[ $ok = 1 ] && [ $refused = 1 ] ||
    { echo "FAIL: the sweep did not cross the boundary (answered: $ok, refused: $refused)"; fail=1; }
exit $fail
