#!/usr/bin/env python3
"""Turns a grab tool's output into sonde grab's row format (ndjson: saddr, sport (the target's
port, as sonde names it in scan and grab rows), status (ZGrab2's words, which sonde's status uses),
http_status, http_body, and for compare-grab's service modes the fields sonde's module of
that name records: tls_cert_sha256, tls_version, tls_cipher, ssh_banner, ssh_host_key_type,
ssh_host_key_sha256, smtp_banner, imap_banner), so `sonde lab score --module grab` scores
every tool the same way and bench/grab-agree.py compares them field by field.

usage: grab-rows.py TOOL WORKDIR [MODE PORT]   (reads WORKDIR/<tool output>, writes
WORKDIR/TOOL.ndjson; MODE http (default), https, tls, ssh, smtp or imap)
sonde's own rows are already in that format and are left as they are."""
import json
import re
import sys

tool, work = sys.argv[1], sys.argv[2]
mode = sys.argv[3] if len(sys.argv) > 3 else "http"
port = int(sys.argv[4]) if len(sys.argv) > 4 else 80


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
            "sport": 80,
            "status": status,
            "http_status": response.get("status_code"),
            "http_body": response.get("body"),
        }


def zgrab2_tls(log):
    """tls_* fields from a ZGrab2 TLS log (zcrypto's handshake_log)."""
    hello = (log or {}).get("handshake_log", {}).get("server_hello") or {}
    certs = (log or {}).get("handshake_log", {}).get("server_certificates") or {}
    # TLS 1.3 says 1.2 in the ServerHello's version and the real one in supported_versions.
    version = (hello.get("supported_versions") or {}).get("selected_version") or hello.get("version") or {}
    return {
        "tls_cert_sha256": ((certs.get("certificate") or {}).get("parsed") or {}).get("fingerprint_sha256"),
        "tls_version": version.get("name"),
        "tls_cipher": (hello.get("cipher_suite") or {}).get("name"),
    }


def zgrab2_service():
    """compare-grab's service modes: ZGrab2's http --use-https, tls, ssh, smtp, imap."""
    module = "http" if mode == "https" else mode
    for line in open(f"{work}/zgrab2.json"):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        grab = rec.get("data", {}).get(module, {})
        result = grab.get("result") or {}
        row = {"saddr": rec.get("ip"), "sport": port, "status": grab.get("status", "unknown")}
        if mode == "https":
            response = result.get("response") or {}
            row.update(http_status=response.get("status_code"), http_body=response.get("body"))
            row.update(zgrab2_tls((response.get("request") or {}).get("tls_log")))
        elif mode == "tls":
            row.update(zgrab2_tls(result))
        elif mode == "ssh":
            key = (result.get("key_exchange") or {}).get("server_host_key") or {}
            row.update(ssh_banner=(result.get("server_id") or {}).get("raw"),
                       ssh_host_key_type=key.get("algorithm"),
                       ssh_host_key_sha256=key.get("fingerprint_sha256"))
        else:  # smtp, imap: the greeting, and TLS after STARTTLS
            row[f"{mode}_banner"] = result.get("banner")
            row.update(zgrab2_tls(result.get("tls")))
        yield row


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
                "sport": 80,
                "status": "success",
                "http_status": int(m.group(1)) if m else None,
                "http_body": body,
            }
    return best.values()


converters = {"zgrab2": zgrab2 if mode == "http" else zgrab2_service, "masscan": masscan}
if tool in converters:
    with open(f"{work}/{tool}.ndjson", "w") as out:
        for row in converters[tool]():
            out.write(json.dumps(row) + "\n")
