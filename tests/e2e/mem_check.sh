#!/bin/sh
# mem_check.sh - the memory check before loading, shared by run and chat:
# the tiny model with a huge --ctx is refused (exit 1) with the numbers and
# what to change, before anything is loaded (no loading line); a context
# that fits runs; --preload reads the weights with progress, --no-preload
# does not; --mlock under a zero lock limit says how to raise it; on a
# terminal a model file out of the page cache is preloaded by default.
set -u
M=$TMPDIR/m.dsr1
. tests/e2e/lib/tiny_model.sh
fail=0
bad() { echo "FAIL: $*"; fail=1; }

for cmd in "run hi" "chat"; do
    echo hi | $DSR1 $cmd -m "$M" --ctx 1073741824 --max-tokens 2 >"$TMPDIR/o" 2>"$TMPDIR/e"
    rc=$?
    [ $rc -eq 1 ] || bad "$cmd huge ctx: exit $rc, not 1"
    grep -q "not enough memory: the KV cache for --ctx 1073741824 takes 800.0 GiB" \
        "$TMPDIR/e" || bad "$cmd huge ctx: no numbers: $(cat "$TMPDIR/e")"
    grep -q "available; lower --ctx ([0-9]* tokens fit)" "$TMPDIR/e" || bad "$cmd: no advice"
    grep -q "loading\|model " "$TMPDIR/e" && bad "$cmd: the model was loaded before refusing"
    [ "$(wc -l <"$TMPDIR/e")" -eq 1 ] || bad "$cmd: more than one line: $(cat "$TMPDIR/e")"
done
$DSR1 run -m "$M" --in /dev/null -j 64 --ctx 100000000 2>"$TMPDIR/e"
grep -q "x 64 sequences .* fit at this parallelism) or --parallel" "$TMPDIR/e" ||
    bad "--parallel not in the advice: $(cat "$TMPDIR/e")"

$DSR1 run -m "$M" --ctx 256 --max-tokens 2 --preload hi >/dev/null 2>"$TMPDIR/e" ||
    bad "--preload run failed: $(cat "$TMPDIR/e")"
grep -q "preloading m.dsr1 100% (267" "$TMPDIR/e" || bad "no preload progress"
grep -q "preloaded m.dsr1 in" "$TMPDIR/e" || bad "no preload summary"
$DSR1 run -m "$M" --ctx 256 --max-tokens 2 --no-preload hi >/dev/null 2>"$TMPDIR/e" ||
    bad "--no-preload run failed"
grep -q "preload" "$TMPDIR/e" && bad "--no-preload preloaded"
(ulimit -l 0 && $DSR1 run -m "$M" --ctx 256 --max-tokens 2 --mlock hi) >/dev/null 2>"$TMPDIR/e"
rc=$?
if [ $rc -ne 0 ]; then
    grep -q -- "--mlock: cannot lock .*ulimit -l" "$TMPDIR/e" || bad "mlock failure: $(cat "$TMPDIR/e")"
else
    grep -q "locked in memory" "$TMPDIR/e" || bad "--mlock: no summary" # privileged
fi

# On a terminal, a file evicted from the page cache is preloaded by default.
if command -v tmux >/dev/null && python3 -c 'import os; os.posix_fadvise' 2>/dev/null; then
    S=dsr1-mem-$$
    export TMUX=
    python3 -c "import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)" "$M"
    tmux -L "$S" new-session -d -s "$S" -x 120 -y 20 \
        "env XDG_DATA_HOME=$TMPDIR/x $DSR1 chat -m $M --ctx 256 </dev/tty 2>$TMPDIR/tty.err; echo EXITED"
    i=0
    while ! grep -q 'Type a message\|EXITED' "$TMPDIR/tty.err" 2>/dev/null && [ $i -lt 200 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    tmux -L "$S" send-keys -t "$S" C-d
    sleep 0.5
    tmux -L "$S" kill-server 2>/dev/null
    grep -q "preloaded m.dsr1" "$TMPDIR/tty.err" || bad "no default preload on a terminal: $(cat "$TMPDIR/tty.err")"
fi
exit $fail
