"""A raw peer of the mock's link protocol, for tests that play a hostile or broken peer.

The layouts below are written from mock_libs/wire/protocol.h, peer_id.h, cache_table.h,
keys.h and resolve.h by hand (an independent reading of the protocol, not generated from
it); ``test_wire_protocol.py`` compares every layout and constant here with what the
compiler makes of those headers, and ``test_wire_security.py`` the sizes with replies of
the real engine.
Everything is host-endian ("="), as the mock's wire is (both ends run on one machine).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
from dataclasses import dataclass

MAGIC, VERSION = 0x4C4C4444, 2
HDR = struct.Struct("=IHHIIQQQ")   # magic, type, version, status, count, a, b, payload_len
# mode, timeout_ms, cluster_id, expected_cluster_id, instance, serial, next_cache_id, token,
# hixl, strict_ids, auth, reserved, nonce[16], proof[32], id_channel[40]
HELLO = struct.Struct("=IIQQQQqQIIII16s32s40s")
TEXT_LEN = 240
# id, kind, placement, num_tensors, owned, remote_accessible, reserved, batches, blocks,
# tensor_size, stride
CACHE_WIRE = struct.Struct("=qIIIIIIQQQQ")
REGION = struct.Struct("=IIQQ")      # tensor, reserved, offset, len
REVERSE = struct.Struct("=128s32s")  # proofs of the client's links this one may replace, the secret's proof
# token, then two endpoints (family, port, addr[16]) of c1: the client's end, the listener's end
ENDPOINT = struct.Struct("=HH16s")
ID_REQUEST = struct.Struct("=Q20s20s")

(MSG_HELLO, MSG_HELLO_REPLY, MSG_REVERSE, MSG_REVERSE_REPLY, MSG_DISCONNECT, MSG_DISCONNECT_REPLY, MSG_PIN,
 MSG_PIN_REPLY, MSG_UNPIN, MSG_READ, MSG_READ_REPLY, MSG_WRITE, MSG_WRITE_REPLY, MSG_RESOLVE, MSG_RESOLVE_REPLY,
 MSG_RELEASE, MSG_RELEASE_REPLY, MSG_PIN_ADDR, MSG_PIN_ADDR_REPLY, MSG_IDENTIFY, MSG_IDENTIFY_REPLY,
 MSG_DISCONNECT_CHALLENGE, MSG_DISCONNECT_PROOF, MSG_MAP, MSG_MAP_REPLY, MSG_MAP_CHALLENGE,
 MSG_MAP_PROOF) = range(1, 28)
MAP_REQUEST = struct.Struct("=QQ")   # the link's token, the first chunk asked for
MAP_DESC = struct.Struct("=QQ")      # a chunk's base in its process, its size
HELLO_LINK = 0
MODE_DIRECT = 1
# what an engine lets peers make it hold (mock_libs/core/engine.h, BOUND_*)
BOUND_HANDSHAKES = 64
BOUND_LINKS = 256
BOUND_PINS_PER_LINK = 64
BOUND_GONE_RECORDS = 1024


def header(kind: int, *, status: int = 0, count: int = 0, a: int = 0, b: int = 0, payload_len: int = 0) -> bytes:
    return HDR.pack(MAGIC, kind, VERSION, status, count, a, b, payload_len)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"the peer closed the connection after {len(data)} of {n} bytes")
        data += chunk
    return data


@dataclass
class Reply:
    kind: int
    status: int
    count: int
    a: int
    b: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body[-TEXT_LEN:].split(b"\0", 1)[0].decode("ascii", "replace")


def recv_reply(sock: socket.socket, max_body: int = 1 << 20) -> Reply:
    magic, kind, version, status, count, a, b, length = HDR.unpack(recv_exact(sock, HDR.size))
    assert (magic, version) == (MAGIC, VERSION), "not a reply of this protocol"
    assert length <= max_body, f"a reply body of {length} bytes"
    return Reply(kind, status, count, a, b, recv_exact(sock, length))


def hello_body(*, cluster_id: int, expected: int, token: int, mode: int = MODE_DIRECT, timeout_ms: int = 1000,
               instance: int = 0, serial: int = 1, next_cache_id: int = 1, hixl: int = 0, strict_ids: int = 0,
               nonce: bytes = b"\x01" * 16, secret: bytes | None = None) -> bytes:
    proof = proof_of(secret, "lldd-hello", nonce, nonce, token) if secret is not None else bytes(32)
    return HELLO.pack(mode, timeout_ms, cluster_id, expected, instance, serial, next_cache_id, token, hixl,
                      strict_ids, 1 if secret is not None else 0, 0, nonce, proof, b"")


def proof_of(secret: bytes, label: str, a: bytes, b: bytes, token: int) -> bytes:
    """The handshake's proof of the shared secret, computed with Python's hmac (the oracle)."""
    return hmac.new(secret, label.encode() + a + b + struct.pack("<Q", token), hashlib.sha256).digest()


@dataclass
class Hello:
    reply: Reply
    fields: tuple[object, ...]

    @property
    def cluster_id(self) -> int:
        value = self.fields[2]
        assert isinstance(value, int)
        return value

    @property
    def id_channel(self) -> str:
        raw = self.fields[14]
        assert isinstance(raw, bytes)
        return raw.split(b"\0", 1)[0].decode()


class RawLink:
    """A link made by hand: HELLO on c1, REVERSE on c2, then requests on c1."""

    def __init__(self, port: int, *, cluster_id: int, expected: int, host: str = "127.0.0.1",
                 timeout: float = 5.0, secret: bytes | None = None, token: int | None = None) -> None:
        self.port, self.host, self.timeout, self.secret = port, host, timeout, secret
        self.cluster_id, self.expected = cluster_id, expected
        self.token = token if token is not None else int.from_bytes(os.urandom(8), "little") | 1
        self.nonce = os.urandom(16)
        self.c1: socket.socket | None = None
        self.c2: socket.socket | None = None

    def hello(self, **fields: int) -> Hello:
        self.c1 = socket.create_connection((self.host, self.port), timeout=self.timeout)
        body = hello_body(cluster_id=self.cluster_id, expected=self.expected, token=self.token, nonce=self.nonce,
                          secret=self.secret, **fields)
        self.c1.sendall(header(MSG_HELLO, a=HELLO_LINK, payload_len=len(body)) + body)
        reply = recv_reply(self.c1)
        assert reply.kind == MSG_HELLO_REPLY and len(reply.body) == HELLO.size + TEXT_LEN
        return Hello(reply, HELLO.unpack_from(reply.body))

    def reverse(self, proof: bytes = bytes(32), replaces: bytes = bytes(128)) -> Reply:
        self.c2 = socket.create_connection((self.host, self.port), timeout=self.timeout)
        body = REVERSE.pack(replaces, proof)
        self.c2.sendall(header(MSG_REVERSE, a=self.token, b=self.cluster_id, payload_len=len(body)) + body)
        return recv_reply(self.c2)

    def link(self) -> Hello:
        hello = self.hello()
        assert hello.reply.status == 0, hello.reply.text
        reply = self.reverse()
        assert reply.status == 0, reply.text
        return hello

    def request(self, kind: int, *, a: int = 0, b: int = 0, count: int = 0, body: bytes = b"") -> Reply:
        assert self.c1 is not None
        self.c1.sendall(header(kind, a=a, b=b, count=count, payload_len=len(body)) + body)
        return recv_reply(self.c1)

    def pin(self, cache_id: int, watermark: int = 0) -> tuple[Reply, tuple[int, ...], list[int]]:
        """PIN: the reply, the cache's description and the addresses the reply carries."""
        reply = self.request(MSG_PIN, a=cache_id, b=watermark)
        if reply.status != 0:
            return reply, (), []
        desc = CACHE_WIRE.unpack_from(reply.body)
        n = desc[3]
        addrs = list(struct.unpack_from(f"={n}Q", reply.body, CACHE_WIRE.size))
        return reply, desc, addrs

    def read(self, cache_id: int, tensor: int, offset: int, length: int) -> Reply:
        return self.request(MSG_READ, a=cache_id, count=1, body=REGION.pack(tensor, 0, offset, length))

    def write(self, cache_id: int, tensor: int, offset: int, data: bytes) -> Reply:
        return self.request(MSG_WRITE, a=cache_id, count=1, body=REGION.pack(tensor, 0, offset, len(data)) + data)

    def close(self) -> None:
        for s in (self.c1, self.c2):
            if s is not None:
                s.close()
        self.c1 = self.c2 = None


def token_proof(token: int, nonce: bytes) -> bytes:
    """A DISCONNECT's proof of a link token for the listener's challenge (Python's hmac)."""
    return hmac.new(struct.pack("<Q", token), b"lldd-disconnect" + nonce, hashlib.sha256).digest()


def disconnect(port: int, *, cluster_id: int, expected: int, tokens: tuple[int, ...] = (),
               host: str = "127.0.0.1") -> Reply:
    """DISCONNECT on a fresh connection, as a non-forced unlink sends it: the request, the
    listener's challenge, proofs of ``tokens``, the reply."""
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(header(MSG_DISCONNECT, a=cluster_id, b=expected))
        challenge = recv_reply(s)
        assert challenge.kind == MSG_DISCONNECT_CHALLENGE and len(challenge.body) == 16
        proofs = b"".join(token_proof(t, challenge.body) for t in tokens)
        s.sendall(header(MSG_DISCONNECT_PROOF, count=len(tokens), payload_len=len(proofs)) + proofs)
        return recv_reply(s)


def endpoint(sockaddr: tuple[str, int]) -> bytes:
    return ENDPOINT.pack(socket.AF_INET, sockaddr[1], socket.inet_aton(sockaddr[0]) + bytes(12))


def identify(channel: str, token: int, c1: socket.socket) -> int:
    """IDENTIFY on a listener's identity channel; its status (0: accepted)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as u:
        u.settimeout(5)
        u.connect("\0" + channel)
        body = ID_REQUEST.pack(token, endpoint(c1.getsockname()), endpoint(c1.getpeername()))
        u.sendall(header(MSG_IDENTIFY, payload_len=len(body)) + body)
        return recv_reply(u).status


def read_memory(pid: int, address: int, length: int) -> bytes:
    """``length`` bytes at ``address`` in process ``pid`` (process_vm_readv)."""
    import ctypes

    class IoVec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    libc = ctypes.CDLL(None, use_errno=True)
    out = ctypes.create_string_buffer(length)
    local, remote = IoVec(ctypes.addressof(out), length), IoVec(address, length)
    got = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if got != length:
        raise OSError(ctypes.get_errno(), f"process_vm_readv of process {pid} failed")
    return out.raw


def map_chunks(channel: str, token: int, first: int = 0,
               proof: bytes | None = None) -> tuple[int, list[tuple[int, int]], list[int]]:
    """MAP on a listener's identity channel (docs/security.md §2.7), answering its
    challenge with the nonce read out of the listener's memory, or with ``proof`` when
    given: the final reply's status, the chunks it describes (base, size) and the file
    descriptors that came with it (the caller closes them)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as u:
        u.settimeout(5)
        u.connect("\0" + channel)
        body = MAP_REQUEST.pack(token, first)
        u.sendall(header(MSG_MAP, payload_len=len(body)) + body)
        _magic, kind, _version, status, _count, a, b, payload_len = HDR.unpack(recv_exact(u, HDR.size))
        if kind == MSG_MAP_REPLY:                   # refused before any challenge
            assert payload_len == 0
            return status, [], []
        assert kind == MSG_MAP_CHALLENGE and payload_len == 0
        pid = struct.unpack("=iII", u.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        nonce = read_memory(pid, a, b) if proof is None else proof
        u.sendall(header(MSG_MAP_PROOF, payload_len=len(nonce)) + nonce)
        head, fds, _flags, _addr = socket.recv_fds(u, HDR.size, 64)
        _magic, kind, _version, status, count, _a, _b, payload_len = HDR.unpack(head)
        assert kind == MSG_MAP_REPLY and payload_len == count * MAP_DESC.size
        body = recv_exact(u, payload_len)
        return status, [MAP_DESC.unpack_from(body, i * MAP_DESC.size) for i in range(count)], fds


# ---- socket-level helpers (tests of the bounds: docs/security.md §3) ----------------------

RELEASE = struct.Struct("=qQIIQQQ")       # cache id, slot, key ns, all, key id, key model, count
REPLY_TEXT = TEXT_LEN


def connect(port: int, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def send_hdr(s: socket.socket, kind: int, a: int = 0, b: int = 0, count: int = 0, payload: bytes = b"",
             payload_len: int | None = None) -> None:
    """A header (payload_len defaults to the payload's length) and the payload."""
    length = len(payload) if payload_len is None else payload_len
    s.sendall(header(kind, count=count, a=a, b=b, payload_len=length) + payload)


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
    body = hello_body(cluster_id=cluster_id, expected=expected, token=token, timeout_ms=timeout_ms)
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
    send_hdr(c2, MSG_REVERSE, a=token, b=cluster_id, payload=REVERSE.pack(bytes(128), bytes(32)))
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
