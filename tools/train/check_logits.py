#!/usr/bin/env python3
"""check_logits.py - compare dsr1's full-vocabulary logits with the PyTorch
reference written by export.py (no torch needed: stdlib only).

Usage: check_logits.py DSR1_LOGITS.f32 REF_USED.f32 USED_IDS.txt VOCAB [TOL]
DSR1_LOGITS is [n, VOCAB]; REF_USED is [n, U] at the ids in USED_IDS.
Checks |diff| <= TOL (default 1e-3) at the used ids and |logit| <= TOL at
every other id (their head rows are zero). Prints the largest differences.
"""
import array
import sys


def main():
    got_p, ref_p, used_p, vocab = sys.argv[1:5]
    tol = float(sys.argv[5]) if len(sys.argv) > 5 else 1e-3
    V = int(vocab)
    used = [int(x) for x in open(used_p).read().split()]
    U = len(used)
    got, ref = array.array("f"), array.array("f")
    with open(got_p, "rb") as f:
        got.frombytes(f.read())
    with open(ref_p, "rb") as f:
        ref.frombytes(f.read())
    if sys.byteorder != "little":
        got.byteswap()
        ref.byteswap()
    if len(ref) % U or len(got) != len(ref) // U * V:
        print("shape mismatch: got %d floats, reference %d rows of %d" % (len(got), len(ref) // U, U))
        return 1
    n = len(ref) // U
    is_used = bytearray(V)
    for t in used:
        is_used[t] = 1
    d_used = d_other = 0.0
    for r in range(n):
        row = got[r * V:(r + 1) * V]
        for j, t in enumerate(used):
            d = abs(row[t] - ref[r * U + j])
            if not d <= d_used:
                d_used = d
        m = max(abs(v) for i, v in enumerate(row) if not is_used[i])
        if not m <= d_other:
            d_other = m
    print("%d positions: max |diff| at the %d used ids %.3g, max |logit| elsewhere %.3g (tolerance %g)"
          % (n, U, d_used, d_other, tol))
    return 0 if d_used <= tol and d_other <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
