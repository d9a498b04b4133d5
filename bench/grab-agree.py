#!/usr/bin/env python3
"""Field by field agreement of two tools' grab rows (sonde grab's ndjson format; ZGrab2's
after bench/grab-rows.py), on the hosts both completed (status success in both).

usage: grab-agree.py SONDE.ndjson PEER.ndjson FIELD...
prints, per field: "FIELD agree N of M" and the first disagreement (address, both values).
A value one tool lacks counts as a disagreement. Hex digests compare without case, banners
without their line end; everything else as written."""
import json
import sys


def rows(path):
    out = {}
    for line in open(path):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("status") == "success":
            # The target's port: sport in sonde's rows (and grab-rows.py's).
            out[(row.get("saddr"), row.get("sport"))] = row
    return out


def normal(field, value):
    if not isinstance(value, str):
        return value
    if field.endswith("_sha256"):
        return value.lower()
    if field.endswith("_banner"):
        return value.rstrip("\r\n")
    return value


def short(value):
    text = json.dumps(value)
    return text if len(text) <= 70 else text[:67] + "..."


sonde, peer = rows(sys.argv[1]), rows(sys.argv[2])
both = sorted(set(sonde) & set(peer), key=str)
print(f"both completed {len(both)} hosts (sonde {len(sonde)}, peer {len(peer)})")
for field in sys.argv[3:]:
    agree, first = 0, None
    for key in both:
        a, b = normal(field, sonde[key].get(field)), normal(field, peer[key].get(field))
        if a is not None and a == b:
            agree += 1
        elif first is None:
            first = f"{key[0]}: sonde {short(a)}, peer {short(b)}"
    print(f"{field} agree {agree} of {len(both)}" + (f"; first disagreement {first}" if first else ""))
