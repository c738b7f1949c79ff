#!/bin/sh
# pull_errors.sh - failures that retrying cannot fix fail at once (exit 1,
# a last line saying what to do, no retry, nothing half-made in the cache):
# a gated repo without a token (401: log in), with a token lacking access
# (403: accept the licence), an unknown repo or revision (404: check the
# name); the token file ($HF_HOME/token, $HF_TOKEN_PATH) is used; too
# little free space is refused before any download (and names the
# conversion's size); a full disk mid-download (a file-size limit) stops
# with the partials kept and nothing corrupted, and the next pull resumes
# from them. Bad flags are usage errors (exit 2).
set -u
. tests/e2e/lib/hub.sh
fail=0
no() { echo "FAIL: $*"; fail=1; }
hub_repo acme/tiny --shard-mb 3
mkdir -p "$HUB_ROOT/acme/gated"
cp "$HUB_ROOT/acme/tiny/config.json" "$HUB_ROOT/acme/tiny/model-00002-of-00004.safetensors" "$HUB_ROOT/acme/gated/"
S1=model-00001-of-00004.safetensors
hub_start --gated acme/gated --fake-size "$S1:1125899906842624"
E=$HF_ENDPOINT
last() { tail -1 "$TMPDIR/err"; }
expect_fail() { # what: exit 1, last line matching $1, no retry note
    rc=$1
    [ "$rc" -eq 1 ] || no "$2: exit $rc, want 1"
    last | grep -q "$3" || { no "$2: message"; cat "$TMPDIR/err"; }
    grep -q retrying "$TMPDIR/err" && no "$2: retried"
}

"$DSR1" pull acme/gated >/dev/null 2>"$TMPDIR/err"
expect_fail $? "401" "^dsr1: .*: not authorised (HTTP 401): the model is gated or private; log in: make a token at $E/settings/tokens and set HF_TOKEN (or run \`huggingface-cli login\`), after accepting the licence on $E/acme/gated$"
[ "$(requests 'status=401')" -le 2 ] || no "401 asked $(requests 'status=401') times"
G=$HF_HUB_CACHE/models--acme--gated
[ -z "$(ls "$G/blobs")" ] || no "401 left blobs: $(ls "$G/blobs")"
[ -e "$G/refs/main" ] && no "401 wrote refs/main"

HF_TOKEN=hf_other "$DSR1" pull acme/gated >/dev/null 2>"$TMPDIR/err"
expect_fail $? "403" "^dsr1: .*: access denied (HTTP 403): accept the model's licence on $E/acme/gated with the account of your token (from HF_TOKEN), then run again$"

mkdir -p "$HF_HOME" && echo hf_good >"$HF_HOME/token"
"$DSR1" pull acme/gated --quiet >/dev/null 2>"$TMPDIR/err" || { no "token file: exit $?"; cat "$TMPDIR/err"; }
[ -s "$G/refs/main" ] || no "gated pull with the token file: no refs/main"
rm "$HF_HOME/token"
echo hf_other >"$TMPDIR/tok"
rm -rf "$G"
HF_TOKEN_PATH=$TMPDIR/tok "$DSR1" pull acme/gated >/dev/null 2>"$TMPDIR/err"
expect_fail $? "HF_TOKEN_PATH" "(from $TMPDIR/tok)"

"$DSR1" pull acme/nothere >/dev/null 2>"$TMPDIR/err"
expect_fail $? "404" "^dsr1: acme/nothere@main: not found (HTTP 404): check the repository name and revision ('main') on $E/acme/nothere$"
[ -e "$HF_HUB_CACHE/models--acme--nothere" ] && no "404 made a cache directory"
"$DSR1" pull acme/tiny@v9 >/dev/null 2>"$TMPDIR/err"
expect_fail $? "revision" "^dsr1: acme/tiny@v9: revision 'v9' not found (HTTP 404); check it on $E/acme/tiny$"

# Free space: the model info claims a 1 PiB shard.
: >"$HUB_LOG"
"$DSR1" pull acme/tiny >/dev/null 2>"$TMPDIR/err"
expect_fail $? "space" "^dsr1: $HF_HUB_CACHE: the download needs 1024.0 TiB, only .* free there; free some space or give --dir on a bigger disk$"
grep -q "writes about 1024.0 TiB more" "$TMPDIR/err" || { no "the conversion's size is not said"; cat "$TMPDIR/err"; }
"$DSR1" pull acme/tiny --convert -o "$TMPDIR/x.dsr1" --type int4 >/dev/null 2>"$TMPDIR/err"
last | grep -q "needs 1024.0 TiB plus the conversion about 532.5 TiB, only" || { no "space with --convert"; cat "$TMPDIR/err"; }
[ "$(requests 'resolve|_lfs')" -eq 0 ] || no "downloaded despite too little space"

# A full disk (file size limit 1 MiB: ulimit -f counts 512-byte blocks).
hub_start
export HF_HUB_CACHE=$TMPDIR/full
R=$HF_HUB_CACHE/models--acme--tiny
(ulimit -f 2048; exec "$DSR1" pull acme/tiny) >/dev/null 2>"$TMPDIR/err"
expect_fail $? "disk full" "^dsr1: $R/blobs/[0-9a-f]\{64\}\.incomplete: write: File too large: [0-9]* of [0-9]* bytes kept; free some space and run the same command again to resume$"
ls "$R/blobs" | grep -q '^[0-9a-f]\{64\}$' && no "a shard blob despite the full disk"
ls "$R"/snapshots/*/ | grep -q '\.safetensors$' && no "a shard linked despite the full disk"
ls "$R"/blobs/*.incomplete >/dev/null 2>&1 || no "no partial kept"
for p in "$R"/blobs/*.incomplete; do
    [ "$(wc -c <"$p")" -le 1048576 ] || no "$p: bigger than the limit"
    n=$(wc -c <"$p")
    # a partial is named by its file's sha256 (LFS shards) or git blob id
    # (small files: the pull stops at the first write error, and a small
    # file in flight then is left partial too)
    src=$(cd "$HUB_ROOT/acme/tiny" && for f in *; do
        [ -f "$f" ] || continue
        s256=$(sha256sum <"$f" | cut -c1-64)
        gid=$({ printf 'blob %d\0' "$(wc -c <"$f")"; cat "$f"; } | sha1sum | cut -c1-40)
        case ${p##*/} in "$s256.incomplete" | "$gid.incomplete") echo "$f" ;; esac
    done)
    [ -n "$src" ] || no "$p: no file of the repository has its name's hash"
    head -c "$n" "$HUB_ROOT/acme/tiny/$src" | cmp -s - "$p" || no "$p: not a prefix of $src"
done
kept=$(cat "$R"/blobs/* | wc -c)
: >"$HUB_LOG"
"$DSR1" pull acme/tiny >/dev/null 2>"$TMPDIR/err" || { no "after the full disk: exit $?"; cat "$TMPDIR/err"; }
total=$(cat "$HUB_ROOT"/acme/tiny/* | wc -c)
[ "$(served '(resolve|_lfs).*status=20[06]')" -eq $((total - kept)) ] ||
    no "after the full disk served $(served '(resolve|_lfs).*status=20[06]'), want $((total - kept))"

# Usage errors.
for args in "" "a/b c/d" "acme/tiny --jobs 0" "acme/tiny --bogus" "acme/tiny -o x.dsr1" \
    "acme/tiny --convert" "acme/tiny --convert -o x --type int3" "acme/tiny --include"; do
    "$DSR1" pull $args >/dev/null 2>&1
    [ $? -eq 2 ] || no "dsr1 pull $args: want exit 2"
done
exit $fail
