#!/bin/sh
# fuzz.sh BUILD SECONDS NAME... - run each libFuzzer target
# BUILD/libfuzzer/fuzz_NAME for SECONDS (niced), starting from the checked-in
# seeds tests/fuzz/corpus/NAME/ plus what earlier runs found
# (BUILD/corpus/NAME/, kept between runs). A crashing input is written to
# BUILD/crashes/NAME-crash-*; copy it into tests/fuzz/corpus/NAME/ once
# fixed so `make test` replays it forever. One summary line per target;
# exit 1 if any target crashed, leaked, or timed out on an input.
set -u
build=$1 secs=$2
shift 2
fail=0
mkdir -p "$build/crashes"
for name in "$@"; do
    bin=$build/libfuzzer/fuzz_$name
    work=$build/corpus/$name
    mkdir -p "$work"
    log=$build/fuzz_$name.log
    DSR1_FUZZ_FIXTURES=$(pwd)/tests/fixtures nice -n 10 "$bin" -max_total_time="$secs" \
        -timeout=20 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$build/crashes/$name-" "$work" "tests/fuzz/corpus/$name" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
    [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
    if [ $rc -eq 0 ]; then
        echo "fuzz $name: ${execs:-?} runs in ${secs}s, ${cov:-cov: ?}, $(ls "$work" | wc -l) corpus inputs, no crash"
    else
        echo "fuzz $name: FAILED (exit $rc) after ${execs:-?} runs; see $log:"
        grep -E '^==[0-9]+==ERROR|SUMMARY|^artifact_prefix|Test unit written|runtime error' "$log" | head -n 6
        fail=1
    fi
done
exit $fail
