"""Sends a case to the target over fresh connections, with short timeouts.

Nothing the target answers is judged here: the replay only keeps the conversation
going (it waits for an answer where the recorded server gave one, so that a
handshake's second connection comes after the first one's reply) and returns the
answers' headers, which the tests of the recording use.
"""
from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Callable

from .case import Case, Step
from .wire import HEADER_SIZE, Header, split_messages

CONNECT_TIMEOUT = 1.0
SEND_TIMEOUT = 0.5
SLOW_SEND_LIMIT = 0.3   # a slowly sent step sends its rest at once after this long


def _send(sock: socket.socket, step: Step) -> None:
    if step.chunk <= 0:
        sock.sendall(step.data)
        return
    give_up = time.monotonic() + SLOW_SEND_LIMIT
    at = 0
    while at < len(step.data):
        if time.monotonic() > give_up:
            sock.sendall(step.data[at:])
            return
        sock.sendall(step.data[at:at + step.chunk])
        at += step.chunk
        time.sleep(step.pause_ms / 1000)


def _await_answer(sock: socket.socket, buffer: bytearray, seen: int, wait: float) -> str:
    """Reads until a message beyond the `seen` first ones is complete ("answered"), the
    peer closes ("closed"), or `wait` seconds pass ("silent")."""
    deadline = time.monotonic() + wait
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "silent"
        ready, _, _ = select.select([sock], [], [], left)
        if not ready:
            return "silent"
        try:
            data = sock.recv(1 << 16)
        except OSError:
            return "closed"
        if not data:
            return "closed"
        buffer += data
        if len(split_messages(bytes(buffer))[0]) > seen:
            return "answered"


def _end(sock: socket.socket, how: str) -> None:
    if how == "shut_wr":
        sock.shutdown(socket.SHUT_WR)
    elif how == "reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    elif how == "close":
        sock.close()


def run_case(case: Case, port: int, answer_wait: float = 0.15,
             opened: Callable[[int], None] | None = None) -> dict[int, list[Header]]:
    """Replays `case` against 127.0.0.1:port; the headers each connection received.
    `opened` is told the local port of every connection the case opens."""
    socks: dict[int, socket.socket] = {}
    buffers: dict[int, bytearray] = {}
    dead: set[int] = set()
    # A connection that left one request unanswered is most likely still reading the
    # body its header announced: later steps there go out without waiting.
    silent: set[int] = set()
    try:
        for step in case.steps:
            if step.conn in dead:
                continue
            sock = socks.get(step.conn)
            if sock is None:
                try:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT)
                except OSError:
                    dead.add(step.conn)
                    continue
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if opened is not None:
                    opened(int(sock.getsockname()[1]))
                sock.settimeout(SEND_TIMEOUT)
                socks[step.conn] = sock
                buffers[step.conn] = bytearray()
            buffer = buffers[step.conn]
            seen = len(split_messages(bytes(buffer))[0])
            try:
                _send(sock, step)
                if step.reply:
                    heard = _await_answer(sock, buffer, seen, 0.01 if step.conn in silent else answer_wait)
                    if heard == "closed":
                        dead.add(step.conn)
                    elif heard == "silent":
                        silent.add(step.conn)
                _end(sock, step.after)
            except OSError:
                dead.add(step.conn)         # the target closed it: later steps on it are moot
            if step.after in ("close", "reset"):
                dead.add(step.conn)
    finally:
        for sock in socks.values():
            sock.close()
    return {conn: [Header.parse(m[:HEADER_SIZE]) for m in split_messages(bytes(buf))[0]]
            for conn, buf in buffers.items()}
