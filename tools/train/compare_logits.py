#!/usr/bin/env python3
"""compare_logits.py - how far one model file's logits are from another's:
mean and max KL(ref || test) in nats over the full vocabulary, top-1
agreement, over every position of `dsr1 logits` outputs [n, VOCAB].
Used for the quantization table in models/tiny-r1/README.md (numpy).

Usage: compare_logits.py REF.f32 TEST.f32 VOCAB
"""
import sys

import numpy as np


def logp(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def main():
    V = int(sys.argv[3])
    a = np.fromfile(sys.argv[1], dtype="<f4").reshape(-1, V).astype(np.float64)
    b = np.fromfile(sys.argv[2], dtype="<f4").reshape(-1, V).astype(np.float64)
    la, lb = logp(a), logp(b)
    kl = (np.exp(la) * (la - lb)).sum(-1)
    top = (a.argmax(-1) == b.argmax(-1)).mean()
    print("positions %d  KL mean %.3g max %.3g  top-1 agreement %.4f" % (len(a), kl.mean(), kl.max(), top))


if __name__ == "__main__":
    main()
