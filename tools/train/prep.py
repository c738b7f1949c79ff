#!/usr/bin/env python3
"""prep.py - tokenize a corpus.py JSONL file with dsr1's own tokenizer.

Prompt and completion are tokenized separately and concatenated, exactly as
at inference: dsr1 tokenizes the rendered prompt (ending with the generation
prompt) and the model then emits the completion's tokens one by one.
Writes JSONL {"family", "ids", "n_prompt", "answer"} per example. An
example's optional "context" (a prefix of its completion) counts as prompt
in n_prompt: the model reads it but is not trained to produce it.

Usage: prep.py IN.jsonl OUT.jsonl [--dsr1 ./dsr1] [--tokenizer PATH]
"""
import argparse
import json
import os
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("--dsr1", default="./dsr1")
    ap.add_argument("--tokenizer", default="build/tiny-r1/tokenizer/tokenizer.json")
    a = ap.parse_args()
    ex = []
    for n, l in enumerate(open(a.inp, encoding="utf-8"), 1):
        try:
            e = json.loads(l)
            for k in ("family", "prompt", "completion"):
                if not isinstance(e.get(k), str):
                    raise ValueError('no string "%s"' % k)
        except ValueError as err:
            sys.exit("prep.py: %s:%d: expected a corpus.py example, %s" % (a.inp, n, err))
        ex.append(e)
    lines = []
    for e in ex:
        lines.append(json.dumps({"text": e["prompt"]}, ensure_ascii=False))
        lines.append(json.dumps({"text": e["completion"]}, ensure_ascii=False))
        lines.append(json.dumps({"text": e.get("context", "")}, ensure_ascii=False))
    p = subprocess.run([a.dsr1, "tokenize", "-m", a.tokenizer, "--jsonl"],
                       input=("\n".join(lines) + "\n").encode(), capture_output=True)
    if p.returncode:
        sys.exit("prep.py: %s tokenize failed: %s" % (a.dsr1, p.stderr.decode(errors="replace").strip()))
    toks = [json.loads(l)["ids"] for l in p.stdout.decode().splitlines()]
    assert len(toks) == 3 * len(ex), (len(toks), len(ex))
    tmp = a.out + ".tmp"  # a finished file or none
    with open(tmp, "w", encoding="utf-8") as f:
        for i, e in enumerate(ex):
            pi, ci, xi = toks[3 * i], toks[3 * i + 1], toks[3 * i + 2]
            # a context prefix of the completion is not a target (loss
            # mask), when its tokens are the completion's first ones
            nx = len(xi) if xi and ci[:len(xi)] == xi else 0
            f.write(json.dumps({"family": e["family"], "ids": pi + ci, "n_prompt": len(pi) + nx,
                                "answer": e["answer"]}) + "\n")
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
