#!/bin/sh
# spec_run.sh - speculative decoding through `dsr1 run` on a generated model
# with an MTP layer and the real tokenizer: with fixed drafts records carry
# usage.speculative (steps > 0; drafted >= accepted >= 0); the texts with
# speculation off, fixed at 3 and adaptive are identical with
# --deterministic (the fast mode runs a 3-sequence verify step of 12 tokens
# W8A8 where a plain 3-token step stays bf16: near-ties may differ), and
# only the speculating run reports it. The adaptive default does not speculate on
# this small model: its MTP head costs about a decode step, more than any
# acceptance can pay (dsr1_spec_never), so it runs no MTP layer at all.
set -u
M=$TMPDIR/m.dsr1
. tests/e2e/lib/tiny_model.sh
fail=0
cat >"$TMPDIR/in.jsonl" <<'JSONL'
{"id": "a", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16, "temperature": 0}
{"id": "b", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}
{"id": "c", "prompt": "Count: 1 2 3", "max_tokens": 9, "temperature": 0.8, "seed": 3}
JSONL
# first argument is the output name, the rest go to dsr1 run
run_as() { name=$1; shift; "$DSR1" run -q -m "$M" --in "$TMPDIR/in.jsonl" \
    --out "$TMPDIR/$name.jsonl" --ctx 256 -j 3 --deterministic "$@" 2>"$TMPDIR/err" ||
    { echo "FAIL: run $*: $(cat "$TMPDIR/err")"; fail=1; }; }
run_as default
run_as k3 --spec-draft 3
python3 - "$TMPDIR/k3.jsonl" <<'PY' || fail=1
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ok = len(recs) == 3
for r in recs:
    s = r.get("usage", {}).get("speculative")
    if not s or s["steps"] < 1 or not (s["drafted"] >= s["accepted"] >= 0):
        print("FAIL: record without usage.speculative:", r); ok = False
sys.exit(0 if ok else 1)
PY
run_as off --spec-draft 0
python3 - "$TMPDIR/off.jsonl" "$TMPDIR/k3.jsonl" "$TMPDIR/default.jsonl" <<'PY' || fail=1
import json, sys
def load(p):
    return [json.loads(l) for l in open(p)]
off, k3, ad = (load(p) for p in sys.argv[1:])
ok = True
def text(r):
    return json.dumps([r.get("content"), r.get("reasoning_content")])
for a, b, c in zip(off, k3, ad):
    if a["id"] in ("a", "b") and not text(a) == text(b) == text(c):
        print("FAIL: greedy text differs with speculation:", a["id"]); ok = False
    if "speculative" in a.get("usage", {}):
        print("FAIL: --spec-draft 0 reports speculation:", a); ok = False
    if "speculative" in c.get("usage", {}):
        print("FAIL: adaptive speculated where a draft cannot pay:", c); ok = False
    if b["usage"]["speculative"]["drafted"] < 1:
        print("FAIL: --spec-draft 3 drafted nothing:", b); ok = False
sys.exit(0 if ok else 1)
PY
# The fast mode (the default) speculates too: every record reports it.
"$DSR1" run -q -m "$M" --in "$TMPDIR/in.jsonl" --out "$TMPDIR/fast.jsonl" --ctx 256 -j 3 \
    --spec-draft 3 2>"$TMPDIR/err" || { echo "FAIL: fast run: $(cat "$TMPDIR/err")"; fail=1; }
python3 - "$TMPDIR/fast.jsonl" <<'PY' || fail=1
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ok = len(recs) == 3 and all(r.get("usage", {}).get("speculative", {}).get("drafted", 0) >= 1 for r in recs)
if not ok: print("FAIL: fast-mode speculation records:", recs)
sys.exit(0 if ok else 1)
PY
"$DSR1" run -m "$M" --spec-draft 99 "x" >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || { echo "FAIL: --spec-draft 99 exit $rc, expected 2"; fail=1; }
exit $fail
