"""Extension ABI, priority 1: lldd_ext_initialize (docs/reference/python-api.md §10.2, docs/reference/semantics.md §1)
and the cache life cycle with keys: register / unregister (v2), allocate /
deallocate / remove_cache_key (v2 and v1) (docs/reference/semantics.md §2.2, §3, §9.2, §9.3, §9.6,
§9.8, PR-21, PR-22, PR-23, PR-34, PR-36, PR-41).

Whether a key is bound is observed through the binding rules themselves (a bound
key cannot be bound again) and whether memory was freed through the pool (a cache
that fills the pool blocks the next allocation until it is freed).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import lint


import ext_support as xs
from listeners import listening_ports
U64 = xs.U64
pytestmark = pytest.mark.mock_only(reason="raw calls of the mock's extension functions")

POOL_16M = '{"memory_size": 16777216, "page_shift": 12}'


def arrays(n: int, shape: tuple[int, ...] = (4, 16), seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=shape, dtype=np.uint8) for _ in range(n)]


# ---- lldd_ext_initialize --------------------------------------------------------------------


@pytest.mark.parametrize("options", [xs.v2_options(), xs.v2_options(direct=False), xs.v1_options(),
                                     xs.v1_options("Prompt", xs.free_port())])
def test_initialize_accepts_each_generation_and_mode(x: Any, options: dict[str, str]) -> None:
    engine = x.create(1)
    assert x.init(engine, options) == S.LLM_SUCCESS
    assert x.init(engine, {"llm.Role": "nonsense"}) == S.LLM_SUCCESS       # already initialised: ignored


@pytest.mark.parametrize("options, status, words", [
    ({"llm.EnableCacheManager": "1"}, S.LLM_PARAM_INVALID, "llm.Role is missing"),
    ({"llm.Role": "Prefill", "llm.EnableCacheManager": "1"}, S.LLM_PARAM_INVALID, "llm.Role"),
    (xs.v1_options(**{"llm.LocalCommRes": ""}), S.LLM_PARAM_INVALID, "llm.LocalCommRes"),
    (xs.v1_options(**{"llm.TransferBackend": "hixl"}), S.LLM_PARAM_INVALID, "llm.TransferBackend"),
    ({"llm.Role": "Decoder"}, S.LLM_PARAM_INVALID, "ge.exec.deviceId is missing"),
    (xs.v1_options(**{"ge.exec.deviceId": "0;1"}), S.LLM_FEATURE_NOT_ENABLED, "PR-36"),
    (xs.v1_options(**{"ge.exec.deviceId": "x"}), S.LLM_PARAM_INVALID, "ge.exec.deviceId"),
    (xs.v1_options("Prompt"), S.LLM_PARAM_INVALID, "llm.listenIpInfo"),
    (xs.v1_options("Prompt", **{"llm.listenIpInfo": "127.0.0.1:1;127.0.0.1:2"}), S.LLM_PARAM_INVALID, "PR-36"),
    (xs.v1_options(**{"ge.flowGraphMemMaxSize": "12,3"}), S.LLM_PARAM_INVALID, "ge.flowGraphMemMaxSize"),
    (xs.v1_options(**{"llm.BufPoolCfg": "{"}), S.LLM_PARAM_INVALID, "llm.BufPoolCfg"),
    (xs.v1_options(**{"llm.SyncKvCacheWaitTime": "2147483648"}), S.LLM_PARAM_INVALID, "PR-26"),
    (xs.v2_options(**{"llm_datadist_ffi.mock.NativePool": "yes"}), S.LLM_PARAM_INVALID, "NativePool"),
    (xs.v2_options(**{"ge.exec.deviceId": "0;1"}), S.LLM_PARAM_INVALID, "one integer"),
    (xs.v2_options(**{"llm.EnableRemoteCacheAccessible": "2"}), S.LLM_PARAM_INVALID, "\"0\" or \"1\""),
    (xs.v2_options(**{"llm.SyncKvCacheWaitTime": "2147483648"}), S.LLM_PARAM_INVALID, "PR-26"),
    (xs.v2_options(**{"llm.ListenIp": "127.0.0.1"}), S.LLM_PARAM_INVALID, "llm.ListenPort"),
    (xs.v2_options(**{"llm.ListenIp": "127.0.0.1", "llm.ListenPort": "65536"}), S.LLM_PARAM_INVALID, "PR-27"),
    (xs.v1_options("Prompt", **{"llm.listenIpInfo": "127.0.0.1:0"}), S.LLM_PARAM_INVALID, "PR-27"),
    (xs.v2_options(**{"llm.ListenIp": "host", "llm.ListenPort": "1"}), S.LLM_PARAM_INVALID, "llm.ListenIp"),
    (xs.v2_options(**{"llm.TransferBackend": "rdma"}), S.LLM_PARAM_INVALID, "hixl"),
    (xs.v2_options(**{"llm.MemPoolConfig": '{"memory_size": 4096, "page_shift": 9}'}), S.LLM_PARAM_INVALID,
     "page_shift"),
    (xs.v2_options(**{"llm.LinkRetryCount": "101"}), S.LLM_PARAM_INVALID, "llm.LinkRetryCount"),
    (xs.v2_options(**{"llm.LinkTotalTime": "-1"}), S.LLM_PARAM_INVALID, "llm.LinkTotalTime"),
    (xs.v2_options(**{"ge.exec.deviceId": "4096"}), S.LLM_FAILED, "ge.exec.deviceId"),
])
def test_initialize_rejects_each_broken_option(x: Any, options: dict[str, str], status: int, words: str) -> None:
    engine = x.create(1)
    assert x.init(engine, options) == status
    assert words in x.last_error()
    assert x.init(engine, xs.v2_options()) == S.LLM_SUCCESS                # a failed init may be retried


def test_initialize_ignores_keys_the_core_never_reads(x: Any) -> None:
    engine = x.create(1)
    assert x.init(engine, xs.v2_options(**{"llm.MemoryUtilization": "0.95", "ge.session_device_id": "0",
                                            "llm.EnableSwitchRole": "1", "llm.listenIpInfo": "nonsense"})) == 0


def test_initialize_checks_its_pointers(x: Any) -> None:
    assert x.lib.lldd_ext_initialize(x.ffi.NULL, x.ffi.NULL, 0) == S.LLM_PARAM_INVALID
    engine = x.create(1)
    assert x.lib.lldd_ext_initialize(engine, x.ffi.NULL, 3) == S.LLM_PARAM_INVALID
    assert "num_options" in x.last_error()


def test_extension_calls_before_initialize_and_after_finalize_fail(x: Any) -> None:
    engine = x.create(1)
    key = x.req(1)
    assert x.allocate(engine, 1, [4, 16])[0] == S.LLM_FAILED
    assert x.register(engine, arrays(1))[0] == S.LLM_FAILED
    assert x.remove_key(engine, key) == S.LLM_FAILED
    assert x.init(engine, xs.v2_options(pool=True)) == 0
    x.lib.lldd_finalize(engine)
    assert x.deallocate(engine, 1) == S.LLM_FAILED
    assert "not initialized" in x.last_error()


def test_reinitialize_after_finalize_may_change_the_generation(x: Any) -> None:
    engine = x.engine(1, xs.v1_options())
    assert x.register(engine, arrays(1))[0] == S.LLM_FEATURE_NOT_ENABLED           # no registration in v1
    x.lib.lldd_finalize(engine)
    assert x.init(engine, xs.v2_options()) == 0
    assert x.register(engine, arrays(1)) == (S.LLM_SUCCESS, 1)


def test_an_empty_pool_option_counts_as_absent(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(**{"llm.MemPoolConfig": ""}))
    assert x.allocate(engine, 1, [4, 16])[0] == S.LLM_FEATURE_NOT_ENABLED


def test_an_injected_fault_fails_an_extension_call(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    assert x.lib.lldd_mock_inject_fault(b"lldd_ext_register_cache", S.LLM_TIMEOUT, 1, 0) == 0
    try:
        assert x.register(engine, arrays(1))[0] == S.LLM_TIMEOUT
        assert x.register(engine, arrays(1)) == (S.LLM_SUCCESS, 1)
    finally:
        x.lib.lldd_mock_clear_faults()


# ---- register / unregister (v2) -------------------------------------------------------------


def test_register_checks_kind_keys_and_flags_before_taking_an_id(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    a = arrays(2)
    assert x.register(engine, a, kind=3)[0] == S.LLM_PARAM_INVALID
    assert "kind 3" in x.last_error()
    assert x.register(engine, a, kind=xs.KIND_BLOCKS, keys=[x.blocks_key(), x.blocks_key(model=1)])[0] == \
        S.LLM_PARAM_INVALID
    assert x.register(engine, a, keys=[x.blocks_key()])[0] == S.LLM_PARAM_INVALID
    assert "LLDD_KEY_CACHE" in x.last_error()
    assert x.register(engine, a, kind=xs.KIND_BLOCKS, keys=[x.req(1)])[0] == S.LLM_PARAM_INVALID
    assert x.register(engine, a, remote=2)[0] == S.LLM_PARAM_INVALID
    assert x.register(engine, a, shape=[])[0] == S.LLM_PARAM_INVALID                   # rank: no id taken
    assert x.register(engine, a, num_tensors=3)[0] == S.LLM_PARAM_INVALID              # count: no id taken
    assert x.register(engine, a) == (S.LLM_SUCCESS, 1)


def test_register_takes_an_id_for_a_cache_that_fails_later(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    a = arrays(2)
    assert x.register(engine, a, shape=[4, 0])[0] == S.LLM_PARAM_INVALID              # id 1 consumed
    d, keep = x.desc(2, [4, 16])
    out = x.ffi.new("int64_t *")
    assert x.lib.lldd_ext_register_cache(engine, d, x.u64([a[0].ctypes.data, 0]), 2, xs.KIND_CACHE, 1,
                                         x.ffi.NULL, 0, out) == S.LLM_PARAM_INVALID
    assert "addrs[1] is 0" in x.last_error()                                           # id 2 consumed
    assert x.register(engine, a) == (S.LLM_SUCCESS, 3)
    del keep


def test_register_refuses_address_zero_even_when_not_remote_accessible(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    d, keep = x.desc(1, [4, 16])
    out = x.ffi.new("int64_t *")
    assert x.lib.lldd_ext_register_cache(engine, d, x.u64([0]), 1, xs.KIND_BLOCKS, 0, x.ffi.NULL, 0, out) == \
        S.LLM_PARAM_INVALID
    del keep


def test_register_applies_pr30_to_mock_acl_allocations(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    from llm_datadist_ffi import acl
    acl.aclrtSetDevice(0)
    ptr = acl.aclrtMalloc(60, 0)
    try:
        d, keep = x.desc(1, [4, 16])
        out = x.ffi.new("int64_t *")
        assert x.lib.lldd_ext_register_cache(engine, d, x.u64([ptr]), 1, xs.KIND_CACHE, 1, x.ffi.NULL, 0,
                                             out) == S.LLM_PARAM_INVALID
        assert "PR-30" in x.last_error()
        del keep
    finally:
        acl.aclrtFree(ptr)
        acl.aclrtResetDevice(0)


def test_register_checks_its_pointers(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    d, keep = x.desc(1, [4, 16])
    out = x.ffi.new("int64_t *")
    NULL = x.ffi.NULL
    assert x.lib.lldd_ext_register_cache(engine, NULL, NULL, 0, 1, 1, NULL, 0, out) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_register_cache(engine, d, NULL, 5, 1, 1, NULL, 0, out) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_register_cache(engine, d, x.u64([1]), 1, 1, 1, NULL, 2**60, out) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_register_cache(engine, d, x.u64([1]), 1, 1, 1, NULL, 0, NULL) == S.LLM_PARAM_INVALID
    del keep


def test_register_refuses_more_keys_than_batches(x: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # a guard: the extra keys would name batches past the cache
    engine = x.engine(1, xs.v2_options())
    assert x.register(engine, arrays(2), keys=[x.req(1)] * 5)[0] == S.LLM_PARAM_INVALID
    assert "5 cache keys for a cache of 4 batches" in x.last_error()


@pytest.mark.parametrize("keys, repeated_binds, words", [
    (lambda x: [x.req(1), x.req(2), x.req(1)], True, "cache_keys[2] repeats cache_keys[0]"),
    (lambda x: [x.prefix(7), x.prefix(7, model=1), x.prefix(7)], True, "cache_keys[2] repeats cache_keys[0]"),
    (lambda x: [x.placeholder(), x.req(3), x.placeholder()], False,
     "cache_keys[2] repeats cache_keys[0], the placeholder"),
])
def test_register_binds_a_repeated_key_once_with_a_lint(x: Any, monkeypatch: pytest.MonkeyPatch, keys: Any,
                                                        repeated_binds: bool, words: str) -> None:
    # PR-21: the vendor's registration checks no key; a repeat binds the key once
    engine = x.engine(1, xs.v2_options(pool=True))
    x.take_lints()
    assert x.register(engine, arrays(2), keys=keys(x)) == (0, 1)
    assert x.take_lints() == [21]
    if repeated_binds:                                                  # a placeholder binds nothing
        assert x.allocate(engine, 1, [4, 16], keys=keys(x)[:1])[0] == S.LLM_PARAM_INVALID   # bound to cache 1
        assert "already bound" in x.last_error()
    assert x.unregister(engine, 1) == 0
    assert x.allocate(engine, 1, [4, 16], keys=keys(x)[:2])[0] == 0                     # all free again
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    assert x.register(engine, arrays(2), keys=keys(x))[0] == S.LLM_PARAM_INVALID
    assert words in x.last_error() and "PR-21" in x.last_error()


def test_a_key_repeated_at_registration_names_the_batch_of_its_last_occurrence(x: Any) -> None:
    # PR-21: the vendor's slot map of the cache keeps the last write, so a server-assisted
    # pull through the key reads batch 2 here, not batch 0
    p, port = x.listening(1, xs.v2_options(direct=False, role="Prompt"))
    d = x.engine(2, xs.v2_options(direct=False, role="Decoder"))
    source = [np.arange(64, dtype=np.uint8).reshape(4, 16) for _ in range(2)]
    x.take_lints()
    assert x.register(p, source, keys=[x.req(7), x.req(8), x.req(7)]) == (0, 1)
    assert x.take_lints() == [21]
    target = [np.zeros((1, 16), np.uint8) for _ in range(2)]
    _, dst_id = x.register(d, target)
    assert x.link(d, [(1, port)]) == (0, [0]), x.last_error()
    assert x.pull(d, x.req(7, cluster=1), dst_id) == 0, x.last_error()
    assert all((t[0] == s[2]).all() for t, s in zip(target, source))


def test_a_key_bound_to_a_live_cache_keeps_its_binding_with_a_lint(x: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = x.engine(1, xs.v2_options(pool=True))
    a = arrays(2)
    assert x.register(engine, a, keys=[x.placeholder(), x.req(5), x.prefix(5)]) == (0, 1)
    x.take_lints()
    assert x.register(engine, a, keys=[x.req(5), x.req(6)]) == (0, 2)
    assert x.take_lints() == [21]
    assert x.unregister(engine, 2) == 0                                # req 5 stays with cache 1
    assert x.allocate(engine, 1, [4, 16], keys=[x.req(5)])[0] == S.LLM_PARAM_INVALID
    assert x.allocate(engine, 1, [4, 16], keys=[x.req(6)])[0] == 0       # req 6 went with cache 2
    assert x.register(engine, a, keys=[x.req(5, model=1), x.prefix(7)]) == (0, 5)       # other identities
    assert x.take_lints() == []
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    assert x.register(engine, a, keys=[x.req(9), x.prefix(5)])[0] == S.LLM_PARAM_INVALID
    assert "already bound" in x.last_error() and "PR-21" in x.last_error()
    monkeypatch.delenv(lint.STRICT_ENV)
    assert x.unregister(engine, 1) == S.LLM_SUCCESS                    # keys go with it
    assert x.register(engine, a, keys=[x.req(5), x.prefix(5)])[0] == S.LLM_SUCCESS
    assert x.take_lints() == []


def test_a_placeholder_with_the_identity_of_a_bound_blocks_key_binds_nothing_with_a_lint(
        x: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = x.engine(1, xs.v2_options(pool=True))
    assert x.register(engine, arrays(1), kind=xs.KIND_BLOCKS, keys=[x.blocks_key(model=3)]) == (0, 1)
    x.take_lints()
    assert x.register(engine, arrays(1), keys=[x.placeholder(model=3), x.req(1)]) == (0, 2)
    assert x.take_lints() == [21]
    assert x.unregister(engine, 2) == 0
    assert x.allocate(engine, 1, [4, 16], xs.KIND_BLOCKS, [x.blocks_key(model=3)])[0] == S.LLM_PARAM_INVALID
    assert x.register(engine, arrays(1), keys=[x.placeholder(model=4), x.req(1)])[0] == S.LLM_SUCCESS
    assert x.take_lints() == []
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    assert x.register(engine, arrays(1), keys=[x.placeholder(model=3), x.req(2)])[0] == S.LLM_PARAM_INVALID
    assert "PR-21" in x.last_error()


def test_register_blocks_cache_takes_a_bound_model_id_from_the_previous_cache(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(pool=True))
    key = x.blocks_key(model=2)
    assert x.register(engine, arrays(1), kind=xs.KIND_BLOCKS, keys=[key]) == (0, 1)
    assert x.register(engine, arrays(1), kind=xs.KIND_BLOCKS, keys=[key]) == (0, 2)     # cache 1 loses it
    assert x.unregister(engine, 1) == 0
    assert x.allocate(engine, 1, [4, 16], xs.KIND_BLOCKS, [key])[0] == S.LLM_PARAM_INVALID   # cache 2 holds it
    assert x.unregister(engine, 2) == 0
    assert x.allocate(engine, 1, [4, 16], xs.KIND_BLOCKS, [key])[0] == S.LLM_SUCCESS


def test_unregister_of_an_unknown_id_succeeds_and_of_an_allocated_cache_removes_it_with_a_lint(
        x: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # PR-23: the entry and its keys go; the vendor's pool takes its memory back
    engine = x.engine(1, xs.v2_options(pool=True, **{"llm.MemPoolConfig": '{"memory_size": 65536, "page_shift": 12}'}))
    x.take_lints()
    assert x.unregister(engine, 42) == S.LLM_SUCCESS
    status, cache_id, _ = x.allocate(engine, 1, [1, 65536], keys=[x.req(1)])
    assert status == 0
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    assert x.unregister(engine, cache_id) == S.LLM_PARAM_INVALID
    assert "PR-23" in x.last_error()
    assert x.allocate(engine, 1, [1, 4096])[0] == S.LLM_OUT_OF_MEMORY                 # still there
    monkeypatch.delenv(lint.STRICT_ENV)
    assert x.unregister(engine, cache_id) == S.LLM_SUCCESS
    assert x.take_lints() == [23]
    assert x.allocate(engine, 1, [1, 65536], keys=[x.req(1)])[0] == 0              # memory and key are free
    assert x.deallocate(engine, cache_id) == S.LLM_SUCCESS                          # an unknown id now


def test_registration_after_a_rank_table_link_cannot_be_remote_accessible(x: Any) -> None:
    engine = x.engine(2, xs.v2_options(**{"llm.LinkTotalTime": "1"}))
    comm = x.ffi.new("uint64_t *")
    ids, ranks = x.u64([1, 2]), x.ffi.new("uint32_t[]", [0, 1])
    if x.lib.lldd_ext_link(engine, b"after_link_ext", ids, ranks, 2, b"{}", comm) == S.LLM_FEATURE_NOT_ENABLED:
        pytest.skip("rank-table links not implemented yet")
    assert x.register(engine, arrays(1), remote=1)[0] == S.LLM_PARAM_INVALID
    assert "after link" in x.last_error()
    assert x.register(engine, arrays(1), remote=0)[0] == S.LLM_SUCCESS
    assert x.lib.lldd_ext_unlink(engine, comm[0]) == 0


@pytest.mark.parametrize("direct, status", [(True, S.LLM_PARAM_INVALID), (False, S.LLM_SUCCESS)])
def test_the_published_table_limit_applies_in_direct_mode_only(x: Any, direct: bool, status: int) -> None:
    engine = x.engine(1, xs.v2_options(direct=direct))
    a = np.ones(1, dtype=np.uint8)
    n = (1024 * 1024 - 24 - 64) // 8 + 1                   # one tensor too many for 1 MiB
    d, keep = x.desc(n, [1])
    out = x.ffi.new("int64_t *")
    addrs = x.ffi.new("uint64_t[]", [a.ctypes.data] * n)
    assert x.lib.lldd_ext_register_cache(engine, d, addrs, n, xs.KIND_CACHE, 1, x.ffi.NULL, 0, out) == status
    d2, keep2 = x.desc(n - 1, [1])
    assert x.lib.lldd_ext_register_cache(engine, d2, addrs, n - 1, xs.KIND_CACHE, 1, x.ffi.NULL, 0, out) == 0
    del keep, keep2


def test_key_bindings_count_towards_the_published_table(x: Any) -> None:
    engine = x.engine(1, xs.v2_options())
    a = np.ones(1, dtype=np.uint8)
    n = (1024 * 1024 - 24 - 64 - 24) // 8                  # room for the entry and exactly one key binding
    d, keep = x.desc(n, [1])
    out = x.ffi.new("int64_t *")
    addrs = x.ffi.new("uint64_t[]", [a.ctypes.data] * n)
    two = x.key_array([x.req(1), x.req(2)])
    assert x.lib.lldd_ext_register_cache(engine, d, addrs, n, xs.KIND_CACHE, 1, two, 1, out) == 0
    assert x.unregister(engine, out[0]) == 0
    d3, keep3 = x.desc(n, [2])
    assert x.lib.lldd_ext_register_cache(engine, d3, addrs, n, xs.KIND_CACHE, 1, two, 2, out) == \
        S.LLM_PARAM_INVALID
    assert "key binding" in x.last_error()
    prefixes = x.key_array([x.prefix(1), x.prefix(2)])                      # prefix keys are not published
    assert x.lib.lldd_ext_register_cache(engine, d3, addrs, n, xs.KIND_CACHE, 1, prefixes, 2, out) == 0
    del keep, keep3


# ---- allocate / deallocate / remove_cache_key -----------------------------------------------


def test_v2_allocate_needs_a_pool_for_its_placement(x: Any) -> None:
    no_pool = x.engine(1, xs.v2_options())
    assert x.allocate(no_pool, 1, [4, 16])[0] == S.LLM_FEATURE_NOT_ENABLED
    assert x.deallocate(no_pool, 1) == S.LLM_FEATURE_NOT_ENABLED
    assert x.remove_key(no_pool, x.req(1)) == S.LLM_FEATURE_NOT_ENABLED
    device_only = x.engine(2, xs.v2_options(pool=True))
    assert x.allocate(device_only, 1, [4, 16], placement=xs.HOST)[0] == S.LLM_PARAM_INVALID
    assert "llm.HostMemPoolConfig" in x.last_error()
    assert x.allocate(device_only, 0, [4, 16])[0] == S.LLM_PARAM_INVALID
    assert x.allocate(device_only, 1, [])[0] == S.LLM_PARAM_INVALID                  # rank: no id taken
    assert x.allocate(device_only, 1, [4, -1])[0] == S.LLM_PARAM_INVALID             # id 1 taken
    assert x.allocate(device_only, 1, [4, 16])[:2] == (0, 2)
    host_only = x.engine(3, xs.v2_options(host_pool=True))
    assert x.allocate(host_only, 1, [4, 16], placement=xs.HOST)[:2] == (0, 1)


def test_allocated_memory_is_the_pool_and_is_usable(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(pool=True))
    status, cache_id, addrs = x.allocate(engine, 3, [4, 1000])
    assert status == 0 and len(set(addrs)) == 3
    for i, addr in enumerate(addrs):
        x.view(addr, 4000)[:] = i + 1
    assert [int(x.view(a, 4000).sum()) for a in addrs] == [4000, 8000, 12000]


def test_allocate_checks_the_capacity_of_tensor_addrs(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(pool=True))
    d, keep = x.desc(3, [4, 16])
    out = x.ffi.new("int64_t *")
    addrs = x.ffi.new("uint64_t[]", 2)
    assert x.lib.lldd_ext_allocate_cache(engine, d, 1, x.ffi.NULL, 0, out, addrs, 2) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_allocate_cache(engine, d, 1, x.ffi.NULL, 0, out, x.ffi.NULL, 3) == S.LLM_PARAM_INVALID
    del keep


def test_v2_pool_exhaustion_is_out_of_memory_and_v1_is_device_out_of_memory(x: Any) -> None:
    v2 = x.engine(1, xs.v2_options(pool=True))                               # 4096 pages of 4 KiB
    assert x.allocate(v2, 2, [2048, 4096])[0] == 0                           # 2 x 2048 pages
    assert x.allocate(v2, 1, [1, 4096])[0] == S.LLM_OUT_OF_MEMORY
    v1 = x.engine(2, xs.v1_options("Prompt", xs.free_port(), **{"ge.flowGraphMemMaxSize": "65536"}))
    assert x.allocate(v1, 1, [16, 4096])[0] == 0
    assert x.allocate(v1, 1, [1, 1024])[0] == S.LLM_DEVICE_OUT_OF_MEMORY
    buf = x.engine(3, xs.v1_options(**{"ge.flowGraphMemMaxSize": "1048576",
                                        "llm.BufPoolCfg": '{"buf_pool_size": 8192}'}))
    assert x.allocate(buf, 1, [2, 4096])[0] == 0                             # buf_pool_size wins (PR-34)
    assert x.allocate(buf, 1, [1, 1024])[0] == S.LLM_DEVICE_OUT_OF_MEMORY
    unlimited = x.engine(4, xs.v1_options())
    for _ in range(3):
        assert x.allocate(unlimited, 2, [64, 4096])[0] == 0


def test_allocated_v1_memory_without_a_pool_is_released_by_finalize(x: Any) -> None:
    before = int(x.lib.lldd_mock_live_allocations())
    engine = x.engine(1, xs.v1_options())
    status, cache_id, _ = x.allocate(engine, 2, [4, 16])
    assert status == 0 and int(x.lib.lldd_mock_live_allocations()) == before + 2
    assert x.deallocate(engine, cache_id) == 0
    assert int(x.lib.lldd_mock_live_allocations()) == before
    assert x.allocate(engine, 2, [4, 16])[0] == 0
    x.lib.lldd_finalize(engine)
    assert int(x.lib.lldd_mock_live_allocations()) == before


@pytest.mark.parametrize("keys, words", [
    (lambda x: [x.req(1)] * 5, "5 cache keys for a cache of 4 batches"),
    (lambda x: [x.req(1), x.req(1)], "cache_keys[1] repeats cache_keys[0]"),
    (lambda x: [x.placeholder(), x.placeholder(), x.req(1)], "placeholder"),
])
def test_v2_allocate_applies_pr22(x: Any, keys: Any, words: str) -> None:
    engine = x.engine(1, xs.v2_options(pool=True))
    assert x.allocate(engine, 2, [4, 16], keys=keys(x))[0] == S.LLM_PARAM_INVALID
    assert words in x.last_error()


def test_allocate_refuses_a_bound_key_v2_param_invalid_v1_failed(x: Any) -> None:
    v2 = x.engine(1, xs.v2_options(pool=True))
    assert x.allocate(v2, 1, [4, 16], keys=[x.req(1)])[0] == 0
    assert x.allocate(v2, 1, [4, 16], keys=[x.req(1)])[0] == S.LLM_PARAM_INVALID
    assert x.allocate(v2, 1, [4, 16], xs.KIND_BLOCKS, [x.blocks_key(model=1)])[0] == 0
    assert x.allocate(v2, 1, [4, 16], xs.KIND_BLOCKS, [x.blocks_key(model=1)])[0] == S.LLM_PARAM_INVALID
    v1 = x.engine(2, xs.v1_options("Prompt", xs.free_port()))
    assert x.allocate(v1, 1, [4, 16], keys=[x.req(1)])[0] == 0
    assert x.allocate(v1, 1, [4, 16], keys=[x.req(1)])[0] == S.LLM_FAILED
    assert x.allocate(v1, 1, [4, 16], xs.KIND_BLOCKS, [x.blocks_key(model=1)])[0] == 0
    assert x.allocate(v1, 1, [4, 16], xs.KIND_BLOCKS, [x.blocks_key(model=1)])[0] == S.LLM_FAILED


def test_v1_allocate_accepts_repeated_keys_and_placeholders(x: Any) -> None:
    engine = x.engine(1, xs.v1_options("Prompt", xs.free_port()))
    keys = [x.req(1), x.placeholder(), x.placeholder(), x.req(1)]
    assert x.allocate(engine, 1, [4, 16], keys=keys)[0] == 0
    assert x.allocate(engine, 1, [4, 16], keys=[x.req(1)])[0] == S.LLM_FAILED      # bound (its last slot)


def test_v1_allocate_follows_the_role_and_placement_rules(x: Any) -> None:
    decoder = x.engine(1, xs.v1_options())
    assert x.allocate(decoder, 1, [4, 16], keys=[x.req(1)])[0] == S.LLM_PARAM_INVALID
    assert "DECODER" in x.last_error()
    assert x.allocate(decoder, 1, [4, 16], xs.KIND_BLOCKS, [x.blocks_key()])[0] == S.LLM_PARAM_INVALID
    assert x.allocate(decoder, 1, [4, 16], placement=xs.HOST)[0] == S.LLM_PARAM_INVALID   # no id taken
    assert x.allocate(decoder, 1, [])[0] == S.LLM_PARAM_INVALID               # past placement: id 1 taken
    assert x.allocate(decoder, 1, [4, 16])[:2] == (0, 2)
    mix = x.engine(2, xs.v1_options("Mix"))
    assert x.allocate(mix, 1, [4, 16], xs.KIND_BLOCKS, [x.blocks_key()])[0] == S.LLM_SUCCESS


def test_deallocate_of_unknown_and_registered_caches(x: Any) -> None:
    v2 = x.engine(1, xs.v2_options(pool=True))
    assert x.deallocate(v2, 77) == S.LLM_SUCCESS
    a = arrays(1)
    assert x.register(v2, a) == (0, 1)
    assert x.deallocate(v2, 1) == S.LLM_SUCCESS                       # a registered cache: nothing happens
    assert x.unregister(v2, 1) == S.LLM_SUCCESS
    v1 = x.engine(2, xs.v1_options())
    assert x.deallocate(v1, 77) == S.LLM_KV_CACHE_NOT_EXIST


@pytest.mark.parametrize("v1", [False, True])
def test_deallocate_with_keys_outstanding_defers_the_free_until_the_last_key_goes(x: Any, v1: bool) -> None:
    opts = xs.v1_options("Prompt", xs.free_port(), **{"ge.flowGraphMemMaxSize": str(8 << 20)}) if v1 \
        else xs.v2_options(pool=True, **{"llm.MemPoolConfig": '{"memory_size": 8388608, "page_shift": 12}'})
    engine = x.engine(1, opts)
    oom = S.LLM_DEVICE_OUT_OF_MEMORY if v1 else S.LLM_OUT_OF_MEMORY
    status, cache_id, _ = x.allocate(engine, 2, [4, 1 << 20], keys=[x.req(1), x.placeholder(), x.prefix(2)])
    assert status == 0                                                   # the whole pool
    assert x.allocate(engine, 1, [1, 4096])[0] == oom
    assert x.deallocate(engine, cache_id) == 0                           # keys still bound: deferred
    assert x.deallocate(engine, cache_id) == 0                           # the id is still valid
    assert x.allocate(engine, 1, [1, 4096])[0] == oom
    assert x.remove_key(engine, x.req(1)) == 0
    assert x.allocate(engine, 1, [1, 4096])[0] == oom                    # the prefix key still holds it
    assert x.remove_key(engine, x.prefix(2)) == 0                        # the last key: freed
    status, small, _ = x.allocate(engine, 1, [1, 4096])
    assert status == 0
    assert x.allocate(engine, 1, [4, 16], keys=[x.req(1), x.prefix(2)])[0] == 0   # both keys are free again


def test_deallocate_frees_a_blocks_cache_at_once_with_its_key(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(pool=True, **{"llm.MemPoolConfig": '{"memory_size": 65536}'}))
    status, cache_id, _ = x.allocate(engine, 1, [1, 65536], xs.KIND_BLOCKS, [x.blocks_key(model=4)])
    assert status == 0
    assert x.deallocate(engine, cache_id) == 0
    assert x.allocate(engine, 1, [1, 65536], xs.KIND_BLOCKS, [x.blocks_key(model=4)])[0] == 0


def test_deallocate_without_keys_frees_at_once(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(pool=True, **{"llm.MemPoolConfig": '{"memory_size": 65536}'}))
    status, cache_id, _ = x.allocate(engine, 1, [1, 65536])
    assert status == 0 and x.deallocate(engine, cache_id) == 0
    assert x.allocate(engine, 1, [1, 65536])[0] == 0


def test_remove_cache_key_checks_the_key(x: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = x.engine(1, xs.v2_options(pool=True))
    x.take_lints()
    assert x.remove_key(engine, x.placeholder()) == S.LLM_SUCCESS                  # PR-41: a lint
    assert x.remove_key(engine, x.key(req=1, prefix=2)) == S.LLM_SUCCESS
    assert x.take_lints() == [41, 41]
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    assert x.remove_key(engine, x.placeholder()) == S.LLM_PARAM_INVALID
    assert "PR-41" in x.last_error()
    assert x.remove_key(engine, x.key(req=1, prefix=2)) == S.LLM_PARAM_INVALID
    monkeypatch.delenv(lint.STRICT_ENV)
    assert x.remove_key(engine, x.blocks_key()) == S.LLM_PARAM_INVALID
    assert x.remove_key(engine, x.by_id(1, 1)) == S.LLM_PARAM_INVALID
    assert x.lib.lldd_ext_remove_cache_key(engine, x.ffi.NULL) == S.LLM_PARAM_INVALID
    assert x.remove_key(engine, x.req(123)) == S.LLM_SUCCESS                   # not bound: nothing happens


def test_remove_cache_key_keeps_the_key_of_a_registered_cache(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(pool=True))
    assert x.register(engine, arrays(1), keys=[x.req(1)]) == (0, 1)
    assert x.remove_key(engine, x.req(1)) == S.LLM_SUCCESS
    assert x.allocate(engine, 1, [4, 16], keys=[x.req(1)])[0] == S.LLM_PARAM_INVALID   # still bound
    assert x.register(engine, arrays(1), kind=xs.KIND_BLOCKS, keys=[x.blocks_key(model=2)]) == (0, 3)
    x.take_lints()
    assert x.remove_key(engine, x.placeholder(model=2)) == S.LLM_SUCCESS             # PR-41: a no-op here
    assert x.take_lints() == [41]
    assert x.allocate(engine, 1, [4, 16], xs.KIND_BLOCKS, [x.blocks_key(model=2)])[0] == S.LLM_PARAM_INVALID


def test_a_placeholder_shaped_key_releases_the_blocks_key_of_an_allocated_blocks_cache(x: Any) -> None:
    # PR-41: the vendor gives the key the identity of its model's blocks key
    engine = x.engine(1, xs.v2_options(pool=True))
    status, cache_id, _ = x.allocate(engine, 1, [4, 16], xs.KIND_BLOCKS, [x.blocks_key(model=2)])
    assert status == 0
    x.take_lints()
    assert x.remove_key(engine, x.placeholder(model=2)) == S.LLM_SUCCESS
    assert x.take_lints() == [41]
    assert x.allocate(engine, 1, [4, 16], xs.KIND_BLOCKS, [x.blocks_key(model=2)])[0] == 0   # free again
    assert x.deallocate(engine, cache_id) == 0


def test_remove_cache_key_releases_the_key_of_an_allocated_cache(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(pool=True))
    status, cache_id, _ = x.allocate(engine, 1, [4, 16], keys=[x.req(1), x.req(2)])
    assert status == 0
    assert x.remove_key(engine, x.req(1)) == 0
    assert x.allocate(engine, 1, [4, 16], keys=[x.req(1)])[0] == 0                  # free again
    assert x.allocate(engine, 1, [4, 16], keys=[x.req(2)])[0] == S.LLM_PARAM_INVALID


def test_v1_remove_cache_key_is_for_a_prompt(x: Any) -> None:
    decoder = x.engine(1, xs.v1_options())
    assert x.remove_key(decoder, x.req(1)) == S.LLM_PARAM_INVALID
    assert "PROMPT only" in x.last_error()
    prompt = x.engine(2, xs.v1_options("Prompt", xs.free_port()))
    assert x.remove_key(prompt, x.req(1)) == S.LLM_SUCCESS


def test_finalize_releases_every_allocation_and_key(x: Any) -> None:
    before = int(x.lib.lldd_mock_live_allocations())
    engine = x.engine(1, xs.v2_options(pool=True, host_pool=True))
    for i in range(5):
        assert x.allocate(engine, 2, [4, 16], keys=[x.req(i)])[0] == 0
    assert x.deallocate(engine, 1) == 0
    x.lib.lldd_finalize(engine)
    assert int(x.lib.lldd_mock_live_allocations()) == before
    assert x.init(engine, xs.v2_options(pool=True)) == 0
    assert x.allocate(engine, 1, [4, 16], keys=[x.req(0)])[:2] == (0, 1)       # a fresh table


def test_a_cache_of_the_native_allocate_is_freed_by_the_extension_deallocate(x: Any) -> None:
    engine = x.engine(1, xs.v2_options(pool=True, **{"llm.MemPoolConfig": '{"memory_size": 65536}',
                                                     "llm_datadist_ffi.mock.NativePool": "1"}))
    d, keep = x.desc(1, [1, 65536])
    out = x.ffi.new("int64_t *")
    addrs = x.ffi.new("uint64_t[]", 1)
    assert x.lib.lldd_allocate_cache(engine, d, out, addrs, 1) == 0
    assert x.allocate(engine, 1, [1, 4096])[0] == S.LLM_OUT_OF_MEMORY
    assert x.deallocate(engine, out[0]) == 0
    assert x.allocate(engine, 1, [1, 4096])[0] == 0
    del keep


def test_keys_and_caches_under_concurrent_calls(x: Any) -> None:
    import threading
    engine = x.engine(1, xs.v2_options(pool=True))
    errors: list[str] = []

    def work(t: int) -> None:
        for i in range(40):
            key = x.req(1000 * t + i)
            status, cache_id, _ = x.allocate(engine, 2, [2, 64], keys=[key, x.prefix(1000 * t + i)])
            if status != 0 or x.deallocate(engine, cache_id) != 0 or x.remove_key(engine, key) != 0 \
                    or x.remove_key(engine, x.prefix(1000 * t + i)) != 0:
                errors.append(f"thread {t} step {i}: {x.last_error()}")
                return

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    # every cache was freed with its last key: the whole pool is free again
    assert x.allocate(engine, 1, [1, 16777216])[0] == 0


@pytest.mark.rules("PR-27", "E-5", "E-26")
def test_the_extension_abi_takes_listen_port_0_for_both_backends_and_refuses_65536(x: Any) -> None:
    before = listening_ports()
    default = x.create(1)
    assert x.init(default, xs.v2_options(port=0, role="Prompt")) == S.LLM_SUCCESS, x.last_error()
    assert len(listening_ports() - before) == 1                  # an ephemeral listener
    now = listening_ports()
    client = x.create(2)
    assert x.init(client, xs.v2_options(port=0, **{"llm.TransferBackend": "hixl"})) == S.LLM_SUCCESS, x.last_error()
    assert listening_ports() == now                             # HIXL with port 0: nothing listens
    refused = x.create(3)
    assert x.init(refused, xs.v2_options(port=65536)) == S.LLM_PARAM_INVALID
    assert "(PR-27)" in x.last_error()
