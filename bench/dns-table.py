#!/usr/bin/env python3
"""bench/dns's table: from its results lines (PART TOOL wall_s user_s sys_s maxrss_kb lookups N
correct C … of T (P %) …), per part and tool the medians of lookups/s (N over the wall time), CPU µs
per lookup (user+system over N), correct % and the largest peak RSS; then, per part, sonde's
(and sonde-r's, sonde paced) figures against each peer's: its rate over theirs and its CPU per lookup over theirs.

usage: dns-table.py RESULTS"""
import re
import statistics
import sys

LINE = re.compile(r"^(\S+) (\S+) ([\d.]+) ([\d.]+) ([\d.]+) (\d+) lookups (\d+)(.*)$")
runs = {}
for line in open(sys.argv[1]):
    m = LINE.match(line.strip())
    if not m:
        continue
    part, tool = m.group(1), m.group(2)
    wall, user, sys_s, rss, n = float(m.group(3)), float(m.group(4)), float(m.group(5)), int(m.group(6)), int(m.group(7))
    pct = re.search(r"\(([\d.]+) %\)", m.group(8))
    runs.setdefault((part, tool), []).append({
        "rate": n / max(wall, 1e-9),
        "cpu_us": (user + sys_s) * 1e6 / max(n, 1),
        "correct": float(pct.group(1)) if pct else float("nan"),
        "rss_mib": rss / 1024,
        "n": n,
    })

med = {}
for (part, tool), rs in runs.items():
    med[(part, tool)] = {k: statistics.median(r[k] for r in rs) for k in ("rate", "cpu_us", "correct")}
    med[(part, tool)]["rss_mib"] = max(r["rss_mib"] for r in rs)
    med[(part, tool)]["runs"] = len(rs)
    med[(part, tool)]["n"] = rs[0]["n"]

print(f"{'part':14} {'tool':8} {'lookups':>9} {'lookups/s':>11} {'CPU us/lookup':>14} {'correct %':>10} {'peak RSS':>10} runs")
for (part, tool), m in sorted(med.items()):
    print(f"{part:14} {tool:8} {m['n']:>9} {m['rate']:>11.0f} {m['cpu_us']:>14.2f} {m['correct']:>10.3f} {m['rss_mib']:>7.1f} MiB {m['runs']}")

# The goals are for the XDP answerer (resolver mode) and the iterative mode; the other
# parts print their ratios alone.
goals = {("xdp", "massdns"): ("2x", "1/2"), ("xdp", "zdns"): ("20x", "1/50"), ("iterative", "zdns"): ("5x", None)}
parts = sorted({p for p, _ in med})
for part, sonde in ((p, t) for p in parts for t in ("sonde", "sonde-r")):
    s = med.get((part, sonde))
    if not s:
        continue
    for peer in ("massdns", "zdns"):
        p = med.get((part, peer))
        if not p:
            continue
        rate_goal, cpu_goal = goals.get((part, peer), (None, None))
        print(f"{part}: {sonde}/{peer}: lookups/s {s['rate'] / p['rate']:.2f}x"
              + (f" (goal >= {rate_goal})" if rate_goal else "")
              + f", CPU per lookup {s['cpu_us'] / p['cpu_us']:.3f} of theirs"
              + (f" (goal <= {cpu_goal})" if cpu_goal else "")
              + f"; correct {s['correct']:.3f} % against {p['correct']:.3f} %")
