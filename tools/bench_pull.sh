#!/bin/sh
# bench_pull.sh - throughput of `dsr1 pull` over the loopback against the
# fake Hub (tests/hub_server.py), next to `cat` of the same files: reading
# them (cat >/dev/null, the ceiling for the server's side) and copying them
# durably (cat > copy + sync, the same disk writes and flush as a pull).
# Runs are interleaved so a noisy machine affects each alike.
#   sh tools/bench_pull.sh [FILES [MIB_EACH [ROUNDS [JOBS]]]]   (default 8 256 3 4)
# Needs ./dsr1 and python3; uses $TMPDIR (default /tmp), about 3x the data.
# DEST=DIR puts the pulled cache and the copies there instead (e.g. a tmpfs,
# /dev/shm, to take the disk out of the comparison).
set -eu
N=${1:-8} MB=${2:-256} ROUNDS=${3:-3} JOBS=${4:-4}
W=$(mktemp -d "${TMPDIR:-/tmp}/bench_pull.XXXXXX")
D=${DEST:-$W}/bench_pull_out.$$
trap 'kill $SRV 2>/dev/null; rm -rf "$W" "$D"' EXIT
mkdir -p "$W/root/bench/blob"
i=1
while [ $i -le "$N" ]; do # incompressible bytes, named like shards (LFS)
    head -c $((MB << 20)) /dev/urandom >"$W/root/bench/blob/part-$i.safetensors"
    i=$((i + 1))
done
python3 tests/hub_server.py --root "$W/root" --port-file "$W/port" --log /dev/null --timeout 3600 &
SRV=$!
while [ ! -s "$W/port" ]; do sleep 0.1; done
export HF_ENDPOINT=http://127.0.0.1:$(cat "$W/port") no_proxy=127.0.0.1,localhost
unset HF_TOKEN http_proxy https_proxy
BYTES=$((N * MB << 20))
cat "$W"/root/bench/blob/* >/dev/null # warm the page cache for every contender
now() { date +%s.%N; }
rate() { echo "$1 $2" | awk -v b=$BYTES '{printf "%.0f", b / 1e6 / ($2 - $1)}'; }
echo "$N files x $MB MiB, $ROUNDS rounds, pull --jobs $JOBS; MB/s (1 MB = 1e6 bytes)"
r=1
while [ $r -le "$ROUNDS" ]; do
    rm -rf "$D" && mkdir -p "$D/copy" && sync
    t0=$(now); HF_HUB_CACHE=$D/cache ./dsr1 pull bench/blob --jobs "$JOBS" --quiet >/dev/null; t1=$(now)
    t2=$(now); cat "$W"/root/bench/blob/* >/dev/null; t3=$(now)
    t4=$(now); for f in "$W"/root/bench/blob/*; do cat "$f" >"$D/copy/${f##*/}"; done; sync; t5=$(now)
    echo "round $r: pull $(rate $t0 $t1)  cat>/dev/null $(rate $t2 $t3)  cat>copy+sync $(rate $t4 $t5)"
    r=$((r + 1))
done
