#!/bin/sh
# pull_convert.sh - `dsr1 pull --convert --type int8 -o OUT --delete-source`:
# OUT is the model `dsr1 convert` makes from the source (same logits), the
# snapshot path is still printed, and only the .safetensors this pull
# fetched are deleted (a shard fetched by an earlier pull stays, as do the
# JSON files). A failed conversion deletes nothing; an output directory
# that cannot be written is refused before downloading.
set -u
. tests/e2e/lib/hub.sh
fail=0
no() { echo "FAIL: $*"; fail=1; }
hub_repo acme/tiny --shard-mb 3
SRC=$HUB_ROOT/acme/tiny
hub_start
R=$HF_HUB_CACHE/models--acme--tiny
S1=model-00001-of-00004.safetensors
"$DSR1" pull acme/tiny --include "$S1" --quiet >/dev/null || no "first pull"

# An output directory that does not exist: refused before downloading.
: >"$HUB_LOG"
"$DSR1" pull acme/tiny --convert -o "$TMPDIR/no/such/dir/m.dsr1" >/dev/null 2>"$TMPDIR/err"
[ $? -eq 1 ] || no "missing output dir: exit $?"
grep -q "^dsr1: $TMPDIR/no/such/dir: cannot write the --convert output there (No such file or directory); nothing was downloaded$" "$TMPDIR/err" ||
    { no "missing output dir message"; cat "$TMPDIR/err"; }
[ "$(requests 'resolve')" -eq 0 ] || no "downloaded before refusing"

# A conversion that fails after the download (a 5 MiB file-size limit lets
# the 3 MB shards in, not the 12 MB output): exit 1, nothing deleted.
(ulimit -f 10240; exec "$DSR1" pull acme/tiny --convert -o "$TMPDIR/m.dsr1" --delete-source) >/dev/null 2>"$TMPDIR/err"
[ $? -eq 1 ] || no "failed conversion: exit $?"
tail -1 "$TMPDIR/err" | grep -q "File too large" || { no "failed conversion message"; cat "$TMPDIR/err"; }
[ "$(ls "$R/blobs" | wc -l)" -eq 6 ] || no "a failed conversion deleted blobs: $(ls "$R/blobs")"
[ -e "$TMPDIR/m.dsr1" ] && no "a failed conversion left its output"
# Forget shards 2-4 so the next pull fetches them again (and may delete them).
COMMIT=$(cat "$R/refs/main")
for f in "$R/snapshots/$COMMIT"/model-0000[234]*; do rm "$R/blobs/$(readlink "$f" | sed 's|.*/||')" "$f"; done

"$DSR1" pull acme/tiny --convert --type int8 -o "$TMPDIR/m.dsr1" --delete-source >"$TMPDIR/out" 2>"$TMPDIR/err" ||
    { no "pull --convert exit $?"; cat "$TMPDIR/err"; }
[ "$(cat "$TMPDIR/out")" = "$R/snapshots/$COMMIT" ] || no "stdout: $(cat "$TMPDIR/out")"
grep -q "the conversion after it (int8 types) writes about" "$TMPDIR/err" || { no "plan line"; cat "$TMPDIR/err"; }
grep -q "^dsr1 convert: .* -> $TMPDIR/m.dsr1" "$TMPDIR/err" || { no "no convert summary"; cat "$TMPDIR/err"; }
grep -q "^dsr1 pull: --delete-source: deleted the .safetensors this pull fetched" "$TMPDIR/err" || no "no delete note"
"$DSR1" convert "$SRC" --type int8 -o "$TMPDIR/ref.dsr1" --quiet || no "reference convert"
"$DSR1" logits -m "$TMPDIR/m.dsr1" --ids 5,17,42 -o "$TMPDIR/a.f32" --threads 1 2>/dev/null &&
"$DSR1" logits -m "$TMPDIR/ref.dsr1" --ids 5,17,42 -o "$TMPDIR/b.f32" --threads 1 2>/dev/null &&
cmp -s "$TMPDIR/a.f32" "$TMPDIR/b.f32" || no "the pulled model's logits differ from the source's"
sha1=$(sha256sum <"$SRC/$S1" | cut -c1-64)
[ "$(ls "$R/blobs" | grep -c '^[0-9a-f]\{64\}$')" -eq 1 ] && [ -f "$R/blobs/$sha1" ] ||
    no "want only the earlier shard kept: $(ls "$R/blobs")"
[ "$(ls "$R/blobs" | grep -c '^[0-9a-f]\{40\}$')" -eq 2 ] || no "the JSON blobs should stay"
[ "$(ls "$R/snapshots/$COMMIT" | grep -c '\.safetensors$')" -eq 1 ] || no "links of deleted shards remain"
exit $fail
