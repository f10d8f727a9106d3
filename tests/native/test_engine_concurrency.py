"""Threads against one engine (docs/security.md §1): the cache table stays exact under
concurrent registrations, allocations and removals, and ``close()`` while other threads
call methods neither frees the engine under them nor leaves them blocked.

These tests are also the ThreadSanitizer stage of ``.ci/run``. Each worker records
what it did; the checks compare the engine's answers with those records (bytes the
test wrote itself), never with values the engine computed.
"""
from __future__ import annotations

import ctypes
import threading
import time
from typing import Any, Callable

import numpy as np
import pytest

from llm_datadist_ffi import LLMException
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import mock_control, native
from llm_datadist_ffi._core._loader import ffi, lldd_lib
from llm_datadist_ffi.native import Cache, CacheDesc, CacheIndex, DataType

Engines = Callable[..., native.LlmDataDist]

THREADS = 8
ROUNDS = 24
# A registration of many tensors spends long enough in the engine (a range check and a
# copy per address) that eight threads overlap in it on every run; allocations are
# small so that the pool holds them all.
WIDE = 1024
NARROW = 8
SHAPE = [2, 16]                                       # 2 batches of 16 bytes: one 1 KiB page per tensor
POOL = '{"memory_size": 8388608, "page_shift": 10}'   # 8192 pages: every allocation below and the probes
JOIN_SECONDS = 60.0
# One round of the race loses an id on most runs of the code before the fix; four make
# a miss unlikely.
REPEATS = 4

pytestmark = pytest.mark.mock_only(reason="pool-backed AllocateCache and CopyKvCache (PR-9) read the caches back")


class RawCalls:
    """C calls prepared once per thread, so that a loop of them spends its time in the
    engine rather than in Python (the GIL is released inside each call)."""

    def __init__(self, engine: native.LlmDataDist) -> None:
        self.handle = engine._engine()
        self.shape = ffi.new("int64_t[]", SHAPE)
        self.id_out = ffi.new("int64_t *")
        self.addrs_out = ffi.new("uint64_t[]", NARROW)

    def _desc(self, num_tensors: int) -> object:
        desc = ffi.new("lldd_cache_desc *")
        desc.placement, desc.num_tensors, desc.data_type = 1, num_tensors, DataType.DT_UINT8.value
        desc.shape, desc.shape_len = self.shape, len(SHAPE)
        return desc

    @staticmethod
    def wide_addrs(array: np.ndarray) -> object:
        """WIDE tensor addresses that all point at ``array`` (aliases are allowed)."""
        return ffi.new("uint64_t[]", [array.ctypes.data] * WIDE)

    def register(self, addrs: object, vendor_path: bool) -> int:
        desc = self._desc(WIDE)
        if vendor_path:
            status = lldd_lib.lldd_ext_register_cache(self.handle, desc, addrs, WIDE, 1, 1, ffi.NULL, 0, self.id_out)
        else:
            status = lldd_lib.lldd_register_kv_cache(self.handle, desc, addrs, WIDE, self.id_out)
        assert status == 0, f"register: status {status}"
        return int(self.id_out[0])

    def allocate(self, vendor_path: bool = False) -> tuple[int, int]:
        """Allocates NARROW tensors: (id, address of tensor 0)."""
        desc = self._desc(NARROW)
        if vendor_path:
            status = lldd_lib.lldd_ext_allocate_cache(self.handle, desc, 1, ffi.NULL, 0, self.id_out, self.addrs_out,
                                                      NARROW)
        else:
            status = lldd_lib.lldd_allocate_cache(self.handle, desc, self.id_out, self.addrs_out, NARROW)
        assert status == 0, f"allocate: status {status}"
        return int(self.id_out[0]), int(self.addrs_out[0])

    def unregister(self, cache_id: int) -> None:
        assert lldd_lib.lldd_unregister_kv_cache(self.handle, cache_id) == 0

    def deallocate(self, cache_id: int) -> None:
        assert lldd_lib.lldd_deallocate_cache(self.handle, cache_id) == 0


def _run_together(workers: list[Callable[[], None]]) -> None:
    """Starts the workers at one barrier and joins them. A worker's exception fails the
    test through pytest's unhandled-thread-exception warning (warnings are errors)."""
    barrier = threading.Barrier(len(workers))

    def body(work: Callable[[], None]) -> None:
        barrier.wait()
        work()

    threads = [threading.Thread(target=body, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_SECONDS)
    assert not any(t.is_alive() for t in threads), "a worker thread is still blocked in the engine"


def _pattern(worker: int, round_: int) -> bytes:
    return bytes((worker * 31 + round_ * 7 + k) % 256 for k in range(SHAPE[0] * SHAPE[1]))


class Probe:
    """Reads batch 0 of tensor 0 of a cache as the engine finds it by id: CopyKvCache
    into an allocated cache of the same tensor count, then its memory."""

    def __init__(self, engine: native.LlmDataDist) -> None:
        self.engine = engine
        self.targets = {n: engine.allocate_cache(CacheDesc(n, DataType.DT_UINT8, SHAPE)) for n in (WIDE, NARROW)}

    def batch0(self, cache_id: int, num_tensors: int) -> bytes:
        target = self.targets[num_tensors]
        self.engine.copy_kv_cache(Cache(cache_id), target)
        return ctypes.string_at(target.tensor_addrs[0], SHAPE[1])


def _worker_memory(engine: native.LlmDataDist, index: int,
                   arrays: list[np.ndarray]) -> tuple["RawCalls", list[bytes], list[Any]]:
    """A worker's raw-call helper, its ROUNDS patterns, and registrable copies of them
    (kept alive in ``arrays`` for the whole test)."""
    calls = RawCalls(engine)
    patterns = [_pattern(index, r) for r in range(ROUNDS)]
    arrays.extend(np.frombuffer(p, dtype=np.uint8).copy() for p in patterns)
    return calls, patterns, [calls.wide_addrs(a) for a in arrays[-ROUNDS:]]


@pytest.mark.parametrize("vendor_path", [False, True], ids=["native", "ext"])
@pytest.mark.parametrize("repeat", range(REPEATS))
def test_concurrent_registrations_and_allocations_each_get_their_own_id_and_cache(
        engines: Engines, vendor_path: bool, repeat: int) -> None:
    engine = engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL})
    made: dict[int, tuple[int, bytes]] = {}          # id -> (tensor count, the bytes written)
    arrays: list[np.ndarray] = []

    def worker(index: int) -> Callable[[], None]:
        calls, patterns, addrs = _worker_memory(engine, index, arrays)

        def work() -> None:
            for r, pattern in enumerate(patterns):
                if (index + r) % 2:
                    made[calls.register(addrs[r], vendor_path)] = (WIDE, pattern)
                else:
                    cache_id, address = calls.allocate(vendor_path)
                    ctypes.memmove(address, pattern, len(pattern))
                    made[cache_id] = (NARROW, pattern)
        return work

    _run_together([worker(i) for i in range(THREADS)])

    assert sorted(made) == list(range(1, THREADS * ROUNDS + 1))
    probe = Probe(engine)
    found = {cache_id: probe.batch0(cache_id, n) for cache_id, (n, _) in made.items()}
    assert found == {cache_id: pattern[:SHAPE[1]] for cache_id, (_, pattern) in made.items()}
    engine.finalize()


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_concurrent_removals_leave_exactly_the_caches_that_were_kept(engines: Engines, repeat: int) -> None:
    engine = engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL})
    kept: dict[int, tuple[int, bytes]] = {}
    gone: set[int] = set()
    arrays: list[np.ndarray] = []

    def worker(index: int) -> Callable[[], None]:
        calls, patterns, addrs = _worker_memory(engine, index, arrays)

        def work() -> None:
            for r, pattern in enumerate(patterns):
                if r % 2:
                    cache_id, count = calls.register(addrs[r], False), WIDE
                else:
                    cache_id, address = calls.allocate()
                    ctypes.memmove(address, pattern, len(pattern))
                    count = NARROW
                if r % 3 == 0:
                    (calls.unregister if r % 2 else calls.deallocate)(cache_id)
                    gone.add(cache_id)
                else:
                    kept[cache_id] = (count, pattern)
        return work

    _run_together([worker(i) for i in range(THREADS)])

    assert sorted([*kept, *gone]) == list(range(1, THREADS * ROUNDS + 1))
    probe = Probe(engine)
    found = {cache_id: probe.batch0(cache_id, n) for cache_id, (n, _) in kept.items()}
    assert found == {cache_id: pattern[:SHAPE[1]] for cache_id, (_, pattern) in kept.items()}
    for cache_id in sorted(gone):
        with pytest.raises(LLMException) as info:
            probe.engine.copy_kv_cache(Cache(cache_id), probe.targets[NARROW])
        assert info.value.status_code == S.LLM_KV_CACHE_NOT_EXIST, f"cache {cache_id}"
    engine.finalize()


# ---- close() while other threads call methods ----------------------------------------------

CLOSERS = 6
CALLS_BEFORE_CLOSE = 20
# Statuses a call may get when it reaches the backend while close() finalizes (LLM_FAILED)
# or after (LLM_FAILED; the pool calls LLM_FEATURE_NOT_ENABLED, docs/semantics.md E-2).
CLOSE_STATUSES = {S.LLM_FAILED, S.LLM_FEATURE_NOT_ENABLED}


def _busy_worker(engine: native.LlmDataDist, index: int, counts: list[int],
                 statuses: list[set[int]], started: threading.Event) -> Callable[[], None]:
    """Registers, allocates, copies and removes caches until a call raises RuntimeError
    (close() has begun); records every status an LLMException carried."""
    array = np.full(SHAPE[0] * SHAPE[1], index, dtype=np.uint8)

    def work() -> None:
        while True:
            try:
                registered = engine.register_kv_cache(_desc_of(1), [array.ctypes.data])
                allocated = engine.allocate_cache(_desc_of(1))
                engine.copy_kv_cache(Cache(registered), allocated)
                engine.unregister_kv_cache(registered)
                engine.deallocate_cache(allocated.cache_id)
            except LLMException as exc:
                statuses[index].add(int(exc.status_code))
            except RuntimeError as exc:
                assert str(exc) == "this LlmDataDist was closed"
                return
            counts[index] += 1
            if min(counts) >= CALLS_BEFORE_CLOSE:
                started.set()
    return work


def _desc_of(num_tensors: int) -> CacheDesc:
    return CacheDesc(num_tensors, DataType.DT_UINT8, SHAPE)


@pytest.mark.parametrize("repeat", range(REPEATS))
def test_close_while_other_threads_call_methods_fails_their_later_calls_cleanly(repeat: int) -> None:
    engine = native.LlmDataDist(1, native.LlmRole.PROMPT)
    engine.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL})
    counts = [0] * CLOSERS
    statuses: list[set[int]] = [set() for _ in range(CLOSERS)]
    started = threading.Event()
    threads = [threading.Thread(target=_busy_worker(engine, i, counts, statuses, started), daemon=True)
               for i in range(CLOSERS)]
    for t in threads:
        t.start()
    assert started.wait(JOIN_SECONDS)
    engine.close()
    for t in threads:
        t.join(JOIN_SECONDS)
    assert not any(t.is_alive() for t in threads), "a worker thread is still blocked in the engine"
    assert set().union(*statuses) <= CLOSE_STATUSES
    with pytest.raises(RuntimeError, match="was closed"):
        engine.register_kv_cache(_desc_of(1), [np.zeros(32, np.uint8).ctypes.data])
    engine.finalize()                                  # still a no-op after close
    engine.close()                                     # and so is a second close


def test_close_waits_for_a_transfer_running_in_another_thread(engines: Engines) -> None:
    server = engines(1, listen=True)
    client = native.LlmDataDist(2, native.LlmRole.DECODER)
    client.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_SYNC_CACHE_WAIT_TIME: "5000"})
    source = [np.arange(32, dtype=np.uint8) + k for k in range(2)]
    target = [np.zeros(32, dtype=np.uint8) for _ in range(2)]
    src_id = server.register_kv_cache(_desc_of(2), [a.ctypes.data for a in source])
    dst_id = client.register_kv_cache(_desc_of(2), [a.ctypes.data for a in target])
    info = native.ClusterInfo(1, 0, [native.IpInfo("127.0.0.1", 0)], [native.IpInfo("127.0.0.1", server.listen_port)])
    assert client.link_llm_clusters([info])[0] == S.LLM_SUCCESS
    mock_control.set_serve_delay(server, 1500)         # the pull takes 1.5 s of its 5 s wait time
    finished: list[float] = []

    def pull() -> None:
        client.pull_kv_cache(CacheIndex(1, src_id), Cache(dst_id))
        finished.append(time.monotonic())

    _run_in_background = threading.Thread(target=pull, daemon=True)
    _run_in_background.start()
    time.sleep(0.5)                                    # well inside the backend by now
    client.close()
    closed = time.monotonic()
    _run_in_background.join(JOIN_SECONDS)
    assert finished and finished[0] <= closed          # the pull ended before close() returned ...
    assert [t[:16].tobytes() for t in target] == [s[:16].tobytes() for s in source]   # ... with its batch
