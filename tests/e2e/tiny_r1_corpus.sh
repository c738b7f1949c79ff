#!/bin/sh
# tiny_r1_corpus.sh - the training corpus generator and tokenizer prep of
# models/tiny-r1 (tools/train/run.sh depends on both being reproducible):
# - corpus.py --compare-v3 still writes, for seed 1, the prompts and
#   completions phases 1-2 trained on (hash pinned from that training file's
#   first 120 lines);
# - --focus: history (one or two earlier exchanges) in about half the prompts;
# - --equal-tens: compares with equal tens digits whose "context" is the
#   completion's first sentence; prep.py counts it as prompt (loss mask);
# - --compare-v2 names the smaller number in the reasoning; --compare-v3
#   writes the tens digits before deciding whether they are equal;
# - evaluate.py --focus scores the trained model on history-heavy prompts;
# - bad input: prep.py on a malformed line fails with a message, no output.
set -u
command -v python3 >/dev/null || { echo "python3 not installed"; exit 77; }
. tests/e2e/lib/tiny_r1.sh
fail=0
C=tools/train/corpus.py
python3 - "$C" <<'PY' || fail=1
import hashlib, json, subprocess, sys
def gen(*args):
    out = subprocess.run([sys.executable, sys.argv[1]] + list(args), check=True,
                         capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines()]
ok = True
h = hashlib.sha256()
for e in gen("--seed", "1", "--per-family", "20", "--compare-v3"):
    h.update((e["prompt"] + "\0" + e["completion"] + "\0").encode())
if h.hexdigest()[:16] != "8e4da3274e6b3059":
    print("FAIL: corpus seed 1 (--compare-v3) is no longer the one phases 1-2 trained on"); ok = False
foc = gen("--seed", "11", "--per-family", "40", "--focus")
hist = sum(e["prompt"].count("<｜User｜>") > 1 for e in foc if e["family"] != "tool")
two = sum(e["prompt"].count("<｜User｜>") > 2 for e in foc)
if not (60 <= hist <= 140 and two > 0):
    print("FAIL: --focus history in %d of 200 non-tool prompts, %d with two" % (hist, two)); ok = False
for e in gen("--seed", "13", "--per-family", "30", "--equal-tens"):
    a, b = (int(x) for x in e["request"]["messages"][0]["content"].rstrip("?").split()[-3::2])
    if a // 10 != b // 10 or a == b or not e["completion"].startswith(e["context"]) \
            or e["context"] != "Tens digits are both %d." % (a // 10) or e["answer"] != str(max(a, b)):
        print("FAIL: --equal-tens example", e["request"], e["context"]); ok = False
v2 = [e for e in gen("--seed", "5", "--per-family", "10", "--compare-v2") if e["family"] == "compare"]
for e in v2:
    big, small = int(e["answer"]), int(e["expect"]["content"].split()[-1].rstrip("."))
    if ("so %d is larger and %d is smaller." % (big, small)) not in e["completion"]:
        print("FAIL: --compare-v2 reasoning", e["completion"]); ok = False
# --compare-v3: the tens digits written before the decision; equal-tens
# examples then carry no context (the decision is a target)
for e in gen("--seed", "5", "--per-family", "40", "--compare-v3") + \
        gen("--seed", "13", "--per-family", "10", "--equal-tens", "--compare-v3"):
    if e["family"] != "compare":
        continue
    a, b = (int(x) for x in e["request"]["messages"][-1]["content"].rstrip("?").split()[-3::2])
    t = "Tens digits: %d and %d." % (a // 10, b // 10)
    if a // 10 == b // 10:
        t += "\nTens digits are both %d. Units digits: %d and %d." % (a // 10, a % 10, b % 10)
    if not e["completion"].startswith(t) or "context" in e or e["answer"] != str(max(a, b)):
        print("FAIL: --compare-v3 example", e["request"], e["completion"]); ok = False
sys.exit(0 if ok else 1)
PY
# prep.py: the context is counted as prompt only where it is the
# completion's first tokens
python3 "$C" --seed 13 --per-family 3 --equal-tens >"$TMPDIR/eq.jsonl"
python3 tools/train/prep.py "$TMPDIR/eq.jsonl" "$TMPDIR/eq.tok.jsonl" --dsr1 "$DSR1" \
    --tokenizer "$TMPDIR/tiny-r1/tokenizer.json" || { echo "FAIL: prep.py"; fail=1; }
python3 - "$TMPDIR/eq.jsonl" "$TMPDIR/eq.tok.jsonl" "$DSR1" "$TMPDIR/tiny-r1/tokenizer.json" <<'PY' || fail=1
import json, subprocess, sys
ex = [json.loads(l) for l in open(sys.argv[1])]
tok = [json.loads(l) for l in open(sys.argv[2])]
def ids(text):
    p = subprocess.run([sys.argv[3], "tokenize", "-m", sys.argv[4], "--jsonl"], check=True,
                       input=json.dumps({"text": text}) + "\n", capture_output=True, text=True)
    return json.loads(p.stdout)["ids"]
ok = len(ex) == len(tok) == 3
for e, t in zip(ex, tok):
    want = len(ids(e["prompt"])) + len(ids(e["context"]))
    if t["n_prompt"] != want or t["ids"][:want] != ids(e["prompt"]) + ids(e["context"]):
        print("FAIL: prep n_prompt %d, expected prompt + context = %d" % (t["n_prompt"], want)); ok = False
sys.exit(0 if ok else 1)
PY
echo '{"prompt": "x"' >"$TMPDIR/bad.jsonl"
if python3 tools/train/prep.py "$TMPDIR/bad.jsonl" "$TMPDIR/bad.tok.jsonl" --dsr1 "$DSR1" \
    --tokenizer "$TMPDIR/tiny-r1/tokenizer.json" 2>"$TMPDIR/err"; then
    echo "FAIL: prep.py accepted a malformed line"; fail=1
fi
[ -s "$TMPDIR/bad.tok.jsonl" ] && { echo "FAIL: prep.py wrote output for bad input"; fail=1; }
grep -q "bad.jsonl" "$TMPDIR/err" || { echo "FAIL: prep.py error does not name the file: $(tail -1 "$TMPDIR/err")"; fail=1; }
# evaluate.py --focus on the trained model: history-heavy prompts scored
python3 tools/train/evaluate.py --dsr1 "$DSR1" -m "$R1M" --seed 12 --per-family 2 --focus \
    --min 0 --json "$TMPDIR/f.json" >/dev/null || { echo "FAIL: evaluate.py --focus"; fail=1; }
python3 -c "
import json, sys
s = json.load(open(sys.argv[1]))['score']
sys.exit(0 if sorted(s) == sorted(['add','compare','sort','count','reverse','tool']) and all(v[1] == 2 for v in s.values()) else 1)
" "$TMPDIR/f.json" || { echo "FAIL: evaluate.py --focus scores"; fail=1; }
exit $fail
