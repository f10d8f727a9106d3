"""A recording TCP proxy: listens on 127.0.0.1, forwards every connection to the
target, and keeps what each client sent, with the time of every chunk, so that a
session of a legitimate client can be cut into messages and replayed later.
"""
from __future__ import annotations

import selectors
import socket
import threading
import time
from dataclasses import dataclass, field

from .case import Case, Step
from .wire import Header, split_messages


@dataclass
class _Conn:
    index: int
    sent: list[tuple[float, bytes]] = field(default_factory=list)   # client -> server chunks
    answered: list[float] = field(default_factory=list)             # times of server -> client chunks
    received: bytearray = field(default_factory=bytearray)           # server -> client bytes
    client_done: threading.Event = field(default_factory=threading.Event)


class RecordingProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._conns: list[_Conn] = []
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._stop = False
        # the headers each connection of the last taken session received, for the tests
        self.answers: dict[int, list[Header]] = {}
        self._acceptor = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return                                  # closed: the proxy stops
            with self._lock:
                if self._stop:
                    client.close()
                    return
                conn = _Conn(len(self._conns))
                self._conns.append(conn)
                t = threading.Thread(target=self._pump, args=(client, conn), name=f"proxy-{conn.index}",
                                     daemon=True)
                self._threads.append(t)
            t.start()

    def _pump(self, client: socket.socket, conn: _Conn) -> None:
        server = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
        with self._lock:
            self._sockets += [client, server]
        open_from = {client: True, server: True}
        with selectors.DefaultSelector() as sel, client, server:
            sel.register(client, selectors.EVENT_READ)
            sel.register(server, selectors.EVENT_READ)
            while any(open_from.values()):
                for key, _ in sel.select(timeout=30):
                    src = key.fileobj
                    assert isinstance(src, socket.socket)
                    dst = server if src is client else client
                    try:
                        data = src.recv(1 << 16)
                    except ConnectionError:
                        data = b""
                    now = time.monotonic()
                    if not data:
                        if src is client:
                            conn.client_done.set()
                        open_from[src] = False
                        sel.unregister(src)
                        try:
                            dst.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass                        # the other side is closed already
                        continue
                    with self._lock:
                        if src is client:
                            conn.sent.append((now, data))
                        else:
                            conn.answered.append(now)
                            conn.received += data
                    try:
                        dst.sendall(data)
                    except OSError:
                        open_from[src] = False
                        sel.unregister(src)
        conn.client_done.set()

    def take(self, name: str, settle: float = 0.2) -> Case:
        """The session recorded since the last take, as a case: every client message
        in the order the target received it. Waits until the clients have closed their
        connections (the target may keep its end open: a link whose client left)."""
        time.sleep(settle)
        with self._lock:
            conns = self._conns
            self._conns = []
        for conn in conns:
            if not conn.client_done.wait(timeout=10):
                raise TimeoutError(f"connection {conn.index} of {name!r} is still open after the session")
        timed: list[tuple[float, int, bytes, bool]] = []
        self.answers = {number: [Header.parse(m) for m in split_messages(bytes(conn.received))[0]]
                        for number, conn in enumerate(conns)}
        for number, conn in enumerate(conns):
            stream = b"".join(chunk for _, chunk in conn.sent)
            messages, rest = split_messages(stream)
            if rest:
                raise ValueError(f"connection {number} of {name!r} ended inside a message ({len(rest)} bytes)")
            # the time a message was complete: the time of the chunk that held its last byte
            ends, at, cursor = [], 0, 0
            for when, chunk in conn.sent:
                cursor += len(chunk)
                while at < len(messages) and sum(map(len, messages[:at + 1])) <= cursor:
                    ends.append(when)
                    at += 1
            for i, (message, done) in enumerate(zip(messages, ends)):
                until = ends[i + 1] if i + 1 < len(ends) else float("inf")
                answered = any(done <= t < until for t in conn.answered)
                timed.append((done, number, message, answered))
        timed.sort(key=lambda item: (item[0], item[1]))
        return Case(name, [Step(conn, message, reply) for _, conn, message, reply in timed])

    def close(self) -> None:
        with self._lock:
            self._stop = True
            sockets, threads = self._sockets, self._threads
        self._listener.close()
        self._acceptor.join(timeout=5)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass                                    # closed already
        for t in threads:
            t.join(timeout=5)
