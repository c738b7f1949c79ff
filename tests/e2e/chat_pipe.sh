#!/bin/sh
# chat_pipe.sh - `dsr1 chat` with stdin not a terminal: the whole input is
# one user turn (several lines), the answer alone on stdout, reasoning on
# stderr without colour escapes when stderr is not a terminal, exit 0;
# greedy answers repeat exactly; a missing model exits 1 with a hint.
set -u
M=$TMPDIR/m.dsr1
. tests/e2e/lib/tiny_model.sh
fail=0
bad() { echo "FAIL: $*"; fail=1; }

printf 'line one\nline two\n' | $DSR1 chat -m "$M" --template r1 --temperature 0 --max-tokens 6 \
    >"$TMPDIR/out" 2>"$TMPDIR/err" || bad "chat pipe failed"
[ -z "$(tr -d '\n' <"$TMPDIR/out")" ] || bad "reasoning on stdout: $(cat "$TMPDIR/out")"
grep -q '^thinking' "$TMPDIR/err" || bad "no reasoning header on stderr"
grep -q 'reasoning did not finish: 6 tokens' "$TMPDIR/err" || bad "no unfinished-reasoning line"
grep -q "$(printf '\033')" "$TMPDIR/err" && bad "colour escapes in a file"
a=$(printf 'Hello' | $DSR1 chat -m "$M" --template v3 --temperature 0 --max-tokens 6 2>/dev/null)
b=$(printf 'Hello' | $DSR1 chat -m "$M" --template v3 --temperature 0 --max-tokens 6 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] || bad "greedy answers differ or are empty: '$a' '$b'"
c=$(printf 'Hello' | $DSR1 chat -m "$M" --template v3 --temperature 0 --max-tokens 6 \
    --system "Be terse." 2>/dev/null)
[ "$a" != "$c" ] || bad "--system made no difference"
printf 'x' | XDG_DATA_HOME=$TMPDIR/none DSR1_MODEL= $DSR1 chat >/dev/null 2>"$TMPDIR/e2"
[ $? -eq 1 ] || bad "no model: exit not 1"
grep -q 'dsr1 convert' "$TMPDIR/e2" || bad "no model: no hint"
$DSR1 chat --think sideways 2>/dev/null; [ $? -eq 2 ] || bad "bad --think: exit not 2"
# A prompt longer than the context: refused, with how to go on.
python3 -c 'print(" ".join(["w%d" % i for i in range(80)]))' |
    $DSR1 chat -m "$M" --ctx 64 >/dev/null 2>"$TMPDIR/e3"
[ $? -eq 1 ] || bad "prompt over the context: exit not 1"
grep -q 'does not fit the context of 64' "$TMPDIR/e3" || bad "no context error: $(cat "$TMPDIR/e3")"
grep -q 'shorten it or use a larger --ctx' "$TMPDIR/e3" || bad "no hint: $(cat "$TMPDIR/e3")"
exit $fail
