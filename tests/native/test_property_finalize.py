"""PR-37 as a property: ``Finalize`` waits for the calls already running on its engine,
and the calls that start after it began fail.

docs/reference/semantics.md §12.3 (PR-37) and docs/semantics.md E-2: a transfer that is running when
``Finalize`` begins completes with the outcome it would have had (the oracle's answer
for it, bytes included); every call that starts on that engine after ``Finalize``
began returns ``LLM_FAILED``, pool calls included; once ``Finalize`` has returned, the
engine answers as an engine that was never initialised (semantics.md §12.1: ``FAILED``, the PR-9
calls ``FEATURE_NOT_ENABLED``).

Each example links engine A (the caller, with a device pool) to engine B, creates one
cache on each, and starts one transfer from A over the fresh link. The transfer's
first step asks B for its cache table (semantics.md §9.7), which B answers only after a serve
delay; meanwhile another thread calls ``A.finalize()``. The test sees that Finalize
has begun when a call that always succeeds on a live engine (unregistering an
unknown id, semantics.md §3.5) stops succeeding, then makes the drawn late calls on the C ABI
(their arguments valid or not: PR-37 comes first), waits for both threads and
compares the transfer's outcome and every byte with the oracle. Then it makes the
drawn calls on the finalized engine through the package and compares them with the
oracle's never-initialised engine.

The delay is long enough that the transfer is waiting on B before Finalize starts on
a loaded 2-core machine (the same margin as the example test
``tests/native/test_engine_lifecycle.py::test_finalize_waits_for_running_calls_and_calls_after_it_began_fail``).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import mock_control, native
from llm_datadist_ffi.native import CachePlacement, GeDataType as G, LlmRole

from native_driver import Harness, observe
from vendor_support import free_port

pytestmark = pytest.mark.mock_only(reason="uses the mock's serve delay to hold a transfer while Finalize runs")

A, B = 1, 2
POOL = '{"memory_size": 1048576, "page_size": 4096}'
SERVE_DELAY_MS = 400          # B answers A's table request this late ...
LEAD_S = 0.1                  # ... and Finalize starts this long after the transfer
TRANSFERS = ("pull_kv_cache", "pull_kv_blocks", "push_kv_cache", "push_kv_blocks")
LATE_CALLS = ("register", "unregister", "allocate", "deallocate", "pull_kv_cache", "pull_kv_blocks",
              "push_kv_cache", "push_kv_blocks", "copy_kv_cache", "copy_kv_blocks", "link", "unlink", "set_role")
EXAMPLES = max(5, settings.default.max_examples // 4)


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    h = Harness(seed=37)
    pa, pb = free_port(), free_port()
    h.add(A, LlmRole.DECODER, {"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{pa}",
                               "llm.SyncKvCacheWaitTime": "5000", "llm_datadist_ffi.mock.NativePool": "1", "llm.MemPoolConfig": POOL}, pa)
    h.add(B, LlmRole.PROMPT, {"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{pb}"}, pb)
    h.reset()
    yield h
    mock_control.set_serve_delay(h.engine(B), 0)
    h.close()


@st.composite
def examples(draw: Any) -> dict[str, Any]:
    num_tensors = draw(st.sampled_from([2, 4]))
    shape = (draw(st.integers(1, 4)), draw(st.sampled_from([8, 16, 32])))
    late = draw(st.lists(st.tuples(st.sampled_from(LATE_CALLS), st.sampled_from([1, 2, 0, 99])), min_size=1,
                         max_size=4))
    after = draw(st.lists(st.tuples(st.sampled_from(LATE_CALLS), st.sampled_from([1, 2, 0, 99])), min_size=1,
                          max_size=4))
    return {"transfer": draw(st.sampled_from(TRANSFERS)), "num_tensors": num_tensors, "shape": shape,
            "linked_from": draw(st.sampled_from([A, B])), "late": late, "after": after}


def _transfer(h: Harness, name: str, local: int, remote: int, blocks: int,
              num_tensors: int) -> tuple[Any, Callable[[], Any]]:
    """The oracle's outcome of the transfer and the package call that makes it (not yet made)."""
    engine = h.engine(A)
    pairs = ([0], [blocks - 1]) if blocks > 1 else ([0], [0])
    if name == "pull_kv_cache":
        expected = h.world.pull_kv_cache(A, (B, remote, 0), local)
        return expected, lambda: engine.pull_kv_cache(native.CacheIndex(B, remote, 0), native.Cache(local))
    if name == "pull_kv_blocks":
        expected = h.world.pull_kv_blocks(A, (B, remote, 0), local, *pairs)
        return expected, lambda: engine.pull_kv_blocks(native.CacheIndex(B, remote, 0), native.Cache(local),
                                                       *pairs)
    caller = (int(CachePlacement.DEVICE), num_tensors)        # pushes read the caller's description (semantics.md §2.5)
    if name == "push_kv_cache":
        expected = h.world.push_kv_cache(A, local, (B, remote, 0), caller=caller)
        return expected, lambda: engine.push_kv_cache(h._caller(local, caller), native.CacheIndex(B, remote, 0))
    expected = h.world.push_kv_blocks(A, local, (B, remote, 0), *pairs, caller=caller)
    return expected, lambda: engine.push_kv_blocks(h._caller(local, caller), native.CacheIndex(B, remote, 0),
                                                   *pairs)


def _raw_call(h: Harness, name: str, cache_id: int) -> int:
    """One call on A's C ABI handle, made while Finalize runs; returns its status."""
    abi, ffi, lib = h.abi, h.abi.ffi, h.abi.lib
    handle = h.engine(A)._engine()
    shape = ffi.new("int64_t[]", [2, 8])
    desc = ffi.new("lldd_cache_desc *", {"placement": 1, "num_tensors": 1, "data_type": int(G.DT_UINT8),
                                         "shape": shape, "shape_len": 2})
    one, two = abi.blocks([0]), abi.blocks([1])
    out_id = ffi.new("int64_t *")
    ip = ffi.new("lldd_ip_info[]", [{"ip": ffi.new("char[]", b"127.0.0.1"), "port": h.nodes[B].port or 0}])
    info = ffi.new("lldd_cluster_info *", {"remote_cluster_id": B, "remote_ip_infos": ip, "num_remote_ip_infos": 1,
                                           "local_ip_infos": ip, "num_local_ip_infos": 1})
    rets, num_rets = ffi.new("lldd_status[1]"), ffi.new("size_t *", 1)
    if name == "register":
        buffer = np.zeros(16, np.uint8)
        addrs = ffi.new("uint64_t[]", [int(buffer.ctypes.data)])
        return int(lib.lldd_register_kv_cache(handle, desc, addrs, 1, out_id))
    if name == "unregister":
        return int(lib.lldd_unregister_kv_cache(handle, cache_id))
    if name == "allocate":
        addrs = ffi.new("uint64_t[1]")
        return int(lib.lldd_allocate_cache(handle, desc, out_id, addrs, 1))
    if name == "deallocate":
        return int(lib.lldd_deallocate_cache(handle, cache_id))
    if name == "pull_kv_cache":
        return int(lib.lldd_pull_kv_cache(handle, abi.index(B, cache_id, 0), abi.cache(cache_id), 0, -1, ffi.NULL))
    if name == "pull_kv_blocks":
        return int(lib.lldd_pull_kv_blocks(handle, abi.index(B, cache_id, 0), abi.cache(cache_id), *one, *two,
                                           ffi.NULL))
    if name == "push_kv_cache":
        return int(lib.lldd_push_kv_cache(handle, abi.cache(cache_id), abi.index(B, cache_id, 0), 0, -1, ffi.NULL))
    if name == "push_kv_blocks":
        return int(lib.lldd_push_kv_blocks(handle, abi.cache(cache_id), abi.index(B, cache_id, 0), *one, *two,
                                           ffi.NULL))
    if name == "copy_kv_cache":
        return int(lib.lldd_copy_kv_cache(handle, abi.cache(cache_id), abi.cache(cache_id), 0, 0, 0, -1))
    if name == "copy_kv_blocks":
        lens = ffi.new("size_t[]", [1])
        return int(lib.lldd_copy_kv_blocks(handle, abi.cache(cache_id), abi.cache(cache_id), *one, two[0], lens, 1))
    if name == "link":
        return int(lib.lldd_link_clusters(handle, info, 1, 1000, rets, num_rets))
    if name == "unlink":
        return int(lib.lldd_unlink_clusters(handle, info, 1, 1000, 0, rets, num_rets))
    assert name == "set_role"
    return int(lib.lldd_set_role(handle, int(LlmRole.MIX), ffi.NULL, 0))


def _after_call(h: Harness, name: str, cache_id: int) -> None:
    """The same call through the package once Finalize has returned, checked by the harness
    against the oracle's never-initialised engine."""
    if name == "register":
        h.register(A, 1, G.DT_UINT8, [2, 8])
    elif name == "unregister":
        h.unregister(A, cache_id)
    elif name == "allocate":
        h.allocate(A, 1, G.DT_UINT8, [2, 8])
    elif name == "deallocate":
        h.deallocate(A, cache_id)
    elif name == "pull_kv_cache":
        h.pull_kv_cache(A, (B, cache_id, 0), cache_id)
    elif name == "pull_kv_blocks":
        h.pull_kv_blocks(A, (B, cache_id, 0), cache_id, [0], [1])
    elif name == "push_kv_cache":
        h.push_kv_cache(A, cache_id, (B, cache_id, 0))
    elif name == "push_kv_blocks":
        h.push_kv_blocks(A, cache_id, (B, cache_id, 0), [0], [1])
    elif name == "copy_kv_cache":
        h.copy_kv_cache(A, cache_id, cache_id)
    elif name == "copy_kv_blocks":
        h.copy_kv_blocks(A, cache_id, cache_id, [0], [[1]])
    elif name == "link":
        h.link(A, B)
    elif name == "unlink":
        h.unlink(A, B)
    else:
        h.set_role(A, int(LlmRole.MIX))


@pytest.mark.rules("§12.3", "PR-37")
@settings(max_examples=EXAMPLES)
@given(ex=examples())
def test_finalize_waits_for_the_running_transfer_and_fails_calls_that_start_later(harness: Harness,
                                                                                  ex: dict[str, Any]) -> None:
    h = harness
    mock_control.set_serve_delay(h.engine(B), 0)
    h.reset()
    shape = list(ex["shape"])
    local = h.register(A, ex["num_tensors"], G.DT_UINT8, shape, CachePlacement.DEVICE)
    remote = h.register(B, ex["num_tensors"], G.DT_UINT8, shape, CachePlacement.DEVICE)
    assert local.ok and remote.ok
    if ex["linked_from"] == A:
        h.link(A, B)
    else:
        h.link(B, A)
    expected, call = _transfer(h, ex["transfer"], local.value, remote.value, shape[0], ex["num_tensors"])
    assert expected.ok, f"test error: the held transfer must be valid, the oracle says {expected.describe()}"

    mock_control.set_serve_delay(h.engine(B), SERVE_DELAY_MS)
    seen: dict[str, Any] = {}

    def run_transfer() -> None:
        seen["result"] = observe(call)

    def run_finalize() -> None:
        h.engine(A).finalize()
        seen["finalize_done"] = time.monotonic()

    transfer = threading.Thread(target=run_transfer)
    transfer_started = time.monotonic()
    transfer.start()
    time.sleep(LEAD_S)
    finalizer = threading.Thread(target=run_finalize)
    finalizer.start()
    deadline = time.monotonic() + 5
    while h.abi.lib.lldd_unregister_kv_cache(h.engine(A)._engine(), 999) == S.LLM_SUCCESS:
        assert time.monotonic() < deadline, "Finalize never began"
        time.sleep(0.001)
    h.world.begin_finalize(A)
    late = [(name, cache_id, _raw_call(h, name, cache_id)) for name, cache_id in ex["late"]]
    finalizer.join()
    transfer.join()
    assert "result" in seen, "the transfer thread ended without a result"
    assert transfer_started_first(seen["result"]), \
        f"the held transfer did not complete as a running call: {seen['result']}"
    # B answers the transfer's table request about SERVE_DELAY_MS after it arrives, so a
    # Finalize that waits for the transfer returns no earlier; one that did not wait would
    # return soon after it began (LEAD_S). Half the delay separates the two; comparing the
    # threads' own timestamps after return would race with the scheduler, and the mock's
    # delay may end a fraction of a millisecond early by this clock.
    assert seen["finalize_done"] >= transfer_started + SERVE_DELAY_MS / 2000, \
        "Finalize returned before the running transfer could have"

    for name, cache_id, status in late:
        want = h.world.call_while_finalizing(A, name)
        assert status == int(want.status), (f"{name}(id {cache_id}) after Finalize began: "
                                            f"got {S(status).name}, the oracle expects {want.describe()}")
    kind, status, _, message = seen["result"]
    want = ("ok", S.LLM_SUCCESS) if expected.ok else ("LLMException", expected.status)
    assert (kind, status) == want, f"{ex['transfer']} while Finalize ran: {kind} {status}: {message}"
    h._apply(expected)
    h.finalize(A)                     # the model catches up; the package's engine is already finalized
    h.check_memory()

    mock_control.set_serve_delay(h.engine(B), 0)
    for name, cache_id in ex["after"]:
        _after_call(h, name, cache_id)
    h.initialize(A)


def transfer_started_first(result: tuple[str, Any, Any, str]) -> bool:
    """A transfer that started after Finalize began would have been refused with
    ``LLM_FAILED`` and the text of PR-37; a running one completes normally."""
    return not (result[1] == S.LLM_FAILED and "Finalize" in result[3])

