#!/usr/bin/env python3
"""corpus.py - the synthetic task corpus of the tiny trained R1 (models/tiny-r1).

Generates conversations with checkable answers from a seed and renders each
one exactly as dsr1 renders it (R1 chat template, tools preamble in the
system prompt; prompts/template-r1.jinja, core/template.c). Each example is
{"family", "prompt" (rendered text ending with the generation prompt),
"completion" (what the assistant must produce, EOS included), "answer" (the
bare answer), "request" (the dsr1 run request), "expect" (the content or
tool call dsr1 run must return)}.

Families (all chosen so a ~1M-parameter model learns them in ~40 minutes on
two CPU cores; see models/tiny-r1/README.md):
  add      two-digit addition, carries worked out in the reasoning
  compare  which of two two-digit numbers is larger (tens, then units)
  sort     four single digits in ascending order
  count    how many times a letter occurs in a word (running count)
  reverse  a word spelled backwards (letters listed in the reasoning)
  tool     get_weather: call the tool with the city (first turn), then
           answer from the tool's result (second turn)
Some prompts carry an earlier, finished exchange as history (multi-turn).

Usage: corpus.py --seed N --per-family K [--out FILE]   (JSONL to stdout)
       [--equal-tens]  K compares with equal tens digits only, each with a
                   "context" prefix of the completion (prep.py: not a target)
       [--focus]   the third training phase's mix (models/tiny-r1/README.md):
                   half the prompts carry history (one or two exchanges, a
                   compare often asking about the sum just given), 30% of
                   counts ask for an absent letter. Without it, the RNG sequence (and so the
                   corpus of every seed) is the one phases 1 and 2 used.
No third-party modules: the test suite may run it without torch.
"""
import argparse
import json
import os
import random
import sys

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSIST = "<｜Assistant｜>"
CALLS_B, CALLS_E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_B, CALL_E, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
OUTS_B, OUTS_E = "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>"
OUT_B, OUT_E = "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"

FAMILIES = ["add", "compare", "sort", "count", "reverse", "tool"]

WORDS = """apple bread chair cloud dance eagle flame grape heart house juice knife
lemon light mango maple night ocean paper piano plant queen river robot salad sheep
smile snake spoon stone storm sugar table tiger toast tower train water whale wheel
world zebra basket banana butter candle carrot castle cookie copper dragon finger
flower forest garden guitar hammer island jacket kitten ladder letter market mirror
monkey orange pepper pencil pillow planet pocket rabbit rocket silver spider summer
tomato turtle window winter yellow bird book cake coin desk door fish frog gold hill
kite lamp leaf moon nest pear rain ring road rose sand ship shoe snow star sun tree
wolf cat dog cup egg hat key map owl pen box fox bee ant bus car""".split()

CITIES = """Oslo Paris Berlin Madrid Rome Vienna Prague Warsaw Dublin Lisbon Athens
Cairo Tokyo Seoul Beijing Delhi Lima Bogota Quito Nairobi Lagos Sydney Perth Toronto
Boston Chicago Denver Miami Dallas Seattle London Helsinki Stockholm Zurich Geneva
Munich Hamburg Milan Naples Kyoto""".split()

SKIES = ["sunny", "cloudy", "rainy", "snowy", "foggy", "windy"]

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../prompts/tools-preamble.txt"),
          encoding="utf-8") as _f:
    PREAMBLE = _f.read()


def think(reasoning, answer):
    """An assistant turn as generated after the forced '<think>\\n'."""
    return reasoning + "\n</think>\n\n" + answer + EOS


def fam_add(r):
    a, b = r.randint(10, 99), r.randint(10, 99)
    q = r.choice(["What is {a} + {b}?", "Add {a} and {b}.", "Compute {a} + {b}."]).format(a=a, b=b)
    ua, ub, ta, tb = a % 10, b % 10, a // 10, b // 10
    u = ua + ub
    c = u // 10
    lines = ["Units: %d + %d = %d, write %d carry %d." % (ua, ub, u, u % 10, c)]
    t = ta + tb + c
    lines.append("Tens: %d + %d + %d = %d." % (ta, tb, c, t))
    lines.append("So %d + %d = %d." % (a, b, a + b))
    return q, think("\n".join(lines), "%d + %d = %d." % (a, b, a + b)), str(a + b)


# The compare reasoning of --compare-v2 (corpus.py without it writes the
# phases 1-4 corpus): "... so B is larger and S is smaller." instead of
# "... so B is larger.". Phase 5 used it, but " smaller" has no vocabulary
# row in the trained model (a resumed phase cannot add rows), so train.py
# left every compare of that phase out: phase 5 trained the other families
# only. ("... so B is larger than S.", whose words have rows, was trained
# too and not kept: comparisons 139/150 against 140/150.)
COMPARE_V2 = False

# The compare reasoning of --compare-v3 (phase 6): the tens digits are
# always written out first ("Tens digits: 5 and 5.") and only then is the
# decision taken (on a new line: "Tens digits are both 5. Units ..."). In the
# phases 1-5 form that decision was the first reasoning token, taken
# before either digit was written: the trained model wrote "Tens digits:
# 5 and 5. 5 is larger" for about one pair in ten with equal tens digits.
# With both digits just written, the decision is a look at the two tokens
# before it. Pairs with different tens digits read as before. Tried as a
# phase 6 (steps 9000-10000 from the published checkpoint, lr tail
# 4.9e-4 to 4e-4; seeds 16 focus, 17 plain, 18 3,000 --equal-tens, all
# --compare-v3) and not kept: on held-out seed 6 it still wrote "Tens
# digits: 7 and 7. 7 is larger" (compare 44/50, was 45/50) and counted
# worse (44/50, was 50/50).
COMPARE_V3 = False


def compare_why(a, b):
    """The compare reasoning, without its final full stop."""
    big = max(a, b)
    ta, tb = a // 10, b // 10
    if ta != tb:
        return "Tens digits: %d and %d. %d is larger, so %d is larger" % (ta, tb, max(ta, tb), big)
    why = ("Tens digits are both %d. Units digits: %d and %d. %d is larger, so %d is larger"
           % (ta, a % 10, b % 10, max(a % 10, b % 10), big))
    return ("Tens digits: %d and %d.\n" % (ta, tb) + why) if COMPARE_V3 else why


def fam_compare(r, focus=False, first=None):
    # (Tried: 40% equal tens digits in the focus mix. The model then
    # answered "Tens digits are both" for most pairs: the first reasoning
    # token is where it compares the tens digits, and the mix moved that
    # decision's prior. The natural 10% stays; --equal-tens adds examples
    # whose decision is context, not target.)
    a = r.randint(10, 99)
    b = r.randint(10, 99)
    while b == a:
        b = r.randint(10, 99)
    if first is not None and first != b:  # a follow-up about an earlier answer
        a = first
        if r.random() < 0.5:
            a, b = b, a
    q = r.choice(["Which is larger, {a} or {b}?", "Which number is bigger: {a} or {b}?"]).format(a=a, b=b)
    big, small = max(a, b), min(a, b)
    why = compare_why(a, b)
    if COMPARE_V2:
        # the smaller number said in the reasoning, so the answer copies
        # both numbers from it: with equal tens digits the two numbers of
        # the question differ only in their second digit, and copying the
        # smaller one from there is what the phase-2 model got wrong
        why += " and %d is smaller" % small
    return q, think(why + ".", "%d is larger than %d." % (big, small)), str(big)


def fam_sort(r):
    xs = [r.randint(0, 9) for _ in range(4)]
    q = r.choice(["Sort these numbers from smallest to largest: {l}.",
                  "Put {l} in ascending order."]).format(l=", ".join(map(str, xs)))
    s = sorted(xs)
    names = ["The smallest is %d." % s[0], "Next is %d." % s[1], "Next is %d." % s[2],
             "The largest is %d." % s[3]]
    ans = ", ".join(map(str, s))
    return q, think(" ".join(names), ans), ans


def fam_count(r, focus=False):
    w = r.choice(WORDS)
    if focus:
        ch = r.choice(w) if r.random() < 0.7 else r.choice([c for c in "abcdefghijklmnopqrstuvwxyz" if c not in w])
    else:
        ch = r.choice(w) if r.random() < 0.8 else r.choice("abcdefghijklmnopqrstuvwxyz")
    q = r.choice(['How many times does the letter "{c}" appear in "{w}"?',
                  'Count the letter "{c}" in the word "{w}".']).format(c=ch, w=w)
    n = 0
    steps = []
    for x in w:
        n += x == ch
        steps.append("%s %d" % (x, n))
    why = "Spell %s: %s. Counting %s: %s." % (w, ", ".join(w), ch, ", ".join(steps))
    word = "time" if n == 1 else "times"
    return q, think(why, 'The letter "%s" appears %d %s in "%s".' % (ch, n, word, w)), str(n)


def fam_reverse(r):
    w = r.choice(WORDS)
    q = r.choice(['Reverse the word "{w}".', 'Spell "{w}" backwards.']).format(w=w)
    rev = w[::-1]
    why = "Letters of %s: %s. Backwards: %s." % (w, ", ".join(w), ", ".join(rev))
    return q, think(why, '"%s" backwards is "%s".' % (w, rev)), rev


def py_json(o):
    """json.dumps as Python's tojson/str dumps it (core/template.c py_json)."""
    return json.dumps(o, ensure_ascii=False)


def system_text(system, tools):
    s = system or ""
    if tools:
        if s:
            s += "\n\n"
        s += PREAMBLE
        for t in tools:
            s += "\n```json\n" + py_json(t) + "\n```\n"
    return s


def render(messages, tools):
    """R1 template (prompts/template-r1.jinja) for the shapes used here, plus
    dsr1's tools preamble; ends with the generation prompt."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    out = BOS + system_text(system, tools)
    is_tool = False
    first_out = True
    for m in messages:
        if m["role"] == "user":
            is_tool = False
            out += USER + m["content"]
        elif m["role"] == "assistant" and m.get("content") is None:
            is_tool = False
            tc = m["tool_calls"][0]  # one call: the template emits no calls_end
            out += (ASSIST + CALLS_B + CALL_B + tc["type"] + SEP + tc["function"]["name"] +
                    "\n```json\n" + tc["function"]["arguments"] + "\n```" + CALL_E)
        elif m["role"] == "assistant":
            if is_tool:
                out += OUTS_E + m["content"] + EOS
                is_tool = False
            else:
                c = m["content"].split("</think>")[-1]
                out += ASSIST + c + EOS
        elif m["role"] == "tool":
            is_tool = True
            if first_out:
                out += OUTS_B + OUT_B + m["content"] + OUT_E
                first_out = False
            else:
                out += "\n" + OUT_B + m["content"] + OUT_E
    if is_tool:
        out += OUTS_E
    else:
        out += ASSIST + "<think>\n"
    return out


def fam_tool(r):
    """Returns (messages, tools, completion, answer) for one of the two turns."""
    city = r.choice(CITIES)
    user = r.choice(["What's the weather in {c}?", "How is the weather in {c} today?",
                     "Is it cold in {c} right now?"]).format(c=city)
    msgs = [{"role": "user", "content": user}]
    args = py_json({"city": city})
    if r.random() < 0.5:
        why = "The user asks about the weather in %s. I should call get_weather with city %s." % (city, city)
        comp = (why + "\n</think>\n\n" + CALLS_B + CALL_B + "function" + SEP + "get_weather\n```json\n" +
                args + "\n```" + CALL_E + CALLS_E + EOS)
        return msgs, comp, "get_weather " + args
    temp = r.randint(-15, 35)
    sky = r.choice(SKIES)
    result = py_json({"city": city, "temp_c": temp, "sky": sky})
    msgs += [{"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": args}}]},
        {"role": "tool", "content": result}]
    comp = "It is %d°C and %s in %s.%s" % (temp, sky, city, EOS)
    return msgs, comp, "%d°C and %s" % (temp, sky)


GEN = {"add": fam_add, "compare": fam_compare, "sort": fam_sort, "count": fam_count,
       "reverse": fam_reverse}


def equal_tens(r):
    """A compare with equal tens digits whose decision ("Tens digits are
    both T.") is given as context (prep.py adds it to the prompt tokens'
    loss mask): more practice at what follows it without moving the prior
    of the decision itself. With --compare-v3 the decision comes after
    the digits are written and is trained like any other token."""
    t = r.randint(1, 9)
    ua, ub = r.sample(range(10), 2)
    a, b = 10 * t + ua, 10 * t + ub
    q = r.choice(["Which is larger, {a} or {b}?", "Which number is bigger: {a} or {b}?"]).format(a=a, b=b)
    why = compare_why(a, b)
    why += (" and %d is smaller." % min(a, b)) if COMPARE_V2 else "."
    msgs = [{"role": "user", "content": q}]
    comp = think(why, "%d is larger than %d." % (max(a, b), min(a, b)))
    ex = {"family": "compare", "prompt": render(msgs, None), "completion": comp,
          "answer": str(max(a, b)), "request": {"messages": msgs}, "expect": expect(comp)}
    if not COMPARE_V3:
        ex["context"] = "Tens digits are both %d." % t
    return ex


def gen(r, fam, focus, first=None):
    if focus and fam == "compare":
        return fam_compare(r, True, first)
    if focus and fam == "count":
        return fam_count(r, True)
    return GEN[fam](r)


def example(r, fam, focus=False):
    tools = None
    history = []
    first = None
    if fam != "tool" and r.random() < (0.5 if focus else 0.25):
        # earlier finished exchanges (history keeps only the answers)
        for _ in range(r.randint(1, 2) if focus else 1):
            hf = r.choice(list(GEN))
            hq, hc, ha = gen(r, hf, focus)
            history += [{"role": "user", "content": hq},
                        {"role": "assistant", "content": hc[:-len(EOS)]}]
        if focus and hf == "add" and int(ha) < 100 and r.random() < 0.5:
            first = int(ha)
    if fam == "tool":
        tools = [WEATHER_TOOL]
        msgs, comp, ans = fam_tool(r)
    else:
        q, comp, ans = gen(r, fam, focus, first)
        msgs = [{"role": "user", "content": q}]
    msgs = history + msgs
    req = {"messages": msgs}
    if tools:
        req["tools"] = tools
    return {"family": fam, "prompt": render(msgs, tools), "completion": comp,
            "answer": ans, "request": req, "expect": expect(comp)}


def expect(comp):
    """What dsr1 run must return: the content after </think>, or the tool call."""
    body = comp[:-len(EOS)]
    if "</think>" in body:
        body = body.split("</think>")[-1].lstrip("\n")
    if body.startswith(CALLS_B):
        name, rest = body.split(SEP)[1].split("\n", 1)
        args = rest.split("```json\n")[1].split("\n```")[0]
        return {"tool_call": {"name": name, "arguments": json.loads(args)}}
    return {"content": body}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--per-family", type=int, required=True)
    ap.add_argument("--out")
    ap.add_argument("--focus", action="store_true")
    ap.add_argument("--equal-tens", action="store_true",
                    help="only compares with equal tens digits, the decision as context")
    ap.add_argument("--compare-v2", action="store_true",
                    help='compare reasoning that names the smaller number too ("... and S is smaller.")')
    ap.add_argument("--compare-v3", action="store_true",
                    help='compare reasoning that writes the tens digits before deciding ("Tens digits: 5 and 5.\\n'
                         'Tens digits are both 5. ...")')
    a = ap.parse_args()
    global COMPARE_V2, COMPARE_V3
    COMPARE_V2 = a.compare_v2
    COMPARE_V3 = a.compare_v3
    r = random.Random(a.seed)
    f = open(a.out, "w", encoding="utf-8") if a.out else sys.stdout
    for i in range(a.per_family if a.equal_tens else 0):
        f.write(json.dumps(equal_tens(r), ensure_ascii=False) + "\n")
    for i in range(0 if a.equal_tens else a.per_family):
        for fam in FAMILIES:
            f.write(json.dumps(example(r, fam, a.focus), ensure_ascii=False) + "\n")
    if a.out:
        f.close()


if __name__ == "__main__":
    main()
