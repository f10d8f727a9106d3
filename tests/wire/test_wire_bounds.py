"""Bounds of the mock engine (docs/security.md §3): nothing a peer does, or fails to do,
makes an engine wait past its wait time or hold more than a fixed amount of
connections, threads, pins and memory.

The engine under test lives in this process; peers are engines in other processes or
raw sockets (wire_support) that speak the mock's framing as a hostile client would.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytest

import vendor_support as vs
import wire_support as ws
from engine_support import PeerProcess, Raw, random_arrays, register
from llm_datadist_ffi import LLMException
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import mock_control, native
from llm_datadist_ffi.native import Cache, CacheIndex, ClusterInfo, IpInfo
from llm_datadist_ffi.vendor import CacheDesc, CacheKey, DataType, LLMDataDist, LLMRole

pytestmark = pytest.mark.mock_only(reason="the bounds are the mock engine's; the wire is the mock's")

Engines = Callable[..., native.LlmDataDist]

# mock_libs/core/engine.h (tests/abi/test_wire_protocol.py pins wire_support's copies to it)
BOUND_HANDSHAKES, BOUND_LINKS = ws.BOUND_HANDSHAKES, ws.BOUND_LINKS
BOUND_PINS_PER_LINK, BOUND_GONE_RECORDS = ws.BOUND_PINS_PER_LINK, ws.BOUND_GONE_RECORDS


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def settles(check: Callable[[], bool], within: float) -> bool:
    """Whether ``check`` holds at some point within ``within`` seconds."""
    end = time.monotonic() + within
    while True:
        if check():
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


def link_info(cluster_id: int, port: int) -> ClusterInfo:
    return ClusterInfo(cluster_id, 0, [IpInfo("127.0.0.1", 0)], [IpInfo("127.0.0.1", port)])


class Call(threading.Thread):
    """A call in a thread of its own, so that a call that never returns fails the test
    instead of hanging it."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.seconds = -1.0

    def run(self) -> None:
        start = time.monotonic()
        try:
            self.result = self.fn()
        except BaseException as exc:   # handed to the test thread, which re-raises it
            self.error = exc
        self.seconds = time.monotonic() - start

    def returned_within(self, seconds: float) -> bool:
        self.join(seconds)
        if self.error is not None:
            raise self.error
        return not self.is_alive()


@pytest.fixture
def prompt(engines: Engines) -> native.LlmDataDist:
    """A listening engine whose wait time (llm.SyncKvCacheWaitTime) is 1000 ms."""
    return engines(1, listen=True, options={"llm.SyncKvCacheWaitTime": "1000"})


@pytest.fixture
def cache_of(prompt: native.LlmDataDist) -> Iterator[Callable[[], int]]:
    """Registers 2-tensor caches on the prompt; their arrays live as long as the test."""
    keep: list[list[np.ndarray]] = []

    def make() -> int:
        arrays = random_arrays(2, (4, 8), len(keep))
        keep.append(arrays)
        return int(register(prompt, arrays))
    yield make


# ---- Why 6: waits for a peer's pin end within the wait time -----------------------------

def test_unregister_cuts_a_stopped_decoders_link_after_the_wait_time(prompt: native.LlmDataDist,
                                                                     cache_of: Callable[[], int]) -> None:
    """A Decoder stopped (SIGSTOP) in the middle of a pull holds a pin on the Prompt's
    cache. The Prompt's serve delay stretches the pull so that the stop lands inside it:
    PIN is answered after 3 s, READ after 3 s more; the Decoder is stopped at 4 s, and
    the Prompt cuts the link at 5 s, before it answers the READ."""
    src = cache_of()
    decoder = PeerProcess(env={"LLDD_MOCK_NO_PROCESS_VM": "1"})   # the socket path: READ holds the pin
    try:
        decoder.call("init", cluster_id=2, role=2, options={"llm.DeviceId": "0", "llm.SyncKvCacheWaitTime": "20000"})
        dst = decoder.call("register", num_tensors=2, shape=[4, 8], seed=-1)
        assert decoder.call("link", clusters=[[1, prompt.listen_port]]) == [0, 0]
        mock_control.set_serve_delay(prompt, 3000)
        assert decoder.proc.stdin is not None and decoder.proc.stdout is not None
        decoder.proc.stdin.write(json.dumps({"op": "pull_cache", "cluster": 1, "src": src, "dst": dst}) + "\n")
        decoder.proc.stdin.flush()
        time.sleep(4.0)
        os.kill(decoder.proc.pid, signal.SIGSTOP)
        try:
            call = Call(lambda: prompt.unregister_kv_cache(src))
            call.start()
            finished = call.returned_within(6.0)
        finally:
            os.kill(decoder.proc.pid, signal.SIGCONT)
        assert finished, "unregister_kv_cache waited for the stopped Decoder"
        assert call.seconds < 4.0                       # 1 s of wait time, then the cut
        mock_control.set_serve_delay(prompt, 0)
        # the Decoder's link was cut: its pull and every later transfer see the peer gone
        reply = json.loads(decoder.proc.stdout.readline())
        assert (reply["ok"], reply.get("status")) == (False, S.LLM_TIMEOUT)
        assert decoder.status("pull_cache", cluster=1, src=src, dst=dst) == S.LLM_TIMEOUT
        # and the Prompt's side says why
        assert sup_push(prompt, 2, cache_of()) == S.LLM_TIMEOUT
        assert "this engine cut the link" in Raw().last_error()
    finally:
        decoder.close()


def test_unregister_cuts_a_silent_client_that_pinned_the_cache(prompt: native.LlmDataDist,
                                                               cache_of: Callable[[], int]) -> None:
    src = cache_of()
    c1, c2 = ws.raw_link(prompt.listen_port, 66, 1, token=0x6666)
    with c1, c2:
        assert ws.pin(c1, src) == 0                   # pinned, and then nothing more
        call = Call(lambda: prompt.unregister_kv_cache(src))
        call.start()
        assert call.returned_within(5.0), "unregister_kv_cache waited for a client that never unpins"
        assert 0.9 <= call.seconds < 3.0               # the wait time first
        assert ws.closed_by_peer(c1, 2.0)               # then its connections are cut
    # the link of the client is gone; the engine serves new links
    c1, c2 = ws.raw_link(prompt.listen_port, 66, 1, token=0x6667)
    with c1, c2:
        assert ws.pin(c1, cache_of()) == 0


def test_deallocate_cuts_a_silent_client_that_pinned_the_cache(engines: Engines) -> None:
    prompt = engines(1, listen=True, options={native.OPTION_SYNC_CACHE_WAIT_TIME: "1000",
                                              native.OPTION_MOCK_NATIVE_POOL: "1",
                                              native.OPTION_MEM_POOL_CONFIG: '{"memory_size": 1048576}'})
    cache = prompt.allocate_cache(native.CacheDesc(2, native.DataType.DT_UINT8, [4, 8]))
    c1, c2 = ws.raw_link(prompt.listen_port, 65, 1, token=0x6565)
    with c1, c2:
        assert ws.pin(c1, cache.cache_id) == 0
        call = Call(lambda: prompt.deallocate_cache(cache.cache_id))
        call.start()
        assert call.returned_within(5.0), "deallocate_cache waited for a client that never unpins"
        assert 0.9 <= call.seconds < 3.0
        assert ws.closed_by_peer(c1, 2.0)


def test_the_vendor_apis_deallocate_cuts_a_silent_client_that_pinned_the_cache() -> None:
    port = vs.free_port()
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    engine.init(vs.v2_options(port=port, pool=True, **{"llm.SyncKvCacheWaitTime": "1000"}))
    try:
        cache = engine.cache_manager.allocate_cache(CacheDesc(2, [4, 64], DataType.DT_UINT8))
        c1, c2 = ws.raw_link(port, 64, 1, token=0x6464)
        with c1, c2:
            assert ws.pin(c1, cache.cache_id) == 0
            call = Call(lambda: engine.cache_manager.deallocate_cache(cache))
            call.start()
            assert call.returned_within(5.0), "CacheManager.deallocate_cache waited for a client that never unpins"
            assert 0.9 <= call.seconds < 3.0
            assert ws.closed_by_peer(c1, 2.0)
    finally:
        engine.finalize()


def test_finalize_ends_within_the_wait_time_while_an_unregister_waits_for_a_pin(
        engines: Engines) -> None:
    arrays = random_arrays(2, (4, 8), 7)
    prompt = engines(1, listen=True, options={"llm.SyncKvCacheWaitTime": "1000"})
    src = register(prompt, arrays)
    c1, c2 = ws.raw_link(prompt.listen_port, 67, 1, token=0x6767)
    with c1, c2:
        assert ws.pin(c1, src) == 0
        unregister = Call(lambda: prompt.unregister_kv_cache(src))
        unregister.start()
        time.sleep(0.2)                                 # the unregister waits for the pin now
        finalize = Call(prompt.finalize)
        finalize.start()
        assert finalize.returned_within(5.0), "finalize waited for the client's pin"
        assert unregister.returned_within(1.0)
        assert finalize.seconds < 3.0


# ---- Why 7: resource exhaustion ------------------------------------------------------------

def test_connections_beyond_the_handshake_cap_are_closed_at_once(prompt: native.LlmDataDist) -> None:
    before = threads()
    silent = [ws.connect(prompt.listen_port) for _ in range(BOUND_HANDSHAKES)]
    try:
        assert settles(lambda: threads() >= before + BOUND_HANDSHAKES, 20.0)  # each has its thread
        extra = ws.connect(prompt.listen_port)
        with extra:
            assert ws.closed_by_peer(extra, 10.0), "a connection past the cap got a thread"
    finally:
        for s in silent:
            s.close()
    # the silent connections' threads end with them: a real link works again
    client_arrays = [np.zeros((4, 8), np.uint8) for _ in range(2)]
    with native.LlmDataDist(2, native.LlmRole.DECODER) as client:
        client.initialize({native.OPTION_DEVICE_ID: "0"})
        register(client, client_arrays)
        assert settles(lambda: client.link_llm_clusters([link_info(1, prompt.listen_port)])[0] == S.LLM_SUCCESS,
                       5.0)


def test_the_wait_for_reverse_ends_when_the_client_closes_its_connection(prompt: native.LlmDataDist) -> None:
    """A HELLO that asks for a wait of 2^32 - 1 ms, and a client that leaves at once."""
    before = threads()
    for i in range(8):
        with ws.connect(prompt.listen_port) as c1:
            assert ws.hello(c1, 100 + i, 1, token=0x7700 + i, timeout_ms=2**32 - 1)[0] == 0
    assert settles(lambda: threads() <= before, 3.0), f"{threads() - before} handshake threads still wait"


@pytest.mark.slow
def test_the_wait_for_reverse_is_capped_whatever_the_client_asks(prompt: native.LlmDataDist) -> None:
    before = threads()
    with ws.connect(prompt.listen_port) as c1:
        assert ws.hello(c1, 100, 1, token=0x7800, timeout_ms=2**32 - 1)[0] == 0
        assert threads() == before + 1
        # 30 s (BOUND_REVERSE_MS) plus 1 s of slack, then the engine gives up and closes c1
        assert ws.closed_by_peer(c1, 40.0)
    assert settles(lambda: threads() <= before, 3.0)


def test_a_release_naming_more_tensors_than_the_pinned_cache_closes_the_connection(
        prompt: native.LlmDataDist, cache_of: Callable[[], int]) -> None:
    src = cache_of()
    c1, c2 = ws.raw_link(prompt.listen_port, 68, 1, token=0x6868)
    with c1, c2:
        assert ws.pin(c1, src) == 0
        # a release of the cache's two tensors is answered
        body = ws.RELEASE.pack(src, 0, 0, 0, 0, 0, 2) + np.array([0, 1], np.uint64).tobytes()
        ws.send_hdr(c1, ws.MSG_RELEASE, payload=body)
        assert ws.recv_hdr(c1)[:2] == (ws.MSG_RELEASE_REPLY, 0)
    vm_before = vm_size()
    c1, c2 = ws.raw_link(prompt.listen_port, 69, 1, token=0x6969)
    with c1, c2:
        assert ws.pin(c1, src) == 0
        # 2^32 - 1 tensors announced (32 GiB of indexes): refused before any allocation
        count = 2**32 - 1
        ws.send_hdr(c1, ws.MSG_RELEASE, payload=ws.RELEASE.pack(src, 0, 0, 0, 0, 0, count),
                    payload_len=ws.RELEASE.size + 8 * count)
        assert ws.closed_by_peer(c1, 3.0), "the engine waits for 32 GiB of tensor indexes"
        assert vm_size() - vm_before < 1 << 30
    c1, c2 = ws.raw_link(prompt.listen_port, 70, 1, token=0x7070)
    with c1, c2:
        assert ws.pin(c1, src) == 0
        body = ws.RELEASE.pack(src, 0, 0, 0, 0, 0, 3) + np.array([0, 1, 0], np.uint64).tobytes()
        ws.send_hdr(c1, ws.MSG_RELEASE, payload=body)
        assert ws.closed_by_peer(c1, 3.0)               # three tensors of a two-tensor cache


def test_a_release_that_would_wait_for_the_connections_own_pin_closes_it() -> None:
    """An allocated cache whose owner deallocated it lives on while its key is bound; the
    key's release frees it. A client that pinned it twice and releases the key would make
    the release wait for the second pin, which the waiting thread itself holds."""
    port = vs.free_port()
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    engine.init(vs.v2_options(port=port, pool=True, **{"llm.SyncKvCacheWaitTime": "1000"}))
    try:
        cache = engine.cache_manager.allocate_cache(CacheDesc(1, [4, 64], DataType.DT_UINT8), [CacheKey(1, 5)])
        engine.cache_manager.deallocate_cache(cache)                  # the key keeps it
        c1, c2 = ws.raw_link(port, 63, 1, token=0x6363)
        with c1, c2:
            assert ws.pin(c1, cache.cache_id) == 0
            assert ws.pin(c1, cache.cache_id) == 0
            release = ws.RELEASE.pack(cache.cache_id, 0, 0, 1, 5, 0, 0)   # the key (req 5, model 0), all tensors
            ws.send_hdr(c1, ws.MSG_RELEASE, payload=release)
            assert ws.closed_by_peer(c1, 3.0), "the release waits for its own connection's pin"
        finish = Call(engine.finalize)
        finish.start()
        assert finish.returned_within(5.0), "finalize waits for the stuck server thread"
    finally:
        if LLMDataDist.llm_engine_instance is not None:
            engine.finalize()


def vm_size() -> int:
    """Virtual memory of this process, in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize in /proc/self/status")


def test_one_connection_holds_at_most_the_pin_cap(prompt: native.LlmDataDist, cache_of: Callable[[], int]) -> None:
    src = cache_of()
    c1, c2 = ws.raw_link(prompt.listen_port, 71, 1, token=0x7171)
    with c1, c2:
        for _ in range(BOUND_PINS_PER_LINK):
            assert ws.pin(c1, src) == 0
        ws.send_hdr(c1, ws.MSG_PIN, a=src)
        assert ws.closed_by_peer(c1, 3.0), "a pin past the cap was answered"
    # the connection's pins went with it: the cache is removed at once
    start = time.monotonic()
    prompt.unregister_kv_cache(src)
    assert time.monotonic() - start < 0.5


def test_links_beyond_the_cap_are_refused_with_link_failed(prompt: native.LlmDataDist) -> None:
    raw = [ws.raw_link(prompt.listen_port, 1000 + i, 1, token=0x10000 + i) for i in range(BOUND_LINKS)]
    try:
        with native.LlmDataDist(2, native.LlmRole.DECODER) as client:
            client.initialize({native.OPTION_DEVICE_ID: "0"})
            status, rets = client.link_llm_clusters([link_info(1, prompt.listen_port)])
            assert (status, rets) == (S.LLM_LINK_FAILED, [S.LLM_LINK_FAILED])
            assert f"serves {BOUND_LINKS} links, the most it takes" in Raw().last_error()
            # one raw client leaves: its link is reaped and the engine takes a new one
            for s in raw.pop():
                s.close()
            assert settles(lambda: client.link_llm_clusters([link_info(1, prompt.listen_port)])[0] ==
                           S.LLM_SUCCESS, 5.0)
    finally:
        for pair in raw:
            for s in pair:
                s.close()


# ---- Why 8: links of gone peers are reaped --------------------------------------------------

DECODERS = textwrap.dedent("""
    import sys
    import numpy as np
    from llm_datadist_ffi import native

    port, first, count, src = map(int, sys.argv[1:5])
    for cluster_id in range(first, first + count):
        engine = native.LlmDataDist(cluster_id, native.LlmRole.DECODER)
        engine.initialize({native.OPTION_DEVICE_ID: "0"})
        arrays = [np.zeros((4, 8), np.uint8) for _ in range(2)]
        dst = engine.register_kv_cache(native.CacheDesc(2, native.DataType.DT_UINT8, [4, 8]),
                                       [a.ctypes.data for a in arrays])
        info = native.ClusterInfo(1, 0, [native.IpInfo("127.0.0.1", 0)], [native.IpInfo("127.0.0.1", port)])
        assert engine.link_llm_clusters([info])[0] == 0
        engine.pull_kv_cache(native.CacheIndex(1, src), native.Cache(dst))
        if sys.argv[5] == "die":
            sys.stdout.flush()
            import os
            os._exit(0)                      # no finalize, no unlink: the process just ends
        engine.finalize()                    # no unlink first, as the vendor allows
        engine.close()
    """)


def run_decoders(port: int, first: int, count: int, src: int, how: str) -> None:
    import llm_datadist_ffi
    package_root = str(Path(llm_datadist_ffi.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", ""))
                                                       if p)}
    subprocess.run([sys.executable, "-c", DECODERS, str(port), str(first), str(count), str(src), how],
                   check=True, env=env, timeout=120)


@pytest.mark.rules("§10.4", "PR-31")
def test_links_of_decoders_that_finalize_or_die_without_unlinking_are_reaped(
        prompt: native.LlmDataDist, cache_of: Callable[[], int]) -> None:
    src = cache_of()
    legit = PeerProcess()
    try:
        legit.call("init", cluster_id=2, role=2, options={"llm.DeviceId": "0"})
        dst = legit.call("register", num_tensors=2, shape=[4, 8], seed=-1)
        assert legit.call("link", clusters=[[1, prompt.listen_port]]) == [0, 0]
        tasks_at_start = threads()
        # a first round warms up what the C library keeps for reuse (malloc arenas of
        # the server threads, the stacks of joined threads)
        run_decoders(prompt.listen_port, 300, 8, src, "finalize")
        assert settles(lambda: threads() <= tasks_at_start, 5.0)
        fds, tasks, vm = open_fds(), threads(), vm_size()
        run_decoders(prompt.listen_port, 100, 24, src, "finalize")
        for first in (200, 201, 202):
            run_decoders(prompt.listen_port, first, 1, src, "die")
        assert settles(lambda: open_fds() <= fds + 2 and threads() <= tasks + 1, 5.0), \
            f"{open_fds() - fds} descriptors and {threads() - tasks} threads more than before"
        # an ended thread that nobody joined keeps its stack (8 MiB each: 27 of them)
        assert vm_size() - vm < 48 << 20, f"{(vm_size() - vm) >> 20} MiB more virtual memory than before"
        # the links to the gone Decoders still answer as PR-31 says
        arrays = random_arrays(2, (4, 8), 3)
        own = register(prompt, arrays)
        status = sup_push(prompt, 100, own)
        assert status == S.LLM_TIMEOUT
        assert prompt.unlink_llm_clusters([ClusterInfo(100, 0, [], [IpInfo("127.0.0.1", 1)])], force_flag=True) \
            == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
        # and the legit Decoder's link works
        legit.call("pull_cache", cluster=1, src=src, dst=dst)         # batch 0 of each tensor
        assert legit.cache_bytes(dst) == b"".join(a[0].tobytes() + bytes(24) for a in random_arrays(2, (4, 8), 0))
    finally:
        legit.close()


def test_the_engine_keeps_at_most_the_cap_of_gone_link_records(prompt: native.LlmDataDist,
                                                               cache_of: Callable[[], int]) -> None:
    src, fds = cache_of(), open_fds()
    for i in range(BOUND_GONE_RECORDS + 1):                 # links whose clients leave at once
        c1, c2 = ws.raw_link(prompt.listen_port, 5000 + i, 1, token=0x50000 + i)
        c1.close()
        c2.close()
    assert settles(lambda: open_fds() <= fds, 10.0), "the gone links were not reaped"
    assert sup_push(prompt, 5000, src) == S.LLM_NOT_YET_LINK            # the oldest record was dropped
    assert sup_push(prompt, 5001, src) == S.LLM_TIMEOUT                 # the others answer as PR-31 says
    assert sup_push(prompt, 5000 + BOUND_GONE_RECORDS, src) == S.LLM_TIMEOUT


def test_a_decoder_that_comes_back_replaces_its_reaped_link(prompt: native.LlmDataDist,
                                                            cache_of: Callable[[], int]) -> None:
    src = cache_of()
    decoder = PeerProcess()
    try:
        fds = open_fds()
        decoder.call("init", cluster_id=2, role=2, options={"llm.DeviceId": "0"})
        decoder.call("register", num_tensors=2, shape=[4, 8], seed=-1)
        assert decoder.call("link", clusters=[[1, prompt.listen_port]]) == [0, 0]
        # two sockets, and the pidfd that holds the Decoder's process (docs/security.md §2.2)
        assert mock_control.link_path(prompt, 2) == "process_vm"
        # (the identity channel's connection closes when the listener reaps its thread)
        assert settles(lambda: open_fds() == fds + 3, 5.0), f"{open_fds() - fds} descriptors for one link"
        decoder.call("finalize")                                     # no unlink
        assert settles(lambda: open_fds() == fds, 5.0)               # reaped
        assert sup_push(prompt, 2, cache_of()) == S.LLM_TIMEOUT      # the record answers (PR-31)
        decoder.call("init", cluster_id=2, role=2, options={"llm.DeviceId": "0"})
        dst = decoder.call("register", num_tensors=2, shape=[4, 8], seed=-1)
        assert decoder.call("link", clusters=[[1, prompt.listen_port]]) == [0, 0]
        decoder.call("pull_cache", cluster=1, src=src, dst=dst)
        assert decoder.cache_bytes(dst) == b"".join(a[0].tobytes() + bytes(24) for a in random_arrays(2, (4, 8), 0))
        assert sup_push(prompt, 2, src) == 0                         # the new link, both ways
    finally:
        decoder.close()


def sup_push(engine: native.LlmDataDist, cluster_id: int, src: int) -> int:
    """The status of a push of cache ``src`` to cache 1 of ``cluster_id``."""
    try:
        engine.push_kv_cache(Cache(src, cache_desc=native.CacheDesc(2, native.DataType.DT_UINT8, [4, 8])),
                             CacheIndex(cluster_id, 1))
    except LLMException as exc:
        return int(exc.status_code)
    return 0
