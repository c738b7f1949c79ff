#!/bin/sh
# bench_peer_states.sh - tools/peer_states.awk, bench-peer's comparison
# within the machine's memory spells: the split found in the probes (the
# tightest cut into two sides of a tenth of the values or more, whose
# medians are 1.25x apart or more),
# runs labelled by the probes before and after them, a run across the
# split and lines without probes left out, medians compared per spell,
# one state when the probes show no gap, "-" when nothing pairs.
set -u
AWK_PROG=$(dirname "$0")/../../tools/peer_states.awk
fail=0
R=$TMPDIR/runs.txt
check() { # want t p pt k [what]
    got=$(awk -v t="$2" -v p="$3" -v pt="$4" -v k="$5" -v what="${6:-}" -f "$AWK_PROG" "$R")
    [ "$got" = "$1" ] || { echo "FAIL: $2 vs $3 col $5 ${6:-}: got '$got', want '$1'"; cat "$R"; fail=1; }
}
# two spells (35 and 60 GB/s): dsr1 decodes 12 / 17, the peer 11 / 15;
# the peer's round-3 run crosses the split, the five-field line has no
# probes, and by the plain medians the peer (more fast runs) would win
cat >"$R" <<'T'
dsr1 int8 250 12 1 35 36
ik int8 137 15 1 59 60
dsr1 int8 249 12 2 36 35
ik int8 136 15 2 60 58
dsr1 int8 251 17 3 60 61
ik int8 137 9 3 36 58
ik int8 138 11 4 35 34
dsr1 int8 100 99 5
T
check "45.7" int8 ik int8 4 threshold
check "slow 1.09 (2/1) fast 1.13 (1/2)" int8 ik int8 4
check "slow 1.81 (2/1) fast 1.84 (1/2)" int8 ik int8 3
# another type or peer: nothing pairs
check "-" int4 ik int4 4
check "-" int8 llama int8 4
# one spell (probes within 1.25x of each other): one comparison of all runs
cat >"$R" <<'T'
dsr1 bf16 140 8 1 50 52
ik bf16 120 7 1 55 54
dsr1 bf16 142 6 2 56 57
ik bf16 118 8 2 51 50
T
check "-" bf16 ik bf16 4 threshold
check "one 0.93 (2/2)" bf16 ik bf16 4
# a lone dip (one probe of 12 at 9 GB/s) is not a spell: fewer than a
# tenth of the values below it, so the split stays at the real gap
cat >"$R" <<'T'
dsr1 int4 230 24 1 60 9
ik int4 133 18 1 61 60
dsr1 int4 231 17 2 35 36
ik int4 134 15 2 35 34
dsr1 int4 232 23 3 58 59
ik int4 135 18 3 59 60
T
check "45.7" int4 ik int4 4 threshold
check "slow 1.13 (1/1) fast 1.28 (1/2)" int4 ik int4 4
# probes caught while the spell changed fill the gap (no step of 1.25x
# between neighbours: 36, 41, 47, 53): the split is still found, between
# the sides' medians (35.5 and 57.5 GB/s), and a run across it left out
cat >"$R" <<'T'
dsr1 int8 250 12 1 34 35
ik int8 137 11 1 35 36
dsr1 int8 251 17 2 57 58
ik int8 136 15 2 60 58
dsr1 int8 249 14 3 41 47
ik int8 138 13 3 47 53
T
check "43.9" int8 ik int8 4 threshold
check "slow 1.09 (1/1) fast 1.21 (1/2)" int8 ik int8 4
# hostile values: text, zero, negative probes or speeds are left out
cat >"$R" <<'T'
dsr1 int8 100 10 1 abc 30
dsr1 int8 100 10 2 0 30
dsr1 int8 100 -5 3 30 30
dsr1 int8 100 12 4 30 31
ik int8 100 10 4 30 30
T
check "one 1.20 (1/1)" int8 ik int8 4
: >"$R"
check "-" int8 ik int8 4
check "-" int8 ik int8 4 threshold
if awk -v t=int8 -v p=ik -v pt=int8 -v k=4 -f "$AWK_PROG" "$TMPDIR/absent" >/dev/null 2>&1; then
    echo "FAIL: a missing runs file gave a table"; fail=1
fi
exit $fail
