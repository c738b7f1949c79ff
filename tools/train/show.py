#!/usr/bin/env python3
"""show.py - print `dsr1 run` results for a person: each request's last user
turn (or tool result), the reasoning set apart, then the answer or tool call.

Usage: show.py REQUESTS.jsonl RESULTS.jsonl
"""
import json
import sys
import textwrap


def main():
    reqs = {}
    for l in open(sys.argv[1], encoding="utf-8"):
        r = json.loads(l)
        reqs[r["id"]] = r
    for l in open(sys.argv[2], encoding="utf-8"):
        o = json.loads(l)
        r = reqs.get(o["id"], {})
        last = (r.get("messages") or [{}])[-1]
        who = "tool result" if last.get("role") == "tool" else "user"
        print("-- %s" % o["id"])
        print("   %-9s %s" % (who + ":", last.get("content", r.get("prompt", ""))))
        if o.get("reasoning_content"):
            for i, line in enumerate(o["reasoning_content"].strip().splitlines()):
                for j, w in enumerate(textwrap.wrap(line, 90) or [""]):
                    print("   %-9s %s" % ("thinking:" if i == 0 and j == 0 else "", w))
        for c in o.get("tool_calls") or []:
            f = c.get("function", {})
            print("   %-9s %s(%s)" % ("tool call:", f.get("name"), f.get("arguments")))
        if o.get("content"):
            print("   %-9s %s" % ("answer:", o["content"].strip()))
        print()


if __name__ == "__main__":
    main()
