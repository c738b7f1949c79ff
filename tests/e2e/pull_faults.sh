#!/bin/sh
# pull_faults.sh - what a real download meets, in one pull with 4 parallel
# connections: a connection dropped mid-file (resumed with a Range request,
# so no byte is served twice), a 429 with Retry-After then success, a burst
# of 5xx answers, a server that ignores Range (starts over), a connection
# that goes silent (--timeout, then resumed). The pull ends
# verified with each retry said on stderr; the bytes served add up to the
# checkpoint's size (plus the one restarted file).
set -u
. tests/e2e/lib/hub.sh
fail=0
no() { echo "FAIL: $*"; fail=1; }
hub_repo acme/tiny --shard-mb 3
SRC=$HUB_ROOT/acme/tiny
S1=model-00001-of-00004.safetensors
S2=model-00002-of-00004.safetensors
S3=model-00003-of-00004.safetensors
S4=model-00004-of-00004.safetensors
hub_start --drop "$S4:500000" --no-range "$S4" --drop "$S1:1000000" --fail "$S2:429:1" --fail "$S3:503:1" --fail "$S3:500:1" \
    --fail "$S3:502:1" --fail config.json:500:2 --stall model.safetensors.index.json:10000
"$DSR1" pull acme/tiny --jobs 4 --timeout 2 >"$TMPDIR/out" 2>"$TMPDIR/err" || { no "pull exit $?"; cat "$TMPDIR/err"; }
R=$HF_HUB_CACHE/models--acme--tiny
SNAP=$(cat "$TMPDIR/out")
for f in $(cd "$SRC" && ls); do cmp -s "$SNAP/$f" "$SRC/$f" || no "$f differs"; done
[ -s "$R/refs/main" ] || no "no refs/main"
ls "$R/blobs" | grep -q incomplete && no "a .incomplete was left"

# The dropped file: two requests, the second from byte 1000000, no byte twice.
size1=$(wc -c <"$SRC/$S1")
grep -q "_lfs/.*range=bytes=1000000- status=206" "$HUB_LOG" || { no "no resume at byte 1000000"; cat "$HUB_LOG"; }
sha1=$(sha256sum <"$SRC/$S1" | cut -c1-64)
[ "$(served "_lfs/$sha1")" -eq "$size1" ] || no "$S1: served $(served "_lfs/$sha1") bytes for $size1"
grep -q "$S1: .*retrying in 1 s (1000000 of $size1 bytes kept)" "$TMPDIR/err" || { no "drop note"; cat "$TMPDIR/err"; }
# 429 then success: Retry-After honoured.
grep -q "$S2: HTTP 429; retrying in 1 s" "$TMPDIR/err" || { no "429 note"; cat "$TMPDIR/err"; }
[ "$(requests "resolve/.*/$S2 ")" -eq 2 ] || no "$S2: want 2 resolve requests"
# The 5xx burst: three failures, then success.
[ "$(requests "resolve/.*/$S3 .*status=50")" -eq 3 ] || no "$S3: want 3 5xx answers"
[ "$(grep -c "$S3: HTTP 50[023]; retrying" "$TMPDIR/err")" -eq 3 ] || { no "5xx notes"; cat "$TMPDIR/err"; }
grep -q "config.json: HTTP 500; retrying in 1 s" "$TMPDIR/err" &&
grep -q "config.json: HTTP 500; retrying in 2 s" "$TMPDIR/err" || { no "backoff should double (1 s, 2 s)"; cat "$TMPDIR/err"; }
# A connection gone silent: given up after --timeout, resumed from byte 10000.
grep -q "model.safetensors.index.json: no data for too long (--timeout); retrying in 1 s (10000 of" "$TMPDIR/err" ||
    { no "stall note"; cat "$TMPDIR/err"; }
grep -q "resolve/.*/model.safetensors.index.json range=bytes=10000- status=206" "$HUB_LOG" || no "stall: no resume"
# Range ignored: the file starts over (said), and arrives whole.
grep -q "$S4: .*retrying in 1 s (500000 of" "$TMPDIR/err" || { no "$S4 drop note"; cat "$TMPDIR/err"; }
[ "$(requests "_lfs/.*range=bytes=500000- status=200")" -eq 1 ] || { no "$S4: no ranged request answered 200"; cat "$HUB_LOG"; }
# Everything served once, but the 500000 bytes of the file that started over.
total=$(( $(cat "$SRC"/* | wc -c) + 500000 ))
[ "$(served '(resolve|_lfs).*status=20[06]')" -eq "$total" ] || no "served $(served '(resolve|_lfs).*status=20[06]') bytes, the files are $total"

# --retries bounds the tries: a file that always fails fails alone, the
# others complete, refs/main is not written, exit 1 with the reason.
export HF_HUB_CACHE=$TMPDIR/c2
hub_start --fail "$S2:500:100"
"$DSR1" pull acme/tiny --retries 2 >/dev/null 2>"$TMPDIR/err"
rc=$?
[ $rc -eq 1 ] || no "always-failing file: exit $rc"
tail -1 "$TMPDIR/err" | grep -q "^dsr1: 1 of 6 files failed (first: $S2: gave up after 2 tries in a row without progress (last: HTTP 500); run again to resume)" ||
    { no "give-up message"; cat "$TMPDIR/err"; }
R=$HF_HUB_CACHE/models--acme--tiny
[ -e "$R/refs/main" ] && no "refs/main written for an incomplete pull"
[ "$(ls "$R"/snapshots/*/ | wc -l)" -eq 5 ] || no "the 5 good files should be linked"
exit $fail
