#!/usr/bin/env python3
"""Scores DNS rows in sonde dns's form (bench/dns-rows.py makes them from the peers' output)
against the lab's truth (`sonde lab truth --dns`, ndjson), by the contract's rule
(docs/lab.md): a (name, type) is correct when the status is the truth's rcode, the chain
is the truth's and the sorted data of the answers of the asked type equal the truth's answers;
wrong when its row differs (a row
without a chain has its CNAME answers' targets for one, as `sonde lab score` reads sonde's); missing when there is none; rows for (name, type)s not asked are extra.

usage: dns-score.py TRUTH ROWS [ASKED] [--nx-beyond-truth]
ASKED (one name per line, or name,type; type A when absent) limits the truth to what a run asked;
with --nx-beyond-truth an asked (name, A) the truth does not list must be NXDOMAIN (the h{k}
names past --dns-hosts, which the contract makes NXDOMAIN), as in the scale part.
Prints one line: correct C wrong W missing M extra E duplicate D of N (P %) [first wrong: ...]."""
import json
import sys


def key(name, rtype):
    name = name.lower()
    return (name if name.endswith(".") else name + ".", rtype.upper())


def load_truth(path):
    truth = {}
    for line in open(path):
        if line.strip():
            t = json.loads(line)
            truth[key(t["name"], t["type"])] = (t["rcode"], list(t.get("chain") or []), sorted(t.get("answers") or []))
    return truth


def load_asked(path):
    asked = []
    for line in open(path):
        line = line.strip()
        if line:
            name, _, rtype = line.partition(",")
            asked.append(key(name, rtype or "A"))
    return asked


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    nx_beyond = "--nx-beyond-truth" in sys.argv
    truth = load_truth(args[0])
    if len(args) > 2:
        asked = load_asked(args[2])
        want = {k: truth.get(k, ("NXDOMAIN", [], []) if nx_beyond else None) for k in asked}
        want = {k: v for k, v in want.items() if v is not None}
    else:
        want = truth
    correct = wrong = extra = duplicate = 0
    seen = set()
    first_wrong = None
    for line in open(args[1], errors="replace"):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError:
            continue
        k = key(r.get("name") or "", r.get("type") or "")
        if k not in want:
            extra += 1
            continue
        if k in seen:
            duplicate += 1
            continue
        seen.add(k)
        rcode, chain, answers = want[k]
        got = sorted(a["data"] for a in r.get("answers") or [] if a.get("type") == k[1])
        # sonde dns writes no chain field: its chain is its CNAME answers' targets, in order (as
        # `sonde lab score` reads it).
        chain_of = r.get("chain") or [a.get("data", "") for a in r.get("answers") or [] if a.get("type") == "CNAME"]
        got_chain = [key(c, "")[0] for c in chain_of]
        if (r.get("status") or "").upper() == rcode and got_chain == chain and got == answers:
            correct += 1
        else:
            wrong += 1
            if first_wrong is None:
                first_wrong = (f"{k[0]} {k[1]}: got {r.get('status')} {got_chain} {got[:2]}, "
                               f"truth {rcode} {chain} {answers[:2]}")
    missing = len(want) - len(seen)
    pct = 100 * correct / max(len(want), 1)
    print(f"correct {correct} wrong {wrong} missing {missing} extra {extra} duplicate {duplicate} "
          f"of {len(want)} ({pct:.3f} %)" + (f" first wrong: {first_wrong[:300]}" if first_wrong else ""))


if __name__ == "__main__":
    main()
