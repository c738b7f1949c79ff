# peer_states.awk - bench-peer's ratios within the machine's memory states
# (tools/bench_peer.sh).
#
#   awk -v t=TYPE -v p=PEER -v pt=PEER_TYPE -v k=COL [-v what=threshold] \
#       -f peer_states.awk runs.txt
#
# runs.txt lines: "engine type prefill decode round bw_before bw_after",
# the last two a `dsr1 bench membw` probe (GB/s) taken right before and
# right after the run. Why: the virtual machines this was written on run
# their memory in spells, a slow one and a fast one (~35 and ~60 GB/s on
# the Zen 4), switching by the minute, and decode follows the spell: one
# engine's runs then fall in two clusters up to 1.5x apart. Whichever
# engine drew more slow-spell runs lost the medians, and a round's three
# runs (a minute or more each) do not always share a spell either. So
# each run is labelled by the probes around it and dsr1 is compared with
# the peer within a spell.
#
# The spells are found from the probes themselves: all probe values of
# the file, sorted, cut in two where the two sides are tightest (the
# least summed distance of the logs from each side's median, each side
# at least a tenth of the values: one-dimensional 2-medians, which a
# lone dip cannot pull the way it pulls means). That is the split when
# the two sides' medians are 1.25x apart or more; otherwise the machine
# held one state ("one"). Not the widest gap between neighbours: probes
# caught while the spell changed fill the gap with values in between
# (the 19:12 BF16 run: 33-61 GB/s with no step of 1.25x). A run both of
# whose probes fall on one side has that state; a run whose probes
# straddle the split (the spell changed during it) and runs without
# probes (the old five-field lines) are left out.
#
# Prints, per state dsr1 and the peer both have runs in, "STATE RATIO
# (N/M)": the ratio of dsr1's median in column k (3 prefill, 4 decode) of
# type t to peer p's of type pt, over N and M runs; states without both
# sides are left out, "-" when none is left. With what=threshold it
# prints the split in GB/s instead ("-" for one state).
function num(v) { return v ~ /^[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$/ && v + 0 > 0 }
function median(a, n,    i, j, x) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j] < a[j - 1]; j--) { x = a[j]; a[j] = a[j - 1]; a[j - 1] = x }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
NF >= 7 && num($6) && num($7) {
    bw[++nb] = $6 + 0; bw[++nb] = $7 + 0
    if ($1 == "dsr1" && $2 == t && num($k)) { dv[++nd] = $k + 0; db0[nd] = $6 + 0; db1[nd] = $7 + 0 }
    if ($1 == p && $2 == pt && num($k)) { pv[++np] = $k + 0; pb0[np] = $6 + 0; pb1[np] = $7 + 0 }
}
END {
    split_at = 0
    if (nb >= 2) {
        median(bw, nb) # sorts bw
        for (i = 1; i <= nb; i++) L[i] = log(bw[i])
        lo = int((nb + 9) / 10) # a tenth of the values, rounded up
        best = -1
        for (i = lo; i <= nb - lo; i++) { # i values below the cut, nb - i above
            c = cost(1, i) + cost(i + 1, nb)
            if (best < 0 || c < best) { best = c; cut = i }
        }
        if (best >= 0 && exp(mid(cut + 1, nb) - mid(1, cut)) >= 1.25) split_at = sqrt(bw[cut] * bw[cut + 1])
    }
    if (what == "threshold") { if (split_at) printf "%.1f\n", split_at; else print "-"; exit }
    ns = split_at ? 2 : 1
    name[1] = split_at ? "slow" : "one"; name[2] = "fast"
    out = ""
    for (s = 1; s <= ns; s++) {
        n1 = n2 = 0
        delete a1; delete a2
        for (i = 1; i <= nd; i++) if (state(db0[i], db1[i]) == s) a1[++n1] = dv[i]
        for (i = 1; i <= np; i++) if (state(pb0[i], pb1[i]) == s) a2[++n2] = pv[i]
        if (n1 && n2) out = out (out == "" ? "" : " ") sprintf("%s %.2f (%d/%d)", name[s], median(a1, n1) / median(a2, n2), n1, n2)
    }
    print out == "" ? "-" : out
}
# The median of the sorted logs L[i..j], and their summed distance from it.
function mid(i, j,    n) { n = j - i + 1; return n % 2 ? L[i + (n - 1) / 2] : (L[i + n / 2 - 1] + L[i + n / 2]) / 2 }
function cost(i, j,    m, c, x) { m = mid(i, j); for (x = i; x <= j; x++) c += L[x] > m ? L[x] - m : m - L[x]; return c }
# 1 slow (or the one state), 2 fast, 0 straddling the split
function state(b0, b1) {
    if (!split_at) return 1
    if (b0 < split_at && b1 < split_at) return 1
    if (b0 > split_at && b1 > split_at) return 2
    return 0
}
