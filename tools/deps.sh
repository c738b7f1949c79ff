#!/bin/sh
# deps.sh - make sure the Debian packages dsr1 builds against are installed.
# As root it installs what is missing with apt-get; otherwise it prints the
# exact command to run and fails. Called by `make` before building.
PKGS="build-essential pkg-config libcjson-dev libzstd-dev libcurl4-openssl-dev libssl-dev libdnnl-dev libnuma-dev libedit-dev zstd tmux python3-jinja2 python3-numpy cmake" # numpy: the GGUF writer test; cmake: make bench-peer
# `deps.sh fuzz` (run by `make fuzz`): clang and its libFuzzer runtime, on
# top of the above. `make test` never needs them (it replays the corpora
# with the normal compiler).
[ "${1:-}" = fuzz ] && PKGS="$PKGS clang libclang-rt-dev"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "dsr1: missing Debian packages:$missing" >&2
    echo "dsr1: run: sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "dsr1: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if apt-get update -qq >"$log" 2>&1 && apt-get install -y -qq $missing >>"$log" 2>&1; then
    rm -f "$log"
else
    cat "$log" >&2
    rm -f "$log"
    echo "dsr1: apt-get install failed for:$missing" >&2
    exit 1
fi
