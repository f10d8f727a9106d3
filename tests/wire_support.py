"""Raw sockets that speak the mock engine's framing (mock_libs/transport.h), for tests
that must act as a peer the engine cannot trust: connect, send a header, receive a
header, and a whole link handshake (HELLO on c1, REVERSE on c2).

The wire is host-endian and host-aligned (the mock says why), so the layouts below
are native with no padding ("=").
"""
from __future__ import annotations

import socket
import struct

HDR = struct.Struct("=IHHIIQQQ")          # magic, type, version, status, count, a, b, payload_len
HELLO = struct.Struct("=IIQQQQqQQQII")    # mode, timeout, cluster, expected, pid, serial, next id, token,
                                          # probe address, probe value, hixl, strict ids
RELEASE = struct.Struct("=qQIIQQQ")       # cache id, slot, key ns, all, key id, key model, count
REPLY_TEXT = 240

MAGIC, VERSION = 0x4C4C4444, 1
MSG_HELLO, MSG_HELLO_REPLY, MSG_REVERSE, MSG_REVERSE_REPLY = 1, 2, 3, 4
MSG_PIN, MSG_PIN_REPLY, MSG_UNPIN = 7, 8, 9
MSG_RELEASE, MSG_RELEASE_REPLY = 16, 17
MODE_DIRECT = 1


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def send_hdr(s: socket.socket, kind: int, a: int = 0, b: int = 0, count: int = 0, payload: bytes = b"",
             payload_len: int | None = None) -> None:
    """A header (payload_len defaults to the payload's length) and the payload."""
    length = len(payload) if payload_len is None else payload_len
    s.sendall(HDR.pack(MAGIC, kind, VERSION, 0, count, a, b, length) + payload)


def recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the engine closed the connection")
        data += chunk
    return data


def recv_hdr(s: socket.socket) -> tuple[int, int, int, int, int]:
    """(type, status, a, b, payload_len) of the next header; the payload stays unread."""
    magic, kind, version, status, _, a, b, length = HDR.unpack(recv_exact(s, HDR.size))
    assert (magic, version) == (MAGIC, VERSION)
    return kind, status, a, b, length


def closed_by_peer(s: socket.socket, within: float) -> bool:
    """Whether the engine closes (or resets) the connection within ``within`` seconds;
    anything it sends meanwhile is read and dropped."""
    s.settimeout(within)
    try:
        while s.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def hello(s: socket.socket, cluster_id: int, expected: int, token: int, timeout_ms: int = 1000) -> tuple[int, str]:
    """Sends a HELLO asking for a link; (status, refusal text) of the reply."""
    body = HELLO.pack(MODE_DIRECT, timeout_ms, cluster_id, expected, 0, 0, 1, token, 0, 0, 0, 0)
    send_hdr(s, MSG_HELLO, payload=body)
    kind, status, _, _, length = recv_hdr(s)
    assert kind == MSG_HELLO_REPLY
    text = recv_exact(s, length)[-REPLY_TEXT:]
    return status, text.split(b"\0", 1)[0].decode()


def raw_link(port: int, cluster_id: int, expected: int, token: int) -> tuple[socket.socket, socket.socket]:
    """A whole handshake as a client that is not an engine: (c1, c2). The engine then
    answers requests sent on c1 and would ask its own on c2."""
    c1 = connect(port)
    status, text = hello(c1, cluster_id, expected, token)
    assert status == 0, text
    c2 = connect(port)
    send_hdr(c2, MSG_REVERSE, a=token, b=cluster_id)
    kind, status, _, _, length = recv_hdr(c2)
    recv_exact(c2, length)
    assert (kind, status) == (MSG_REVERSE_REPLY, 0)
    return c1, c2


def pin(c1: socket.socket, cache_id: int) -> int:
    """PIN a cache over a raw link; the status of the reply (its body is dropped)."""
    send_hdr(c1, MSG_PIN, a=cache_id)
    kind, status, _, _, length = recv_hdr(c1)
    assert kind == MSG_PIN_REPLY
    recv_exact(c1, length)
    return status
