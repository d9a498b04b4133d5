#!/usr/bin/env python3
"""Turns a DNS peer's output into sonde dns's row form (ndjson, one object per (name, type): name,
type, status, chain, answers [{name, type, ttl, data}], server, attempts, rtt_us, tcp), so
bench/dns-score.py and `sonde lab score` score every tool the same way against the lab's DNS
tree (lab up --dns-tree).

usage: dns-rows.py TOOL IN OUT   (TOOL massdns or zdns; IN may be given more than once as
IN1,IN2,... for runs split by type; OUT is written)

massdns (-o Je): one line per answer, and with the e flag one per lookup that ran out of tries
({"error": "TIMEOUT"|"MAXRETRIES"}); massdns retries SERVFAIL and REFUSED, so an answer with
either only shows when the last try got it. Its ndjson writes a TXT record's strings one after another
with nothing between them: that cannot be split again, so it stays one string here.
ZDNS (-o, normal verbosity): one line per name, {"name", "results": {TYPE: {"status", "data":
{"answers": [...], "resolver"}}}}; names without the trailing dot, MX as answer plus preference,
a TXT record's strings one a line. ZDNS follows CNAMEs itself and lists every step's
records in answers.
Names are lowercased with the trailing dot; AAAA in Python's compressed form, as Rust prints it.
A lookup with no answer at all is TIMEOUT; any other failure ERROR."""
import ipaddress
import json
import sys


def fqdn(name):
    name = (name or "").lower()
    return name if name.endswith(".") else name + "."


def presentation(rtype, data, record=None):
    if rtype == "AAAA":
        try:
            return str(ipaddress.IPv6Address(data))
        except ValueError:
            return data
    if rtype in ("CNAME", "NS", "PTR"):
        return fqdn(data)
    if rtype == "MX":
        if record is not None and "preference" in record:
            return f"{record['preference']} {fqdn(data)}"
        pref, _, host = data.partition(" ")
        return f"{pref} {fqdn(host)}"
    if rtype == "TXT":
        # ZDNS gives a record's strings one a line; massdns's ndjson joins them with nothing
        # between, so its record reads as one string (the lab's big TXT then differs from the
        # truth's eight, though its characters are all there).
        return " ".join(f'"{s}"' for s in data.split("\n"))
    return data


def row(name, rtype, status, answers, server, tcp=False):
    chain = []
    # The chain is the CNAME targets from the asked name on, in the order they lead.
    by_owner = {a["name"]: a["data"] for a in answers if a["type"] == "CNAME"}
    at = fqdn(name)
    while at in by_owner and len(chain) < 16:
        at = by_owner[at]
        chain.append(at)
    return {"name": fqdn(name), "type": rtype, "status": status, "chain": chain, "answers": answers,
            "server": server, "attempts": None, "rtt_us": None, "tcp": tcp}


def massdns(path):
    for line in open(path, errors="replace"):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        rtype = rec.get("type", "A")
        if "error" in rec:
            status = "TIMEOUT" if rec["error"] == "TIMEOUT" else "ERROR"
            yield row(rec.get("name"), rtype, status, [], None)
            continue
        answers = [{"name": fqdn(a.get("name")), "type": a.get("type"), "ttl": a.get("ttl"),
                    "data": presentation(a.get("type"), a.get("data", ""))}
                   for a in (rec.get("data") or {}).get("answers", [])]
        server = (rec.get("resolver") or "").rsplit(":", 1)[0] or None
        yield row(rec.get("name"), rtype, rec.get("status", "ERROR"), answers, server, rec.get("proto") == "TCP")


ZDNS_STATUS = {"NOERROR", "NXDOMAIN", "SERVFAIL", "REFUSED", "FORMERR", "NOTIMP", "TIMEOUT"}


def zdns(path):
    for line in open(path, errors="replace"):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        for rtype, res in (rec.get("results") or {}).items():
            data = res.get("data") or {}
            status = res.get("status", "ERROR")
            if status == "ITERATIVE_TIMEOUT":
                status = "TIMEOUT"
            elif status not in ZDNS_STATUS:
                status = "ERROR"
            answers = [{"name": fqdn(a.get("name")), "type": a.get("type"), "ttl": a.get("ttl"),
                        "data": presentation(a.get("type"), a.get("answer", ""), a)}
                       for a in data.get("answers") or []]
            server = (data.get("resolver") or "").rsplit(":", 1)[0] or None
            yield row(rec.get("name"), rtype, status, answers, server, data.get("protocol") == "tcp")


def main():
    tool, paths, out = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
    convert = {"massdns": massdns, "zdns": zdns}[tool]
    n = 0
    with open(out, "w") as f:
        for path in paths:
            for r in convert(path):
                f.write(json.dumps(r) + "\n")
                n += 1
    print(n)


if __name__ == "__main__":
    main()
