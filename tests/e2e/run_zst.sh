#!/bin/sh
# run_zst.sh - compressed batches: zstd input is read (detected by its
# magic, also from stdin), *.zst output is written as zstd that the zstd
# tool reads, equal to the plain output; --resume into a .zst output after
# a kill appends new frames and gives the same records as one clean run.
set -u
command -v zstd >/dev/null || { echo "zstd tool not installed"; exit 77; }
M=$TMPDIR/m.dsr1
. tests/e2e/lib/tiny_model.sh
fail=0
bad() { echo "FAIL: $*"; fail=1; }
strip() { sed 's/,"timing":{[^}]*}//'; }

: >"$TMPDIR/in.jsonl"
for i in $(seq 1 8); do
    printf '{"id": %d, "prompt": "Zed %d", "max_tokens": 8}\n' $i $i >>"$TMPDIR/in.jsonl"
done
zstd -q -c "$TMPDIR/in.jsonl" >"$TMPDIR/in.jsonl.zst"
# --deterministic: a resumed run batches the remaining requests
# differently, and only this mode promises the same answer in any batch
# (in the fast mode two 5-token prompts prefilled together run FP8 W8A8).
run() { $DSR1 run -q -m "$M" -j 2 --deterministic "$@"; }
run --in "$TMPDIR/in.jsonl" --out "$TMPDIR/plain.jsonl" || bad "plain run failed"
strip <"$TMPDIR/plain.jsonl" >"$TMPDIR/ref"
run --in "$TMPDIR/in.jsonl.zst" --out "$TMPDIR/out.jsonl.zst" || bad "zst run failed"
head -c 4 "$TMPDIR/out.jsonl.zst" | od -An -tx1 | grep -q '28 b5 2f fd' || bad "output is not zstd"
zstd -q -dc "$TMPDIR/out.jsonl.zst" | strip | cmp -s - "$TMPDIR/ref" || bad "zst output differs from plain"
# zstd on stdin, plain on stdout.
run --in - <"$TMPDIR/in.jsonl.zst" | strip | cmp -s - "$TMPDIR/ref" || bad "zst stdin differs"

# Kill mid-run, tear the last frame, resume: same records as the clean run.
t0=$(date +%s.%N)
run --in "$TMPDIR/in.jsonl" --out "$TMPDIR/x.jsonl" >/dev/null
t1=$(date +%s.%N)
$DSR1 run -q -m "$M" -j 2 --deterministic --in "$TMPDIR/in.jsonl.zst" --out "$TMPDIR/r.jsonl.zst" &
pid=$!
sleep "$(awk -v s="$$" -v a="$t0" -v b="$t1" 'BEGIN { srand(s); printf "%.2f", (b - a) * (0.4 + rand() * 0.4) }')"
kill -KILL $pid 2>/dev/null
wait $pid 2>/dev/null
size=$(wc -c <"$TMPDIR/r.jsonl.zst")
[ "$size" -gt 3 ] && truncate -s $((size - 3)) "$TMPDIR/r.jsonl.zst" # a torn frame
run --in "$TMPDIR/in.jsonl.zst" --out "$TMPDIR/r.jsonl.zst" --resume || bad "zst resume failed"
zstd -q -dc "$TMPDIR/r.jsonl.zst" | strip | cmp -s - "$TMPDIR/ref" || bad "zst resume differs"
exit $fail
