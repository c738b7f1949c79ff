#!/bin/sh
# bench_prefix.sh - the prefix cache on a batch that shares a system prompt:
# N requests (default 64) whose conversations start with the same ~2,000-token
# system prompt and differ in a short user message go through `dsr1 run`
# with the prefix cache on and with --no-prefix-cache, alternately (ROUNDS
# times each, default 2, so machine noise falls on both). For each run it
# prints the prompt tokens, the prefill tokens actually computed (prompt
# tokens minus usage.cached_tokens, summed over the output) and the wall
# time; then the ratios.
#
# MODEL: a .dsr1 file (default: the tiny synthetic model with the real
# DeepSeek tokenizer, generated into build/bench/prefix/). Knobs: N=64,
# SYS_WORDS=1000 (about 2,000 tokens), PAR=8 (--parallel), GEN=8
# (max_tokens), ROUNDS=2, THREADS.
set -eu
DSR1=${DSR1:-./dsr1}
B=${BUILD:-build}/bench/prefix
N=${N:-64}
SYS_WORDS=${SYS_WORDS:-1000}
PAR=${PAR:-8}
GEN=${GEN:-8}
ROUNDS=${ROUNDS:-2}
TH=${THREADS:+--threads $THREADS}
mkdir -p "$B"
M=${MODEL:-$B/tiny.dsr1}
if [ ! -f "$M" ]; then
    "${BUILD:-build}/gen_ckpt" --preset tiny --tokenizer tests/fixtures/tokenizer --vocab 129280 \
        --out "$B/ck" >/dev/null
    "$DSR1" convert "$B/ck" -o "$M" --quiet >/dev/null
fi
python3 - "$N" "$SYS_WORDS" "$GEN" >"$B/req.jsonl" <<'PY'
import json, sys
n, words, gen = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
system = "You are a careful assistant. " + " ".join("rule%d" % i for i in range(words))
for i in range(n):
    print(json.dumps({"id": "r%d" % i, "max_tokens": gen, "temperature": 0,
                      "messages": [{"role": "system", "content": system},
                                   {"role": "user", "content": "Question %d: what is %d + %d?" % (i, i, i)}]}))
PY
sys_tokens=$("$DSR1" tokenize -m "$M" --count "$(python3 -c "import json;print(json.loads(open('$B/req.jsonl').readline())['messages'][0]['content'])")")
echo "model $M, $N requests, system prompt $sys_tokens tokens, --parallel $PAR, max_tokens $GEN"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores"
one() { # label, extra flags
    t0=$(date +%s.%N)
    "$DSR1" run -m "$M" --in "$B/req.jsonl" --out - -j "$PAR" --ctx 4096 --no-preload $TH $2 \
        2>/dev/null >"$B/out.jsonl"
    t1=$(date +%s.%N)
    python3 - "$1" "$t0" "$t1" "$B/out.jsonl" <<'PY'
import json, sys
label, t0, t1, path = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
p = c = k = 0
for line in open(path):
    u = json.loads(line)["usage"]
    p += u["prompt_tokens"]; c += u["cached_tokens"]; k += 1
print("%-6s %2d answers  prompt tokens %7d  cached %7d  prefill computed %7d  wall %7.2f s"
      % (label, k, p, c, p - c, t1 - t0))
PY
}
for r in $(seq "$ROUNDS"); do
    one on "" | tee -a "$B/on.txt"
    one off --no-prefix-cache | tee -a "$B/off.txt"
done
python3 - "$B/on.txt" "$B/off.txt" <<'PY'
import re, statistics, sys
def load(p):
    rows = [re.findall(r"computed +(\d+) +wall +([\d.]+)", l)[0] for l in open(p)]
    return statistics.median(int(a) for a, _ in rows), statistics.median(float(b) for _, b in rows)
con, won = load(sys.argv[1]); coff, woff = load(sys.argv[2])
print("medians: prefill computed on %d, off %d tokens (%.1fx fewer); wall on %.2f s, off %.2f s "
      "(%.2fx faster)" % (con, coff, coff / max(1, con), won, woff, woff / won))
PY
rm -f "$B/on.txt" "$B/off.txt"
