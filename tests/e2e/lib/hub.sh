# hub.sh - sourced by the pull_*.sh e2e scripts (not a test itself): a fake
# Hugging Face Hub on the loopback (tests/hub_server.py) and a private cache.
#   hub_repo ORG/NAME [gen_ckpt args]  generate a tiny checkpoint as that repo
#   hub_start [server fault flags]     start the server; sets HF_ENDPOINT
#   hub_stop                           stop it (also done on exit)
#   served PATTERN                     body bytes served for log lines matching
#   requests PATTERN                   number of such requests
# The environment is cleaned of tokens and proxies, so nothing leaves the
# machine and no token of the user's is used.
command -v python3 >/dev/null 2>&1 || { echo "python3 not found (needed for the fake Hub)"; exit 77; }
unset HF_TOKEN HF_TOKEN_PATH HUGGING_FACE_HUB_TOKEN HF_HUB_CACHE HUGGINGFACE_HUB_CACHE \
    http_proxy https_proxy HTTP_PROXY HTTPS_PROXY ALL_PROXY all_proxy
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost
export HF_HOME=$TMPDIR/hfhome
export HF_HUB_CACHE=$HF_HOME/hub
HUB_ROOT=$TMPDIR/hubroot
HUB_LOG=$TMPDIR/hub.log
HUB_PID=

hub_repo() {
    name=$1
    shift
    mkdir -p "$HUB_ROOT/${name%/*}"
    "$BUILD/gen_ckpt" --preset tiny --out "$HUB_ROOT/$name" "$@" >/dev/null 2>&1 ||
        { echo "gen_ckpt failed"; exit 1; }
}

hub_stop() {
    [ -n "$HUB_PID" ] && kill "$HUB_PID" 2>/dev/null && wait "$HUB_PID" 2>/dev/null
    HUB_PID=
}
trap hub_stop EXIT

hub_start() {
    hub_stop
    rm -f "$TMPDIR/hub.port"
    python3 tests/hub_server.py --root "$HUB_ROOT" --port-file "$TMPDIR/hub.port" \
        --log "$HUB_LOG" --timeout 300 "$@" 2>"$TMPDIR/hub.err" &
    HUB_PID=$!
    i=0
    while [ ! -s "$TMPDIR/hub.port" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    [ -s "$TMPDIR/hub.port" ] || { echo "the fake Hub did not start:"; cat "$TMPDIR/hub.err"; exit 1; }
    HUB_PORT=$(cat "$TMPDIR/hub.port")
    export HF_ENDPOINT=http://127.0.0.1:$HUB_PORT
}

served() { grep -E "$1" "$HUB_LOG" | sed 's/.* bytes=\([0-9]*\).*/\1/' | awk '{s+=$1} END {print s+0}'; }
requests() { grep -cE "$1" "$HUB_LOG"; }
