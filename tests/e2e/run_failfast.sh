#!/bin/sh
# run_failfast.sh - `dsr1 run` refuses mistakes before the model loads and
# never loses data (issue 12 item 3, issue 13 items 3, 7, 8, 11, 13, 14):
# usage errors exit 2 with one line; the model is named as a missing file
# so a check that ran after loading would show the model's error instead.
set -u
M=$TMPDIR/m.dsr1
. tests/e2e/lib/tiny_model.sh
fail=0
bad() { echo "FAIL: $*"; fail=1; }
T=$TMPDIR
NOMODEL=$T/no-such-model.dsr1

# expect STATUS PATTERN ARGS...: exit status and a one-line stderr with PATTERN.
expect() {
    want=$1 pat=$2
    shift 2
    "$DSR1" run "$@" >"$T/o" 2>"$T/e"
    rc=$?
    [ $rc -eq "$want" ] || bad "run $*: exit $rc, expected $want ($(cat "$T/e"))"
    grep -q -- "$pat" "$T/e" || bad "run $*: stderr lacks '$pat': $(cat "$T/e")"
    [ "$want" -ne 2 ] || [ "$(wc -l <"$T/e")" -eq 1 ] || bad "run $*: not one line: $(cat "$T/e")"
}
printf '{"id": "a", "prompt": "Hi", "max_tokens": 2}\n{"id": "b", "prompt": "Yo", "max_tokens": 2}\n' >"$T/in.jsonl"
echo precious >"$T/keep.jsonl"

# Arguments and files, all before the model (which does not even exist).
expect 2 "nothere.jsonl: No such file" -m "$NOMODEL" --in "$T/nothere.jsonl"
expect 2 "the directory /nonexistdir does not exist" -m "$NOMODEL" --in "$T/in.jsonl" --out /nonexistdir/x
expect 2 "resume needs --out FILE" -m "$NOMODEL" --in "$T/in.jsonl" --resume
expect 2 "backend gpu: expected auto, cpu, cuda or hip" -m "$NOMODEL" --backend gpu "hi"
expect 2 "keep.jsonl exists (9 bytes); add --resume to continue it or --overwrite" \
    -m "$NOMODEL" --in "$T/in.jsonl" --out "$T/keep.jsonl"
expect 2 "is a file; did you mean --in $T/in.jsonl?" -m "$NOMODEL" "$T/in.jsonl"
expect 2 "unknown option --temprature (did you mean --temperature?)" -m "$NOMODEL" --temprature 0 hi
expect 2 "unknown option --repeat_penalty (did you mean --repetition-penalty?)" -m "$NOMODEL" --repeat_penalty 1 hi
expect 2 "max-tokens needs a value" -m "$NOMODEL" hi --max-tokens
expect 2 "template v4: expected v3, r1 or raw" -m "$NOMODEL" --template v4 hi
# 13.7: --in F --out F, and --in DIR, refused before anything is touched.
cp "$T/in.jsonl" "$T/same.jsonl"
expect 2 "the same file" -m "$M" --in "$T/same.jsonl" --out "$T/./same.jsonl" --overwrite
cmp -s "$T/in.jsonl" "$T/same.jsonl" || bad "--in F --out F changed F"
ln "$T/same.jsonl" "$T/hardlink.jsonl"
expect 2 "the same file" -m "$M" --in "$T/same.jsonl" --out "$T/hardlink.jsonl" --resume
mkdir "$T/dir"
expect 2 "a directory, expected a JSONL file" -m "$M" --in "$T/dir" --out "$T/keep.jsonl" --overwrite
[ "$(cat "$T/keep.jsonl")" = precious ] || bad "--in DIR touched the output"

# --overwrite replaces; --out with a prompt writes the record there.
"$DSR1" run -q -m "$M" --ctx 256 --in "$T/in.jsonl" --out "$T/keep.jsonl" --overwrite || bad "--overwrite run"
[ "$(grep -c '"id":"[ab]"' "$T/keep.jsonl")" -eq 2 ] || bad "--overwrite output: $(cat "$T/keep.jsonl")"
"$DSR1" run -q -m "$M" --ctx 256 -n 3 --out "$T/p.jsonl" "hello" >"$T/o" || bad "--out o.jsonl PROMPT failed"
grep -q '"id":"line-1","content":".*"completion_tokens":3,' "$T/p.jsonl" || bad "prompt --out: $(cat "$T/p.jsonl")"
[ -s "$T/o" ] && bad "prompt --out also wrote stdout"

# llama.cpp spellings: -n -c -t -s -p --temp --ctx-size -sys --system-prompt --stop.
"$DSR1" run -q -m "$M" -n 3 -c 256 -t 1 -s 5 --temp 0 -sys "Be brief." -p "hi" >"$T/l1" || bad "llama.cpp flags"
"$DSR1" run -q -m "$M" --n-predict 3 --ctx-size 256 --threads 1 --seed 5 --temperature 0 \
    --system-prompt "Be brief." "hi" >"$T/l2" || bad "long llama.cpp flags"
cmp -s "$T/l1" "$T/l2" || bad "aliases differ: $(cat "$T/l1") / $(cat "$T/l2")"
first=$(head -c 3 "$T/l1")
"$DSR1" run -q -m "$M" -n 3 -c 256 --temp 0 -sys "Be brief." --stop "$first" hi >"$T/l3" || bad "--stop"
[ "$(cat "$T/l3")" = "" ] || bad "--stop '$first' left: $(cat "$T/l3")"

# 13.8: input that cannot be read twice (FIFO, /dev/stdin) is streamed once.
mkfifo "$T/fifo"
cat "$T/in.jsonl" >"$T/fifo" &
"$DSR1" run -q -m "$M" --ctx 256 --in "$T/fifo" --out "$T/f.jsonl" || bad "FIFO input failed"
[ "$(wc -l <"$T/f.jsonl")" -eq 2 ] || bad "FIFO input: $(wc -l <"$T/f.jsonl") records, expected 2"
cat "$T/in.jsonl" | "$DSR1" run -q -m "$M" --ctx 256 --in /dev/stdin >"$T/s.jsonl" || bad "/dev/stdin failed"
[ "$(wc -l <"$T/s.jsonl")" -eq 2 ] || bad "/dev/stdin: $(wc -l <"$T/s.jsonl") records, expected 2"

if command -v bash >/dev/null; then # process substitution: /dev/fd/N, a pipe
    bash -c '"$0" run -q -m "$1" --ctx 256 --in <(cat "$2")' "$DSR1" "$M" "$T/in.jsonl" >"$T/ps.jsonl" ||
        bad "--in <(...) failed"
    [ "$(wc -l <"$T/ps.jsonl")" -eq 2 ] || bad "--in <(...): $(wc -l <"$T/ps.jsonl") records, expected 2"
fi

# 12/13.11: duplicate ids refused up front, naming the lines; custom_id too.
printf '{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n{"id": "b", "prompt": "z"}\n' >"$T/dup.jsonl"
expect 1 'duplicate id "a" on lines 1 and 2' -m "$M" --in "$T/dup.jsonl" --out "$T/dup.out"
[ -e "$T/dup.out" ] && bad "duplicate ids: output created"
printf '{"custom_id": "q", "body": {"prompt": "x"}}\n{"custom_id": "q", "body": {"prompt": "y"}}\n' >"$T/dupc.jsonl"
expect 1 '"q" on lines 1 and 2' -m "$M" --in "$T/dupc.jsonl"
# Streamed input cannot be read ahead: the repeat gets an error record.
cat "$T/dup.jsonl" | "$DSR1" run -q -m "$M" --ctx 256 -n 2 --in - >"$T/dups.out"
grep -q '"id":"a","error":{"code":"invalid_request","message":"line 2: duplicate id \\"a\\" (first on line 1)' "$T/dups.out" ||
    bad "streamed duplicate: $(cat "$T/dups.out")"
# 1e999 is not a usable id: an error record under line-N, and a resume
# does not run it again.
printf '{"id": 1e999, "prompt": "x", "max_tokens": 2}\n{"id": 7, "prompt": "y", "max_tokens": 2}\n' >"$T/num.jsonl"
"$DSR1" run -q -m "$M" --ctx 256 --in "$T/num.jsonl" --out "$T/num.out"
grep -q '^{"id":"line-1","error":{"code":"invalid_request","message":"line 1: \\"id\\": expected a string or a finite number' "$T/num.out" ||
    bad "1e999: $(cat "$T/num.out")"
"$DSR1" run -m "$M" --ctx 256 --in "$T/num.jsonl" --out "$T/num.out" --resume 2>"$T/e"
grep -q "0 records written (0 failed), 2 skipped as done" "$T/e" || bad "resume reran: $(cat "$T/e")"

# 13.13: a line over --max-line-bytes gets an error record that says so.
long=$(head -c 3000 /dev/zero | tr '\0' 'x')
printf '{"id": "a", "prompt": "Hi", "max_tokens": 2}\n{"id": "big", "prompt": "%s"}\n{"id": "c", "prompt": "Yo", "max_tokens": 2}\n' "$long" >"$T/long.jsonl"
"$DSR1" run -q -m "$M" --ctx 256 --in "$T/long.jsonl" --max-line-bytes 1000 >"$T/long.out"
[ $? -eq 1 ] || bad "over-long line: expected exit 1"
sed -n 2p "$T/long.out" | grep -q '"id":"line-2","error":{"code":"invalid_request","message":"line 2: 3027 bytes, over the limit of 1000 bytes per line (--max-line-bytes)"' ||
    bad "line cap record: $(sed -n 2p "$T/long.out")"
[ "$(grep -c '"content"' "$T/long.out")" -eq 2 ] || bad "the lines around the long one did not run"

# 13.14: \u0000 in a request and a NUL on stdin are refused, naming where.
printf '{"id": "n", "prompt": "ab\\u0000cd"}\n' >"$T/nul.jsonl"
"$DSR1" run -q -m "$M" --ctx 256 --in "$T/nul.jsonl" >"$T/nul.out"
grep -q 'line 1: \\\\u0000 (a NUL character) at byte 25' "$T/nul.out" || bad "\\u0000: $(cat "$T/nul.out")"
printf 'ab\000cd' | "$DSR1" run -q -m "$M" --ctx 256 - >/dev/null 2>"$T/e"
[ $? -eq 1 ] && grep -q "a NUL byte at offset 2" "$T/e" || bad "NUL on stdin: $(cat "$T/e")"
# Prompt mode whose stdout cannot be written: exit 1 with a message.
if [ -w /dev/full ]; then
    "$DSR1" run -q -m "$M" --ctx 256 -n 3 hi >/dev/full 2>"$T/e"
    [ $? -eq 1 ] && grep -q "<stdout>: write: No space left" "$T/e" || bad "stdout /dev/full: $(cat "$T/e")"
fi
# ulimit -f: EFBIG reported, not a silent SIGXFSZ death.
: >"$T/many.jsonl"
for i in $(seq 1 40); do printf '{"id": %d, "prompt": "Item %d", "max_tokens": 3}\n' $i $i >>"$T/many.jsonl"; done
(ulimit -f 2; exec "$DSR1" run -q -m "$M" --ctx 256 --in "$T/many.jsonl" --out "$T/fsz.jsonl" 2>"$T/e")
rc=$?
[ $rc -eq 1 ] && grep -q "fsz.jsonl: write: File too large" "$T/e" || bad "ulimit -f: exit $rc: $(cat "$T/e")"

# 13.3: --resume onto a .zst whose frame declares 2^63 bytes: refused at
# once (it looped forever), file untouched.
printf '\050\265\057\375\340\000\000\000\000\000\000\000\200\001\000\000' >"$T/huge.jsonl.zst"
timeout 20 "$DSR1" run -q -m "$M" --in "$T/in.jsonl" --out "$T/huge.jsonl.zst" --resume 2>"$T/e"
rc=$?
[ $rc -eq 1 ] && grep -q "without a usable content size at byte 0; not resuming" "$T/e" || bad "2^63 frame: exit $rc: $(cat "$T/e")"
[ "$(wc -c <"$T/huge.jsonl.zst")" -eq 16 ] || bad "2^63 frame: file changed"
# 13.9: a damaged frame in the middle is refused, never cut.
"$DSR1" run -q -m "$M" --ctx 256 --in "$T/many.jsonl" --out "$T/z.jsonl.zst" || bad "zst run"
size=$(wc -c <"$T/z.jsonl.zst")
printf 'Z' | dd of="$T/z.jsonl.zst" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
"$DSR1" run -q -m "$M" --in "$T/many.jsonl" --out "$T/z.jsonl.zst" --resume 2>"$T/e"
[ $? -eq 1 ] && grep -q "not resuming into this file" "$T/e" || bad "damaged zst: $(cat "$T/e")"
[ "$(wc -c <"$T/z.jsonl.zst")" -eq "$size" ] || bad "damaged zst was cut"
exit $fail
