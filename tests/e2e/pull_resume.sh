#!/bin/sh
# pull_resume.sh - an interrupted pull resumes without downloading finished
# bytes again. The fake Hub stalls one shard after 1 MB; the test waits
# until that much is in its .incomplete partial and the other files are
# done, then interrupts dsr1 (SIGINT): exit 1 with a message saying the
# same command resumes, the partial kept, no link or refs/main for the
# unfinished state. The second run asks for the rest with a Range request
# and nothing else: the bytes served over both runs equal the files' size.
set -u
. tests/e2e/lib/hub.sh
fail=0
no() { echo "FAIL: $*"; fail=1; }
hub_repo acme/tiny --shard-mb 3
SRC=$HUB_ROOT/acme/tiny
S3=model-00003-of-00004.safetensors
hub_start --stall "$S3:1048576"
R=$HF_HUB_CACHE/models--acme--tiny
sha=$(sha256sum <"$SRC/$S3" | cut -c1-64)
"$DSR1" pull acme/tiny --jobs 2 >"$TMPDIR/out" 2>"$TMPDIR/err" &
pid=$!
i=0 # wait (at most 20 s) for 1 MB in the partial and the other 5 files linked
while [ $i -lt 400 ]; do
    part=$(wc -c 2>/dev/null <"$R/blobs/$sha.incomplete" || echo 0)
    links=$(ls "$R"/snapshots/*/ 2>/dev/null | wc -l)
    [ "$part" -eq 1048576 ] && [ "$links" -eq 5 ] && break
    sleep 0.05
    i=$((i + 1))
done
[ $i -lt 400 ] || { no "the stall was not reached (partial $part bytes, $links links)"; kill $pid; exit 1; }
# A second pull of the same repo meanwhile: that file is locked, said so.
"$DSR1" pull acme/tiny --include "$S3" >/dev/null 2>"$TMPDIR/err2"
[ $? -eq 1 ] || no "a concurrent pull of a file being downloaded should fail"
tail -1 "$TMPDIR/err2" | grep -q "$S3: another process is downloading it" || { no "lock message"; cat "$TMPDIR/err2"; }
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 1 ] || no "interrupted pull: exit $rc, want 1"
tail -1 "$TMPDIR/err" | grep -q "^dsr1: interrupted; partial files are kept: run the same command again to resume" ||
    { no "interrupt message"; cat "$TMPDIR/err"; }
[ -s "$TMPDIR/out" ] && no "stdout after an interrupt: $(cat "$TMPDIR/out")"
[ "$(wc -c <"$R/blobs/$sha.incomplete")" -eq 1048576 ] || no "partial not kept at 1 MB"
[ -e "$R/blobs/$sha" ] && no "an unfinished blob was moved into place"
[ -e "$R/refs/main" ] && no "refs/main written by the interrupted pull"
ls "$R"/snapshots/*/"$S3" >/dev/null 2>&1 && no "a link to the unfinished file"

# Again: only the rest of that file is asked for.
cp "$HUB_LOG" "$TMPDIR/log1"
: >"$HUB_LOG"
"$DSR1" pull acme/tiny >"$TMPDIR/out" 2>"$TMPDIR/err" || { no "resumed pull exit $?"; cat "$TMPDIR/err"; }
grep -q "5 already in the cache; 1.0 MiB kept from an earlier try" "$TMPDIR/err" || { no "plan line"; cat "$TMPDIR/err"; }
[ "$(requests '(resolve|_lfs)')" -eq 2 ] || { no "second run requests (want the resolve + one ranged GET):"; cat "$HUB_LOG"; }
grep -q "_lfs/$sha range=bytes=1048576- status=206" "$HUB_LOG" || { no "no Range request from 1 MB"; cat "$HUB_LOG"; }
size=$(wc -c <"$SRC/$S3")
[ "$(served "_lfs/$sha")" -eq $((size - 1048576)) ] || no "second run served $(served "_lfs/$sha") bytes, want $((size - 1048576))"
cat "$TMPDIR/log1" "$HUB_LOG" >"$TMPDIR/both"
HUB_LOG=$TMPDIR/both
total=$(cat "$SRC"/* | wc -c)
[ "$(served '(resolve|_lfs).*status=20[06]')" -eq "$total" ] || no "both runs served $(served '(resolve|_lfs).*status=20[06]') bytes, files are $total"
SNAP=$(cat "$TMPDIR/out")
for f in $(cd "$SRC" && ls); do cmp -s "$SNAP/$f" "$SRC/$f" || no "$f differs"; done
[ -s "$R/refs/main" ] || no "no refs/main after the resumed pull"
exit $fail
