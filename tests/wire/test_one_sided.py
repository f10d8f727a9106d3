"""Transfers to a peer process read the peer's published cache table (docs/design.md,
"Links of the mock"): after a link's first transfer, a pull or push to an identified
peer of the same user involves no work of the peer's CPU, as the device's direct mode
does not, and the guards that used to need the peer's answer still hold.

The peer (a Prompt) lives in another process (engine_support.PeerProcess); the engine
under test, a Decoder, lives here. Stopping the peer with SIGSTOP shows what needs the
peer and what does not.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np
import pytest

from engine_support import PeerProcess, cluster, fill, register
from llm_datadist_ffi import LLMException
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import mock_control, native
from llm_datadist_ffi.native import Cache, CacheIndex

pytestmark = pytest.mark.mock_only(reason="the published table is the mock's way to a peer's caches")

Engines = Callable[..., native.LlmDataDist]
PROMPT = 1
SHAPE = [8, 256]                  # 8 blocks of 256 bytes per tensor


@pytest.fixture
def prompt() -> Iterator[tuple[PeerProcess, int]]:
    """A Prompt in another process, listening; yields it and its port."""
    from engine_support import free_port
    peer = PeerProcess()
    try:
        for _ in range(20):
            port = free_port()
            reply = peer.request("init", cluster_id=PROMPT, role=int(native.LlmRole.PROMPT),
                                 options={"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{port}",
                                          "llm.SyncKvCacheWaitTime": "1000"})
            if reply["ok"]:
                break
        else:
            pytest.fail("no free port for the Prompt")
        yield peer, port
    finally:
        os.kill(peer.proc.pid, signal.SIGCONT)
        peer.close()


@pytest.fixture
def decoder(engines: Engines) -> native.LlmDataDist:
    return engines(2, native.LlmRole.DECODER, options={"llm.SyncKvCacheWaitTime": "1000"})


@contextlib.contextmanager
def stopped(peer: PeerProcess) -> Iterator[None]:
    """The peer process stopped (SIGSTOP): its threads answer nothing meanwhile. The
    signal takes effect some time after kill() returns: wait until every thread is."""
    os.kill(peer.proc.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 5
        while not all_threads_stopped(peer.proc.pid):
            assert time.monotonic() < deadline, "the peer did not stop"
            time.sleep(0.005)
        yield
    finally:
        os.kill(peer.proc.pid, signal.SIGCONT)


def all_threads_stopped(pid: int) -> bool:
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/stat") as stat:
            states.append(stat.read().rsplit(")", 1)[1].split()[0])
    return all(state == "T" for state in states)


def linked(decoder: native.LlmDataDist, port: int) -> None:
    status, rets = decoder.link_llm_clusters([cluster(PROMPT, port)], 5000)
    assert (status, rets) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    assert mock_control.link_path(decoder, PROMPT) == "process_vm"


def status_of(call: Callable[[], Any]) -> int:
    try:
        call()
    except LLMException as exc:
        return int(exc.status_code)
    return 0


def test_pulls_and_pushes_reach_a_stopped_prompt_after_the_first_transfer(
        prompt: tuple[PeerProcess, int], decoder: native.LlmDataDist) -> None:
    peer, port = prompt
    src = peer.call("register", num_tensors=2, shape=SHAPE, seed=5)
    target = peer.call("register", num_tensors=2, shape=SHAPE, seed=-1)
    local = [np.zeros(SHAPE, dtype=np.uint8) for _ in range(2)]
    dst = register(decoder, local)
    linked(decoder, port)
    expected = [a.reshape(SHAPE) for a in fill(2, SHAPE, 5)]
    decoder.pull_kv_blocks(CacheIndex(PROMPT, src), Cache(dst), [0], [0])       # takes the table
    with stopped(peer):
        decoder.pull_kv_blocks(CacheIndex(PROMPT, src), Cache(dst), [3, 4, 6], [1, 2, 7])
        for mine, theirs in zip(local, expected):
            assert np.array_equal(mine[[1, 2, 7]], theirs[[3, 4, 6]])
            assert np.array_equal(mine[[0]], theirs[[0]])
            assert not mine[[3, 4, 5, 6]].any()
        decoder.push_kv_blocks(Cache(dst, cache_desc=native.CacheDesc(2, native.DataType.DT_UINT8, SHAPE)),
                               CacheIndex(PROMPT, target), [1, 2], [5, 6])
    pushed = np.frombuffer(peer.cache_bytes(target), dtype=np.uint8).reshape(2, *SHAPE)
    for t in range(2):
        assert np.array_equal(pushed[t][[5, 6]], expected[t][[3, 4]])
        assert not pushed[t][[0, 1, 2, 3, 4, 7]].any()


@pytest.mark.rules("§9.7")
def test_the_table_answers_for_freed_and_later_caches_without_the_prompt(
        prompt: tuple[PeerProcess, int], decoder: native.LlmDataDist) -> None:
    peer, port = prompt
    src = peer.call("register", num_tensors=2, shape=SHAPE, seed=5)
    freed = peer.call("register", num_tensors=2, shape=SHAPE, seed=6)
    local = [np.zeros(SHAPE, dtype=np.uint8) for _ in range(2)]
    dst = register(decoder, local)
    linked(decoder, port)
    decoder.pull_kv_blocks(CacheIndex(PROMPT, src), Cache(dst), [0], [0])       # the table copy (semantics.md §9.7)
    later = peer.call("register", num_tensors=2, shape=SHAPE, seed=7)
    peer.call("unregister", cache_id=freed)
    with stopped(peer):
        for cache_id, why in ((freed, "never registered, or freed"), (later, "not in this link's copy"),
                              (10_000, "not in this link's copy")):
            with pytest.raises(LLMException) as caught:
                decoder.pull_kv_blocks(CacheIndex(PROMPT, cache_id), Cache(dst), [1], [1])
            assert caught.value.status_code == S.LLM_KV_CACHE_NOT_EXIST
            assert why in str(caught.value)
        decoder.pull_kv_blocks(CacheIndex(PROMPT, src), Cache(dst), [1], [1])   # and the link still works


def test_a_cache_the_table_has_no_slot_for_is_asked_of_the_prompt(
        prompt: tuple[PeerProcess, int], decoder: native.LlmDataDist) -> None:
    """Ids that are equal modulo the table's 1,024 slots share a slot: the later cache
    is not published, and a transfer from it asks the Prompt as before."""
    peer, port = prompt
    first = peer.call("register", num_tensors=2, shape=SHAPE, seed=5)
    peer.call("churn", count=1023)
    second = peer.call("register", num_tensors=2, shape=SHAPE, seed=8)
    assert second == first + 1024
    local = [np.zeros(SHAPE, dtype=np.uint8) for _ in range(2)]
    dst = register(decoder, local)
    linked(decoder, port)
    decoder.pull_kv_blocks(CacheIndex(PROMPT, second), Cache(dst), [2], [2])
    expected = [a.reshape(SHAPE) for a in fill(2, SHAPE, 8)]
    assert all(np.array_equal(mine[2], theirs[2]) for mine, theirs in zip(local, expected))
    with stopped(peer):
        decoder.pull_kv_blocks(CacheIndex(PROMPT, first), Cache(dst), [1], [1])      # published
        assert status_of(lambda: decoder.pull_kv_blocks(CacheIndex(PROMPT, second), Cache(dst), [3],
                                                        [3])) == S.LLM_TIMEOUT     # needs the Prompt


@pytest.mark.rules("E-15")
def test_the_prompts_serve_delay_holds_for_table_reads_too(prompt: tuple[PeerProcess, int],
                                                            decoder: native.LlmDataDist) -> None:
    peer, port = prompt
    src = peer.call("register", num_tensors=2, shape=SHAPE, seed=5)
    local = [np.zeros(SHAPE, dtype=np.uint8) for _ in range(2)]
    dst = register(decoder, local)
    linked(decoder, port)
    decoder.pull_kv_blocks(CacheIndex(PROMPT, src), Cache(dst), [0], [0])
    peer.call("serve_delay", ms=5000)                                           # past the wait time
    assert status_of(lambda: decoder.pull_kv_blocks(CacheIndex(PROMPT, src), Cache(dst), [1], [1])) == S.LLM_TIMEOUT


def test_an_unregister_waits_for_pulls_that_read_the_cache(prompt: tuple[PeerProcess, int],
                                                           decoder: native.LlmDataDist) -> None:
    """Pulls run in a loop while the Prompt unregisters the source and then overwrites
    its memory: a pull that succeeded must carry the cache's bytes, never the overwrite
    (the unregister waited for the pull's pin), and one that failed says the cache is
    gone."""
    peer, port = prompt
    shape = [16, 65536]                                   # 1 MiB per tensor: a pull takes a while
    rounds = 12
    sources = [peer.call("register", num_tensors=2, shape=shape, seed=100 + r) for r in range(rounds)]
    local = [np.zeros(shape, dtype=np.uint8) for _ in range(2)]
    dst = register(decoder, local)
    linked(decoder, port)
    blocks = list(range(16))
    for r, src in enumerate(sources):
        expected = [a.reshape(shape) for a in fill(2, shape, 100 + r)]
        outcomes: list[str] = []
        stop = threading.Event()

        def puller(src: int = src, expected: list[np.ndarray] = expected, outcomes: list[str] = outcomes) -> None:
            while not stop.is_set():
                for a in local:
                    a.fill(0)
                status = status_of(lambda: decoder.pull_kv_blocks(CacheIndex(PROMPT, src), Cache(dst), blocks,
                                                                   blocks))
                if status == S.LLM_KV_CACHE_NOT_EXIST:
                    outcomes.append("gone")
                    return
                assert status == 0
                outcomes.append("bytes" if all(np.array_equal(m, e) for m, e in zip(local, expected)) else "WRONG")

        thread = threading.Thread(target=puller)
        thread.start()
        time.sleep(0.02)
        peer.call("unregister_and_fill", cache_id=src, value=0xEE)
        stop.set()
        thread.join(10)
        assert not thread.is_alive()
        assert "WRONG" not in outcomes, outcomes
        assert outcomes and set(outcomes) <= {"bytes", "gone"}


def test_transfers_over_one_link_run_side_by_side(prompt: tuple[PeerProcess, int], engines: Engines) -> None:
    """Two threads pull disjoint blocks over one link whose link model makes every
    transfer take 1.5 s: the second is inside the link while the first still is (one
    after the other, their times could not overlap)."""
    peer, port = prompt
    decoder = engines(2, native.LlmRole.DECODER, options={"llm.SyncKvCacheWaitTime": "5000"})
    src = peer.call("register", num_tensors=2, shape=SHAPE, seed=5)
    local = [np.zeros(SHAPE, dtype=np.uint8) for _ in range(2)]
    dst = register(decoder, local)
    linked(decoder, port)
    decoder.pull_kv_blocks(CacheIndex(PROMPT, src), Cache(dst), [0], [0])
    mock_control.set_link_pace(decoder, PROMPT, 0, 1_500_000)
    spans: dict[int, tuple[float, float]] = {}

    def pull(block: int) -> None:
        start = time.monotonic()
        decoder.pull_kv_blocks(CacheIndex(PROMPT, src), Cache(dst), [block], [block])
        spans[block] = (start, time.monotonic())

    threads = [threading.Thread(target=pull, args=(b,)) for b in (3, 6)]
    for t in threads:
        t.start()
        time.sleep(0.2)
    for t in threads:
        t.join(10)
    (a0, a1), (b0, b1) = spans[3], spans[6]
    assert min(a1, b1) - max(a0, b0) > 1.0, spans
    expected = [a.reshape(SHAPE) for a in fill(2, SHAPE, 5)]
    assert all(np.array_equal(m[[0, 3, 6]], e[[0, 3, 6]]) for m, e in zip(local, expected))
