#!/bin/sh
# fuzz_corpus.sh - every fuzz target replays its checked-in corpus
# (tests/fuzz/corpus/<name>/: seeds from the fixtures and every input that
# once crashed a target) through the replay driver built with the normal
# compiler ($BUILD/fuzz/fuzz_<name>; under `make check` with ASan+UBSan).
# A crash, a sanitizer report or a missing corpus fails the test. `make
# fuzz` is the real fuzzing; this keeps what it found from coming back.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
fail=0 n=0
for src in "$root"/tests/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    name=${name#fuzz_}
    bin=$BUILD/fuzz/fuzz_$name
    corpus=$root/tests/fuzz/corpus/$name
    if [ ! -x "$bin" ]; then echo "FAIL: $bin not built"; fail=1; continue; fi
    if [ -z "$(ls -A "$corpus" 2>/dev/null)" ]; then echo "FAIL: no corpus in $corpus"; fail=1; continue; fi
    DSR1_FUZZ_FIXTURES=$FIXTURES "$bin" "$corpus" >"$TMPDIR/out" 2>"$TMPDIR/err"
    rc=$?
    if [ $rc -ne 0 ] || grep -q "ERROR: AddressSanitizer\|runtime error" "$TMPDIR/err"; then
        echo "FAIL: fuzz_$name on its corpus: exit $rc"; tail -n 20 "$TMPDIR/err"; fail=1
    fi
    n=$((n + 1))
done
[ $n -ge 10 ] || { echo "FAIL: only $n fuzz targets"; fail=1; }
exit $fail
