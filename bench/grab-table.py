#!/usr/bin/env python3
"""Medians per tool of compare-grab's raw lines, and sonde's ratios against the peers of the
same run. A line: LABEL TOOL wall_s user_s sys_s maxrss_kb completed N of M live (P %), bodies
correct B of C (P %), … (or LABEL TOOL hung / failed)."""
import re
import statistics
import sys

rows, bad = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 3:
        continue
    key = (f[0], f[1])
    m = re.search(r"completed (\d+) of (\d+) live \(([\d.]+) %\)", line)
    b = re.search(r"bodies correct (\d+) of (\d+) \(([\d.]+) %\)", line)
    w = re.search(r"wrong bodies (\d+)", line)
    fc = re.search(r"fields correct (\d+) of (\d+) \(([\d.]+) %\)", line)
    if not m or len(f) < 6:
        bad.setdefault(key, []).append(" ".join(f[2:])[:80])
        continue
    wall, user, sys_, rss = float(f[2]), float(f[3]), float(f[4]), float(f[5])
    done = int(m.group(1))
    rows.setdefault(key, []).append({
        "conn_s": done / max(wall, 1e-9),
        "cpu_us": (user + sys_) * 1e6 / max(done, 1),
        "completed": float(m.group(3)),
        "bodies": float(b.group(3)) if b else float("nan"),
        "wrong": int(w.group(1)) if w else 0,
        "fields": float(fc.group(3)) if fc else float("nan"),
        "rss_mib": rss / 1024,
    })

med = {}
# The service modes (compare-grab MODE=…) check fields, not bodies.
checked = "fields" if any(r["fields"] == r["fields"] and r["bodies"] != r["bodies"]
                          for rs in rows.values() for r in rs) else "bodies"
print(f"{'':6} {'tool':13} {'conn/s':>9} {'CPU us/conn':>12} {'completed':>10} {checked + ' ok':>10} {'wrong':>6} {'peak RSS':>9}  runs")
for key, rs in sorted(rows.items()):
    m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    med[key] = m
    print(f"{key[0]:6} {key[1]:13} {m['conn_s']:9.0f} {m['cpu_us']:12.1f} {m['completed']:9.3f}% {m[checked]:9.3f}% {m['wrong']:6.0f} {m['rss_mib']:7.0f} MiB  {len(rs)}")
for key, why in sorted(bad.items()):
    print(f"{key[0]:6} {key[1]:13} {len(why)} run(s) did not finish: {why[0]}")
for label in sorted({k[0] for k in med}):
    s = med.get((label, "sonde-xdp"))
    if not s:
        continue
    threaded = sorted(k[1] for k in med if k[0] == label and k[1].startswith("sonde-xdp-t"))
    for peer in ["sonde-kernel", "zgrab2", "masscan", "sonde-ring"] + threaded:
        p = med.get((label, peer))
        if p:
            print(f"{label}: sonde-xdp / {peer:12} = {s['conn_s'] / p['conn_s']:.2f}x conn/s, "
                  f"{s['cpu_us'] / p['cpu_us']:.3f}x the CPU per connection")
