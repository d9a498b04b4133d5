#!/usr/bin/env python3
"""Runs a command inside the scanner namespace and measures its send phase the same way for every
tool: the interface's tx_packets counter, sampled every millisecond, gives the frames sent and
the time from the first to the last one; the child's rusage gives its CPU time.

usage: measure-send.py IFACE NAME PROBES [TIMEOUT] -- CMD ARGS...   (run it inside the namespace)
The send phase ends when PROBES frames have left (later frames are resets and ARP, not probes).
prints one line: NAME frames send_seconds pps cpu_seconds
A command still running after TIMEOUT seconds (default 300) is killed and reported as hung:
the line is "NAME hung TIMEOUT" and the exit code 3 (masscan 1.3.2 can wait forever).
"""
import resource
import subprocess
import sys
import time

iface, name, probes = sys.argv[1], sys.argv[2], int(sys.argv[3])
sep = sys.argv.index("--")
timeout = float(sys.argv[4]) if sep > 4 else 300.0
cmd = sys.argv[sep + 1:]
counter = f"/sys/class/net/{iface}/statistics/tx_packets"


def tx():
    with open(counter) as f:
        return int(f.read())


start = tx()
last, first_t, last_t = start, None, None
child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
deadline = time.monotonic() + timeout
while child.poll() is None:
    if time.monotonic() > deadline:
        child.kill()
        child.wait()
        print(name, "hung", round(timeout))
        sys.exit(3)
    now, t = tx(), time.monotonic()
    if now != last:
        first_t = first_t or t
        if last - start < probes:
            last_t = t
        last = now
    time.sleep(0.001)
if child.returncode != 0:
    sys.stderr.write(child.stderr.read().decode(errors="replace"))
    sys.exit(f"{name} failed with exit code {child.returncode}")
frames = tx() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
span = max((last_t or 0) - (first_t or 0), 1e-3)
sent = min(frames, probes)
print(name, sent, round(span, 4), round(sent / span), round(usage.ru_utime + usage.ru_stime, 4))
