# peer_rounds.awk - bench-peer's per-round ratios (tools/bench_peer.sh).
#
#   awk -v t=TYPE -v p=PEER -v pt=PEER_TYPE -v k=COL -f peer_rounds.awk runs.txt
#
# runs.txt lines: "engine type prefill decode round". dsr1's value in
# column k (3 prefill, 4 decode) of type t is divided by peer p's of type
# pt in the same round; prints "median ahead/rounds", or "-" when no
# round has both. Rounds where either side is missing or not a positive
# number are left out (a failed run leaves no line); lines without a
# round (runs.txt before the field existed) pair with nothing. A round
# given twice keeps its last line.
function num(v) { return v ~ /^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ && v + 0 > 0 }
$1 == "dsr1" && $2 == t && NF >= 5 && num($k) { d[$5] = $k + 0 }
$1 == p && $2 == pt && NF >= 5 && num($k) { q[$5] = $k + 0 }
END {
    n = 0; w = 0
    for (r in d) if (r in q) { v[++n] = d[r] / q[r]; w += d[r] > q[r] }
    if (!n) { print "-"; exit }
    for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j] < v[j - 1]; j--) { x = v[j]; v[j] = v[j - 1]; v[j - 1] = x }
    printf "%.2f %d/%d\n", n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2, w, n
}
