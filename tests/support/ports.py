"""Ports for test listeners.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, which is
also where every outgoing connection of every process takes its source port: between
choosing such a port and listening on it, a connection elsewhere on the machine can
take it, and the listener fails (seen under the load of the sanitizer stage). A port
below the ephemeral range is never taken that way, so ``free_port`` picks one at random
there, checks that it binds, and falls back to ``bind(0)`` where the range leaves no
room below it.
"""
from __future__ import annotations

import random
import socket

_LOWEST = 10000


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _binds(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on, below the ephemeral range if it can."""
    high = _ephemeral_low() - 1
    if high - _LOWEST >= 1000:
        for _ in range(50):
            port = random.randint(_LOWEST, high)
            if _binds(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
