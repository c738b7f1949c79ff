#!/usr/bin/env python3
"""evaluate.py - accuracy of a tiny-r1 .dsr1 file through the real path.

Generates held-out prompts with corpus.py (a seed the training set did not
use), answers them with `dsr1 run` (greedy), and scores each family: a
result is correct when its content equals the expected answer sentence
(which holds the checked answer) and reasoning was produced, or, for the
first tool turn, when it is exactly one get_weather call with the right
arguments. Stdlib only (the test suite runs it; no torch).

Usage: evaluate.py -m MODEL [--seed 2] [--per-family 8] [--min 0.95] [--focus]
       [--json OUT] [--prompts-out P.jsonl] [-- extra dsr1 run options, e.g. -j 16]
Exit 0 when every family reaches --min, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402


def correct(ex, res):
    exp = ex["expect"]
    if "tool_call" in exp:
        calls = res.get("tool_calls") or []
        if len(calls) != 1:
            return False
        f = calls[0].get("function", {})
        try:
            args = json.loads(f.get("arguments", ""))
        except ValueError:
            return False
        return f.get("name") == exp["tool_call"]["name"] and args == exp["tool_call"]["arguments"]
    content = (res.get("content") or "").strip()
    if content != exp["content"]:
        return False
    # forced <think>: a reasoning block must be there (not after a tool result)
    needs_reasoning = ex["prompt"].endswith("<think>\n")
    return bool(res.get("reasoning_content")) or not needs_reasoning


def key(o):
    return (o.get("content"), o.get("reasoning_content"), json.dumps(o.get("tool_calls")))


def shape_error(ex, res):
    """'' when res has the shape the model was trained to produce."""
    if res is None:
        return "no result"
    if "tool_call" in ex["expect"]:
        calls = res.get("tool_calls") or []
        if len(calls) != 1 or calls[0].get("function", {}).get("name") != "get_weather":
            return "expected one get_weather call, got %r" % calls
        try:
            args = json.loads(calls[0]["function"].get("arguments", ""))
        except ValueError:
            return "arguments are not JSON"
        if not (isinstance(args, dict) and list(args) == ["city"] and isinstance(args["city"], str)):
            return "arguments %r" % args
        return ""
    if not (res.get("content") or "").strip():
        return "empty answer"
    if ex["prompt"].endswith("<think>\n") and not res.get("reasoning_content"):
        return "no reasoning"
    if res.get("finish_reason") != "stop":
        return "finish_reason %s" % res.get("finish_reason")
    return ""


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--dsr1", default="./dsr1")
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--per-family", type=int, default=8)
    ap.add_argument("--min", type=float, default=0.95)
    ap.add_argument("--focus", action="store_true",
                    help="corpus.py --focus prompts: half with history, follow-up questions")
    ap.add_argument("--json")
    ap.add_argument("--save", help="keep dsr1 run's results here")
    ap.add_argument("--show", action="store_true", help="print wrong answers")
    ap.add_argument("--check-format", action="store_true",
                    help="fail unless every result has the trained shape: reasoning and an "
                         "answer after a forced <think>, one get_weather call with a city")
    ap.add_argument("--same-as", help="fail unless the results equal this earlier --save file")
    ap.add_argument("--prompts-out", help="also write the rendered prompts, tagged by family, as "
                                          "`dsr1 bench --spec --prompts` reads them")
    a = ap.parse_args(argv)
    import random
    r = random.Random(a.seed)
    ex = [corpus.example(r, f, a.focus) for _ in range(a.per_family) for f in corpus.FAMILIES]
    if a.prompts_out:
        with open(a.prompts_out, "w", encoding="utf-8") as f:
            for e in ex:
                f.write(json.dumps({"prompt": e["prompt"], "tag": e["family"]},
                                   ensure_ascii=False) + "\n")
    with tempfile.TemporaryDirectory() as td:
        inp, out = os.path.join(td, "in.jsonl"), os.path.join(td, "out.jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            for i, e in enumerate(ex):
                req = dict(e["request"], id=i, max_tokens=160)
                f.write(json.dumps(req, ensure_ascii=False) + "\n")
        t0 = time.time()
        out = a.save or out
        p = subprocess.run([a.dsr1, "run", "-m", a.model, "--in", inp, "--out", out,
                            "--temperature", "0", "--overwrite"] + extra, stderr=subprocess.PIPE)
        summary = [l for l in p.stderr.decode(errors="replace").splitlines() if l.strip()][-3:]
        wall = time.time() - t0
        if p.returncode:
            print("dsr1 run failed with status %d" % p.returncode)
            return 1
        res = {}
        for l in open(out, encoding="utf-8"):
            o = json.loads(l)
            res[o["id"]] = o
    score = {}
    for i, e in enumerate(ex):
        ok = i in res and correct(e, res[i])
        s = score.setdefault(e["family"], [0, 0])
        s[0] += ok
        s[1] += 1
        if not ok and a.show:
            o = res.get(i, {})
            print("WRONG %s: %r -> %r / %r" % (e["family"], e["request"]["messages"][-1]["content"],
                                               o.get("content"), o.get("tool_calls")))
    bad = 0
    if a.check_format:
        for i, e in enumerate(ex):
            msg = shape_error(e, res.get(i))
            if msg:
                bad += 1
                print("FORMAT %s %d: %s" % (e["family"], i, msg))
    if a.same_as:
        old = {}
        for l in open(a.same_as, encoding="utf-8"):
            o = json.loads(l)
            old[o["id"]] = o
        for i in range(len(ex)):
            if key(res.get(i, {})) != key(old.get(i, {})):
                bad += 1
                print("DIFFERS from %s: request %d: %r vs %r" % (a.same_as, i, key(res.get(i, {})),
                                                                  key(old.get(i, {}))))
    worst = 1.0
    line = []
    for f in corpus.FAMILIES:
        k, n = score[f]
        worst = min(worst, k / n)
        line.append("%s %d/%d" % (f, k, n))
    print("%s: %s (%.1f s)" % (" ".join(extra) or "defaults", ", ".join(line), wall))
    for l in summary:
        print("   dsr1 run: " + l.strip()[-150:])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"options": extra, "score": score, "wall_s": wall}, f)
    return 0 if worst >= a.min and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
