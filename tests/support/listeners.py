"""The TCP ports this process listens on, read from /proc (Linux).

A test of a listen address with port 0 needs to see what the engine did with it: the
default backend binds an ephemeral port the API never reports, and a HIXL engine binds
nothing. The kernel's socket tables (``/proc/self/net/tcp``, ``tcp6``) list every
listening socket of the network namespace with its inode; the descriptors in
``/proc/self/fd`` name the inodes this process owns.
"""
from __future__ import annotations

import os
from typing import Set

LISTEN_STATE = "0A"  # TCP_LISTEN in the kernel's tables


def _socket_inodes() -> Set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between listdir and readlink
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            inodes.add(target[len("socket:["):-1])
    return inodes


def listening_ports() -> Set[int]:
    """The local ports of the listening TCP sockets (IPv4 and IPv6) this process holds."""
    mine = _socket_inodes()
    ports = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table, encoding="ascii") as lines:
                next(lines)  # the header
                for line in lines:
                    cols = line.split()
                    if cols[3] == LISTEN_STATE and cols[9] in mine:
                        ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        except FileNotFoundError:  # no IPv6 in this kernel
            continue
    return ports
