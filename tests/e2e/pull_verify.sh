#!/bin/sh
# pull_verify.sh - every file is checked before it goes into place. A shard
# served with one byte flipped fails its sha256: the partial is deleted and
# the message says so, nothing of it is in blobs/ or snapshots/, the other
# files complete, refs/main is not written, exit 1. A small file served
# wrong fails its git blob id the same way. Served right, the next pull
# fetches only those files and succeeds.
set -u
. tests/e2e/lib/hub.sh
fail=0
no() { echo "FAIL: $*"; fail=1; }
hub_repo acme/tiny --shard-mb 3
SRC=$HUB_ROOT/acme/tiny
S2=model-00002-of-00004.safetensors
hub_start --corrupt "$S2" --corrupt config.json
R=$HF_HUB_CACHE/models--acme--tiny
sha=$(sha256sum <"$SRC/$S2" | cut -c1-64)
"$DSR1" pull acme/tiny >"$TMPDIR/out" 2>"$TMPDIR/err"
rc=$?
[ $rc -eq 1 ] || no "exit $rc, want 1"
grep -q "^dsr1 pull: $S2: sha256 mismatch: expected $sha, got [0-9a-f]\{64\}; the download was deleted: run again to fetch it afresh" "$TMPDIR/err" ||
    { no "no sha256 mismatch note"; cat "$TMPDIR/err"; }
grep -q "^dsr1 pull: config.json: git blob id mismatch: expected [0-9a-f]\{40\}, got" "$TMPDIR/err" ||
    { no "no git blob id mismatch note"; cat "$TMPDIR/err"; }
tail -1 "$TMPDIR/err" | grep -q "^dsr1: 2 of 6 files failed (first: config.json: git blob id mismatch" ||
    { no "last line"; cat "$TMPDIR/err"; }
[ -s "$TMPDIR/out" ] && no "stdout on failure"
ls "$R/blobs" | grep -q "$sha" && no "something of the bad shard is in blobs/: $(ls "$R/blobs")"
ls "$R/blobs" | grep -q incomplete && no "a partial was kept"
[ "$(ls "$R/blobs" | wc -l)" -eq 4 ] || no "want the 4 good blobs, have $(ls "$R/blobs" | wc -l)"
ls "$R"/snapshots/*/"$S2" >/dev/null 2>&1 && no "the bad shard is linked"
ls "$R"/snapshots/*/config.json >/dev/null 2>&1 && no "the bad config.json is linked"
[ -e "$R/refs/main" ] && no "refs/main written"

hub_start
: >"$HUB_LOG"
"$DSR1" pull acme/tiny >"$TMPDIR/out" 2>"$TMPDIR/err" || { no "second pull exit $?"; cat "$TMPDIR/err"; }
[ "$(requests 'resolve')" -eq 2 ] || { no "second pull should fetch only the 2 bad files:"; cat "$HUB_LOG"; }
SNAP=$(cat "$TMPDIR/out")
for f in $(cd "$SRC" && ls); do cmp -s "$SNAP/$f" "$SRC/$f" || no "$f differs"; done
[ -s "$R/refs/main" ] || no "no refs/main"
exit $fail
