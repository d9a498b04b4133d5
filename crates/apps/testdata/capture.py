#!/usr/bin/env python3
"""Sends a request (a file's bytes) to a server on 127.0.0.1 and saves the reply.

Loopback only: used to capture test fixtures from local servers (openssl s_server,
python -m http.server); nothing leaves the host.
Usage: capture.py PORT REQUEST_FILE REPLY_FILE
"""
import socket
import sys

port, request_file, reply_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with open(request_file, "rb") as f:
    request = f.read()
reply = b""
with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
    sock.sendall(request)
    sock.settimeout(1.0)  # the server's flight is sent at once; 1 s of silence ends it
    while len(reply) < 1 << 20:
        try:
            data = sock.recv(65536)
        except socket.timeout:
            break
        if not data:
            break
        reply += data
with open(reply_file, "wb") as f:
    f.write(reply)
print(f"{len(reply)} bytes -> {reply_file}")
