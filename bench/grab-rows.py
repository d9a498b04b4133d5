#!/usr/bin/env python3
"""Turns a grab tool's output into sonde grab's row format (ndjson: saddr, dport, status,
http_status, http_body), so `sonde lab score --module grab` scores every tool the same way.

usage: grab-rows.py TOOL WORKDIR    (reads WORKDIR/<tool output>, writes WORKDIR/TOOL.ndjson)
sonde's own rows are already in that format and are left as they are."""
import json
import re
import sys

tool, work = sys.argv[1], sys.argv[2]


def zgrab2():
    # One JSON object per line: {"ip": ..., "data": {"http": {"status": ..., "result": {"response": ...}}}}
    for line in open(f"{work}/zgrab2.json"):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        http = rec.get("data", {}).get("http", {})
        response = (http.get("result") or {}).get("response") or {}
        status = http.get("status", "unknown")
        yield {
            "saddr": rec.get("ip"),
            "dport": 80,
            "status": "success" if status == "success" else status,
            "http_status": response.get("status_code"),
            "http_body": response.get("body"),
        }


def masscan():
    # -oJ: one record per line, in a JSON array; banner records carry the HTTP reply as masscan
    # saw it (status line and headers, and the body when it fits its banner).
    best = {}
    for line in open(f"{work}/masscan.json"):
        line = line.strip().rstrip(",")
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        for port in rec.get("ports", []):
            banner = (port.get("service") or {}).get("banner")
            if port.get("port") != 80 or banner is None or (port.get("service") or {}).get("name") != "http":
                continue
            m = re.match(r"HTTP/1\.\d (\d{3})", banner)
            body = banner.split("\r\n\r\n", 1)[1] if "\r\n\r\n" in banner else None
            best[rec["ip"]] = {
                "saddr": rec["ip"],
                "dport": 80,
                "status": "success",
                "http_status": int(m.group(1)) if m else None,
                "http_body": body,
            }
    return best.values()


converters = {"zgrab2": zgrab2, "masscan": masscan}
if tool in converters:
    with open(f"{work}/{tool}.ndjson", "w") as out:
        for row in converters[tool]():
            out.write(json.dumps(row) + "\n")
