#!/bin/sh
# bench_peer_order.sh - tools/bench_peer.sh end to end with stand-in
# engines: a fake dsr1 and two fake llama-bench builds that log each run
# and print fixed speeds. Checks the order of the runs (one untimed dsr1
# pass, then each round starting with the next engine: dsr1 llama ik,
# llama ik dsr1, ik dsr1 llama, dsr1 llama ik), that every run lands in
# runs.txt with its round (a peer's failed run left out, reported, and
# the rounds going on), and the table's medians and ratios. The steps
# that build peers, generate the checkpoint and convert it are skipped
# because their outputs exist (what the script promises for reruns).
set -u
fail=0
HERE=$(pwd)
W=$TMPDIR/w
LOG=$TMPDIR/order.log
export LOG
mkdir -p "$W/build-llama/bin" "$W/build-ik/bin" "$TMPDIR/ckpt" "$TMPDIR/src"
echo '{}' >"$TMPDIR/ckpt/config.json"
: >"$W/r1-int8.dsr1"
: >"$W/r1-q8_0.gguf"
: >"$LOG"

# dsr1: `bench` rows as cli/bench_model.c prints them (prompt batch gen
# ttft prefill tpot decode ...): prefill 200 tok/s, decode 20.
# `bench membw` is the probe around each run: its first 12 calls read 30
# GB/s (a slow spell), the rest 60, so the run whose probes are calls 12
# and 13 (ik_llama.cpp's, round 3) crosses the spells.
cat >"$TMPDIR/dsr1" <<'EOF'
#!/bin/sh
case $1 in
bench)
    if [ "$2" = membw ]; then
        n=$(($(cat "$LOG.bw" 2>/dev/null || echo 0) + 1))
        echo $n >"$LOG.bw"
        echo "membw: $([ $n -le 12 ] && echo 30.0 || echo 60.0) GB/s streaming read (stand-in)"
        exit 0
    fi
    echo dsr1 >>"$LOG"
    echo " prompt batch   gen    ttft_ms  prefill_t/s   tpot_ms  decode_t/s"
    echo "    512     1    32      100.0       200.00     50.00       20.00"
    echo "      1     1    32        5.0         1.00     50.00       20.00" ;;
info) echo "cpu: Stand-in CPU" ;;
--version) echo "dsr1 stand-in" ;;
esac
EOF
# llama-bench -o csv: a prefill row and a decode row; ik's second run
# fails (no output, exit 1), as a crashed or killed peer would
for e in llama:100:10 ik:150:16; do
    name=${e%%:*} rest=${e#*:}
    cat >"$W/build-$name/bin/llama-bench" <<EOF
#!/bin/sh
echo $name >>"\$LOG"
[ $name = ik ] && [ \$(grep -c '^ik\$' "\$LOG") = 2 ] && exit 1
echo "n_prompt,n_gen,avg_ts"
echo "512,0,${rest%%:*}"
echo "0,32,${rest#*:}"
EOF
    printf '#!/bin/sh\nexit 1\n' >"$W/build-$name/bin/llama-quantize"
done
chmod +x "$TMPDIR/dsr1" "$W"/build-*/bin/*

out=$(DSR1="$TMPDIR/dsr1" W="$W" CKPT="$TMPDIR/ckpt" LLAMA_SRC="$TMPDIR/src" IK_SRC="$TMPDIR/src" \
    TYPES=int8 ROUNDS=4 KEEP=1 PYTHON=$(command -v python3) sh "$HERE/tools/bench_peer.sh" 2>"$TMPDIR/err")
rc=$?
[ $rc = 0 ] || { echo "FAIL: bench_peer.sh exit $rc"; cat "$TMPDIR/err"; exit 1; }

got=$(tr '\n' ' ' <"$LOG")
want="dsr1 dsr1 llama ik llama ik dsr1 ik dsr1 llama dsr1 llama ik "
[ "$got" = "$want" ] || { echo "FAIL: run order '$got', want '$want'"; fail=1; }

# every run in runs.txt with its round, in the order they ran; the failed
# one left out and said on stderr, the rounds after it still run
got=$(awk '{ printf "%s%s ", $1, $5 }' "$W/runs.txt")
want="dsr11 llama1 ik1 llama2 dsr12 ik3 dsr13 llama3 dsr14 llama4 ik4 "
[ "$got" = "$want" ] || { echo "FAIL: runs.txt '$got', want '$want'"; cat "$W/runs.txt"; fail=1; }
grep -q "ik_llama.cpp q8_0 round 2 failed" "$TMPDIR/err" ||
    { echo "FAIL: the failed run not reported"; cat "$TMPDIR/err"; fail=1; }

row() { # label -> the table's row with that label, spaces squeezed
    echo "$out" | grep "^$1 " | head -1 | tr -s ' '
}
# medians and ratios: prefill 200 / 100 / 150, decode 20 / 10 / 16
[ "$(row 'pp512 int8 vs q8_0')" = "pp512 int8 vs q8_0 200.00 100.00 150.00 2.00 1.33" ] ||
    { echo "FAIL: prefill row '$(row 'pp512 int8 vs q8_0')'"; fail=1; }
[ "$(row 'tg32 int8 vs q8_0')" = "tg32 int8 vs q8_0 20.00 10.00 16.00 2.00 1.25" ] ||
    { echo "FAIL: decode row '$(row 'tg32 int8 vs q8_0')'"; fail=1; }
# the per-round table: each ratio paired within its round, ahead in 4 of
# 4 against llama.cpp and in the 3 rounds ik_llama.cpp completed
echo "$out" | grep -q "^pp512 int8 vs q8_0 *2.00 4/4 *1.33 3/3$" ||
    { echo "FAIL: per-round prefill row missing"; echo "$out"; fail=1; }
echo "$out" | grep -q "^machine: Stand-in CPU" || { echo "FAIL: the machine line"; echo "$out"; fail=1; }
# the heads line names the pairs that ran: 8-bit heads here, no BF16 clause
# (a BF16-only run once printed the 8/4-bit pairs' heads too; checked last, below)
[ "$(echo "$out" | grep "^LM heads:")" = "LM heads: dsr1 int8/int4 INT8, fp8 int8; GGUF Q8_0/Q4_0 Q8_0" ] ||
    { echo "FAIL: the LM heads line"; echo "$out"; fail=1; }
# every run carries the probes around it (the failed one left no line)
got=$(awk '{ printf "%s%s:%s-%s ", $1, $5, $6, $7 }' "$W/runs.txt")
want="dsr11:30.0-30.0 llama1:30.0-30.0 ik1:30.0-30.0 llama2:30.0-30.0 dsr12:30.0-30.0 ik3:30.0-60.0 dsr13:60.0-60.0 llama3:60.0-60.0 dsr14:60.0-60.0 llama4:60.0-60.0 ik4:60.0-60.0 "
[ "$got" = "$want" ] || { echo "FAIL: probes in runs.txt '$got', want '$want'"; fail=1; }
# the spells: split between 30 and 60 (at their geometric mean), each
# side's medians compared within it, ik_llama.cpp's round-3 run left out
echo "$out" | grep -q "^by memory state (.*slow below 42.4 GB/s, fast above" ||
    { echo "FAIL: the memory-state header"; echo "$out"; fail=1; }
[ "$(echo "$out" | grep "^tg32 int8 vs q8_0 *slow" | tr -s ' ')" = \
    "tg32 int8 vs q8_0 slow 2.00 (2/2) fast 2.00 (2/2) slow 1.25 (2/1) fast 1.25 (2/1)" ] ||
    { echo "FAIL: the memory-state decode row"; echo "$out"; fail=1; }
# last (it rewrites runs.txt): a BF16-only run names its heads alone
: >"$W/r1-bf16.dsr1"
: >"$W/r1-bf16.gguf"
out2=$(DSR1="$TMPDIR/dsr1" W="$W" CKPT="$TMPDIR/ckpt" LLAMA_SRC="$TMPDIR/src" IK_SRC="$TMPDIR/src" \
    TYPES=bf16 ROUNDS=1 KEEP=1 PYTHON=$(command -v python3) sh "$HERE/tools/bench_peer.sh" 2>"$TMPDIR/err2")
[ "$(echo "$out2" | grep "^LM heads:")" = "LM heads: bf16: BF16 on every side" ] ||
    { echo "FAIL: the LM heads line of a BF16 run"; echo "$out2"; cat "$TMPDIR/err2"; fail=1; }
# a peer not given (no IK_SRC): never run, no probe taken for it, "-" in its column
iks=$(grep -c '^ik$' "$LOG"); bw0=$(cat "$LOG.bw")
out3=$(DSR1="$TMPDIR/dsr1" W="$W" CKPT="$TMPDIR/ckpt" LLAMA_SRC="$TMPDIR/src" \
    TYPES=int8 ROUNDS=2 KEEP=1 PYTHON=$(command -v python3) sh "$HERE/tools/bench_peer.sh" 2>"$TMPDIR/err3")
[ "$(grep -c '^ik$' "$LOG")" = "$iks" ] || { echo "FAIL: ik_llama.cpp ran without IK_SRC"; fail=1; }
[ "$(awk '{ printf "%s%s ", $1, $5 }' "$W/runs.txt")" = "dsr11 llama1 llama2 dsr12 " ] ||
    { echo "FAIL: runs.txt without IK_SRC"; cat "$W/runs.txt"; fail=1; }
[ $(($(cat "$LOG.bw") - bw0)) = 8 ] || { echo "FAIL: probes without IK_SRC: $(($(cat "$LOG.bw") - bw0)), want 8"; fail=1; }
[ "$(echo "$out3" | grep "^tg32 int8 vs q8_0 " | head -1 | tr -s ' ')" = "tg32 int8 vs q8_0 20.00 10.00 - 2.00 -" ] ||
    { echo "FAIL: the decode row without IK_SRC"; echo "$out3"; cat "$TMPDIR/err3"; fail=1; }
exit $fail
