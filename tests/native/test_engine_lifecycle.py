"""Engine life cycle of the mock (docs/reference/semantics.md §12, docs/reference/cpp-api.md §6.2-6.6, PR-26, PR-27,
PR-37): creation, Initialize and its options, Finalize, destroy, SetRole, NULL
arguments and the control functions."""
from __future__ import annotations

import socket
import threading
import time
from typing import Any, Callable

import numpy as np
import pytest

from llm_datadist_ffi import LLMException
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import acl, lint, mock_control, native

import engine_support as sup


raw = sup.Raw()

Engines = Callable[..., native.LlmDataDist]
POOL = '{"memory_size": 65536, "page_shift": 10}'


@pytest.mark.rules("§1.2", "PR-9")
@pytest.mark.mock_only(reason="describes the mock backend's own ABI, capabilities and name")
def test_version_capabilities_and_backend_name_describe_the_mock() -> None:
    lib = raw.lib
    from llm_datadist_ffi._core._loader import const
    assert lib.lldd_abi_version() == const("LLDD_ABI_VERSION") == 1
    caps = lib.lldd_capabilities()
    assert caps == 0x01 | 0x02 | 0x04 | 0x08 | 0x10 | 0x20
    assert raw.ffi.string(lib.lldd_backend_name()) == b"mock"


@pytest.mark.rules("§1.2", "PR-10")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_live_engine_count_follows_create_and_destroy() -> None:
    before = mock_control.live_engines()
    a, b = native.LlmDataDist(1, 1), native.LlmDataDist(2, 2)
    assert mock_control.live_engines() == before + 2
    a.close()
    assert mock_control.live_engines() == before + 1
    b.close()
    assert mock_control.live_engines() == before


@pytest.mark.rules("§1.2", "§3.2", "§6.5", "§10.2", "§10.7", "§12.1", "cpp-api §6.2", "cpp-api §6.6", "cpp-api §6.7",
                   "cpp-api §6.10", "cpp-api §6.13", "PR-9")
def test_calls_before_initialize_fail_except_the_pool_calls(engines: Engines) -> None:
    e = engines(1)
    assert sup.status_of(e.register_kv_cache, sup.desc(1, [1, 8]), [64]) == S.LLM_FAILED
    assert sup.status_of(e.unregister_kv_cache, 1) == S.LLM_FAILED
    assert sup.status_of(e.set_role, native.LlmRole.DECODER) == S.LLM_FAILED
    assert e.link_llm_clusters([sup.cluster(2, 1)])[0] == S.LLM_FAILED
    assert e.unlink_llm_clusters([sup.cluster(2, 1)])[0] == S.LLM_FAILED
    assert raw.pull_cache(e, 2, 1, 1) == S.LLM_FAILED
    assert raw.pull_blocks(e, 2, 1, 1, [0], [0]) == S.LLM_FAILED
    assert raw.push_cache(e, 2, 1, 1, 2) == S.LLM_FAILED
    assert raw.push_blocks(e, 2, 1, 1, 2, [0], [0]) == S.LLM_FAILED
    assert "not initialized" in raw.last_error()
    # PR-9: without a pool the four pool calls answer FEATURE_NOT_ENABLED in every state
    assert sup.status_of(e.allocate_cache, sup.desc(1, [1, 8])) == S.LLM_FEATURE_NOT_ENABLED
    assert sup.status_of(e.deallocate_cache, 1) == S.LLM_FEATURE_NOT_ENABLED
    assert sup.status_of(e.copy_kv_cache, native.Cache(1), native.Cache(2)) == S.LLM_FEATURE_NOT_ENABLED
    assert sup.status_of(e.copy_kv_blocks, native.Cache(1), native.Cache(2), [0], [[1]]) == S.LLM_FEATURE_NOT_ENABLED


@pytest.mark.rules("§1.2", "PR-9")
def test_pool_calls_need_a_configured_pool(engines: Engines) -> None:
    e = engines(1, options={})
    assert sup.status_of(e.allocate_cache, sup.desc(1, [1, 8])) == S.LLM_FEATURE_NOT_ENABLED
    assert sup.status_of(e.deallocate_cache, 5) == S.LLM_FEATURE_NOT_ENABLED
    assert "PR-9" in raw.last_error()


@pytest.mark.rules("§6.5", "§12.1", "cpp-api §6.2")
def test_initialize_again_succeeds_and_ignores_the_new_options(engines: Engines) -> None:
    e = engines(1, options={})
    assert raw.initialize(e, [("llm.DeviceId", "not a device")]) == S.LLM_SUCCESS
    assert sup.register(e, [np.zeros((2, 4), np.uint8)]) == 1


@pytest.mark.rules("§11", "cpp-api §6.2", "cpp-api §6.3")
@pytest.mark.parametrize("role", [0, 4, -1])
def test_initialize_rejects_an_invalid_role(role: int) -> None:
    with native.LlmDataDist(1, role) as e:
        assert raw.initialize(e, [("llm.DeviceId", "0")]) == S.LLM_PARAM_INVALID
        assert "role" in raw.last_error()


@pytest.mark.rules("E-3", "cpp-api §6.4")
@pytest.mark.parametrize("value", [None, "", "x", "-1", "0;1", "1;", " 0", "2147483648", "0x1"])
def test_initialize_requires_exactly_one_device_id(value: str | None) -> None:
    with native.LlmDataDist(1, 1) as e:
        pairs = [] if value is None else [("llm.DeviceId", value)]
        assert raw.initialize(e, pairs) == S.LLM_PARAM_INVALID
        assert "llm.DeviceId" in raw.last_error()
        assert raw.initialize(e, [("llm.DeviceId", "0")]) == S.LLM_SUCCESS


@pytest.mark.rules("E-3", "§13", "cpp-api §6.4", "PR-27")
@pytest.mark.parametrize("value", ["127.0.0.1", "127.0.0.1:", "1.2.3:80", "localhost:80", "::1:80", "[::1]80",
                                   "127.0.0.1:65536", "127.0.0.1:4294967296", "127.0.0.1:8a", ""])
def test_initialize_rejects_listen_addresses_that_do_not_parse(value: str) -> None:
    with native.LlmDataDist(1, 1) as e:
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.ListenIpInfo", value)]) == S.LLM_PARAM_INVALID
        assert "llm.ListenIpInfo" in raw.last_error()


@pytest.mark.rules("E-3", "cpp-api §6.4")
def test_initialize_listens_on_an_ipv6_address(engines: Engines) -> None:
    port = sup.free_port()
    e = engines(1)
    assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.ListenIpInfo", f"[::1]:{port}")]) == S.LLM_SUCCESS
    with socket.create_connection(("::1", port), timeout=2):
        pass


@pytest.mark.rules("§13", "PR-26")
@pytest.mark.parametrize("value,status", [("2147483648", S.LLM_PARAM_INVALID),
                                          ("", S.LLM_PARAM_INVALID), ("10ms", S.LLM_PARAM_INVALID),
                                          ("-5", S.LLM_PARAM_INVALID), ("1", S.LLM_SUCCESS),
                                          ("2147483647", S.LLM_SUCCESS)])
def test_initialize_takes_a_sync_wait_time_of_0_to_2_31_minus_1_ms(value: str, status: int) -> None:
    with native.LlmDataDist(1, 1) as e:
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.SyncKvCacheWaitTime", value)]) == status


@pytest.mark.rules("§13", "PR-26")
@pytest.mark.mock_only(reason="reads the mock's lint record")
def test_the_engine_accepts_a_sync_wait_time_of_0_with_a_lint(monkeypatch: pytest.MonkeyPatch) -> None:
    # PR-26: the vendor accepts any digit string; 0 is a zero transfer timeout
    raw.take_lints()
    with native.LlmDataDist(1, 1) as e:
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.SyncKvCacheWaitTime", "0")]) == S.LLM_SUCCESS
    [(rule, text)] = raw.take_lints()
    assert rule == 26 and "llm.SyncKvCacheWaitTime is 0 ms" in text
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    with native.LlmDataDist(1, 1) as e:
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.SyncKvCacheWaitTime", "0")]) == S.LLM_PARAM_INVALID
        assert "(PR-26)" in raw.last_error()
    assert raw.take_lints() == []


@pytest.mark.rules("§13", "PR-26")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_the_native_layer_warns_once_for_a_sync_wait_time_of_0(engines: Engines,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    e = engines(1)
    with pytest.warns(lint.ZeroWaitTimeWarning, match="PR-26") as record:
        e.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_SYNC_CACHE_WAIT_TIME: "0"})
    assert len(record) == 1                   # the engine's own record of it is not reported again
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    with mock_control.fault("lldd_initialize", S.LLM_WAIT_PROCESS_TIMEOUT):
        f = engines(2)
        with pytest.raises(LLMException) as info:     # refused in Python: the fault stays armed
            f.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_SYNC_CACHE_WAIT_TIME: "0"})
        assert info.value.status_code == S.LLM_PARAM_INVALID and "PR-26" in str(info.value)
        assert sup.status_of(f.initialize, {native.OPTION_DEVICE_ID: "0"}) == S.LLM_WAIT_PROCESS_TIMEOUT


@pytest.mark.rules("§13", "PR-26", "PR-27")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_the_native_layer_checks_pr_26_and_pr_27_before_the_backend(engines: Engines) -> None:
    # [all] rules: decided in Python, so an injected fault of the C function stays armed
    e = engines(1)
    with mock_control.fault("lldd_initialize", S.LLM_WAIT_PROCESS_TIMEOUT):
        for option, value, rule in [(native.OPTION_SYNC_CACHE_WAIT_TIME, "2147483648", "PR-26"),
                                    (native.OPTION_LISTEN_IP_INFO, "127.0.0.1:65536", "PR-27")]:
            with pytest.raises(LLMException) as info:
                e.initialize({native.OPTION_DEVICE_ID: "0", option: value})
            assert info.value.status_code == S.LLM_PARAM_INVALID and f"({rule})" in str(info.value)
        assert sup.status_of(e.initialize, {native.OPTION_DEVICE_ID: "0"}) == S.LLM_WAIT_PROCESS_TIMEOUT
    e.initialize({native.OPTION_DEVICE_ID: "0"})
    with mock_control.fault("lldd_set_role", S.LLM_WAIT_PROCESS_TIMEOUT):
        with pytest.raises(LLMException) as info:
            e.set_role(native.LlmRole.DECODER, {native.OPTION_LISTEN_IP_INFO: "127.0.0.1:70000"})
        assert info.value.status_code == S.LLM_PARAM_INVALID and "(PR-27)" in str(info.value)
        assert sup.status_of(e.set_role, native.LlmRole.DECODER) == S.LLM_WAIT_PROCESS_TIMEOUT
    assert e.role == native.LlmRole.PROMPT


@pytest.mark.rules("§15", "cpp-api §6.4")
@pytest.mark.parametrize("key,value,status", [
    ("llm.TransferBackend", "hixl", S.LLM_PARAM_INVALID),          # E-5: no llm.ListenIpInfo
    ("llm.TransferBackend", "hccl", S.LLM_PARAM_INVALID),
    ("llm.TransferBackend", "", S.LLM_PARAM_INVALID),
    ("llm.LinkRetryCount", "1", S.LLM_SUCCESS),
    ("llm.LinkRetryCount", "100", S.LLM_SUCCESS),
    ("llm.LinkRetryCount", "0", S.LLM_PARAM_INVALID),
    ("llm.LinkRetryCount", "101", S.LLM_PARAM_INVALID),
    ("llm.LinkRetryCount", "three", S.LLM_PARAM_INVALID),
    ("llm.RdmaTrafficClass", "132", S.LLM_SUCCESS),
    ("llm.RdmaTrafficClass", "high", S.LLM_PARAM_INVALID),
    ("llm.RdmaServiceLevel", "4", S.LLM_SUCCESS),
    ("llm.RdmaServiceLevel", "-4", S.LLM_PARAM_INVALID),
    ("llm.SomethingElse", "anything", S.LLM_SUCCESS),
    ("llm.LocalCommRes", "not json at all", S.LLM_SUCCESS),   # checked by the first link
])
@pytest.mark.rules("E-5", "E-3")
def test_initialize_checks_each_known_option(key: str, value: str, status: int) -> None:
    with native.LlmDataDist(1, 1) as e:
        assert raw.initialize(e, [("llm.DeviceId", "0"), (key, value)]) == status


@pytest.mark.rules("§3.3", "§15", "PR-34")
@pytest.mark.parametrize("value", [
    "", "{", "[]", '"65536"', '{"page_shift": 16}', '{"memory_size": "65536"}', '{"memory_size": -1}',
    '{"memory_size": 65536.0}', '{"memory_size": 0}', '{"memory_size": 65536, "page_shift": 9}',
    '{"memory_size": 65536, "page_shift": 31}', '{"memory_size": 65536, "page_shift": "16"}',
    '{"memory_size": 281474976645120}', '{"memory_size": 65536} x',
])
@pytest.mark.parametrize("key", ["llm.MemPoolConfig", "llm.HostMemPoolConfig"])
@pytest.mark.rules("E-4")
def test_initialize_rejects_malformed_pool_configurations(key: str, value: str) -> None:
    with native.LlmDataDist(1, 1) as e:
        assert raw.initialize(e, [("llm.DeviceId", "0"), (key, value)]) == S.LLM_PARAM_INVALID
        assert key in raw.last_error()


@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
@pytest.mark.rules("E-4")
def test_a_repeated_pool_json_key_keeps_its_last_value(engines: Engines) -> None:
    # decision E-4 (docs/semantics.md): the last "memory_size" counts
    with native.LlmDataDist(1, 1) as e:
        bad_last = '{"memory_size": 65536, "memory_size": 0}'
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.MemPoolConfig", bad_last)]) == S.LLM_PARAM_INVALID
        assert "greater than 0" in raw.last_error()
    e = engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: '{"memory_size": 0, "memory_size": 2048, '
                                                           '"page_shift": 10}'})
    e.allocate_cache(sup.desc(1, [1, 2048]))                       # both pages
    assert sup.status_of(e.allocate_cache, sup.desc(1, [1, 1])) == S.LLM_OUT_OF_MEMORY


@pytest.mark.rules("§3.3", "§15", "PR-34")
def test_initialize_accepts_a_pool_just_below_the_page_limit() -> None:
    # memory_size >> page_shift must stay below 2^32 - 1: with page_shift 30, 2^32 - 2 pages
    # would be 4 EiB, so check the boundary arithmetic with the smallest pages instead
    with native.LlmDataDist(1, 1) as e:
        ok = '{"memory_size": %d, "page_shift": 10}' % ((2**32 - 2) << 10)
        too_big = '{"memory_size": %d, "page_shift": 10}' % ((2**32 - 1) << 10)
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.MemPoolConfig", too_big)]) == S.LLM_PARAM_INVALID
        # 4 TiB is more than the mock device holds: accepted by the parser, then out of memory
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.MemPoolConfig", ok)]) == S.LLM_OUT_OF_MEMORY


@pytest.mark.rules("cpp-api §6.4")
def test_repeated_option_keys_keep_the_last_value() -> None:
    with native.LlmDataDist(1, 1) as e:
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.DeviceId", "bad")]) == S.LLM_PARAM_INVALID
        assert raw.initialize(e, [("llm.DeviceId", "bad"), ("llm.DeviceId", "0")]) == S.LLM_SUCCESS


# each step: the options (with a valid llm.DeviceId unless given) and the option the
# failure must name: the option checked first (docs/reference/cpp-api.md §6.4 steps 2-6)
INIT_ORDER = [
    ([("llm.ListenIpInfo", "x")], "role"),                                       # role 4 (below)
    ([("llm.DeviceId", ""), ("llm.ListenIpInfo", "x")], "llm.DeviceId"),
    ([("llm.ListenIpInfo", "x"), ("llm.TransferBackend", "hccl")], "llm.ListenIpInfo"),
    ([("llm.TransferBackend", "hccl"), ("llm.SyncKvCacheWaitTime", "x")], "llm.TransferBackend"),
    ([("llm.SyncKvCacheWaitTime", "x"), ("llm.MemPoolConfig", "{")], "llm.SyncKvCacheWaitTime"),
    ([("llm.MemPoolConfig", "{"), ("llm.HostMemPoolConfig", "{")], "llm.MemPoolConfig"),
    ([("llm.HostMemPoolConfig", "{"), ("llm.LinkRetryCount", "0")], "llm.HostMemPoolConfig"),
    ([("llm.LinkRetryCount", "0"), ("llm.RdmaTrafficClass", "x")], "llm.LinkRetryCount"),
]


@pytest.mark.rules("cpp-api §6.4")
@pytest.mark.parametrize("pairs,first", INIT_ORDER, ids=[c[1] for c in INIT_ORDER])
def test_initialize_checks_its_options_in_order(pairs: list[tuple[str, str]], first: str) -> None:
    role = 4 if first == "role" else 1
    with native.LlmDataDist(1, role) as e:
        device = [] if any(k == "llm.DeviceId" for k, _ in pairs) else [("llm.DeviceId", "0")]
        assert raw.initialize(e, device + pairs) == S.LLM_PARAM_INVALID
        message = raw.last_error()
        assert first in message
        if first == "role":
            assert "llm." not in message
        assert sup.status_of(e.register_kv_cache, sup.desc(1, [1]), [64]) == S.LLM_FAILED     # not initialised


@pytest.mark.rules("§6.5", "§12.1", "cpp-api §6.2", "cpp-api §6.4")
def test_initialize_with_an_unknown_device_fails_and_may_be_retried() -> None:
    with native.LlmDataDist(1, 1) as e:
        assert raw.initialize(e, [("llm.DeviceId", "4096")]) == S.LLM_FAILED
        assert "aclrtSetDevice(4096)" in raw.last_error() and "does not exist" in raw.last_error()
        assert raw.initialize(e, [("llm.DeviceId", "3")]) == S.LLM_SUCCESS


@pytest.mark.rules("§6.5", "§12.1", "cpp-api §6.2", "cpp-api §6.4")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_initialize_fails_when_the_listen_port_is_taken_and_undoes_everything() -> None:
    allocations = mock_control.live_allocations()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with native.LlmDataDist(1, 1) as e:
            pairs = [("llm.DeviceId", "0"), ("llm.ListenIpInfo", f"127.0.0.1:{port}"), ("llm.MemPoolConfig", POOL)]
            assert raw.initialize(e, pairs) == S.LLM_FAILED
            assert "cannot listen" in raw.last_error()
            assert mock_control.live_allocations() == allocations        # the pool went again
            assert sup.status_of(e.allocate_cache, sup.desc(1, [1, 8])) == S.LLM_FEATURE_NOT_ENABLED
            free = sup.free_port()
            assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.ListenIpInfo", f"127.0.0.1:{free}")]) == 0


@pytest.mark.rules("§3.3", "§15", "cpp-api §6.4", "PR-34")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_a_pool_larger_than_the_device_is_out_of_memory() -> None:
    allocations = mock_control.live_allocations()
    with native.LlmDataDist(1, 1) as e:
        huge = '{"memory_size": %d, "page_shift": 30}' % (1 << 47)
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.MemPoolConfig", huge)]) == S.LLM_OUT_OF_MEMORY
        assert mock_control.live_allocations() == allocations
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.MemPoolConfig", POOL)]) == S.LLM_SUCCESS
        assert mock_control.live_allocations() == allocations + 1       # the device pool
    assert mock_control.live_allocations() == allocations


@pytest.mark.rules("§3.1", "§3.5", "§6.5", "§12.1", "cpp-api §6.2", "cpp-api §6.13")
@pytest.mark.mock_only(reason="pool-backed AllocateCache/DeallocateCache/CopyKv* (PR-9): the vendor's C++ class answers FEATURE_NOT_ENABLED")
def test_finalize_forgets_everything_and_ids_restart_at_one(engines: Engines) -> None:
    e = engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL})
    arrays = [np.zeros((2, 4), np.uint8)]
    assert sup.register(e, arrays) == 1
    assert e.allocate_cache(sup.desc(1, [2, 4])).cache_id == 2
    e.finalize()
    assert sup.status_of(e.unregister_kv_cache, 1) == S.LLM_FAILED
    e.finalize()                                         # twice: a no-op
    e.initialize({native.OPTION_DEVICE_ID: "0"})
    assert sup.register(e, arrays) == 1
    assert sup.status_of(e.allocate_cache, sup.desc(1, [2, 4])) == S.LLM_FEATURE_NOT_ENABLED


@pytest.mark.rules("§6.5", "§12.1", "cpp-api §6.2")
def test_finalize_before_initialize_is_a_no_op() -> None:
    with native.LlmDataDist(1, 1) as e:
        e.finalize()
        e.initialize({native.OPTION_DEVICE_ID: "0"})
        assert sup.register(e, [np.zeros((1, 1), np.uint8)]) == 1


@pytest.mark.rules("§6.5", "§12.1", "cpp-api §6.2")
def test_finalize_resets_the_device_it_set() -> None:
    # device 7 is used by no other test of this file; the engine holds the only reference
    result: dict[str, Any] = {}

    def run() -> None:
        with native.LlmDataDist(1, 1) as e:
            e.initialize({native.OPTION_DEVICE_ID: "7"})
            result["current"] = acl.aclrtGetDevice()
            e.finalize()
            try:
                acl.aclrtGetDevice()
                result["after"] = "still current"
            except acl.AclError as exc:
                result["after"] = exc.code
    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    assert result == {"current": 7, "after": 107002}     # ACL_ERROR_RT_CONTEXT_NULL


@pytest.mark.rules("§12.3", "PR-37")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_finalize_waits_for_running_calls_and_calls_after_it_began_fail(engines: Engines) -> None:
    server = engines(1, listen=True)
    client = engines(2, options={native.OPTION_SYNC_CACHE_WAIT_TIME: "5000"})
    src = sup.random_arrays(2, (2, 8), 1)
    dst = [np.zeros((2, 8), np.uint8) for _ in range(2)]
    sid, did = sup.register(server, src), sup.register(client, dst)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    mock_control.set_serve_delay(server, 500)
    results: dict[str, Any] = {}
    started = threading.Event()

    def pull() -> None:
        results["pull_start"] = time.monotonic()
        started.set()
        results["pull"] = sup.status_of(client.pull_kv_cache, native.CacheIndex(1, sid), native.Cache(did))
        results["pull_done"] = time.monotonic()

    puller = threading.Thread(target=pull)
    puller.start()
    started.wait()
    time.sleep(0.1)                                      # the pull is waiting for the slow peer
    finalizer = threading.Thread(target=client.finalize)
    finalizer.start()
    deadline = time.monotonic() + 5
    # an unknown id unregisters successfully until Finalize has begun
    while raw.lib.lldd_unregister_kv_cache(client._engine(), 999) == S.LLM_SUCCESS and time.monotonic() < deadline:
        time.sleep(0.002)
    results["late"] = raw.pull_cache(client, 1, sid, did)          # starts after Finalize began
    late_done = time.monotonic()
    finalizer.join()
    finalize_done = time.monotonic()
    puller.join()
    assert results["pull"] == S.LLM_SUCCESS
    assert all((d[0] == s[0]).all() for d, s in zip(dst, src))
    assert results["late"] == S.LLM_FAILED
    assert "Finalize is running" in raw.last_error()
    assert late_done < results["pull_done"]
    # Finalize waited for the pull, which the peer holds for its 500 ms serve delay (the two
    # threads' own timestamps after return are not ordered: either may be scheduled first)
    assert finalize_done - results["pull_start"] >= 0.45


@pytest.mark.rules("E-2", "§12.3", "PR-37")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_pool_calls_fail_while_finalize_runs(engines: Engines) -> None:
    # decision E-2: FAILED once Finalize has begun (PR-37), FEATURE_NOT_ENABLED after it
    server = engines(1, listen=True)
    client = engines(2, options={native.OPTION_SYNC_CACHE_WAIT_TIME: "5000", native.OPTION_MOCK_NATIVE_POOL: "1",
                                 native.OPTION_MEM_POOL_CONFIG: POOL})
    src = sup.random_arrays(2, (2, 8), 1)
    dst = [np.zeros((2, 8), np.uint8) for _ in range(2)]
    sid, did = sup.register(server, src), sup.register(client, dst)
    cache = client.allocate_cache(sup.desc(2, [2, 8]))
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    mock_control.set_serve_delay(server, 500)
    started = threading.Event()
    results: dict[str, int] = {}

    def pull() -> None:
        started.set()
        results["pull"] = sup.status_of(client.pull_kv_cache, native.CacheIndex(1, sid), native.Cache(did))

    puller = threading.Thread(target=pull)
    puller.start()
    started.wait()
    time.sleep(0.1)
    finalizer = threading.Thread(target=client.finalize)
    finalizer.start()
    deadline = time.monotonic() + 5
    while raw.lib.lldd_unregister_kv_cache(client._engine(), 999) == S.LLM_SUCCESS and time.monotonic() < deadline:
        time.sleep(0.002)
    during = [sup.status_of(client.allocate_cache, sup.desc(1, [2, 8])),
              sup.status_of(client.deallocate_cache, cache.cache_id),
              sup.status_of(client.copy_kv_cache, native.Cache(cache.cache_id), native.Cache(did)),
              sup.status_of(client.copy_kv_blocks, native.Cache(cache.cache_id), native.Cache(did), [0], [[1]])]
    message = raw.last_error()
    finalizer.join()
    puller.join()
    assert results["pull"] == S.LLM_SUCCESS
    assert during == [S.LLM_FAILED] * 4
    assert "Finalize is running" in message
    assert sup.status_of(client.allocate_cache, sup.desc(1, [2, 8])) == S.LLM_FEATURE_NOT_ENABLED


@pytest.mark.rules("§14")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_the_last_error_message_belongs_to_the_calling_thread(engines: Engines) -> None:
    idle = engines(1)                                   # not initialised
    first, second = threading.Barrier(2), threading.Barrier(2)
    seen: dict[str, str] = {}

    def a() -> None:
        raw.lib.lldd_unregister_kv_cache(idle._engine(), 1)          # "not initialized"
        first.wait()
        second.wait()                                                # b has failed meanwhile
        seen["a"] = raw.last_error()

    def b() -> None:
        first.wait()
        raw.lib.lldd_mock_set_serve_delay(raw.ffi.NULL, 1)           # "must not be NULL"
        second.wait()
        seen["b"] = raw.last_error()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["a"] == "lldd_unregister_kv_cache: LlmDataDist is not initialized"
    assert seen["b"] == "lldd_mock_set_serve_delay: engine must not be NULL"


@pytest.mark.rules("§6.5", "§12.1", "cpp-api §6.2")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_destroy_finalizes_an_initialised_engine() -> None:
    before = mock_control.live_allocations()
    e = native.LlmDataDist(1, 1)
    e.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL})
    e.allocate_cache(sup.desc(2, [4, 4]))
    assert mock_control.live_allocations() == before + 1
    e.close()
    assert mock_control.live_allocations() == before


@pytest.mark.rules("§1.2", "§3.1", "PR-10")
def test_engines_of_one_process_are_independent(engines: Engines) -> None:
    a, b = engines(1, options={}), engines(2, options={}, device_id=1)
    arrays = [np.zeros((1, 4), np.uint8)]
    assert sup.register(a, arrays) == 1
    assert sup.register(b, arrays) == 1
    b.finalize()
    assert sup.register(a, arrays) == 2


# ---- SetRole ----------------------------------------------------------------------------------

@pytest.mark.rules("§10.7", "§13", "cpp-api §6.6", "PR-27")
def test_set_role_checks_role_and_listen_address(engines: Engines) -> None:
    e = engines(1, options={})
    assert raw.set_role(e, 4, []) == S.LLM_PARAM_INVALID
    assert raw.set_role(e, 0, []) == S.LLM_PARAM_INVALID
    assert raw.set_role(e, 2, [("llm.ListenIpInfo", "127.0.0.1:65536")]) == S.LLM_PARAM_INVALID
    assert raw.set_role(e, 2, [("llm.ListenIpInfo", "nowhere")]) == S.LLM_PARAM_INVALID
    e.set_role(native.LlmRole.MIX)
    assert e.role == native.LlmRole.MIX


@pytest.mark.rules("§10.7", "cpp-api §6.6")
def test_set_role_is_refused_while_a_link_exists(engines: Engines) -> None:
    server = engines(1, listen=True)
    client = engines(2, options={})
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    assert sup.status_of(client.set_role, native.LlmRole.PROMPT) == S.LLM_EXIST_LINK
    assert sup.status_of(server.set_role, native.LlmRole.DECODER) == S.LLM_EXIST_LINK
    assert client.unlink_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    server.set_role(native.LlmRole.DECODER, {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{server.listen_port}"})
    client.set_role(native.LlmRole.PROMPT)


@pytest.mark.rules("E-5")
def test_hixl_needs_a_listen_address(engines: Engines) -> None:
    """The vendor's HIXL engine is named by its listen address: without llm.ListenIpInfo
    its initialisation is PARAM_INVALID (E-5)."""
    with native.LlmDataDist(1, 1) as e:
        assert raw.initialize(e, [("llm.DeviceId", "0"), ("llm.TransferBackend", "hixl")]) == S.LLM_PARAM_INVALID
        assert "llm.ListenIpInfo" in raw.last_error()
    engines(2, options={native.OPTION_TRANSFER_BACKEND: "hixl"}, listen=True)


@pytest.mark.rules("E-5")
def test_set_role_with_hixl_checks_no_links(engines: Engines) -> None:
    """HIXL's role switch only refuses a changed listen address (E-5), links or not."""
    server = engines(1, options={native.OPTION_TRANSFER_BACKEND: "hixl"}, listen=True)
    client = engines(2, options={native.OPTION_TRANSFER_BACKEND: "hixl"}, listen=True, device_id=1)
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    assert raw.set_role(client, 2, [("llm.ListenIpInfo", f"127.0.0.1:{sup.free_port()}")]) == \
        S.LLM_FEATURE_NOT_ENABLED
    client.set_role(native.LlmRole.DECODER, {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{client.listen_port}"})
    assert client.role == native.LlmRole.DECODER


@pytest.mark.rules("§10.7", "cpp-api §6.6")
def test_set_role_checks_role_and_address_before_links_and_links_before_the_listener(engines: Engines) -> None:
    # docs/reference/cpp-api.md §6.6: role, listen address, links (EXIST_LINK), then the listener
    server = engines(1, listen=True)
    client = engines(2, options={})
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[0] == S.LLM_SUCCESS
    assert raw.set_role(server, 4, [("llm.ListenIpInfo", "nowhere")]) == S.LLM_PARAM_INVALID
    assert "role 4" in raw.last_error()
    assert raw.set_role(server, 2, [("llm.ListenIpInfo", "nowhere")]) == S.LLM_PARAM_INVALID
    assert "llm.ListenIpInfo" in raw.last_error()
    assert raw.set_role(server, 2, [("llm.ListenIpInfo", f"127.0.0.1:{sup.free_port()}")]) == S.LLM_EXIST_LINK
    assert raw.set_role(server, 2, []) == S.LLM_EXIST_LINK
    assert server.role == native.LlmRole.PROMPT


@pytest.mark.rules("§10.7", "cpp-api §6.6")
def test_set_role_starts_moves_and_stops_the_listener(engines: Engines) -> None:
    server = engines(1, options={})
    client = engines(2, options={})
    port = sup.free_port()
    assert client.link_llm_clusters([sup.cluster(1, port)])[1] == [S.LLM_LINK_FAILED]
    server.set_role(native.LlmRole.PROMPT, {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})
    assert client.link_llm_clusters([sup.cluster(1, port)])[1] == [S.LLM_SUCCESS]
    assert client.unlink_llm_clusters([sup.cluster(1, port)])[1] == [S.LLM_SUCCESS]
    other = sup.free_port()
    server.set_role(native.LlmRole.PROMPT, {native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{other}"})
    assert client.link_llm_clusters([sup.cluster(1, port)])[1] == [S.LLM_LINK_FAILED]
    assert client.link_llm_clusters([sup.cluster(1, other)])[1] == [S.LLM_SUCCESS]
    assert client.unlink_llm_clusters([sup.cluster(1, other)], force_flag=True)[1] == [S.LLM_SUCCESS]
    # the server still holds its side: drop it, then stop listening
    assert server.unlink_llm_clusters([sup.cluster(2, 1)], force_flag=True)[1] == [S.LLM_SUCCESS]
    server.set_role(native.LlmRole.DECODER)
    assert client.link_llm_clusters([sup.cluster(1, other)])[1] == [S.LLM_LINK_FAILED]


@pytest.mark.rules("§10.7", "cpp-api §6.6")
def test_set_role_on_the_same_port_keeps_the_listener(engines: Engines) -> None:
    server = engines(1, listen=True)
    client = engines(2, options={})
    server.set_role(native.LlmRole.DECODER, {native.OPTION_LISTEN_IP_INFO: f"0.0.0.0:{server.listen_port}"})
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[1] == [S.LLM_SUCCESS]


@pytest.mark.rules("E-6", "§10.7", "cpp-api §6.6")
def test_set_role_keeps_the_old_listener_when_the_new_port_is_taken(engines: Engines) -> None:
    server = engines(1, listen=True)
    client = engines(2, options={})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        status = raw.set_role(server, 2, [("llm.ListenIpInfo", f"127.0.0.1:{busy}")])
        assert status == S.LLM_FAILED
    assert server.role == native.LlmRole.PROMPT
    assert client.link_llm_clusters([sup.cluster(1, server.listen_port)])[1] == [S.LLM_SUCCESS]


@pytest.mark.rules("E-5", "§10.7", "cpp-api §6.6")
def test_set_role_cannot_change_the_listen_address_with_hixl(engines: Engines) -> None:
    server = engines(1, options={native.OPTION_TRANSFER_BACKEND: "hixl"}, listen=True)
    port = server.listen_port
    assert raw.set_role(server, 2, [("llm.ListenIpInfo", f"127.0.0.1:{sup.free_port()}")]) == \
        S.LLM_FEATURE_NOT_ENABLED
    assert raw.set_role(server, 2, []) == S.LLM_FEATURE_NOT_ENABLED
    assert raw.set_role(server, 2, [("llm.ListenIpInfo", f"127.0.0.1:{port}")]) == S.LLM_SUCCESS


# ---- NULL arguments and injected faults -------------------------------------------------------

@pytest.mark.rules("E-1", "§3.6", "cpp-api §6.2")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_null_engines_and_pointers_are_param_invalid(engines: Engines) -> None:
    lib, ffi, NULL = raw.lib, raw.ffi, raw.ffi.NULL
    P = S.LLM_PARAM_INVALID
    e = engines(1, options={native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL})._engine()
    cache, index, shape = raw.cache(1), raw.index(2, 1), ffi.new("int64_t[]", [1, 4])
    d = ffi.new("lldd_cache_desc *")
    d.placement, d.num_tensors, d.data_type, d.shape, d.shape_len = 1, 1, 4, shape, 2
    rets, num = ffi.new("lldd_status[]", 1), ffi.new("size_t *")
    cid, addrs = ffi.new("int64_t *"), ffi.new("uint64_t[]", 1)
    assert lib.lldd_create(1, 1, NULL) == P
    assert lib.lldd_initialize(NULL, NULL, 0) == P
    assert lib.lldd_initialize(e, NULL, 1) == P
    assert lib.lldd_set_role(NULL, 1, NULL, 0) == P
    assert lib.lldd_set_role(e, 1, NULL, 2) == P
    assert lib.lldd_link_clusters(NULL, NULL, 0, 1000, rets, num) == P
    assert lib.lldd_link_clusters(e, NULL, 1, 1000, rets, num) == P
    assert lib.lldd_unlink_clusters(e, NULL, 1, 1000, 0, rets, num) == P
    assert lib.lldd_register_kv_cache(NULL, d, addrs, 1, cid) == P
    assert lib.lldd_register_kv_cache(e, NULL, addrs, 1, cid) == P
    assert lib.lldd_register_kv_cache(e, d, NULL, 1, cid) == P
    assert lib.lldd_register_kv_cache(e, d, addrs, 1, NULL) == P
    assert lib.lldd_unregister_kv_cache(NULL, 1) == P
    assert lib.lldd_allocate_cache(NULL, d, cid, addrs, 1) == P
    assert lib.lldd_allocate_cache(e, NULL, cid, addrs, 1) == P
    assert lib.lldd_allocate_cache(e, d, NULL, addrs, 1) == P
    assert lib.lldd_allocate_cache(e, d, cid, NULL, 1) == P
    assert lib.lldd_allocate_cache(e, d, cid, addrs, 0) == P          # no room for the address
    assert lib.lldd_deallocate_cache(NULL, 1) == P
    assert lib.lldd_pull_kv_cache(NULL, index, cache, 0, -1, NULL) == P
    assert lib.lldd_pull_kv_cache(e, NULL, cache, 0, -1, NULL) == P
    assert lib.lldd_pull_kv_cache(e, index, NULL, 0, -1, NULL) == P
    assert lib.lldd_pull_kv_blocks(e, index, cache, NULL, 3, addrs, 1, NULL) == P
    assert lib.lldd_pull_kv_blocks(e, index, cache, addrs, 1, NULL, 3, NULL) == P
    assert lib.lldd_push_kv_cache(e, NULL, index, 0, -1, NULL) == P
    assert lib.lldd_push_kv_cache(e, cache, NULL, 0, -1, NULL) == P
    assert lib.lldd_push_kv_blocks(e, cache, index, NULL, 2, addrs, 1, NULL) == P
    assert lib.lldd_copy_kv_cache(e, NULL, cache, 0, 0, 0, -1) == P
    assert lib.lldd_copy_kv_cache(e, cache, NULL, 0, 0, 0, -1) == P
    lens = ffi.new("size_t[]", [1])
    assert lib.lldd_copy_kv_blocks(e, cache, cache, addrs, 1, NULL, lens, 1) == P
    assert lib.lldd_copy_kv_blocks(e, cache, cache, addrs, 1, addrs, NULL, 1) == P
    assert lib.lldd_mock_set_serve_delay(NULL, 1) == P
    assert lib.lldd_mock_drop_connections(NULL) == P
    lib.lldd_finalize(NULL)
    lib.lldd_destroy(NULL)
    assert "NULL" in raw.last_error()


@pytest.mark.rules("E-1")
def test_link_with_null_rets_count_reports_nothing(engines: Engines) -> None:
    e = engines(1, options={})
    num = raw.ffi.new("size_t *", 99)
    assert raw.lib.lldd_link_clusters(e._engine(), raw.ffi.NULL, 0, 1000, raw.ffi.NULL, num) == S.LLM_PARAM_INVALID
    assert num[0] == 0


@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_an_injected_fault_is_returned_before_any_check(engines: Engines) -> None:
    e = engines(1, options={})
    with mock_control.fault("lldd_pull_kv_cache", S.LLM_TIMEOUT):
        assert raw.pull_cache(e, 1, 1, 1) == S.LLM_TIMEOUT      # own cluster, unknown cache: not reached
        assert "injected" in raw.last_error()
        assert raw.pull_cache(e, 1, 1, 1) == S.LLM_PARAM_INVALID
    with mock_control.fault("lldd_register_kv_cache", S.LLM_OUT_OF_MEMORY, count=1, skip=1):
        assert sup.register(e, [np.zeros((1, 1), np.uint8)]) == 1
        assert sup.status_of(sup.register, e, [np.zeros((1, 1), np.uint8)]) == S.LLM_OUT_OF_MEMORY
        assert sup.register(e, [np.zeros((1, 1), np.uint8)]) == 2


@pytest.mark.rules("cpp-api §6.2", "cpp-api §6.4")
@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
def test_an_acl_fault_in_initialize_is_llm_failed() -> None:
    with native.LlmDataDist(1, 1) as e, mock_control.fault("aclrtSetDevice", 107001):
        assert raw.initialize(e, [("llm.DeviceId", "0")]) == S.LLM_FAILED
        assert "aclrtSetDevice" in raw.last_error()


@pytest.mark.mock_only(reason="uses the mock's control interface (fault injection, serve delay, dropped connections, accounting)")
@pytest.mark.rules("E-15")
def test_drop_connections_needs_an_initialised_engine() -> None:
    with native.LlmDataDist(1, 1) as e:
        assert raw.lib.lldd_mock_drop_connections(e._engine()) == S.LLM_FAILED
        assert raw.lib.lldd_mock_set_serve_delay(e._engine(), 5) == S.LLM_SUCCESS
