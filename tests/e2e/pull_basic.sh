#!/bin/sh
# pull_basic.sh - `dsr1 pull` against the fake Hub (tests/hub_server.py):
# a 4-shard tiny checkpoint arrives in the Hugging Face cache layout
# (blobs named by sha256 / git blob id, relative snapshot links, refs/main),
# byte-identical to the source; LFS files come through the redirect to the
# other host name, which never sees the token; stdout is the snapshot path
# alone. A second pull fetches nothing. A blob placed by another tool is
# not fetched again. --include selects files. http_proxy is honoured. The
# repo id then works where a path does (info, convert, tokenize, -m).
set -u
. tests/e2e/lib/hub.sh
fail=0
no() { echo "FAIL: $*"; fail=1; }
hub_repo acme/tiny --shard-mb 3 --tokenizer "$FIXTURES/tokenizer"
SRC=$HUB_ROOT/acme/tiny
mkdir -p "$SRC/extra/deep" # a nested path, and the same content twice (one blob, two links)
cp "$SRC/config.json" "$SRC/extra/deep/config.json"
hub_start
export HF_TOKEN=hf_secret_for_the_api_only

"$DSR1" pull acme/tiny --jobs 4 >"$TMPDIR/out" 2>"$TMPDIR/err" || { no "pull exit $?"; cat "$TMPDIR/err"; exit 1; }
R=$HF_HUB_CACHE/models--acme--tiny
COMMIT=$(cat "$R/refs/main")
echo "$COMMIT" | grep -qE '^[0-9a-f]{40}$' || no "refs/main holds '$COMMIT'"
[ "$(cat "$TMPDIR/out")" = "$R/snapshots/$COMMIT" ] || no "stdout: '$(cat "$TMPDIR/out")'"
N=$(cd "$SRC" && find . -type f | wc -l)
grep -q "$N files verified ($((N - 1)) fetched, 0 already cached, 1 the same as another)" "$TMPDIR/err" || { no "summary"; cat "$TMPDIR/err"; }
grep -q "converting it (dsr1 convert) (the checkpoint's types) writes about" "$TMPDIR/err" ||
    no "no mention of the conversion's size"
n=0
for f in $(cd "$SRC" && find . -type f | sed 's|^\./||'); do
    n=$((n + 1))
    link=$R/snapshots/$COMMIT/$f
    [ -L "$link" ] || { no "$f: not a symlink"; continue; }
    blob=$(readlink "$link")
    case $f in
    */*/*) want=../../../../blobs/ ;;
    *) want=../../blobs/ ;;
    esac
    case $blob in $want*) ;; *) no "$f: link is not relative to blobs/ ($want): $blob" ;; esac
    cmp -s "$link" "$SRC/$f" || no "$f: content differs"
    name=${blob##*/}
    case $f in
    *.safetensors)
        [ "$(sha256sum <"$SRC/$f" | cut -c1-64)" = "$name" ] || no "$f: blob not named by sha256" ;;
    *)
        want=$(python3 -c 'import hashlib,sys; d=open(sys.argv[1],"rb").read(); print(hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest())' "$SRC/$f")
        [ "$want" = "$name" ] || no "$f: blob not named by its git blob id" ;;
    esac
done
[ $n -ge 9 ] || no "expected 4 shards and 5 other files in the source, got $n"
[ "$(requests 'resolve/[0-9a-f]*/(extra/deep/)?config.json ')" -eq 1 ] || no "one blob for two identical files should be fetched once"
ls "$R/blobs" | grep -q incomplete && no "a .incomplete was left"
# LFS through the other host, without the token; the API and resolve with it.
[ "$(requests '^localhost:.* /_lfs/.*status=200')" -eq "$(ls "$SRC" | grep -c '\.safetensors$')" ] || { no "each shard downloaded once via localhost"; cat "$HUB_LOG"; }
grep -q '^localhost:.*auth=yes' "$HUB_LOG" && no "the token went to the LFS host"
grep -q '^127.0.0.1:.*/api/models/acme/tiny/revision/main.*auth=yes' "$HUB_LOG" || no "no token on the API call"

# Not a terminal: no redrawn lines. A terminal (script(1)): the progress
# line is redrawn in place with the files count.
grep -q "$(printf '\r')" "$TMPDIR/err" && no "carriage returns in non-terminal output"
if command -v script >/dev/null 2>&1; then
    HF_HUB_CACHE=$TMPDIR/tty script -qc "\"$DSR1\" pull acme/tiny" "$TMPDIR/tty.out" >/dev/null 2>&1 ||
        no "pull on a terminal failed"
    grep -q "$(printf '\r\033')\[Kpulling \[.*\] .*%.* MB/s  ETA .*s  files [0-9]*/$N" "$TMPDIR/tty.out" ||
        { no "no redrawn progress line on a terminal"; cat -A "$TMPDIR/tty.out" | head -20; }
fi

# Again: nothing is downloaded.
: >"$HUB_LOG"
"$DSR1" pull acme/tiny >"$TMPDIR/out2" 2>"$TMPDIR/err" || no "second pull exit $?"
[ "$(requests 'resolve|_lfs')" -eq 0 ] || { no "second pull downloaded:"; cat "$HUB_LOG"; }
grep -q "$N files verified (0 fetched, $N already cached)" "$TMPDIR/err" || { no "second pull summary"; cat "$TMPDIR/err"; }
cmp -s "$TMPDIR/out" "$TMPDIR/out2" || no "second stdout differs"

# A cache filled by another tool (blob + ref, no links): only links are made.
export HF_HUB_CACHE=$TMPDIR/other
B=$HF_HUB_CACHE/models--acme--tiny/blobs
mkdir -p "$B"
cp "$R/blobs/$(readlink "$R/snapshots/$COMMIT/config.json" | sed 's|.*/||')" "$B/" 
: >"$HUB_LOG"
"$DSR1" pull acme/tiny --include '*.json' --quiet >/dev/null 2>"$TMPDIR/err" || { no "--include pull"; cat "$TMPDIR/err"; }
[ -s "$TMPDIR/err" ] && { no "--quiet printed:"; cat "$TMPDIR/err"; }
grep -q 'resolve/.*/config.json' "$HUB_LOG" && no "config.json fetched although its blob was there"
[ "$(requests 'resolve/.*\.json')" -eq 3 ] || { no "expected 3 json fetched"; cat "$HUB_LOG"; }
[ "$(find "$HF_HUB_CACHE/models--acme--tiny/snapshots/$COMMIT" -type l | wc -l)" -eq 5 ] || no "--include: want 5 json links"
ls "$HF_HUB_CACHE/models--acme--tiny/snapshots/$COMMIT" | grep -q '\.safetensors$' && no "--include fetched shards"
export HF_HUB_CACHE=$HF_HOME/hub

# Through a proxy: HF_ENDPOINT names a host that only the proxy knows (the
# fake Hub serves proxy requests too: an absolute URI in the request line).
: >"$HUB_LOG"
HF_HUB_CACHE=$TMPDIR/proxied HF_ENDPOINT=http://hub.invalid http_proxy=http://127.0.0.1:$HUB_PORT \
    "$DSR1" pull acme/tiny --include config.json --quiet >/dev/null 2>"$TMPDIR/err" ||
    { no "pull through http_proxy: exit $?"; cat "$TMPDIR/err"; }
grep -q '^hub.invalid GET http://hub.invalid/api/models/acme/tiny/revision/main' "$HUB_LOG" &&
grep -q '^hub.invalid GET http://hub.invalid/acme/tiny/resolve/.*/config.json .*status=200' "$HUB_LOG" ||
    { no "requests did not go through the proxy:"; cat "$HUB_LOG"; }
cmp -s "$TMPDIR/proxied/models--acme--tiny/snapshots/$COMMIT/config.json" "$SRC/config.json" ||
    no "config.json through the proxy differs"

# The repo id where a path goes.
"$DSR1" info acme/tiny >"$TMPDIR/info" 2>&1 || no "info acme/tiny"
grep -q "4 layers + 1 MTP" "$TMPDIR/info" || { no "info"; cat "$TMPDIR/info"; }
[ "$("$DSR1" tokenize -m acme/tiny "Hello world")" = "$("$DSR1" tokenize -m "$SRC" "Hello world")" ] ||
    no "tokenize -m acme/tiny"
"$DSR1" convert acme/tiny@main -o "$TMPDIR/a.dsr1" --quiet 2>"$TMPDIR/err" || { no "convert acme/tiny@main"; cat "$TMPDIR/err"; }
"$DSR1" convert "$SRC" -o "$TMPDIR/b.dsr1" --quiet || no "convert the source"
"$DSR1" logits -m acme/tiny --ids 5 -o "$TMPDIR/l.f32" 2>"$TMPDIR/err" && no "-m on a checkpoint should fail"
grep -q "a checkpoint directory, not a .dsr1 file" "$TMPDIR/err" || { no "-m message"; cat "$TMPDIR/err"; }
"$DSR1" logits -m "$TMPDIR/a.dsr1" --ids 5,17 -o "$TMPDIR/a.f32" --threads 1 2>/dev/null &&
"$DSR1" logits -m "$TMPDIR/b.dsr1" --ids 5,17 -o "$TMPDIR/b.f32" --threads 1 2>/dev/null &&
cmp -s "$TMPDIR/a.f32" "$TMPDIR/b.f32" || no "model from the pulled repo gives other logits than from the source"
"$DSR1" info acme/missing >/dev/null 2>"$TMPDIR/err"
[ $? -eq 1 ] && grep -q "not in the Hugging Face cache .*dsr1 pull acme/missing" "$TMPDIR/err" ||
    { no "missing repo id message"; cat "$TMPDIR/err"; }
"$DSR1" info acme/missing.dsr1 >/dev/null 2>"$TMPDIR/err" # a file's name: no pull suggested
grep -q "dsr1 pull" "$TMPDIR/err" && { no "a missing .dsr1 path got a pull suggestion"; cat "$TMPDIR/err"; }
"$DSR1" pull not-a-repo >/dev/null 2>&1
[ $? -eq 2 ] || no "pull of a non-repo-id should be a usage error"
exit $fail
