#!/bin/sh
# hostile_files.sh - files that lie about what they are (issue 13, items 1,
# 6, 10, 15): each must end in one "dsr1: ..." line and a non-zero exit (or
# be shown harmlessly), never a hang, a crash or a lost source file.
#  - a FIFO in place of a shard, config.json or tokenizer.json: convert and
#    info refuse it at once ("not a regular file") instead of waiting for a
#    writer (each run under `timeout`: a hang is a failure, not a stuck suite);
#  - a FIFO given as the .dsr1 file to info;
#  - stdin closed (`<&-`): `run --in -` reads nothing instead of the model;
#  - convert -o onto its own shard, index or config.json, directly, through
#    a symlink and through a hard link: refused, source unchanged, no temp;
#  - tokenizer.json whose merge names a 40,000-byte token (a heap overflow
#    once): convert refuses it naming the merge;
#  - a checkpoint whose directory name carries terminal escape codes: info
#    shows it without the ESC byte.
# Only sh, sed, dd, cmp, timeout, mkfifo.
set -u
SRC=$FIXTURES/tiny/ckpt
S1=model-00001-of-00002.safetensors
fail=0

fresh() { rm -rf "$TMPDIR/ck"; cp -r "$SRC" "$TMPDIR/ck"; }

# refuse WHAT PATTERN CMD...: exit 1 within 20 s, one "dsr1" stderr line with PATTERN.
refuse() {
    what=$1 pat=$2; shift 2
    timeout 20 "$@" >"$TMPDIR/stdout" 2>"$TMPDIR/err" </dev/null
    rc=$?
    if [ $rc -ne 1 ] || [ "$(wc -l <"$TMPDIR/err")" -ne 1 ] || ! grep -q '^dsr1' "$TMPDIR/err" ||
        ! grep -qF -- "$pat" "$TMPDIR/err"; then
        echo "FAIL: $what: exit $rc (124 = hung), want 1 and one line with '$pat':"
        cat "$TMPDIR/err"; fail=1
    fi
}

# ---- FIFOs instead of files (item 6) ----
for f in "$S1" config.json; do
    fresh; rm "$TMPDIR/ck/$f"; mkfifo "$TMPDIR/ck/$f"
    refuse "convert, FIFO as $f" "not a regular file" "$DSR1" convert "$TMPDIR/ck" -o "$TMPDIR/o.dsr1"
    refuse "info, FIFO as $f" "not a regular file" "$DSR1" info "$TMPDIR/ck"
done
fresh; mkfifo "$TMPDIR/ck/tokenizer.json"
refuse "convert, FIFO as tokenizer.json" "not a regular file" \
    "$DSR1" convert "$TMPDIR/ck" -o "$TMPDIR/o.dsr1"
rm -f "$TMPDIR/fifo.dsr1"; mkfifo "$TMPDIR/fifo.dsr1"
refuse "info, FIFO as the .dsr1" "not a regular file" "$DSR1" info "$TMPDIR/fifo.dsr1"
[ -e "$TMPDIR/o.dsr1" ] && { echo "FAIL: an output was left"; fail=1; }

# ---- convert -o onto its own sources (item 10) ----
for f in "$S1" model.safetensors.index.json config.json; do
    fresh
    refuse "convert -o its own $f" "source file" "$DSR1" convert "$TMPDIR/ck" -o "$TMPDIR/ck/$f" --quiet
    cmp -s "$SRC/$f" "$TMPDIR/ck/$f" || { echo "FAIL: -o $f changed the source"; fail=1; }
done
fresh
ln -sf "$TMPDIR/ck/$S1" "$TMPDIR/link.dsr1"
refuse "convert -o a symlink to a shard" "$S1" "$DSR1" convert "$TMPDIR/ck" -o "$TMPDIR/link.dsr1"
rm -f "$TMPDIR/hard.dsr1"; ln "$TMPDIR/ck/$S1" "$TMPDIR/hard.dsr1"
refuse "convert -o a hard link to a shard" "$S1" "$DSR1" convert "$TMPDIR/ck" -o "$TMPDIR/hard.dsr1"
cmp -s "$SRC/$S1" "$TMPDIR/ck/$S1" || { echo "FAIL: a link output changed the shard"; fail=1; }
ls "$TMPDIR/ck" "$TMPDIR" | grep -q 'tmp-' && { echo "FAIL: temp file left"; fail=1; }

# ---- a merge naming a 40,000-byte token (item 1) ----
fresh
cp "$FIXTURES/tokenizer/tokenizer.json" "$TMPDIR/ck/tokenizer.json"
n=$(grep -n '^ *"Ġ t",$' "$TMPDIR/ck/tokenizer.json" | head -1 | cut -d: -f1)
[ -n "$n" ] || { echo "fixture changed: no merge \"Ġ t\""; exit 1; }
long=$(head -c 40000 /dev/zero | tr '\0' A)
sed -i "${n}s/.*/\"Ġ $long\",/" "$TMPDIR/ck/tokenizer.json"
refuse "convert, merge with a 40,000-byte half" "model.merges[0]" \
    "$DSR1" convert "$TMPDIR/ck" -o "$TMPDIR/o.dsr1" --quiet
[ -e "$TMPDIR/o.dsr1" ] && { echo "FAIL: the bad tokenizer was packed"; fail=1; }

# ---- escape codes from a file reach no terminal (item 15) ----
esc=$(printf '\033')
evil="$TMPDIR/ev${esc}[2J${esc}]0;pwned$(printf '\007')il"
rm -rf "$evil"; cp -r "$SRC" "$evil"
"$DSR1" convert "$evil" -o "$TMPDIR/evil.dsr1" --quiet 2>"$TMPDIR/err" ||
    { echo "FAIL: convert of the oddly named checkpoint"; cat "$TMPDIR/err"; fail=1; }
"$DSR1" info "$TMPDIR/evil.dsr1" >"$TMPDIR/info" 2>&1 || { echo "FAIL: info exit"; fail=1; }
grep -q "source:     ev?\[2J?\]0;pwned?il" "$TMPDIR/info" ||
    { echo "FAIL: info did not show the name sanitized:"; cat -v "$TMPDIR/info"; fail=1; }
if grep -q "$esc" "$TMPDIR/info"; then echo "FAIL: ESC reached the terminal"; cat -v "$TMPDIR/info"; fail=1; fi
# An error quoting a name from a file: the ESC is gone from the message too.
"$DSR1" info "$evil/nope.dsr1" 2>"$TMPDIR/err" >/dev/null
if grep -q "$esc" "$TMPDIR/err"; then echo "FAIL: ESC in an error message"; cat -v "$TMPDIR/err"; fail=1; fi
rm -rf "$evil"

# ---- stdin closed: fd 0 must not become the model file (item 6) ----
M=$TMPDIR/m.dsr1
rm -rf "$TMPDIR/ck"
. "$(dirname "$0")/lib/tiny_model.sh"
timeout 60 "$DSR1" run -m "$M" --in - --max-tokens 2 >"$TMPDIR/out" 2>"$TMPDIR/err" <&-
rc=$?
if [ $rc -ne 0 ] || [ -s "$TMPDIR/out" ]; then
    echo "FAIL: run --in - with stdin closed: exit $rc, $(wc -l <"$TMPDIR/out") records (want 0, none)"
    head -c 300 "$TMPDIR/out"; cat "$TMPDIR/err"; fail=1
fi
exit $fail
