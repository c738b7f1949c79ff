#!/bin/sh
# numa_cli.sh - `--numa` on the command line (backends/cpu/numa.c): dsr1
# logits with --numa virtual:2 writes the same bytes as --numa off and as
# the default, and says the split on its model line; run takes the flag
# too; info --hw lists each node's CPUs, threads and experts; bad values
# are usage errors (exit 2), a split wider than the CPUs a runtime error.
set -u
fail=0
no() { echo "FAIL: $*"; fail=1; }
ncpu=$(nproc 2>/dev/null || echo 1)
[ "$ncpu" -ge 2 ] || { echo "one CPU: no virtual split to test"; exit 77; }
. tests/e2e/lib/tiny_model.sh

"$DSR1" logits -m "$M" --ids 5,17,42,99 -o "$TMPDIR/off.f32" --numa off 2>/dev/null || no "logits --numa off"
"$DSR1" logits -m "$M" --ids 5,17,42,99 -o "$TMPDIR/def.f32" 2>/dev/null || no "logits (default)"
"$DSR1" logits -m "$M" --ids 5,17,42,99 -o "$TMPDIR/v2.f32" --numa virtual:2 2>"$TMPDIR/err" ||
    { no "logits --numa virtual:2"; cat "$TMPDIR/err"; }
grep -q "numa virtual:2 over" "$TMPDIR/err" || { no "model line lacks the split"; cat "$TMPDIR/err"; }
cmp -s "$TMPDIR/off.f32" "$TMPDIR/v2.f32" || no "virtual:2 logits differ from one node"
cmp -s "$TMPDIR/off.f32" "$TMPDIR/def.f32" || no "default logits differ from --numa off"

"$DSR1" run -m "$M" --numa virtual:2 --max-tokens 6 --temperature 0 hello >"$TMPDIR/r2" 2>/dev/null ||
    no "run --numa virtual:2 exit $?"
"$DSR1" run -m "$M" --numa off --max-tokens 6 --temperature 0 hello >"$TMPDIR/r1" 2>/dev/null ||
    no "run --numa off exit $?"
[ -s "$TMPDIR/r1" ] || no "run wrote nothing"
cmp -s "$TMPDIR/r1" "$TMPDIR/r2" || no "run output differs with --numa virtual:2"

"$DSR1" info --hw --numa virtual:2 >"$TMPDIR/h" || no "info --hw --numa virtual:2 exit"
grep -q "^numa split: virtual:2" "$TMPDIR/h" && grep -q "^  node 0: .*experts 0,2,4,6,..,254 (128 of 256)" "$TMPDIR/h" &&
    grep -q "^  node 1: .*experts 1,3,5,7,..,255 (128 of 256)" "$TMPDIR/h" || { no "info --hw split"; cat "$TMPDIR/h"; }
"$DSR1" info --hw --json --numa virtual:2 | grep -q '"numa":{"split":"virtual:2' || no "info --hw --json numa"

for bad in bogus virtual: virtual:0 virtual:x virtual:65; do
    "$DSR1" logits -m "$M" --ids 5 -o "$TMPDIR/x.f32" --numa "$bad" >/dev/null 2>"$TMPDIR/e"; rc=$?
    [ $rc -eq 2 ] && grep -q "numa wants auto, off or virtual:N" "$TMPDIR/e" || no "--numa $bad: exit $rc $(cat "$TMPDIR/e")"
done
"$DSR1" bench -m "$M" --numa nope >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || no "bench --numa nope: exit $rc"
"$DSR1" info --hw --numa virtual:$((ncpu + 1)) >/dev/null 2>"$TMPDIR/e"; rc=$?
[ $rc -eq 1 ] && grep -q "CPUs to split" "$TMPDIR/e" || no "virtual:$((ncpu + 1)): exit $rc $(cat "$TMPDIR/e")"
exit $fail
