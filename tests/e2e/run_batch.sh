#!/bin/sh
# run_batch.sh - `dsr1 run --in/--out` on a tiny generated model with the
# real tokenizer: good lines get result records in input order, bad lines
# (not JSON, missing fields, unknown role, over-long prompt, bad values) get
# error records with their id (or line-N) and the run goes on; exit 1 says
# some failed. Also the OpenAI batch shape, stop strings, --unordered.
set -u
M=$TMPDIR/m.dsr1
. tests/e2e/lib/tiny_model.sh
fail=0
bad() { echo "FAIL: $*"; fail=1; }

long=$(printf 'word %.0s' $(seq 1 700))
cat >"$TMPDIR/in.jsonl" <<JSONL
{"id": "a", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0}
{"id": 2, "prompt": "Once upon a time", "max_tokens": 4}
not json
{"id": "b", "messages": [{"role": "wizard", "content": "Hi"}]}

{"custom_id": "c", "body": {"messages": [{"role": "user", "content": "Yo"}], "max_tokens": 3}}
{"messages": []}
{"id": "long", "prompt": "$long"}
{"id": "t", "prompt": "x", "temperature": -2}
{"id": "z", "prompt": "x"
{"id": "tool", "max_tokens": 3, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}], "messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "18C, sunny"}]}
JSONL
$DSR1 run -q -m "$M" --in "$TMPDIR/in.jsonl" --out "$TMPDIR/out.jsonl" --ctx 512 -j 3 2>"$TMPDIR/err"
rc=$?
[ $rc -eq 1 ] || bad "exit $rc, expected 1 (some requests failed)"
[ -s "$TMPDIR/err" ] && bad "stderr not empty with -q: $(cat "$TMPDIR/err")"
ids=$(sed 's/^{"id":\([^,]*\),.*/\1/' "$TMPDIR/out.jsonl" | tr '\n' ' ')
[ "$ids" = '"a" 2 "line-3" "b" "c" "line-7" "long" "t" "line-10" "tool" ' ] || bad "ids in order: $ids"
line() { sed -n "$1p" "$TMPDIR/out.jsonl"; }
has() { line "$1" | grep -q "$2" || bad "record $1 lacks $2: $(line "$1")"; }
has 1 '"finish_reason":"length","usage":{"prompt_tokens":[0-9]*,"completion_tokens":6,'
has 1 '"timing":{"ttft_ms":'
has 2 '"completion_tokens":4'
has 3 '"error":{"code":"invalid_request","message":"line 3: not valid JSON'
has 4 "unknown role 'wizard'"
has 5 '"custom_id":"c"'
has 6 'non-empty array'
has 7 '"error":{"code":"context_length_exceeded","message":"line 8: '
has 8 'temperature'
has 9 '"error"'
has 10 '"finish_reason":"length"' # tools and a tool result render and run
# The over-long prompt is refused before anything runs; the others answered.
[ "$(grep -c '"error"' "$TMPDIR/out.jsonl")" -eq 6 ] || bad "6 error records expected"

# A stop string is matched on the decoded text and not included: stopping
# at the whole greedy answer leaves empty content and finish "stop"; a stop
# string that never occurs changes nothing. The greedy answer comes from a
# run of the same two requests' shape as the stop run: in the fast mode a
# token's logits move with what shares its prefill (two 5-token prompts
# are 10 tokens, FP8 W8A8 from 9; one alone stays bf16), and on this random
# model near-ties are common, so one request alone may answer differently.
printf '%s\n' '{"id": "g", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}' \
    '{"id": "g2", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stop": ["@@@"]}' \
    >"$TMPDIR/g.jsonl"
$DSR1 run -q -m "$M" --in "$TMPDIR/g.jsonl" --out "$TMPDIR/g.out" || bad "greedy run failed"
content=$(sed -n 1p "$TMPDIR/g.out" | sed 's/.*"content":"\(.*\)","reasoning_content".*/\1/')
[ -n "$content" ] || bad "empty greedy content"
printf '{"id": "s", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stop": "%s"}\n' \
    "$content" >"$TMPDIR/s.jsonl"
printf '{"id": "n", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stop": ["@@@"]}\n' \
    >>"$TMPDIR/s.jsonl"
$DSR1 run -q -m "$M" --in "$TMPDIR/s.jsonl" --out "$TMPDIR/s.out" || bad "stop run failed"
sed -n 1p "$TMPDIR/s.out" | grep -q '"content":"",.*"finish_reason":"stop"' ||
    bad "stop at '$content': $(sed -n 1p "$TMPDIR/s.out")"
sed -n 2p "$TMPDIR/s.out" | grep -qF "\"content\":\"$content\"" ||
    bad "unmatched stop changed the answer: $(sed -n 2p "$TMPDIR/s.out")"

# --unordered: the same records, any order.
$DSR1 run -q -m "$M" --in "$TMPDIR/in.jsonl" --out "$TMPDIR/un.jsonl" --ctx 512 -j 3 --unordered
strip() { sed 's/,"timing":{[^}]*}//' "$1" | sort; }
[ "$(strip "$TMPDIR/un.jsonl")" = "$(strip "$TMPDIR/out.jsonl")" ] || bad "--unordered differs"

# Usage errors exit 2.
$DSR1 run -m "$M" 2>/dev/null; [ $? -eq 2 ] || bad "no --in and no prompt: not exit 2"
$DSR1 run -m "$M" --in x --temperature abc 2>/dev/null; [ $? -eq 2 ] || bad "bad number: not exit 2"
$DSR1 run -m "$M" --in /nonexistent.jsonl 2>"$TMPDIR/e2"; [ $? -eq 2 ] || bad "missing input: not exit 2"
grep -q "nonexistent.jsonl" "$TMPDIR/e2" || bad "missing input not named"
exit $fail
