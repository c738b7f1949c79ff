#!/bin/sh
# bench_peer_rounds.sh - tools/peer_rounds.awk, the per-round table of
# `make bench-peer`: dsr1's run paired with the peer's run of the same
# round, the median of those ratios and the rounds dsr1 was ahead in;
# rounds a side is missing from (a failed run), values that are not
# positive numbers, lines of the old runs.txt without a round, and other
# engines and types left out; "-" when nothing pairs; a missing file is an
# error, not an empty table.
set -u
AWK_PROG=$(dirname "$0")/../../tools/peer_rounds.awk
fail=0
R=$TMPDIR/runs.txt
check() { # want t p pt k
    got=$(awk -v t="$2" -v p="$3" -v pt="$4" -v k="$5" -f "$AWK_PROG" "$R")
    [ "$got" = "$1" ] || { echo "FAIL: $2 vs $3 col $5: got '$got', want '$1'"; cat "$R"; fail=1; }
}
# three rounds: prefill ratios 2, 1.5, 0.5 (median 1.5, ahead in 2);
# decode 1.1, 0.9, 1.2 (median 1.1)
cat >"$R" <<'T'
dsr1 int8 200 11 1
llama int8 100 10 1
ik int8 100 20 1
dsr1 int8 150 9 2
llama int8 100 10 2
dsr1 int8 50 12 3
llama int8 100 10 3
T
check "1.50 2/3" int8 llama int8 3
check "1.10 2/3" int8 llama int8 4
# ik ran in round 1 only: one pair
check "2.00 1/1" int8 ik int8 3
check "0.55 0/1" int8 ik int8 4
# another type, another peer: nothing pairs
check "-" int4 llama int4 3
check "-" int8 nobody int8 3
# the fp8-bf16 row against the peer's fp8 runs
cat >"$R" <<'T'
dsr1 fp8 120 10 1
dsr1 fp8-bf16 90 10 1
ik fp8 100 10 1
T
check "0.90 0/1" fp8-bf16 ik fp8 3
# an even count: the mean of the middle two (1 and 2 -> 1.5); a round
# given twice keeps its last line (round 2: 300/100, not 100/100)
cat >"$R" <<'T'
dsr1 int4 100 1 1
ik int4 100 1 1
dsr1 int4 100 1 2
dsr1 int4 300 1 2
ik int4 100 1 2
T
check "2.00 1/2" int4 ik int4 3
cat >"$R" <<'T'
dsr1 int4 100 1 1
ik int4 100 1 1
dsr1 int4 200 1 2
ik int4 100 1 2
T
check "1.50 1/2" int4 ik int4 3
# hostile lines: a zero, a negative, text, NaN, an empty field, the old
# four-field format, a truncated line - all left out, one good round kept
cat >"$R" <<'T'
dsr1 int8 100 5 1
llama int8 0 5 1
dsr1 int8 100 5 2
llama int8 -50 5 2
dsr1 int8 abc 5 3
llama int8 100 5 3
dsr1 int8 nan 5 4
llama int8 100 5 4
dsr1 int8 100 5
llama int8 100 5
dsr1 int8
llama
dsr1 int8 130 5 7
llama int8 100 5 7
T
check "1.30 1/1" int8 llama int8 3
# nothing at all
: >"$R"
check "-" int8 llama int8 3
# a missing runs file: awk fails (bench-peer stops under set -e), no table
if awk -v t=int8 -v p=llama -v pt=int8 -v k=3 -f "$AWK_PROG" "$TMPDIR/absent" >/dev/null 2>&1; then
    echo "FAIL: a missing runs file gave a table"; fail=1
fi
exit $fail
