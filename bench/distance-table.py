#!/usr/bin/env python3
"""Medians per (path, tool) of bench/distance's grab lines, and the ratios the issue asks for:
rtt ms is the median SYN to SYN-ACK; table ms the mean SYN-ACK to end (a connection's time in the
table), and peak beside rate × that, SYNs peak beside rate × the mean rtt (Little's law, at the
pace -r, or the run's rate when not paced); then
each sonde run through the far path against the same through the near (~0 ms) one, and against
ZGrab2 through the far one. A line: PATH TOOL wall_s user_s sys_s maxrss_kb <lab score's line>
rows R distinct D life_us L rtt_us T rtt_mean_us M peak P syn_peak Q syn_again S resent X peer_resent Y path_lost Z pace R."""
import re
import statistics
import sys

runs, bad = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 3:
        continue
    key = (f[0], f[1])
    done = re.search(r"completed (\d+) of (\d+) live \(([\d.]+) %\)", line)
    bodies = re.search(r"bodies correct (\d+) of (\d+) \(([\d.]+) %\)", line)
    if not done or len(f) < 6:
        bad.setdefault(key, []).append(" ".join(f[2:])[:100])
        continue
    num = lambda name: float(re.search(rf"\b{name} (-?\d+(?:\.\d+)?)", line).group(1))
    wall, cpu = float(f[2]), float(f[3]) + float(f[4])
    n = int(done.group(1))
    # Little's law at the pace new SYNs left (-r), or at the run's rate when not paced.
    pace = num("pace") or n / wall
    runs.setdefault(key, []).append({
        "conn_s": n / wall,
        "cpu_us": cpu * 1e6 / max(n, 1),
        "completed": float(done.group(3)),
        "bodies": float(bodies.group(3)) if bodies else float("nan"),
        "rows": num("rows"), "distinct": num("distinct"),
        "life_ms": num("life_us") / 1e3, "rtt_ms": num("rtt_us") / 1e3,
        "little": pace * num("life_us") / 1e6,
        "little_syn": pace * num("rtt_mean_us") / 1e6,
        "peak": num("peak"), "syn_peak": num("syn_peak"), "syn_again": num("syn_again"), "resent": num("resent"),
        "path_lost": num("path_lost"), "rss_mib": float(f[5]) / 1024,
    })

med = {k: {c: statistics.median(r[c] for r in rs) for c in rs[0]} for k, rs in runs.items()}
print(f"{'path':5} {'tool':13} {'conn/s':>8} {'CPU us':>8} {'done %':>8} {'bodies %':>8} {'rows':>7} "
      f"{'distinct':>8} {'rtt ms':>7} {'table ms':>8} {'peak':>7} {'rate*that':>9} {'SYNs peak':>9} {'rate*rtt':>8} {'SYN again':>9} {'resent':>7} {'path lost':>9} {'RSS MiB':>7}  runs")
for k, m in sorted(med.items()):
    print(f"{k[0]:5} {k[1]:13} {m['conn_s']:8.0f} {m['cpu_us']:8.1f} {m['completed']:8.3f} {m['bodies']:8.3f} "
          f"{m['rows']:7.0f} {m['distinct']:8.0f} {m['rtt_ms']:7.1f} {m['life_ms']:8.1f} {m['peak']:7.0f} {m['little']:9.0f} {m['syn_peak']:9.0f} {m['little_syn']:8.0f} "
          f"{m['syn_again']:9.0f} {m['resent']:7.0f} {m['path_lost']:9.0f} {m['rss_mib']:7.0f}  {len(runs[k])}")
for k, why in sorted(bad.items()):
    print(f"{k[0]:5} {k[1]:13} {len(why)} run(s) did not finish: {why[0]}")
for tool in sorted({k[1] for k in med if k[1].startswith("sonde")}):
    far, near, zg = med.get(("far", tool)), med.get(("near", tool)), med.get(("far", "zgrab2"))
    if far and near:
        print(f"{tool}: far / near = {far['conn_s'] / near['conn_s']:.2f}x conn/s (goal >= 0.8)")
    if far and zg:
        print(f"{tool} / zgrab2, both far: {far['conn_s'] / zg['conn_s']:.2f}x conn/s (goal >= 10), "
              f"{far['cpu_us'] / zg['cpu_us']:.3f}x the CPU per connection (goal <= 0.05)")
