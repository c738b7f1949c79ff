#!/bin/sh
# spec_bench_prompts.sh - `dsr1 bench --spec --prompts FILE` on the tiny
# generated model with the real tokenizer: one row per mode (off, adaptive,
# k=1, k=2) whose tokens equal the off mode's (greedy speculation is exact),
# fixed drafts that draft, the per-tag acceptance table with both tags; a
# line without a "prompt" string, a missing and an empty file are refused
# naming the file (and line); run --kv-type refuses other than bf16/fp8.
set -u
M=$TMPDIR/m.dsr1
. tests/e2e/lib/tiny_model.sh
fail=0
P=$TMPDIR/p.jsonl
cat >"$P" <<'JSONL'
{"prompt": "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>\n", "tag": "greet"}
{"prompt": "Once upon a time", "tag": "story"}

{"prompt": "Count: 1 2 3", "tag": "story"}
JSONL
"$DSR1" bench --spec -m "$M" --prompts "$P" --batch 2 --gen 12 --k 2 --rounds 2 >"$TMPDIR/b" 2>"$TMPDIR/e" ||
    { echo "FAIL: bench exit $?: $(cat "$TMPDIR/e")"; exit 1; }
grep -q "^prompts: .*: 3 prompts, 2 tags; batch 2" "$TMPDIR/b" || { echo "FAIL: header"; fail=1; }
for mode in off adaptive k=1 k=2; do
    awk -v m="$mode" '$1 == m && $2 + 0 > 0 && $NF == "yes" { ok = 1 } END { exit !ok }' "$TMPDIR/b" ||
        { echo "FAIL: no row for $mode with the off mode's tokens"; fail=1; }
done
awk '$1 == "k=2" && $4 + 0 > 0 { ok = 1 } END { exit !ok }' "$TMPDIR/b" ||
    { echo "FAIL: k=2 drafted nothing"; fail=1; }
grep -q "^greet " "$TMPDIR/b" && grep -q "^story " "$TMPDIR/b" || { echo "FAIL: tag rows"; fail=1; }
[ $fail -eq 0 ] || cat "$TMPDIR/b"
printf '{"prompt": "ok"}\n{"text": "no prompt"}\n' >"$TMPDIR/bad.jsonl"
"$DSR1" bench --spec -m "$M" --prompts "$TMPDIR/bad.jsonl" >/dev/null 2>"$TMPDIR/e"; rc=$?
[ $rc -eq 1 ] && grep -q "bad.jsonl: line 2: expected" "$TMPDIR/e" ||
    { echo "FAIL: bad line: exit $rc: $(cat "$TMPDIR/e")"; fail=1; }
# a missing file and an empty one are runtime errors naming the file
"$DSR1" bench --spec -m "$M" --prompts "$TMPDIR/none.jsonl" >/dev/null 2>"$TMPDIR/e"; rc=$?
[ $rc -eq 1 ] && grep -q "none.jsonl: cannot open" "$TMPDIR/e" ||
    { echo "FAIL: missing file: exit $rc: $(cat "$TMPDIR/e")"; fail=1; }
printf '\n  \n' >"$TMPDIR/empty.jsonl"
"$DSR1" bench --spec -m "$M" --prompts "$TMPDIR/empty.jsonl" >/dev/null 2>"$TMPDIR/e"; rc=$?
[ $rc -eq 1 ] && grep -q "empty.jsonl: no prompts" "$TMPDIR/e" ||
    { echo "FAIL: empty file: exit $rc: $(cat "$TMPDIR/e")"; fail=1; }
# --kv-type takes bf16 or fp8 only; fp8 runs
"$DSR1" run -q -m "$M" --kv-type fp16 "hi" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: run --kv-type fp16 exit $rc, expected 2"; fail=1; }
"$DSR1" run -q -m "$M" --kv-type fp8 --max-tokens 4 "hi" >"$TMPDIR/o" 2>"$TMPDIR/e" && [ -s "$TMPDIR/o" ] ||
    { echo "FAIL: run --kv-type fp8: $(cat "$TMPDIR/e")"; fail=1; }
exit $fail
