#!/usr/bin/env python3
"""r1_tokenizer.py - write DeepSeek-R1's tokenizer files into DIR.

R1's tokenizer is DeepSeek-V3's (tests/fixtures/tokenizer) with the added
tokens 128798 and 128799 renamed from placeholders to <think> and </think>
(non-special, as in the released R1 files), and R1's tokenizer_config.json
(its chat template forces <think> open; tests/fixtures/chat).

Usage: r1_tokenizer.py DIR
"""
import json
import os
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../..")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(ROOT, "tests/fixtures/tokenizer/tokenizer.json"), encoding="utf-8") as f:
        t = json.load(f)
    for a in t["added_tokens"]:
        if a["id"] == 128798:
            a.update(content="<think>", special=False)
        if a["id"] == 128799:
            a.update(content="</think>", special=False)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False)
    with open(os.path.join(ROOT, "tests/fixtures/chat/tokenizer_config.r1.json"), encoding="utf-8") as f:
        c = json.load(f)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(c, f, ensure_ascii=False, indent=2)


if __name__ == "__main__":
    main()
