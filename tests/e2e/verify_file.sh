#!/bin/sh
# verify_file.sh - `dsr1 verify` and `--verify` on load (issue 13 item 16).
# A freshly converted file verifies (exit 0, one "ok" line on stdout). One
# flipped payload byte (the first tensor's, at offset 4096 + 100): a plain
# load does not notice (that is what dsr1(5) says: payload hashes are only
# checked on request), `dsr1 verify` and `run --verify` fail naming the
# tensor. One flipped metadata byte: every open refuses it (checksum).
set -u
fail=0
M=$TMPDIR/m.dsr1
. "$(dirname "$0")/lib/tiny_model.sh"
echo '{"id": 1, "prompt": "hi"}' >"$TMPDIR/in.jsonl"

"$DSR1" verify "$M" >"$TMPDIR/out" 2>"$TMPDIR/err"
rc=$?
[ $rc -eq 0 ] && [ "$(wc -l <"$TMPDIR/out")" -eq 1 ] && grep -q ": ok: .* tensors" "$TMPDIR/out" ||
    { echo "FAIL: verify of a good file: exit $rc"; cat "$TMPDIR/out" "$TMPDIR/err"; fail=1; }

# flip FILE OFFSET: invert one byte in place.
flip() {
    b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    printf "$(printf '\\%03o' $((255 - b)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
# The first tensor in the directory is the first payload, at 4096.
cp "$M" "$TMPDIR/bad.dsr1"
flip "$TMPDIR/bad.dsr1" 4196
cmp -s "$M" "$TMPDIR/bad.dsr1" && { echo "FAIL: flip did nothing"; exit 1; }

"$DSR1" run -m "$TMPDIR/bad.dsr1" --in "$TMPDIR/in.jsonl" --max-tokens 1 --quiet \
    >/dev/null 2>"$TMPDIR/err" ||
    { echo "FAIL: a plain load refused a payload flip (dsr1(5) says it is not checked)"; cat "$TMPDIR/err"; fail=1; }

for cmd in "verify" "run --verify --in $TMPDIR/in.jsonl --quiet -m"; do
    # shellcheck disable=SC2086
    "$DSR1" $cmd "$TMPDIR/bad.dsr1" >"$TMPDIR/out" 2>"$TMPDIR/err"
    rc=$?
    if [ $rc -ne 1 ] || [ "$(wc -l <"$TMPDIR/err")" -ne 1 ] ||
        ! grep -q "^dsr1: .*bad.dsr1: tensor model.embed_tokens.weight: payload hash .* (corrupt)" "$TMPDIR/err" ||
        [ -s "$TMPDIR/out" ]; then
        echo "FAIL: $cmd on a flipped payload byte: exit $rc (want 1 and the tensor named):"
        cat "$TMPDIR/err" "$TMPDIR/out"; fail=1
    fi
done

# A metadata byte: the header checksum covers it; every open refuses.
meta=$(od -An -tu8 -j 24 -N8 "$M" | tr -d ' ')
cp "$M" "$TMPDIR/badmeta.dsr1"
flip "$TMPDIR/badmeta.dsr1" $((meta + 5))
for cmd in "verify" "info"; do
    "$DSR1" $cmd "$TMPDIR/badmeta.dsr1" >/dev/null 2>"$TMPDIR/err"
    rc=$?
    [ $rc -eq 1 ] && grep -q "^dsr1: .*badmeta.dsr1: .*checksum" "$TMPDIR/err" ||
        { echo "FAIL: $cmd on a flipped metadata byte: exit $rc"; cat "$TMPDIR/err"; fail=1; }
done

"$DSR1" verify "$TMPDIR/none.dsr1" >/dev/null 2>"$TMPDIR/err"
[ $? -eq 1 ] && grep -q "none.dsr1" "$TMPDIR/err" || { echo "FAIL: missing file"; fail=1; }
"$DSR1" verify --bogus >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: unknown option is not a usage error"; fail=1; }
exit $fail
