#!/usr/bin/env python3
"""Reads the parquet shards of one sharded scan with DuckDB, as an analyst would, and checks them:

- one query over all the files: every target (address, port) exactly once, N in all;
- the column types (ports USMALLINT, TTL UTINYINT, times TIMESTAMP WITH TIME ZONE, addresses as
  text and as 16 bytes that sort in address order);
- each file's key-value metadata: the command line (with --lab LAB, and no --shard: the shard came
  from the scheduler), the seed, the shard of SHARDS, sonde's version, the start time.

Then writes the union, sorted, to MERGED (parquet) for `sonde lab score`.
Used by crates/cli/tests/lab_shards.rs and bench/slurm-shards. Prints one JSON line of figures;
exits 1 with one line saying what is wrong.

usage: check_shards.py --files F [F ...] --targets N --shards K --seed S --lab LAB --merged OUT
"""

import argparse
import datetime
import ipaddress
import json
import sys

import duckdb

EXPECTED_TYPES = {
    "saddr": "VARCHAR",
    "saddr_bytes": "BLOB",
    "sport": "USMALLINT",
    "daddr": "VARCHAR",
    "daddr_bytes": "BLOB",
    "dport": "USMALLINT",
    "classification": "VARCHAR",
    "success": "BOOLEAN",
    "repeat": "BOOLEAN",
    "ttl": "UTINYINT",
    "ipid": "USMALLINT",
    "window": "USMALLINT",
    "tcp_mss": "USMALLINT",
    "tcp_wscale": "UTINYINT",
    "tcp_sack_ok": "BOOLEAN",
    "tcp_ts": "UINTEGER",
    "rtt_us": "BIGINT",
    "timestamp": "TIMESTAMP WITH TIME ZONE",
}


def fail(why):
    print(f"check_shards: {why}", file=sys.stderr)
    sys.exit(1)


def sql_list(files):
    return "[" + ", ".join("'" + f.replace("'", "''") + "'" for f in files) + "]"


def check_rows(con, source, targets):
    # One query over every shard: rows, distinct targets, hits, and the time span.
    rows, distinct, hits, first, last = con.execute(
        f"""SELECT count(*), count(DISTINCT (saddr_bytes, sport)), count(*) FILTER (WHERE success),
                   min(timestamp)::VARCHAR, max(timestamp)::VARCHAR
            FROM {source} WHERE NOT repeat"""
    ).fetchone()
    if distinct != rows:
        fail(f"{rows - distinct} targets appear twice ({rows} rows, {distinct} distinct)")
    if rows != targets:
        fail(f"{rows} targets answered, expected every one of the {targets}")
    return {"rows": rows, "hits": hits, "first": str(first), "last": str(last)}


def check_types(con, source):
    described = {name: kind for name, kind, *_ in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    for name, kind in EXPECTED_TYPES.items():
        if described.get(name) != kind:
            fail(f"column {name} is {described.get(name)}, expected {kind}")
    # The 16-byte form is the address (IPv4 mapped into IPv6), and sorts as addresses do.
    pairs = con.execute(f"SELECT saddr, saddr_bytes FROM {source} ORDER BY saddr_bytes").fetchall()
    addrs = [ipaddress.ip_address(text) for text, _ in pairs]
    for (text, raw), addr in zip(pairs, addrs):
        mapped = addr if addr.version == 6 else ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + addr.packed)
        if bytes(raw) != mapped.packed:
            fail(f"saddr_bytes of {text} is {bytes(raw).hex()}")
    if addrs != sorted(addrs):
        fail("ORDER BY saddr_bytes is not address order")
    return described


def check_metadata(con, files, shards, seed, lab):
    found = {}
    for name, key, value in con.execute(
        f"SELECT file_name, decode(key), decode(value) FROM parquet_kv_metadata({sql_list(files)})"
    ).fetchall():
        found.setdefault(name, {})[key] = value
    if sorted(found) != sorted(files):
        fail(f"key-value metadata in {sorted(found)}, expected in every one of {sorted(files)}")
    seen = []
    for name, meta in sorted(found.items()):
        words = meta.get("sonde.command_line", "").split()
        if "--lab" not in words or words[words.index("--lab") + 1 :][:1] != [lab]:
            fail(f"{name}: command line {meta.get('sonde.command_line')!r} lacks --lab {lab}")
        if "--shard" in words or "--shards" in words:
            fail(f"{name}: the shard was given on the command line, not by the scheduler")
        if meta.get("sonde.seed") != str(seed) or meta.get("sonde.shards") != str(shards):
            fail(f"{name}: seed {meta.get('sonde.seed')} shards {meta.get('sonde.shards')}")
        if not meta.get("sonde.version"):
            fail(f"{name}: no sonde.version")
        started = datetime.datetime.fromisoformat(meta["sonde.start_time"].replace("Z", "+00:00"))
        if abs((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()) > 86400:
            fail(f"{name}: start time {started} is not today")
        seen.append(int(meta["sonde.shard"]))
    if sorted(set(seen)) != list(range(shards)):
        fail(f"the files are shards {sorted(seen)}, expected each of 0..{shards - 1}")
    return sorted(seen)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--files", nargs="+", required=True)
    p.add_argument("--targets", type=int, required=True)
    p.add_argument("--shards", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--lab", required=True)
    p.add_argument("--merged", required=True)
    a = p.parse_args()
    if not a.lab:
        fail("--lab is empty")
    con = duckdb.connect()
    source = f"read_parquet({sql_list(a.files)})"
    figures = check_rows(con, source, a.targets)
    check_types(con, source)
    figures["shards_of_files"] = check_metadata(con, a.files, a.shards, a.seed, a.lab)
    merged = a.merged.replace("'", "''")
    con.execute(f"COPY (SELECT * FROM {source} ORDER BY saddr_bytes, sport) TO '{merged}' (FORMAT parquet)")
    figures["duckdb"] = duckdb.__version__
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
