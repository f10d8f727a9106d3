"""Floods of a listener by hostile peers (docs/security.md §3.4, the listener's gate).

A connection holds no thread of the listener until its first message is complete and
screened; one source (a client's IP address over TCP, its user id on the identity
channel) holds at most its share of the gate, of the handshake threads and of the links.
With a shared secret, a client without it holds nothing beyond its share of the gate.

The engine under test lives in this process; the flood comes from raw sockets
(wire_support), from other addresses of 127.0.0.0/8, and from a process of another user.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import socket
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

import wire_support as ws
from engine_support import Raw, register
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import mock_control, native
from llm_datadist_ffi.native import ClusterInfo, IpInfo
from ports import free_port

pytestmark = pytest.mark.mock_only(reason="the listener's gate is the mock's")

SECRET_OPTION = "llm_datadist_ffi.mock.LinkSecret"


def status_of(pid: int) -> dict[str, int]:
    """Threads, resident memory (KiB) and open descriptors of a process (/proc)."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {"threads": int(fields["Threads"]), "rss_kib": int(fields["VmRSS"].split()[0]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def settles(check: Callable[[], bool], within: float) -> bool:
    end = time.monotonic() + within
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def cluster(cluster_id: int, port: int) -> ClusterInfo:
    return ClusterInfo(cluster_id, 0, [IpInfo("127.0.0.1", 0)], [IpInfo("127.0.0.1", port)])


@pytest.fixture
def listener() -> Iterator[Callable[..., native.LlmDataDist]]:
    """listener(cluster_id, **options): a Prompt in this process on a free port."""
    made: list[native.LlmDataDist] = []

    def make(cluster_id: int = 1, **options: str) -> native.LlmDataDist:
        engine = native.LlmDataDist(cluster_id, native.LlmRole.PROMPT)
        made.append(engine)
        port = free_port()
        engine.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}",
                           **options})
        engine.listen_port = port  # type: ignore[attr-defined]
        return engine

    yield make
    for engine in made:
        engine.close()


def identity_channel(port: int) -> str:
    """The listener's identity channel, from the reply to a HELLO that is then dropped."""
    peer = ws.RawLink(port, cluster_id=999, expected=1)
    try:
        channel = peer.hello().id_channel
    finally:
        peer.close()
    assert channel
    return channel


# ---- item 5: silent connections from another user, renewed ----------------------------------

def flood(port: int, channel: str, count: int, seconds: float) -> None:
    """Holds ``count`` silent connections, half TCP and half on the identity channel, and
    renews each every 2 s (a tenth of them every 0.2 s)."""
    def tcp() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        return s

    def unix() -> socket.socket:
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        u.setblocking(False)
        try:
            u.connect("\0" + channel)
        except OSError:                      # the listener's backlog is full: the next round
            pass
        return u

    held = [tcp() if i % 2 == 0 else unix() for i in range(count)]
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        for _ in range(count // 10):
            held[i].close()
            held[i] = tcp() if i % 2 == 0 else unix()
            i = (i + 1) % count
        time.sleep(0.2)


class Flooder:
    """A child process of another user (forked before the engine exists, so that it holds
    none of its threads or locks) that floods the listener once told where it is."""

    def __init__(self, user: pwd.struct_passwd, count: int, seconds: float) -> None:
        to_child_r, self.to_child = os.pipe()
        self.from_child, from_child_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:                    # the child: never returns into pytest
            code = 1
            try:
                os.close(self.to_child)
                os.close(self.from_child)
                os.setgroups([])
                os.setgid(user.pw_gid)
                os.setuid(user.pw_uid)
                port, channel = os.read(to_child_r, 256).decode().split()
                os.write(from_child_w, f"{os.getuid()}\n".encode())
                flood(int(port), channel, count, seconds)
                code = 0
            finally:
                os._exit(code)
        os.close(to_child_r)
        os.close(from_child_w)

    def start(self, port: int, channel: str) -> int:
        """Tells the child the listener; its user id once it floods."""
        os.write(self.to_child, f"{port} {channel}".encode())
        return int(os.read(self.from_child, 64).decode())

    def running(self) -> bool:
        return os.waitpid(self.pid, os.WNOHANG) == (0, 0)

    def stop(self) -> None:
        os.close(self.to_child)
        os.close(self.from_child)
        try:
            os.kill(self.pid, 9)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)


def other_user() -> pwd.struct_passwd:
    if os.geteuid() != 0:
        pytest.skip("a flood from another user needs root to start a process as `nobody` (CI runs as root); "
                    "as this user the test cannot make one")
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("this host has no user `nobody` to flood from")


def test_a_link_succeeds_while_another_user_holds_a_thousand_silent_connections(
        listener: Callable[..., native.LlmDataDist]) -> None:
    nobody = other_user()
    flooder = Flooder(nobody, 1000, 12.0)
    try:
        prompt = listener(1)
        port = prompt.listen_port  # type: ignore[attr-defined]
        channel = identity_channel(port)
        time.sleep(0.3)                              # the dropped HELLO's thread ends
        before = status_of(os.getpid())
        assert flooder.start(port, channel) == nobody.pw_uid, "the flood did not start as `nobody`"
        time.sleep(2.5)                              # every connection renewed at least once
        arrays = [np.arange(32, dtype=np.uint8).reshape(1, 32) + i for i in range(2)]
        src = register(prompt, arrays)
        peak = dict(before)
        with native.LlmDataDist(2, native.LlmRole.DECODER) as client:
            client.initialize({native.OPTION_DEVICE_ID: "0"})
            dst_arrays = [np.zeros((1, 32), np.uint8) for _ in range(2)]
            dst = register(client, dst_arrays)
            evicted: list[str] = []
            for _ in range(3):
                now = status_of(os.getpid())
                peak = {k: max(peak[k], now[k]) for k in peak}
                status, rets = client.link_llm_clusters([cluster(1, port)], timeout_in_millis=3000)
                if rets == [S.LLM_LINK_FAILED] and "closed the connection" in Raw().last_error() and not evicted:
                    # The TCP half of the flood shares the client's source (127.0.0.1): a HELLO
                    # later than 32 newer flood connections (about 0.13 s at this rate) loses its
                    # connection to eviction (docs/security.md §3.4). That can happen once to a
                    # thread descheduled on a loaded machine (seen under ThreadSanitizer); the
                    # client's retry then links. Once in three links, never twice.
                    evicted.append(Raw().last_error())
                    status, rets = client.link_llm_clusters([cluster(1, port)], timeout_in_millis=3000)
                assert (status, rets) == (S.LLM_SUCCESS, [S.LLM_SUCCESS]), (Raw().last_error(), evicted)
                # the identity channel answered the link's IDENTIFY: the kernel vouched for the peer
                assert mock_control.link_path(client, 1) == "same-process"
                client.pull_kv_cache(native.CacheIndex(1, src), native.Cache(dst))
                assert all(np.array_equal(a, b) for a, b in zip(arrays, dst_arrays))
                for a in dst_arrays:
                    a[:] = 0
                assert client.unlink_llm_clusters([cluster(1, port)])[0] == S.LLM_SUCCESS
        assert flooder.running(), "the flood ended before the links were made"
        during = status_of(os.getpid())
        peak = {k: max(peak[k], during[k]) for k in peak}
    finally:
        flooder.stop()
    print(f"\nflood of 1000 silent connections: before {before}, peak {peak}, links retried after an eviction: "
          f"{evicted}")
    # no thread per silent connection; descriptors: the gate's table at most
    assert peak["threads"] <= before["threads"] + 4, (before, peak)
    assert peak["fds"] <= before["fds"] + ws.BOUND_GATE + 16, (before, peak)
    assert peak["rss_kib"] <= before["rss_kib"] + 32 * 1024, (before, peak)
    # and the gate empties once the flood is gone
    assert settles(lambda: status_of(os.getpid())["fds"] <= before["fds"] + 4, 12.0)


def test_silent_connections_hold_no_thread_and_one_address_holds_at_most_its_share(
        listener: Callable[..., native.LlmDataDist]) -> None:
    prompt = listener(1)
    port = prompt.listen_port  # type: ignore[attr-defined]
    before = status_of(os.getpid())
    share = ws.BOUND_GATE_PER_SOURCE
    silent = [ws.connect(port, source="127.0.0.2") for _ in range(share + 8)]
    try:
        time.sleep(0.5)
        assert status_of(os.getpid())["threads"] == before["threads"]
        # the oldest eight of that address were closed to make room, the rest are held
        assert all(ws.closed_by_peer(s, 2.0) for s in silent[:8])
        assert not any(ws.closed_by_peer(s, 0.05) for s in silent[8:])
        # another address is not crowded out: a HELLO from it is answered
        with ws.connect(port) as c1:
            assert ws.hello(c1, 7, 1, token=0x5151)[0] == S.LLM_SUCCESS
    finally:
        for s in silent:
            s.close()


# ---- item 6: nobody without the secret takes a slot; one address takes its share only ------

def test_with_a_secret_a_stranger_takes_no_thread_and_no_slot(listener: Callable[..., native.LlmDataDist]) -> None:
    prompt = listener(1, **{SECRET_OPTION: "s3cret"})
    port = prompt.listen_port  # type: ignore[attr-defined]
    time.sleep(0.2)
    before = status_of(os.getpid())
    held: list[socket.socket] = []
    try:
        for i in range(ws.BOUND_HANDSHAKES + 16):
            # a DISCONNECT without the secret's proof, a HELLO with a wrong one, a REVERSE
            # naming no handshake: each is answered at once and takes nothing
            d = ws.connect(port)
            d.sendall(ws.header(ws.MSG_DISCONNECT, a=2, b=1))
            reply = ws.recv_reply(d)
            assert (reply.kind, reply.status, reply.a) == (ws.MSG_DISCONNECT_REPLY, S.LLM_UNLINK_FAILED, 0)
            h = ws.connect(port)
            body = ws.hello_body(cluster_id=100 + i, expected=1, token=0x9000 + i, secret=b"wrong")
            h.sendall(ws.header(ws.MSG_HELLO, payload_len=len(body)) + body)
            assert ws.recv_reply(h).status == S.LLM_LINK_FAILED
            r = ws.connect(port)
            r.sendall(ws.header(ws.MSG_REVERSE, a=0x9000 + i, b=100 + i, payload_len=ws.REVERSE.size) +
                      ws.REVERSE.pack(bytes(128), bytes(32)))
            assert ws.recv_reply(r).status == S.LLM_LINK_FAILED
            held += [d, h, r]
        assert status_of(os.getpid())["threads"] <= before["threads"] + 1
        # the strangers' connections are still open: a client with the secret links
        with native.LlmDataDist(2, native.LlmRole.DECODER) as client:
            client.initialize({native.OPTION_DEVICE_ID: "0", SECRET_OPTION: "s3cret"})
            status, rets = client.link_llm_clusters([cluster(1, port)], timeout_in_millis=3000)
            assert (status, rets) == (S.LLM_SUCCESS, [S.LLM_SUCCESS]), Raw().last_error()
            assert client.unlink_llm_clusters([cluster(1, port)])[0] == S.LLM_SUCCESS
    finally:
        for s in held:
            s.close()


@contextlib.contextmanager
def raw_links(port: int, per_source: dict[str, int]) -> Iterator[None]:
    """Raw links (wire_support.raw_link) from each address, as many as it says; closed after."""
    raw: list[tuple[socket.socket, socket.socket]] = []
    try:
        for source, count in per_source.items():
            for _ in range(count):
                n = 1000 + len(raw)
                raw.append(ws.raw_link(port, n, 1, token=0x20000 + n, source=source))
        yield
    finally:
        for pair in raw:
            for s in pair:
                s.close()


def refused_hello(port: int, source: str) -> str:
    """The text of the refusal of a HELLO from ``source``, which must be refused."""
    with ws.connect(port, source=source) as c1:
        status, text = ws.hello(c1, 5000, 1, token=0x30000)
    assert status == S.LLM_LINK_FAILED, "the HELLO was answered with a link"
    return text


def test_without_a_secret_one_address_cannot_take_every_link_slot(
        listener: Callable[..., native.LlmDataDist]) -> None:
    prompt = listener(1)
    port = prompt.listen_port  # type: ignore[attr-defined]
    share = ws.BOUND_LINKS_PER_SOURCE
    with raw_links(port, {"127.0.0.2": share}):
        assert f"serves {share} links to this client's address" in refused_hello(port, "127.0.0.2")
        # another address still links (the slots left are not that address's to take)
        with native.LlmDataDist(2, native.LlmRole.DECODER) as client:
            client.initialize({native.OPTION_DEVICE_ID: "0"})
            status, rets = client.link_llm_clusters([cluster(1, port)], timeout_in_millis=3000)
            assert (status, rets) == (S.LLM_SUCCESS, [S.LLM_SUCCESS]), Raw().last_error()


def test_without_a_secret_one_address_holds_at_most_its_share_of_handshake_threads(
        listener: Callable[..., native.LlmDataDist]) -> None:
    prompt = listener(1)
    port = prompt.listen_port  # type: ignore[attr-defined]
    share = ws.BOUND_HANDSHAKES_PER_SOURCE
    before = status_of(os.getpid())
    waiting = [ws.connect(port, source="127.0.0.2") for _ in range(share)]
    extra = ws.connect(port, source="127.0.0.2")
    try:
        for i, c1 in enumerate(waiting):     # HELLOs that never send their REVERSE
            assert ws.hello(c1, 100 + i, 1, token=0x7100 + i, timeout_ms=10000)[0] == S.LLM_SUCCESS
        assert status_of(os.getpid())["threads"] == before["threads"] + share
        body = ws.hello_body(cluster_id=200, expected=1, token=0x7200, timeout_ms=10000)
        extra.sendall(ws.header(ws.MSG_HELLO, payload_len=len(body)) + body)
        extra.settimeout(0.5)
        with pytest.raises(TimeoutError):    # it waits in the gate for a thread of its address
            extra.recv(1)
        with ws.connect(port) as c1:         # another address is answered at once
            c1.settimeout(1.0)
            assert ws.hello(c1, 300, 1, token=0x7300)[0] == S.LLM_SUCCESS
        waiting.pop().close()                # one of the address's handshakes ends: the waiting one goes on
        extra.settimeout(3.0)
        assert ws.recv_hdr(extra)[:2] == (ws.MSG_HELLO_REPLY, S.LLM_SUCCESS)
    finally:
        extra.close()
        for s in waiting:
            s.close()


def test_the_link_slots_one_address_leaves_are_taken_by_others_up_to_the_cap(
        listener: Callable[..., native.LlmDataDist]) -> None:
    """Several addresses together still reach BOUND_LINKS, and the refusal says so."""
    prompt = listener(1)
    port = prompt.listen_port  # type: ignore[attr-defined]
    share = ws.BOUND_LINKS_PER_SOURCE
    with raw_links(port, {"127.0.0.2": share, "127.0.0.3": ws.BOUND_LINKS - share}):
        assert f"serves {ws.BOUND_LINKS} links, the most it takes" in refused_hello(port, "127.0.0.4")
