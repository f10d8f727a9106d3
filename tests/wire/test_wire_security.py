"""The wire against a hostile peer (docs/security.md §2): who may take the fast paths,
what a peer may read or write, who may drop a link, what replies reveal, the shared
secret. The hostile peer is a raw client (wire_support.py) in this process or in a
child process; the victim is a real engine.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest

import engine_support as sup
import ext_support as xs
import wire_support as wire
from paths import helper_env
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import mock_control, native

pytestmark = pytest.mark.mock_only(reason="the mock's own wire protocol and listener")

SECRET_OPTION = "llm_datadist_ffi.mock.LinkSecret"


@pytest.fixture
def engines() -> Iterator[Any]:
    made: list[native.LlmDataDist] = []

    def make(cluster_id: int, listen: bool = True, **options: str) -> native.LlmDataDist:
        engine = native.LlmDataDist(cluster_id, native.LlmRole.PROMPT if listen else native.LlmRole.DECODER)
        opts = dict(options)
        if listen:
            port = sup.free_port()
            opts[native.OPTION_LISTEN_IP_INFO] = f"127.0.0.1:{port}"
            engine.listen_port = port  # type: ignore[attr-defined]
        opts.setdefault(native.OPTION_DEVICE_ID, "0")
        made.append(engine)                  # closed also when initialize refuses
        engine.initialize(opts)
        return engine

    yield make
    for engine in made:
        engine.close()


def _mapped_ranges() -> list[tuple[int, int]]:
    """The ranges of this process's code, data, heap and stacks: every mapping with a name
    (the anonymous ones include sanitizers' shadow memory, terabytes that random words of a
    reply's nonces would fall into)."""
    ranges = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            ranges.append((start, end))
    return ranges


def _words_that_look_like_secrets(body: bytes) -> list[int]:
    """Every 8-byte word of a reply that is this process's pid or an address in it."""
    ranges = _mapped_ranges()
    found = []
    for offset in range(0, len(body) - 7):
        (word,) = struct.unpack_from("=Q", body, offset)
        if word == os.getpid() or any(start <= word < end for start, end in ranges):
            found.append(word)
    return found


# ---- item 11: replies reveal no pid and no address ----------------------------------------

def test_a_handshake_reply_carries_no_pid_and_no_address_of_the_listener(engines: Any) -> None:
    server = engines(1)
    peer = wire.RawLink(server.listen_port, cluster_id=7, expected=1)
    try:
        hello = peer.hello()
        assert hello.reply.status == S.LLM_SUCCESS
        assert hello.cluster_id == 1
        assert _words_that_look_like_secrets(hello.reply.body) == []
    finally:
        peer.close()


def test_a_refused_handshake_reveals_nothing_about_the_listener(engines: Any) -> None:
    server = engines(1)
    peer = wire.RawLink(server.listen_port, cluster_id=7, expected=4)
    try:
        hello = peer.hello(strict_ids=1)       # strict mode: a mismatch is refused (PR-28)
    finally:
        peer.close()
    assert hello.reply.status == S.LLM_PARAM_INVALID
    assert hello.reply.body[:wire.HELLO.size] == bytes(wire.HELLO.size)
    assert "not cluster 4" in hello.reply.text and "1" not in re.sub(r"PR-28", "", hello.reply.text)


def test_pin_replies_carry_no_address_to_a_peer_nobody_identified(engines: Any) -> None:
    server = engines(1)
    arrays = sup.fill(2, [4, 16], seed=3)
    cache_id = sup.register(server, arrays, dtype=native.DataType.DT_UINT8)
    peer = wire.RawLink(server.listen_port, cluster_id=7, expected=1)
    try:
        peer.link()
        reply, desc, addrs = peer.pin(cache_id)
        assert reply.status == S.LLM_SUCCESS and desc[0] == cache_id and desc[3] == 2
        assert addrs == [0, 0]
        # the socket path still serves the bytes, by tensor index and offset
        read = peer.read(cache_id, 1, 16, 32)
        assert read.status == S.LLM_SUCCESS and read.body == arrays[1].tobytes()[16:48]
        assert mock_control.link_path(server, 7) == "socket"
    finally:
        peer.close()


def test_the_listener_binds_exactly_the_address_it_is_given(engines: Any) -> None:
    server = engines(1)                                  # 127.0.0.1
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", server.listen_port), timeout=2).close()


def test_an_ipv6_wildcard_listener_does_not_take_ipv4_connections() -> None:
    probe = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        probe.bind(("::1", 0))
    except OSError as exc:
        pytest.skip(f"this machine has no IPv6 loopback ({exc})")
    finally:
        probe.close()
    port = sup.free_port()
    engine = native.LlmDataDist(1, native.LlmRole.PROMPT)
    engine.initialize({native.OPTION_LISTEN_IP_INFO: f"[::]:{port}", native.OPTION_DEVICE_ID: "0"})
    try:
        socket.create_connection(("::1", port), timeout=2).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        engine.close()


# ---- item 2: the server decides from its own state ----------------------------------------

@pytest.fixture
def ext() -> Iterator[xs.Ext]:
    x = xs.Ext()
    yield x
    x.close()


def test_a_cache_registered_without_remote_access_is_neither_read_nor_written_by_a_raw_peer(ext: xs.Ext) -> None:
    engine, port = ext.listening(1, xs.v2_options(direct=True, role="Prompt"))
    arrays = xs.fill(1, 64, seed=5)
    before = arrays[0].tobytes()
    status, cache_id = ext.register(engine, arrays, remote=0)
    assert status == S.LLM_SUCCESS
    peer = wire.RawLink(port, cluster_id=7, expected=1)
    try:
        peer.link()
        reply, desc, addrs = peer.pin(cache_id)
        assert reply.status == S.LLM_SUCCESS and desc[5] == 0 and addrs == [0]   # remote_accessible = 0
        assert peer.write(cache_id, 0, 0, b"\xee" * 64).status == S.LLM_PARAM_INVALID
    finally:
        peer.close()
    assert arrays[0].tobytes() == before
    peer = wire.RawLink(port, cluster_id=8, expected=1)
    try:
        peer.link()
        assert peer.pin(cache_id)[0].status == S.LLM_SUCCESS
        read = peer.read(cache_id, 0, 0, 64)
        assert read.status == S.LLM_PARAM_INVALID and read.body == b""
    finally:
        peer.close()


def test_the_table_copy_is_the_listeners_not_the_watermark_a_peer_claims(engines: Any) -> None:
    server = engines(1)
    first = sup.register(server, sup.fill(1, [4, 4], seed=1), dtype=native.DataType.DT_UINT8)
    peer = wire.RawLink(server.listen_port, cluster_id=7, expected=1)
    try:
        peer.link()
        assert peer.pin(first)[0].status == S.LLM_SUCCESS            # the copy is taken here
        later = sup.register(server, sup.fill(1, [4, 4], seed=2), dtype=native.DataType.DT_UINT8)
        reply, _, _ = peer.pin(later, watermark=1 << 40)             # "my copy is newer"
        assert reply.status == S.LLM_KV_CACHE_NOT_EXIST
        assert reply.a == first + 1                                  # the listener's own mark
    finally:
        peer.close()


# ---- item 3: a link is dropped only by its own ends ---------------------------------------

def test_a_stranger_can_neither_drop_a_live_link_nor_take_its_cluster_id(engines: Any) -> None:
    prompt = engines(1)
    decoder = engines(2, listen=False)
    arrays = [a.reshape(1, 64) for a in sup.fill(1, [64], seed=9)]        # one batch of 64 bytes
    src = sup.register(prompt, arrays, dtype=native.DataType.DT_UINT8)
    dst_arrays = [np.zeros((1, 64), np.uint8)]
    dst = sup.register(decoder, dst_arrays, dtype=native.DataType.DT_UINT8)
    assert decoder.link_llm_clusters([sup.cluster(1, prompt.listen_port)])[0] == S.LLM_SUCCESS
    # a DISCONNECT without a proof of the link's token: answered, nothing dropped
    reply = wire.disconnect(prompt.listen_port, cluster_id=2, expected=1, tokens=(0x1234, 0x5678))
    assert reply.status == S.LLM_SUCCESS
    assert mock_control.link_path(prompt, 2) == "same-process"
    # the stranger claims the Decoder's cluster id: refused while the Decoder's link lives
    peer = wire.RawLink(prompt.listen_port, cluster_id=2, expected=1)
    try:
        assert peer.hello().reply.status == S.LLM_SUCCESS
        reverse = peer.reverse(replaces=wire.token_proof(0x5EC0DE, bytes(16)) * 4)   # guessed proofs
        assert reverse.status == S.LLM_ALREADY_LINK and "GUARD E-25" in reverse.text
    finally:
        peer.close()
    decoder.pull_kv_cache(native.CacheIndex(1, src), native.Cache(dst))
    assert dst_arrays[0].tobytes() == arrays[0].tobytes()
    # the Decoder's own unlink still works (its token), and then the id is free again
    assert decoder.unlink_llm_clusters([sup.cluster(1, prompt.listen_port)])[1] == [S.LLM_SUCCESS]
    assert mock_control.link_path(prompt, 2) == "none"


def test_a_relink_after_a_force_unlink_replaces_the_old_link(engines: Any) -> None:
    prompt = engines(1)
    decoder = engines(2, listen=False)
    assert decoder.link_llm_clusters([sup.cluster(1, prompt.listen_port)])[0] == S.LLM_SUCCESS
    assert decoder.unlink_llm_clusters([sup.cluster(1, prompt.listen_port)], force_flag=True)[1] == [S.LLM_SUCCESS]
    assert decoder.link_llm_clusters([sup.cluster(1, prompt.listen_port)])[0] == S.LLM_SUCCESS
    assert mock_control.link_path(prompt, 2) == "same-process"


# ---- item 1 and 9: identity the kernel vouches for ----------------------------------------

@pytest.fixture
def peer_process() -> Iterator[Any]:
    made: list[sup.PeerProcess] = []

    def make(env: dict[str, str] | None = None) -> sup.PeerProcess:
        p = sup.PeerProcess(env)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def test_a_peer_in_another_process_takes_process_vm_only_once_the_kernel_named_it(engines: Any,
                                                                                   peer_process: Any) -> None:
    prompt = engines(1)
    decoder = peer_process()
    decoder.call("init", cluster_id=2, role=int(native.LlmRole.DECODER), options={native.OPTION_DEVICE_ID: "0"})
    assert decoder.call("link", clusters=[[1, prompt.listen_port]]) == [0, 0]
    assert mock_control.link_path(prompt, 2) == "process_vm"
    assert decoder.call("link_path", cluster=1) == "process_vm"
    off = peer_process({"LLDD_MOCK_NO_PROCESS_VM": "1"})
    off.call("init", cluster_id=3, role=int(native.LlmRole.DECODER), options={native.OPTION_DEVICE_ID: "0"})
    assert off.call("link", clusters=[[1, prompt.listen_port]]) == [0, 0]
    assert off.call("link_path", cluster=1) == "socket"
    assert mock_control.link_path(prompt, 3) == "process_vm"       # this side has it on


def test_an_identity_claim_needs_the_links_token_and_its_own_connection(engines: Any) -> None:
    server = engines(1)
    peer = wire.RawLink(server.listen_port, cluster_id=7, expected=1)
    other = wire.RawLink(server.listen_port, cluster_id=8, expected=1)
    try:
        hello = peer.hello()
        other.hello()
        assert peer.c1 is not None and other.c1 is not None
        assert wire.identify(hello.id_channel, peer.token ^ 1, peer.c1) != 0        # wrong token
        assert wire.identify(hello.id_channel, peer.token, other.c1) != 0           # another connection
        assert wire.identify(hello.id_channel, peer.token, peer.c1) == 0
        assert wire.identify(hello.id_channel, peer.token, peer.c1) != 0            # one claim per handshake
    finally:
        peer.close()
        other.close()


ATTACKER = textwrap.dedent("""
    import socket, struct, sys
    import wire_support as wire
    port, victim_cache, secret_addr = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    peer = wire.RawLink(port, cluster_id=66, expected=1)
    hello = peer.hello(next_cache_id=100)       # its caches 1..99 "existed at link time" (PR-32)
    assert wire.identify(hello.id_channel, peer.token, peer.c1) == 0   # as itself: all it can claim
    assert peer.reverse().status == 0
    reply, desc, addrs = peer.pin(victim_cache)
    assert reply.status == 0
    print("ready", flush=True)
    # the victim pulls cache 1 of cluster 66: answer with the victim's secret address
    h = wire.HDR.unpack(wire.recv_exact(peer.c2, wire.HDR.size))
    assert h[1] == wire.MSG_PIN, h
    n = desc[3]
    body = wire.CACHE_WIRE.pack(1, *desc[1:]) + struct.pack(f"={n}Q", *([secret_addr] * n))
    peer.c2.sendall(wire.header(wire.MSG_PIN_REPLY, a=1 << 40, b=1 << 40, payload_len=len(body)) + body)
    sys.stdin.readline()
""")


def test_a_peer_cannot_make_the_engine_read_its_own_memory_for_it(engines: Any) -> None:
    victim = engines(1)
    secret = np.frombuffer(b"TOPSECRET-" * 10, dtype=np.uint8)[:64].copy()          # never registered
    dst = [np.zeros((1, 64), np.uint8)]
    dst_id = sup.register(victim, dst, dtype=native.DataType.DT_UINT8)
    attacker = subprocess.Popen([sys.executable, "-c", ATTACKER, str(victim.listen_port),
                                 str(dst_id), str(secret.ctypes.data)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=helper_env())
    try:
        assert attacker.stdout is not None and attacker.stdout.readline().strip() == "ready"
        assert mock_control.link_path(victim, 66) == "process_vm"   # the attacker's own process
        try:
            victim.pull_kv_cache(native.CacheIndex(66, 1), native.Cache(dst_id))
        except native.LLMException as exc:
            assert exc.status_code == S.LLM_FAILED and "not mapped" in str(exc)
        assert b"TOPSECRET" not in dst[0].tobytes()
    finally:
        attacker.kill()
        attacker.communicate()


def test_a_transfer_to_a_peer_that_was_killed_and_reaped_fails(engines: Any, peer_process: Any) -> None:
    prompt = engines(1)
    arrays = [np.full(1 << 20, 7, np.uint8)] * 2                   # alive while registered
    src = sup.register(prompt, arrays, dtype=native.DataType.DT_UINT8)
    decoder = peer_process()
    decoder.call("init", cluster_id=2, role=int(native.LlmRole.PROMPT),
                 options={native.OPTION_DEVICE_ID: "0",
                          native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{(port := sup.free_port())}"})
    dst = decoder.call("register", num_tensors=2, shape=[1 << 20], seed=1)
    assert prompt.link_llm_clusters([sup.cluster(2, port)])[0] == S.LLM_SUCCESS
    assert mock_control.link_path(prompt, 2) == "process_vm"
    prompt.push_kv_cache(native.Cache(src, cache_desc=native.CacheDesc(2, native.DataType.DT_UINT8, [1])),
                         native.CacheIndex(2, dst))
    os.kill(decoder.proc.pid, signal.SIGKILL)
    decoder.proc.wait()                                        # killed and reaped
    with pytest.raises(native.LLMException) as caught:
        prompt.push_kv_cache(native.Cache(src, cache_desc=native.CacheDesc(2, native.DataType.DT_UINT8, [1])),
                             native.CacheIndex(2, dst))
    assert caught.value.status_code == S.LLM_TIMEOUT


# ---- the shared secret ----------------------------------------------------------------------

@pytest.mark.parametrize("secret", [b"s3cret", b"k" * 64, bytes(range(1, 101))])
def test_the_listeners_proof_of_the_secret_is_hmac_sha256(engines: Any, secret: bytes) -> None:
    server = engines(1, **{SECRET_OPTION: secret.decode("ascii")})
    peer = wire.RawLink(server.listen_port, cluster_id=7, expected=1, secret=secret)
    try:
        hello = peer.hello()
        assert hello.reply.status == S.LLM_SUCCESS
        server_nonce, proof = hello.fields[12], hello.fields[13]
        assert isinstance(server_nonce, bytes) and hello.fields[10] == 1
        assert proof == wire.proof_of(secret, "lldd-server", peer.nonce, server_nonce, peer.token)
        wrong = peer.reverse(bytes(32))
        assert wrong.status == S.LLM_LINK_FAILED and "shared secret" in wrong.text
    finally:
        peer.close()
    peer = wire.RawLink(server.listen_port, cluster_id=8, expected=1, secret=secret)
    try:
        hello = peer.hello()
        server_nonce = hello.fields[12]
        assert isinstance(server_nonce, bytes)
        reply = peer.reverse(wire.proof_of(secret, "lldd-client", server_nonce, peer.nonce, peer.token))
        assert reply.status == S.LLM_SUCCESS
    finally:
        peer.close()


def test_a_handshake_without_the_secret_is_refused_and_learns_nothing(engines: Any) -> None:
    server = engines(1, **{SECRET_OPTION: "s3cret"})
    for secret in (None, b"wrong"):
        peer = wire.RawLink(server.listen_port, cluster_id=7, expected=1, secret=secret)
        try:
            hello = peer.hello()
        finally:
            peer.close()
        assert hello.reply.status == S.LLM_LINK_FAILED and "shared secret" in hello.reply.text
        assert hello.reply.body[:wire.HELLO.size] == bytes(wire.HELLO.size)


def test_engines_link_only_when_both_hold_the_same_secret(engines: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server = engines(1, **{SECRET_OPTION: "alpha"})
    same = engines(2, listen=False, **{SECRET_OPTION: "alpha"})
    assert same.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    other = engines(3, listen=False, **{SECRET_OPTION: "beta"})
    assert other.link_llm_clusters([sup.cluster(1, server.listen_port)])[1] == [S.LLM_LINK_FAILED]
    none = engines(4, listen=False)
    assert none.link_llm_clusters([sup.cluster(1, server.listen_port)])[1] == [S.LLM_LINK_FAILED]
    open_server = engines(5)
    assert same.link_llm_clusters([sup.cluster(5, open_server.listen_port)])[1] == [S.LLM_LINK_FAILED]
    assert "did not prove the shared secret" in same.link_reasons[1][0]
    monkeypatch.setenv("LLM_DATADIST_FFI_LINK_SECRET", "alpha")
    from_env = engines(6, listen=False)
    assert from_env.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS


def _stranger_disconnect(port: int, named: int, expected: int, count: int) -> tuple[bytes, float]:
    start = time.monotonic()
    transcript = wire.disconnect_transcript(port, cluster_id=named, expected=expected, count=count)
    return transcript, time.monotonic() - start


def test_a_disconnect_without_the_secret_learns_nothing_in_content_or_timing(engines: Any) -> None:
    """With a secret set, a DISCONNECT from a client without it gets the same bytes at
    once whatever it names: a cluster linked to the listener (which the listener would
    wait up to a second for), one that exists unlinked, one that does not exist; and
    whatever listener id it expects, strict or not. The link stays."""
    listener_id = 0x51A7E1D
    server = engines(listener_id, **{SECRET_OPTION: "s3cret"})
    linked = engines(7, listen=False, **{SECRET_OPTION: "s3cret"})
    engines(8, listen=False, **{SECRET_OPTION: "s3cret"})          # exists, not linked
    assert linked.link_llm_clusters([sup.cluster(listener_id, server.listen_port)])[0] == S.LLM_SUCCESS
    transcripts = set()
    times: dict[int, list[float]] = {7: [], 8: [], 9: []}
    for _ in range(5):
        for named in (7, 8, 9):
            for expected, count in ((listener_id, 0), (listener_id, wire.DISCONNECT_STRICT_IDS), (12345, 0),
                                    (12345, wire.DISCONNECT_STRICT_IDS)):
                transcript, seconds = _stranger_disconnect(server.listen_port, named, expected, count)
                transcripts.add(transcript)
                if count == 0 and expected == listener_id:
                    times[named].append(seconds)
    medians = {named: sorted(t)[len(t) // 2] for named, t in times.items()}
    assert max(medians.values()) - min(medians.values()) < 0.2, f"median seconds per named cluster: {medians}"
    assert not [t for t in transcripts if struct.pack("=Q", listener_id) in t], "an answer names the listener"
    assert len(transcripts) == 1, f"{len(transcripts)} different answers"
    (transcript,) = transcripts
    reply = wire.HDR.unpack_from(transcript)
    assert (reply[1], reply[3], reply[5]) == (wire.MSG_DISCONNECT_REPLY, S.LLM_UNLINK_FAILED, 0)
    assert "shared secret" in transcript[wire.HDR.size:].split(b"\0", 1)[0].decode()
    # the stranger dropped nothing: the link holds, and its own end unlinks it (with the secret)
    assert mock_control.link_path(linked, listener_id) != "none"
    assert linked.unlink_llm_clusters([sup.cluster(listener_id, server.listen_port)])[0] == S.LLM_SUCCESS
    assert mock_control.link_path(linked, listener_id) == "none"


def test_an_unlink_with_another_secret_is_refused_with_the_listeners_reason(engines: Any) -> None:
    server = engines(1, **{SECRET_OPTION: "alpha"})
    same = engines(2, listen=False, **{SECRET_OPTION: "alpha"})
    assert same.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    other = engines(3, listen=False, **{SECRET_OPTION: "beta"})
    # (before: the listener asked for token proofs and answered LLM_SUCCESS with its cluster id)
    assert other.unlink_llm_clusters([sup.cluster(1, server.listen_port)]) == (S.LLM_UNLINK_FAILED,
                                                                               [S.LLM_UNLINK_FAILED])
    assert ("the peer refused the disconnect: the unlink did not prove the listener's shared secret"
            in sup.Raw().last_error())
    assert mock_control.link_path(same, 1) != "none"


def test_a_secret_longer_than_256_bytes_is_refused_with_its_name(engines: Any) -> None:
    with pytest.raises(native.LLMException) as caught:
        engines(1, **{SECRET_OPTION: "x" * 257})
    assert caught.value.status_code == S.LLM_PARAM_INVALID and "LinkSecret is 257 bytes long" in str(caught.value)
