#!/bin/sh
# tiny_r1_accuracy.sh - the trained tiny R1 answers held-out prompts through
# `dsr1 run` (greedy): a sample of 8 prompts per task family (corpus seed 3;
# training used seed 1) must be >= 95% correct per family, i.e. all of them,
# at FP8 as published and at INT4 with speculative decoding on (the default
# adaptive MTP drafts), at FP8 with drafting off, at BF16 and INT8, and at
# --parallel 1 and 16. tools/train/evaluate.py generates and scores them.
set -u
command -v python3 >/dev/null || { echo "python3 not installed"; exit 77; }
. tests/e2e/lib/tiny_r1.sh
fail=0
ev() { # model, then dsr1 run options
    m=$1; shift
    python3 tools/train/evaluate.py --dsr1 "$DSR1" -m "$m" --seed 3 --per-family 8 --show -- "$@" || fail=1
}
ev "$R1M"
ev "$R1M" --spec-draft 0
ev "$R1M" -j 1
ev "$R1M" -j 16
for t in int4 int8 bf16; do
    tiny_r1_type $t
    echo "type $t:"
    ev "$TMPDIR/tiny-r1-$t.dsr1"
done
exit $fail
