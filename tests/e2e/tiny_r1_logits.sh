#!/bin/sh
# tiny_r1_logits.sh - the trained tiny R1 (models/tiny-r1): `dsr1 logits
# --f32` and `--mtp` on the FP8 checkpoint as published agree to 1e-3 with
# the training code's own PyTorch forward pass on the same (dequantized)
# weights (tests/fixtures/tiny-r1, written by tools/train/export.py), at the
# used vocabulary ids; every other id has a zero head row and logit 0.
set -u
command -v python3 >/dev/null || { echo "python3 not installed"; exit 77; }
. tests/e2e/lib/tiny_r1.sh
F=$FIXTURES/tiny-r1
fail=0
"$DSR1" logits -m "$R1M" --f32 --ids-file "$F/ids.txt" -o "$TMPDIR/l.f32" 2>/dev/null || { echo "dsr1 logits failed"; exit 1; }
python3 tools/train/check_logits.py "$TMPDIR/l.f32" "$F/logits_used.f32" "$F/used_ids.txt" 129280 || fail=1
"$DSR1" logits -m "$R1M" --f32 --mtp --ids-file "$F/ids.txt" -o "$TMPDIR/m.f32" 2>/dev/null || { echo "dsr1 logits --mtp failed"; exit 1; }
python3 tools/train/check_logits.py "$TMPDIR/m.f32" "$F/mtp_logits_used.f32" "$F/used_ids.txt" 129280 || fail=1
exit $fail
