#!/bin/sh
# bench_cli.sh - `dsr1 bench kernels --quick`, `bench membw`, `info --hw`:
# the tables have every row with positive numbers, the JSON is one object
# naming the chosen backend, and bad options are usage errors (exit 2).
set -u
fail=0
"$DSR1" bench kernels --quick >"$TMPDIR/k" 2>"$TMPDIR/e" || { echo "FAIL: bench kernels exit"; cat "$TMPDIR/e"; fail=1; }
# 4 weight types x (f32 n=1, fast n=1, fast n=4, fast n=16) and FP8's fast
# mode at n=16 (as W8A8; with AMX its GEMV on the tiles): 17 rows of our
# kernels, each with a positive time, GB/s and GFLOP/s; with AMX four
# more, the GEMVs on the tiles ("bf16t": FP8 at n=1, 4 and 16, BF16 at
# n=4 and 16, the FP8 n=16 row in W8A8's place); where oneDNN has bf16
# kernels, also one "onednn" row per type at n=16 (matmul_dnnl.c).
if grep -q -- '-amx' "$TMPDIR/k"; then want=21; else want=17; fi
rows=$(awk '$1 ~ /^(fp8|int8|int4|bf16)$/ && $2 != "onednn" && $4 > 0 && $5 > 0 && $6 > 0' "$TMPDIR/k" | wc -l)
[ "$rows" -eq $want ] || { echo "FAIL: expected $want kernel rows, got $rows:"; cat "$TMPDIR/k"; fail=1; }
if [ $want -eq 21 ]; then
    awk '$2 == "bf16t" && (($1 == "fp8" && $3 == 1) || (($1 == "fp8" || $1 == "bf16") && ($3 == 4 || $3 == 16))) { f++ }
         END { exit f != 5 }' "$TMPDIR/k" || { echo "FAIL: not the five rows on the tiles"; fail=1; }
else
    awk '$1 == "fp8" && $2 == "w8a8" && $3 == 16 { f = 1 } END { exit !f }' "$TMPDIR/k" ||
        { echo "FAIL: no FP8 W8A8 row"; fail=1; }
fi
dn=$(awk '$2 == "onednn" && $4 > 0 && $5 > 0 && $6 > 0' "$TMPDIR/k" | wc -l)
[ "$dn" -eq 0 ] || [ "$dn" -eq 4 ] || { echo "FAIL: expected 0 or 4 onednn rows, got $dn"; fail=1; }
grep -q '^int8  int8 ' "$TMPDIR/k" || { echo "FAIL: no W8A8 row"; fail=1; }
grep -q '^int4  int8 ' "$TMPDIR/k" || { echo "FAIL: no W4A8 row"; fail=1; }

"$DSR1" bench membw --size 64 >"$TMPDIR/m" || { echo "FAIL: bench membw exit"; fail=1; }
grep -Eq '^membw: [0-9]+\.[0-9] GB/s' "$TMPDIR/m" || { echo "FAIL: membw line:"; cat "$TMPDIR/m"; fail=1; }
# The probe's table at --threads 2: every (threads 1..2) x split x prefetch
# x pages row, all positive, and the bound line is the best pass of them.
"$DSR1" bench membw --size 64 --threads 2 --reps 3 >"$TMPDIR/m2" || { echo "FAIL: membw --threads 2"; fail=1; }
if grep -q avx512 "$TMPDIR/k"; then want=36; else want=12; fi
awk -v want=$want '
    $1 ~ /^[12]$/ && ($2 == "blocks" || $2 == "stripes" || $2 == "rows") && ($4 == "4K" || $4 == "2M") && $5 > 0 && $6 >= $5 {
        rows++; seen[$1 " " $2 " " $3 " " $4]++; if ($6 > best) best = $6 }
    /^membw: [0-9.]+ GB\/s streaming read/ { bound = $2 }
    END { ok = rows == want && length(seen) == want && bound + 0 > 0 && bound + 0.05 >= best && bound - 0.05 <= best
          if (!ok) print "FAIL: membw probe: " rows " rows (want " want "), bound " bound ", best " best
          exit !ok }' "$TMPDIR/m2" || { cat "$TMPDIR/m2"; fail=1; }

"$DSR1" info --hw >"$TMPDIR/h" || { echo "FAIL: info --hw exit"; fail=1; }
for p in "cpu:" "kernels:" "cores:" "numa:" "memory:" "backend:    cpu"; do
    grep -qF "$p" "$TMPDIR/h" || { echo "FAIL: '$p' not in info --hw"; cat "$TMPDIR/h"; fail=1; }
done
"$DSR1" info --hw --json >"$TMPDIR/j" || { echo "FAIL: info --hw --json exit"; fail=1; }
[ "$(wc -l <"$TMPDIR/j")" -eq 1 ] && grep -q '"backend":"cpu"' "$TMPDIR/j" &&
    grep -q '"physical_cores":' "$TMPDIR/j" || { echo "FAIL: info --hw --json:"; cat "$TMPDIR/j"; fail=1; }

"$DSR1" bench kernels --bogus >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: unknown option exit $rc, expected 2"; fail=1; }
"$DSR1" bench kernels --shape 10x100 >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: bad --shape exit $rc, expected 2"; fail=1; }
"$DSR1" bench membw --size 1 >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: --size 1 exit $rc, expected 2"; fail=1; }
exit $fail
