#!/bin/sh
# measure.sh - the figures of models/tiny-r1/README.md, through the real
# path, from the checked-in archive (no torch needed):
#  1. accuracy per task family (tools/train/evaluate.py: `dsr1 run`, greedy,
#     held-out prompts of corpus seed 4, N per family) for each weight type
#     (FP8 as published, BF16, INT8, INT4) x speculation off / fixed 3 drafts
#     x --parallel 1 / 16, every run's results required identical to the
#     FP8 -j 16 off run of its type (greedy speculation and batching are
#     exact); the adaptive mode and the FP8 KV cache once each;
#  2. `dsr1 eval` (KL and top-1 against the f32 path) of each weight type
#     and of the FP8 KV cache, on held-out conversations;
#  3. `dsr1 bench --spec --prompts` at batch 1 and 8: acceptance per family
#     and tokens/s of each speculation mode against off.
# Usage: tools/train/measure.sh [N per family, default 20]; W=DIR work dir,
# BENCH_N prompts per family for the speed table (default 5).
# Writes the tables to $W/measure.txt (and prints them). Long: about 20
# minutes on 2 cores.
set -eu
cd "$(dirname "$0")/../.."
N=${1:-20}
W=${W:-build/tiny-r1-measure}
D=./dsr1
mkdir -p "$W"
rm -rf "$W/tiny-r1"
zstd -dc models/tiny-r1/tiny-r1.tar.zst | tar -x -C "$W"
OUT=$W/measure.txt
: >"$OUT"
say() { echo "$@" | tee -a "$OUT"; }
for t in fp8 bf16 int8 int4; do
    rm -f "$W/$t.dsr1"
    if [ $t = fp8 ]; then $D convert "$W/tiny-r1" -o "$W/$t.dsr1" --quiet
    else $D convert "$W/tiny-r1" -o "$W/$t.dsr1" --type $t --quiet; fi
done
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
say "machine: $cpu, $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
say
say "## accuracy (evaluate.py --seed 4 --per-family $N)"
ev() { # type, then evaluate.py and dsr1 run options; a run whose results
       # differ from its --same-as file is marked DIFFERENT
    t=$1; shift
    if r=$(python3 tools/train/evaluate.py --dsr1 $D -m "$W/$t.dsr1" --seed 4 --per-family "$N" \
           --min 0 "$@"); then note=""; else note=" DIFFERENT from the first run of $t"; fi
    echo "$r" | grep -v "^   dsr1 run\|^DIFFERS" | sed "s/^/$t: /; s/\$/$note/" | tee -a "$OUT"
}
for t in fp8 bf16 int8 int4; do
    ev $t --save "$W/$t.base.jsonl" -- --spec-draft 0 -j 16
    ev $t --same-as "$W/$t.base.jsonl" -- --spec-draft 3 -j 16
    ev $t --same-as "$W/$t.base.jsonl" -- --spec-draft 0 -j 1
    ev $t --same-as "$W/$t.base.jsonl" -- --spec-draft 3 -j 1
done
ev fp8 --same-as "$W/fp8.base.jsonl" -- -j 16
ev fp8 -- --kv-type fp8 -j 16
ev fp8 -- --fp8-prefill bf16 -j 16
say
say "## dsr1 eval against the f32 path (held-out conversations, seed 5)"
python3 - "$W/conv.jsonl" <<'PY'
import json, random, sys
sys.path.insert(0, "tools/train")
import corpus
r = random.Random(5)
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for _ in range(8):
        for fam in corpus.FAMILIES:
            e = corpus.example(r, fam)
            f.write(json.dumps({"text": e["prompt"] + e["completion"]}, ensure_ascii=False) + "\n")
PY
for t in fp8 bf16 int8 int4; do
    $D eval -m "$W/$t.dsr1" --prompts "$W/conv.jsonl" --n 512 --json | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("%s: top-1 %.2f%%, KL mean %.3g max %.3g nats" % (sys.argv[1], 100 * r["top1_agree"], r["kl_mean"], r["kl_max"]))' "$t" | tee -a "$OUT"
done
$D eval -m "$W/fp8.dsr1" --prompts "$W/conv.jsonl" --n 512 --kv-type fp8 --json | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("fp8 + fp8 KV: top-1 %.2f%%, KL mean %.3g max %.3g nats" % (100 * r["top1_agree"], r["kl_mean"], r["kl_max"]))' | tee -a "$OUT"
$D eval -m "$W/fp8.dsr1" --prompts "$W/conv.jsonl" --n 512 --fp8-prefill bf16 --json | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("fp8 --fp8-prefill bf16: top-1 %.2f%%, KL mean %.3g max %.3g nats" % (100 * r["top1_agree"], r["kl_mean"], r["kl_max"]))' | tee -a "$OUT"
for t in bf16 int8 int4; do
    $D eval -m "$W/$t.dsr1" --ref "$W/fp8.dsr1" --prompts "$W/conv.jsonl" --n 512 --json | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("%s against the published FP8 (f32 paths): top-1 %.2f%%, KL mean %.3g max %.3g nats" % (sys.argv[1], 100 * r["top1_agree"], r["kl_mean"], r["kl_max"]))' "$t" | tee -a "$OUT"
done
say
B=${BENCH_N:-5}
say "## dsr1 bench --spec --prompts (FP8, seed 4, $B per family)"
python3 tools/train/evaluate.py --dsr1 $D -m "$W/fp8.dsr1" --seed 4 --per-family "$B" --min 0 \
    --prompts-out "$W/prompts.jsonl" >/dev/null
for b in 1 8; do
    $D bench --spec -m "$W/fp8.dsr1" --prompts "$W/prompts.jsonl" --batch $b --gen 160 --rounds 3 | tee -a "$OUT"
    say
done
