"""Which processes listen on which TCP addresses, read from /proc (no psutil): for the tests that check
what a local Ray exposes, and that nothing of it listens after its driver is gone."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path


def _address(text: str) -> str:
    ip, _ = text.split(":")
    if len(ip) == 8:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(ip, 16)))
    raw = bytes.fromhex(ip)
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))


def listening(pids) -> dict[int, list[str]]:
    """pid -> the addresses it listens on (IPv4-mapped IPv6 shown as IPv4), for the pids still alive."""
    sockets = {}
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == "0A":  # TCP_LISTEN
                sockets[fields[9]] = _address(fields[1]).removeprefix("::ffff:")
    found = {}
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        addresses = [sockets[link[8:-1]] for link in links if link.startswith("socket:[") and link[8:-1] in sockets]
        if addresses:
            found[pid] = addresses
    return found


def tree(pid: int) -> list[int]:
    """`pid` and every process below it, from /proc."""
    children: dict[int, list[int]] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent = int(Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(name))
    found, stack = [], [pid]
    while stack:
        found.append(stack.pop())
        stack.extend(children.get(found[-1], []))
    return found
