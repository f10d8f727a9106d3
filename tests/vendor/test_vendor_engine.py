"""LLMDataDist (docs/reference/python-api.md §10): constructor, init in both generations, finalize,
re-init, one engine per process, the manager properties, one-sided links, rank-table
links, switch_role and check_link_status.

Each row of the spec has a test; a call that breaks two rules must raise the earlier.
Engines of other processes (``vendor_peer.py``) are the link peers: the vendor's API
allows one initialised engine per process.
"""
from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from llm_datadist_ffi import LLMException, LLMStatusCode, lint
from llm_datadist_ffi._core import _capi
from llm_datadist_ffi._core._capi import ffi
from llm_datadist_ffi._vendor.v2 import llm_datadist as llm_datadist_module
from llm_datadist_ffi.vendor import (
    BlocksCacheKey, CacheDesc, CacheKeyByIdAndIndex, DataType, LLMClusterInfo, LLMConfig, LLMDataDist, LLMRole, RegisterMemStatus,
)
from llm_datadist_ffi._vendor.v2.cache_manager import CacheManager
from llm_datadist_ffi._vendor.v1.cache_manager import KvCacheManager

import vendor_support as vs

# The vendor-compatible API runs on the extension functions (include/lldd/ext.h): keys, cache
# kinds and modes that the public C++ class cannot express, so the ascend shim answers
# LLM_FEATURE_NOT_ENABLED for them (docs/ascend.md).
pytestmark = [pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions"),
              pytest.mark.usefixtures("no_engine_left")]


raises, lx = vs.raises, vs.lx
S = LLMStatusCode
U64_MAX = 2**64 - 1
NOT_INITIALIZED = "llm datadist is not initialized"


@pytest.fixture
def v2() -> Iterator[LLMDataDist]:
    engine = LLMDataDist(LLMRole.DECODER, 2)
    engine.init(vs.v2_options())
    yield engine
    engine.finalize()


@pytest.fixture
def v1_decoder() -> Iterator[LLMDataDist]:
    engine = LLMDataDist(LLMRole.DECODER, 2)
    engine.init(vs.v1_options(**{"llm.EnableSwitchRole": "1"}))
    yield engine
    engine.finalize()


# ---------------------------------------------------------------------------
# python-api.md §10.1 constructor and members before init
# ---------------------------------------------------------------------------


def test_constructor_takes_a_role_and_a_uint64_cluster_id() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, U64_MAX)
    assert engine.cluster_id == U64_MAX
    assert LLMDataDist(LLMRole.MIX, 0).cluster_id == 0


def test_constructor_rejects_a_plain_int_role_with_type_error() -> None:
    raises(TypeError, lambda: LLMDataDist(1, 1), "role")  # type: ignore[arg-type]


def test_constructor_checks_the_cluster_id_as_uint64() -> None:
    raises(TypeError, lambda: LLMDataDist(LLMRole.PROMPT, "1"), "cluster_id")  # type: ignore[arg-type]
    raises(TypeError, lambda: LLMDataDist(LLMRole.PROMPT, None), "cluster_id")  # type: ignore[arg-type]
    raises(ValueError, lambda: LLMDataDist(LLMRole.PROMPT, -1), "cluster_id")
    raises(ValueError, lambda: LLMDataDist(LLMRole.PROMPT, 2**64), "cluster_id")


def test_constructor_checks_the_role_before_the_cluster_id() -> None:
    raises(TypeError, lambda: LLMDataDist(1, -1), "role")  # type: ignore[arg-type]


def test_constructor_creates_no_engine() -> None:
    LLMDataDist(LLMRole.PROMPT, 1)
    assert LLMDataDist.llm_engine_instance is None


@pytest.mark.parametrize("call", [
    lambda e: e.cache_manager,
    lambda e: e.kv_cache_manager,
    lambda e: e.link_clusters([]),
    lambda e: e.unlink_clusters([]),
    lambda e: e.link("c", {1: 0, 2: 1}, "{}"),
    lambda e: e.unlink(1),
    lambda e: e.query_register_mem_status(1),
    lambda e: e.switch_role(LLMRole.PROMPT),
    lambda e: e.check_link_status(1),
], ids=["cache_manager", "kv_cache_manager", "link_clusters", "unlink_clusters", "link", "unlink",
        "query_register_mem_status", "switch_role", "check_link_status"])
def test_every_member_raises_plain_runtime_error_before_init(call: Any) -> None:
    engine = LLMDataDist(LLMRole.DECODER, 2)
    raises(RuntimeError, lambda: call(engine), NOT_INITIALIZED)


def test_not_initialized_is_checked_before_the_arguments() -> None:
    engine = LLMDataDist(LLMRole.DECODER, 2)
    raises(RuntimeError, lambda: engine.link_clusters("not a list", timeout=-5), NOT_INITIALIZED)  # type: ignore
    raises(RuntimeError, lambda: engine.link(None, None, None), NOT_INITIALIZED)  # type: ignore[arg-type]


def test_finalize_before_init_is_a_no_op() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    engine.finalize()
    engine.finalize()
    assert LLMDataDist.llm_engine_instance is None


# ---------------------------------------------------------------------------
# python-api.md §10.2 init: Python-side steps, in order
# ---------------------------------------------------------------------------


def test_init_rejects_options_that_are_not_a_dict() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    raises(TypeError, lambda: engine.init([("llm.EnableCacheManager", "1")]), "options")  # type: ignore[arg-type]
    assert LLMDataDist.llm_engine_instance is None


def test_init_with_none_options_is_the_vendors_attribute_error() -> None:
    # the vendor's type check lets None through and its next step reads the dict
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    raises(AttributeError, lambda: engine.init(None), "options")  # type: ignore[arg-type]
    assert LLMDataDist.llm_engine_instance is None
    # also before the role lookup of an instance made with role=None
    raises(AttributeError, lambda: LLMDataDist(None, 1).init(None), "options")  # type: ignore[arg-type]


def test_init_checks_flow_graph_mem_max_size_type_comma_then_digits() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    raises(TypeError, lambda: engine.init({"ge.flowGraphMemMaxSize": 1024}), "ge.flowGraphMemMaxSize")
    lx(lambda: engine.init({"ge.flowGraphMemMaxSize": "1,2"}), "','")
    lx(lambda: engine.init({"ge.flowGraphMemMaxSize": "12a"}), "digits")
    lx(lambda: engine.init({"ge.flowGraphMemMaxSize": "1a,2"}), "','")


def test_init_rejects_local_comm_res_without_cache_manager_mode() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    lx(lambda: engine.init({"llm.LocalCommRes": "", "llm.EnableCacheManager": "0"}), "llm.LocalCommRes")


def test_init_checks_the_transfer_backend_requirements_in_order() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    lx(lambda: engine.init({"llm.TransferBackend": "hixl"}), "llm.EnableCacheManager")
    lx(lambda: engine.init({"llm.TransferBackend": "hixl", "llm.EnableCacheManager": "1",
                            "llm.EnableRemoteCacheAccessible": "0"}), "llm.EnableRemoteCacheAccessible")
    lx(lambda: engine.init({"llm.TransferBackend": "hixl", "llm.EnableCacheManager": "1"}), "llm.listenIpInfo")


@pytest.mark.parametrize("listen, error, fragment", [
    ("127.0.0.1", LLMException, "ip:port"),
    ("::1:26000", LLMException, "ip:port"),
    ("127.0.0.1:http", ValueError, "port"),
    ("127.0.0.1:65536", LLMException, "PR-27"),
    ("127.0.0.1:4294967296", LLMException, "PR-27"),
])
def test_init_parses_the_v2_listen_address_as_ip_colon_port(listen: str, error: type, fragment: str) -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    options = vs.v2_options(**{"llm.listenIpInfo": listen})
    if error is LLMException:
        lx(lambda: engine.init(options), fragment)
    else:
        raises(error, lambda: engine.init(options), fragment)


@pytest.mark.parametrize("value", ["-5", "12ms", "2147483648", ""])
def test_init_rejects_a_sync_wait_time_outside_zero_to_int32_max(value: str) -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    lx(lambda: engine.init(vs.v2_options(**{"llm.SyncKvCacheWaitTime": value})), "PR-26")


@pytest.mark.parametrize("options", [vs.v2_options(**{"llm.SyncKvCacheWaitTime": "0"}),
                                     vs.v1_options(**{"llm.SyncKvCacheWaitTime": "0"})])
def test_init_accepts_a_sync_wait_time_of_zero_with_one_lint(options: Dict[str, str]) -> None:
    # PR-26: the vendor accepts any digit string; strict mode refuses 0 before the core
    engine = LLMDataDist(LLMRole.DECODER, 1)
    with vs.strict_mode():
        lx(lambda: engine.init(dict(options)), "PR-26")
    try:
        vs.linted("PR-26", lambda: engine.init(dict(options)), "is 0 milliseconds")
    finally:
        engine.finalize()


def test_init_rejects_option_values_that_are_not_str() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    options: dict = vs.v2_options()
    options["llm.SomeNumber"] = 5
    raises(TypeError, lambda: engine.init(options), "llm.SomeNumber")
    assert LLMDataDist.llm_engine_instance is None


def test_init_with_a_none_role_raises_key_error() -> None:
    engine = LLMDataDist(None, 1)  # type: ignore[arg-type]
    raises(KeyError, lambda: engine.init(vs.v2_options()), "role")


def test_init_in_v1_mode_requires_ge_exec_device_id_as_param_invalid() -> None:
    engine = LLMDataDist(LLMRole.DECODER, 1)
    lx(lambda: engine.init({"llm.SyncKvCacheWaitTime": "1000"}), "ge.exec.deviceId")


def test_init_in_v1_mode_requires_digit_device_ids() -> None:
    engine = LLMDataDist(LLMRole.DECODER, 1)
    lx(lambda: engine.init({"ge.exec.deviceId": "x"}), "ge.exec.deviceId")


def test_init_in_v1_mode_requires_a_prompt_listen_address_per_device() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    lx(lambda: engine.init({"ge.exec.deviceId": "0"}), "llm.listenIpInfo")
    lx(lambda: engine.init({"ge.exec.deviceId": "0;1", "llm.listenIpInfo": "127.0.0.1:26000"}), "2 devices")
    lx(lambda: engine.init({"ge.exec.deviceId": "0", "llm.listenIpInfo": "127.0.0.1"}), "ip:port")
    lx(lambda: engine.init({"ge.exec.deviceId": "0", "llm.listenIpInfo": "nohost:26000"}), "IPv4")


def test_init_reports_the_earlier_of_two_broken_rules() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    # ge.flowGraphMemMaxSize (step 4) before llm.LocalCommRes (step 8)
    lx(lambda: engine.init({"ge.flowGraphMemMaxSize": "1,2", "llm.LocalCommRes": "",
                            "llm.EnableCacheManager": "0"}), "','")
    # the options type (step 3) before any option
    raises(TypeError, lambda: engine.init("llm.LocalCommRes"), "options")  # type: ignore[arg-type]


def test_init_does_not_modify_the_callers_options(v2: LLMDataDist) -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    options = {"llm.LocalCommRes": "", "llm.listenIpInfo": f"127.0.0.1:{vs.free_port()}"}
    snapshot = dict(options)
    v2.finalize()
    engine.init(options)
    try:
        assert options == snapshot
    finally:
        engine.finalize()


# ---------------------------------------------------------------------------
# python-api.md §10.2 init: generations, one engine per process, failures
# ---------------------------------------------------------------------------


def test_init_in_cache_manager_mode_offers_cache_manager_only(v2: LLMDataDist) -> None:
    assert isinstance(v2.cache_manager, CacheManager)
    assert v2.cache_manager is v2.cache_manager
    lx(lambda: v2.kv_cache_manager, "llm.EnableCacheManager")
    assert LLMDataDist.llm_engine_instance is v2


def test_init_without_cache_manager_mode_offers_kv_cache_manager_only(v1_decoder: LLMDataDist) -> None:
    assert isinstance(v1_decoder.kv_cache_manager, KvCacheManager)
    assert v1_decoder.kv_cache_manager.is_initialized() is True
    lx(lambda: v1_decoder.cache_manager, "cache_manager is not supported when llm.EnableCacheManager is not "
                                         "configured.")


def test_local_comm_res_turns_on_cache_manager_mode_even_when_empty() -> None:
    engine = LLMDataDist(LLMRole.DECODER, 2)
    engine.init({"llm.LocalCommRes": ""})
    try:
        assert isinstance(engine.cache_manager, CacheManager)
        assert engine.cache_manager._direct_mode is True
    finally:
        engine.finalize()


def test_llm_config_options_init_an_engine_and_extra_raw_keys_are_accepted() -> None:
    config = LLMConfig()
    config.device_id = 0
    config.enable_cache_manager = True
    config.enable_remote_cache_accessible = True
    config.sync_kv_timeout = 3000
    config.enable_switch_role = True
    options = config.generate_options()
    options["llm.RdmaServiceLevel"] = "4"
    options["ge.session_device_id"] = "0"
    engine = LLMDataDist(LLMRole.MIX, 5)
    engine.init(options)
    try:
        assert isinstance(engine.cache_manager, CacheManager)
    finally:
        engine.finalize()


def test_init_twice_is_a_no_op_that_ignores_the_new_options(v2: LLMDataDist) -> None:
    manager = v2.cache_manager
    v2.init({"llm.EnableCacheManager": "0"})
    assert v2.cache_manager is manager


def test_a_second_engine_cannot_init_while_one_is_initialised(v2: LLMDataDist) -> None:
    other = LLMDataDist(LLMRole.PROMPT, 1)
    error = lx(lambda: other.init(vs.v2_options()), "Cannot init multiple LLMDataDists", status=S.LLM_FAILED)
    assert LLMDataDist.llm_engine_instance is v2
    assert isinstance(error, LLMException)
    # step 2 comes before the options check (step 3)
    lx(lambda: other.init(None), "Cannot init multiple LLMDataDists", status=S.LLM_FAILED)  # type: ignore


def test_a_second_engine_may_init_after_the_first_finalized(v2: LLMDataDist) -> None:
    v2.finalize()
    other = LLMDataDist(LLMRole.PROMPT, 1)
    other.init(vs.v2_options())
    try:
        assert LLMDataDist.llm_engine_instance is other
    finally:
        other.finalize()


def test_a_failing_core_init_leaves_the_instance_uninitialised_and_retryable() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    error = raises(LLMException, lambda: engine.init(vs.v2_options(**{"llm.MemPoolConfig": "not json"})),
                   "LLMDataDist.init")
    assert error.status_code == S.LLM_PARAM_INVALID  # type: ignore[attr-defined]
    assert LLMDataDist.llm_engine_instance is None
    raises(RuntimeError, lambda: engine.cache_manager, NOT_INITIALIZED)
    engine.init(vs.v2_options())
    try:
        assert isinstance(engine.cache_manager, CacheManager)
    finally:
        engine.finalize()


@pytest.mark.parametrize("key, value", [
    ("llm.EnableRemoteCacheAccessible", "yes"),
    ("llm.LinkRetryCount", "0"),
    ("llm.LinkRetryCount", "101"),
    ("llm.MemPoolConfig", '{"memory_size": 1048576, "page_shift": 9}'),
    ("llm.MemPoolConfig", '{"memory_size": 0}'),
    ("llm.RdmaTrafficClass", "abc"),
])
def test_v2_core_rejects_a_malformed_option_at_init(key: str, value: str) -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    raises(LLMException, lambda: engine.init(vs.v2_options(**{key: value})), "[LLMDataDist.init] failed",
           S.LLM_PARAM_INVALID)
    assert LLMDataDist.llm_engine_instance is None


def test_v2_core_rejects_a_transfer_backend_other_than_hixl() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    options = vs.v2_options(vs.free_port(), **{"llm.TransferBackend": "rdma"})
    raises(LLMException, lambda: engine.init(options), "[LLMDataDist.init] failed", S.LLM_PARAM_INVALID)


def test_v2_core_ignores_keys_it_does_not_read() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    engine.init(vs.v2_options(**{"llm.MemoryUtilization": "0.95", "llm.EnableSwitchRole": "1",
                                 "ge.session_device_id": "0", "llm.deployResPath": "/nowhere", "x.y": "z"}))
    engine.finalize()


def test_v2_core_rejects_two_device_ids_at_init() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    lx(lambda: engine.init(vs.v2_options(**{"ge.exec.deviceId": "0;1"})))
    assert LLMDataDist.llm_engine_instance is None


# ---------------------------------------------------------------------------
# python-api.md §10.3 finalize, re-init, atexit
# ---------------------------------------------------------------------------


def test_finalize_frees_the_slot_and_marks_the_manager_uninitialised(v1_decoder: LLMDataDist) -> None:
    manager = v1_decoder.kv_cache_manager
    v1_decoder.finalize()
    assert LLMDataDist.llm_engine_instance is None
    assert manager.is_initialized() is False
    raises(RuntimeError, lambda: v1_decoder.kv_cache_manager, NOT_INITIALIZED)
    v1_decoder.finalize()


def test_reinit_makes_a_fresh_engine_with_ids_from_one_and_a_new_manager() -> None:
    import numpy as np

    engine = LLMDataDist(LLMRole.DECODER, 2)
    options = vs.v2_options()
    arrays = [np.zeros((4, 16), dtype=np.uint8) for _ in range(2)]
    desc = CacheDesc(2, [4, 16], DataType.DT_UINT8)
    engine.init(options)
    try:
        first = engine.cache_manager
        ids = [first.register_blocks_cache(desc, [a.ctypes.data for a in arrays]).cache_id for _ in range(2)]
        assert ids == [1, 2]
        engine.finalize()
        engine.init(options)
        second = engine.cache_manager
        assert second is not first
        assert second.register_blocks_cache(desc, [a.ctypes.data for a in arrays]).cache_id == 1
    finally:
        engine.finalize()


def test_a_manager_kept_across_finalize_fails_with_the_vendor_codes_then_reaches_the_new_engine() -> None:
    import numpy as np

    engine = LLMDataDist(LLMRole.DECODER, 2)
    arrays = [np.zeros((4, 16), dtype=np.uint8) for _ in range(2)]
    desc = CacheDesc(2, [4, 16], DataType.DT_UINT8)
    engine.init(vs.v2_options())
    old = engine.cache_manager
    cache = old.register_blocks_cache(desc, [a.ctypes.data for a in arrays])
    engine.finalize()
    try:
        raises(LLMException, lambda: old.register_blocks_cache(desc, [a.ctypes.data for a in arrays]),
               "register_blocks_cache", S.LLM_FAILED)
        raises(LLMException, lambda: old.unregister_cache(1), "unregister_cache", S.LLM_FAILED)
        lx(lambda: old.pull_cache(CacheKeyByIdAndIndex(1, 1), _contiguous_cache_of(old, 99)), "pull_cache")
        engine.init(vs.v2_options())
        again = old.register_blocks_cache(desc, [a.ctypes.data for a in arrays])
        assert again.cache_id == 1
        # the cache object of the first engine is rejected (project rule, docs/reference/python-api.md §8.1)
        lx(lambda: old.pull_blocks(BlocksCacheKey(1), cache, [0], [0]), "finalized")
    finally:
        engine.finalize()


def _contiguous_cache_of(manager: CacheManager, cache_id: int) -> Any:
    from llm_datadist_ffi.vendor import Cache

    return Cache(cache_id, CacheDesc(2, [4, 16], DataType.DT_UINT8), [1, 2], manager, True, False)


def test_atexit_hook_finalizes_the_live_instance() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    engine.init(vs.v2_options())
    llm_datadist_module._finalize_at_exit()
    assert LLMDataDist.llm_engine_instance is None
    raises(RuntimeError, lambda: engine.cache_manager, NOT_INITIALIZED)


def test_atexit_hook_turns_an_llm_exception_into_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    engine.init(vs.v2_options())
    real_finalize = LLMDataDist.finalize

    def failing(self: LLMDataDist) -> None:
        real_finalize(self)
        raise LLMException("finalize failed", status_code=S.LLM_FAILED)

    monkeypatch.setattr(LLMDataDist, "finalize", failing)
    with pytest.warns(RuntimeWarning, match="finalize failed"):
        llm_datadist_module._finalize_at_exit()
    assert LLMDataDist.llm_engine_instance is None


def test_a_process_that_exits_without_finalize_is_finalized_quietly(tmp_path: Path) -> None:
    with vs.Peer() as peer:
        peer.run("engine = LLMDataDist(LLMRole.PROMPT, 1); engine.init(support.v2_options())")
        peer.process.stdin.close()  # type: ignore[union-attr]
        assert peer.process.wait(timeout=30) == 0


# ---------------------------------------------------------------------------
# python-api.md §10.5 link_clusters / unlink_clusters
# ---------------------------------------------------------------------------


def test_link_clusters_checks_timeout_then_clusters(v2: LLMDataDist) -> None:
    info = vs.cluster_info(1, 1)
    raises(TypeError, lambda: v2.link_clusters([info], timeout="1"), "timeout")  # type: ignore[arg-type]
    raises(ValueError, lambda: v2.link_clusters([info], timeout=2**31), "timeout")
    lx(lambda: v2.link_clusters([info], timeout=0), "timeout")
    lx(lambda: v2.link_clusters("x", timeout=-1), "timeout")  # type: ignore[arg-type]
    raises(TypeError, lambda: v2.link_clusters(info), "clusters")  # type: ignore[arg-type]
    raises(TypeError, lambda: v2.link_clusters(None), "clusters")  # type: ignore[arg-type]
    raises(TypeError, lambda: v2.link_clusters([info, 3]), "clusters[1]")  # type: ignore[list-item]


def test_link_clusters_in_v2_needs_a_local_ip_then_a_uint64_remote_id(v2: LLMDataDist) -> None:
    no_local = vs.cluster_info(1, 1, local=False)
    lx(lambda: v2.link_clusters([no_local]), "local_ip_info_list")
    no_id = vs.cluster_info(None, 1)
    raises(TypeError, lambda: v2.link_clusters([no_id]), "remote_cluster_id")
    both = vs.cluster_info(None, 1, local=False)
    lx(lambda: v2.link_clusters([both]), "local_ip_info_list")


def test_link_clusters_without_a_local_ip_is_allowed_with_a_non_empty_local_comm_res() -> None:
    engine = LLMDataDist(LLMRole.DECODER, 2)
    engine.init({"llm.LocalCommRes": '{"version": "1.3"}', "ge.exec.deviceId": "0"})
    try:
        no_local = vs.cluster_info(7, vs.free_port(), local=False)
        assert engine.link_clusters([no_local], 1000) == (S.LLM_LINK_FAILED, [S.LLM_LINK_FAILED])
    finally:
        engine.finalize()


def test_link_clusters_with_no_cluster_reports_param_invalid_without_raising(v2: LLMDataDist) -> None:
    assert v2.link_clusters([]) == (S.LLM_PARAM_INVALID, [])


def test_link_clusters_reports_link_failed_per_cluster_without_raising(v2: LLMDataDist) -> None:
    status, per_cluster = v2.link_clusters([vs.cluster_info(7, vs.free_port())], timeout=1000)
    assert status == S.LLM_LINK_FAILED and per_cluster == [S.LLM_LINK_FAILED]
    assert type(status) is LLMStatusCode and type(per_cluster[0]) is LLMStatusCode


def test_link_clusters_reports_the_last_failing_cluster_and_each_status(v2: LLMDataDist) -> None:
    bad_ip = LLMClusterInfo()
    bad_ip.remote_cluster_id = 8
    bad_ip.append_local_ip_info("127.0.0.1", 0)
    status, per_cluster = v2.link_clusters([vs.cluster_info(7, vs.free_port()), bad_ip], timeout=1000)
    assert per_cluster == [S.LLM_LINK_FAILED, S.LLM_PARAM_INVALID]
    assert status == S.LLM_PARAM_INVALID


def test_link_clusters_accepts_a_tuple_of_clusters(v2: LLMDataDist) -> None:
    assert v2.link_clusters((vs.cluster_info(7, vs.free_port()),), 500) == (S.LLM_LINK_FAILED, [S.LLM_LINK_FAILED])


def test_unlink_clusters_checks_timeout_clusters_then_force(v2: LLMDataDist) -> None:
    info = vs.cluster_info(1, 1)
    raises(TypeError, lambda: v2.unlink_clusters([info], timeout=None), "timeout")  # type: ignore[arg-type]
    lx(lambda: v2.unlink_clusters([info], timeout=0), "timeout")
    raises(TypeError, lambda: v2.unlink_clusters({}, 100), "clusters")  # type: ignore[arg-type]
    raises(TypeError, lambda: v2.unlink_clusters([info], 100, force=1), "force")  # type: ignore[arg-type]
    raises(TypeError, lambda: v2.unlink_clusters([info], 100, force=None), "force")  # type: ignore[arg-type]
    raises(TypeError, lambda: v2.unlink_clusters([vs.cluster_info(None, 1)], 100, True), "remote_cluster_id")


def test_forced_unlink_of_a_cluster_never_linked_succeeds(v2: LLMDataDist) -> None:
    only_id = LLMClusterInfo()
    only_id.remote_cluster_id = 12345
    assert v2.unlink_clusters([only_id], 1000, force=True) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])


def test_link_and_unlink_a_peer_over_loopback_in_both_generations() -> None:
    for generation in ("v2", "v1"):
        port = vs.free_port()
        with vs.Peer() as peer:
            options = "support.v2_options(port)" if generation == "v2" else "support.v1_options(port)"
            peer.run(f"port = {port}; p = LLMDataDist(LLMRole.PROMPT, 1); p.init({options})")
            engine = LLMDataDist(LLMRole.DECODER, 2)
            engine.init(vs.v2_options() if generation == "v2" else vs.v1_options())
            try:
                info = vs.cluster_info(1, port)
                assert engine.link_clusters([info], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
                assert engine.link_clusters([info], 5000) == (S.LLM_ALREADY_LINK, [S.LLM_ALREADY_LINK])
                assert engine.unlink_clusters([info], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
                assert engine.link_clusters([info], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
                assert engine.unlink_clusters([info], 5000, force=True) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            finally:
                engine.finalize()
                peer.run("p.finalize()")


def test_link_clusters_to_a_peer_with_another_cluster_id_warns_and_links(monkeypatch: pytest.MonkeyPatch) -> None:
    """PR-28 (lint): the device links and keys the link by the listener's id."""
    monkeypatch.delenv(lint.STRICT_ENV, raising=False)
    port = vs.free_port()
    with vs.Peer() as peer:
        peer.run(f"p = LLMDataDist(LLMRole.PROMPT, 1); p.init(support.v2_options({port}))")
        engine = LLMDataDist(LLMRole.DECODER, 2)
        engine.init(vs.v2_options())
        try:
            with pytest.warns(lint.ClusterIdMismatchWarning, match="PR-28"):
                assert engine.link_clusters([vs.cluster_info(99, port)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            assert engine.link_clusters([vs.cluster_info(1, port)], 5000) == (S.LLM_ALREADY_LINK,
                                                                             [S.LLM_ALREADY_LINK])
        finally:
            engine.finalize()


def test_link_clusters_to_a_peer_with_another_cluster_id_fails_per_cluster_in_strict_mode(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lint.STRICT_ENV, "1")
    port = vs.free_port()
    with vs.Peer() as peer:
        peer.run(f"p = LLMDataDist(LLMRole.PROMPT, 1); p.init(support.v2_options({port}))")
        engine = LLMDataDist(LLMRole.DECODER, 2)
        engine.init(vs.v2_options())
        try:
            assert engine.link_clusters([vs.cluster_info(99, port)], 5000) == (
                S.LLM_PARAM_INVALID, [S.LLM_PARAM_INVALID])
        finally:
            engine.finalize()


@pytest.mark.rules("E-7")
def test_an_engine_links_to_itself_as_the_vendors_tests_do() -> None:
    """The vendor's test_enable_local_comm_res.py links an engine to its own listener,
    then unlinks without force; cleaning up a link never made succeeds too."""
    port = vs.free_port()
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    engine.init(vs.v2_options(port, **{"llm.LocalCommRes": '{"version": "1.0", "server_list": []}'}))
    try:
        itself = vs.cluster_info(1, port)
        assert engine.unlink_clusters([itself], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
        assert engine.link_clusters([itself], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
        assert engine.unlink_clusters([itself], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
    finally:
        engine.finalize()


def test_v1_link_clusters_by_a_prompt_is_param_invalid_without_per_cluster_results() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    engine.init(vs.v1_options(vs.free_port()))
    try:
        assert engine.link_clusters([vs.cluster_info(2, vs.free_port())], 1000) == (S.LLM_PARAM_INVALID, [])
    finally:
        engine.finalize()


def test_v1_link_clusters_of_more_than_16_clusters_exceeds_the_limit(v1_decoder: LLMDataDist) -> None:
    clusters = [vs.cluster_info(10 + i, 1) for i in range(17)]
    assert v1_decoder.link_clusters(clusters, 1000) == (S.LLM_CLUSTER_NUM_EXCEED_LIMIT, [])


def test_large_cluster_ids_round_trip_through_a_link() -> None:
    port = vs.free_port()
    big = 2**64 - 2
    with vs.Peer() as peer:
        peer.run(f"p = LLMDataDist(LLMRole.PROMPT, {big}); p.init(support.v2_options({port}))")
        engine = LLMDataDist(LLMRole.DECODER, 2**63 + 5)
        engine.init(vs.v2_options())
        try:
            assert engine.link_clusters([vs.cluster_info(big, port)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
        finally:
            engine.finalize()


# ---------------------------------------------------------------------------
# python-api.md §10.4 rank-table links
# ---------------------------------------------------------------------------

RANK_TABLE = vs.RANK_TABLE


def test_link_is_not_available_in_v1(v1_decoder: LLMDataDist) -> None:
    lx(lambda: v1_decoder.link("c", {1: 0, 2: 1}, RANK_TABLE), "link")
    lx(lambda: v1_decoder.unlink(1), "unlink")
    lx(lambda: v1_decoder.query_register_mem_status(1), "query_register_mem_status")


def test_link_checks_its_arguments_in_order(v2: LLMDataDist) -> None:
    raises(TypeError, lambda: v2.link(None, {2: 0, 1: 1}, RANK_TABLE), "comm_name")  # type: ignore[arg-type]
    lx(lambda: v2.link("", {2: 0, 1: 1}, RANK_TABLE), "comm_name")
    lx(lambda: v2.link("x" * 128, {2: 0, 1: 1}, RANK_TABLE), "128")
    v2_ok = "x" * 127
    raises(TypeError, lambda: v2.link(v2_ok, [(2, 0)], RANK_TABLE), "cluster_rank_info")  # type: ignore
    raises(TypeError, lambda: v2.link(v2_ok, {"2": 0, 1: 1}, RANK_TABLE), "cluster_rank_info")  # type: ignore
    lx(lambda: v2.link(v2_ok, {1: 0, 2: 1, 3: 2, 4: 3, 5: 4}, RANK_TABLE), "at most 4")
    raises(ValueError, lambda: v2.link(v2_ok, {-1: 0, 2: 1}, RANK_TABLE), "cluster id")
    raises(ValueError, lambda: v2.link(v2_ok, {1: 2**32, 2: 1}, RANK_TABLE), "rank")
    raises(TypeError, lambda: v2.link(v2_ok, {2: 0, 1: 1}, None), "rank_table")  # type: ignore[arg-type]
    lx(lambda: v2.link(v2_ok, {2: 0}, RANK_TABLE), "at least 2")
    lx(lambda: v2.link(v2_ok, {2: 1, 1: 0}, RANK_TABLE), "ascending")


def test_link_needs_the_local_cluster_as_a_member(v2: LLMDataDist) -> None:
    lx(lambda: v2.link("comm", {5: 0, 6: 1}, RANK_TABLE), "link")


def test_link_needs_a_json_rank_table(v2: LLMDataDist) -> None:
    lx(lambda: v2.link(comm_name("json"), {1: 0, 2: 1}, "{not json"), "link")


def test_unlink_and_query_check_the_comm_id(v2: LLMDataDist) -> None:
    for call in (v2.unlink, v2.query_register_mem_status):
        raises(TypeError, lambda: call("1"), "comm_id")  # type: ignore[arg-type]
        raises(TypeError, lambda: call(None), "comm_id")  # type: ignore[arg-type]
        raises(ValueError, lambda: call(-1), "comm_id")
        raises(LLMException, lambda: call(77), status=S.LLM_NOT_YET_LINK)


def comm_name(what: str) -> str:
    """A communicator name no other test run on this host uses (the mock's rendezvous
    is by name, PR-39)."""
    return f"{what}_{uuid.uuid4().hex}"


def test_rank_table_link_is_preparing_until_every_member_joined_then_ok_and_carries_pulls() -> None:
    import numpy as np

    name = comm_name("pd_comm")
    with vs.Peer() as peer:
        peer.run("p = LLMDataDist(LLMRole.PROMPT, 1); p.init(support.v2_options())\n"
                 "kv = [fill(70 + t, (8, 64)) for t in range(2)]\n"
                 "p.cache_manager.register_blocks_cache(CacheDesc(2, [8, 64], DataType.DT_UINT8), "
                 "[a.ctypes.data for a in kv], BlocksCacheKey(1, 0))")
        engine = LLMDataDist(LLMRole.DECODER, 2)
        engine.init(vs.v2_options())
        try:
            mine = [np.zeros((8, 64), dtype=np.uint8) for _ in range(2)]
            cache = engine.cache_manager.register_blocks_cache(CacheDesc(2, [8, 64], DataType.DT_UINT8),
                                                               [a.ctypes.data for a in mine])
            comm_id = engine.link(name, {1: 0, 2: 1}, RANK_TABLE)
            assert comm_id == 1
            assert engine.query_register_mem_status(comm_id) is RegisterMemStatus.PREPARING
            raises(LLMException, lambda: engine.cache_manager.pull_blocks(BlocksCacheKey(1, 0), cache, [1], [2]),
                   status=S.LLM_NOT_YET_LINK)
            assert peer.run(f"c = p.link('{name}', {{1: 0, 2: 1}}, support.RANK_TABLE)", "c") == 1
            deadline = time.monotonic() + 20
            while engine.query_register_mem_status(comm_id) is not RegisterMemStatus.OK:
                assert time.monotonic() < deadline, "the link never became OK"
                time.sleep(0.05)
            assert peer.run(value="p.query_register_mem_status(c).name") == "OK"
            engine.cache_manager.pull_blocks(BlocksCacheKey(1, 0), cache, [1, 5], [2, 3])
            for t in range(2):
                expected = np.zeros((8, 64), dtype=np.uint8)
                expected[[2, 3]] = vs.fill(70 + t, (8, 64))[[1, 5]]
                assert mine[t].tobytes() == expected.tobytes()
            raises(LLMException, lambda: engine.switch_role(LLMRole.PROMPT), status=S.LLM_EXIST_LINK)
            engine.unlink(comm_id)
            raises(LLMException, lambda: engine.query_register_mem_status(comm_id), status=S.LLM_NOT_YET_LINK)
            raises(LLMException, lambda: engine.unlink(comm_id), status=S.LLM_NOT_YET_LINK)
        finally:
            engine.finalize()


def test_rank_table_link_fails_when_a_member_does_not_join_in_time() -> None:
    engine = LLMDataDist(LLMRole.DECODER, 2)
    engine.init(vs.v2_options(**{"llm.LinkTotalTime": "1"}))
    try:
        comm_id = engine.link(comm_name("lonely"), {1: 0, 2: 1}, RANK_TABLE)
        deadline = time.monotonic() + 20
        while (status := engine.query_register_mem_status(comm_id)) is RegisterMemStatus.PREPARING:
            assert time.monotonic() < deadline, "the link stayed PREPARING"
            time.sleep(0.05)
        assert status is RegisterMemStatus.FAILED
    finally:
        engine.finalize()


def status_of(query: Any, limit: float = 10.0) -> str:
    """The first state other than ``PREPARING`` that ``query()`` (a state's name) gives
    within ``limit`` seconds, or ``PREPARING`` if it never changed."""
    deadline = time.monotonic() + limit
    while (status := query()) == "PREPARING" and time.monotonic() < deadline:
        time.sleep(0.05)
    return status


@pytest.mark.rules("§10.6", "§13", "X-23")
@pytest.mark.parametrize("first", ["communicator", "link_clusters"])
def test_a_second_communicator_over_a_linked_pair_fails_at_link_total_time_and_the_first_link_keeps_working(
        first: str) -> None:
    """Two engines already linked (by an earlier communicator, or by ``link_clusters``)
    join a second communicator. Its member exchange cannot make a second link between
    them, so it stays ``PREPARING`` until ``llm.LinkTotalTime`` (here 2 s) and then is
    ``FAILED`` on both members (semantics.md §10.6, §13 ``llm.LinkTotalTime``; decision X-23). Its
    ``unlink`` succeeds on both sides and drops only its own links (semantics.md §10.6 "drops every
    link of the communicator"): pulls over the first link work before, during and after.
    """
    import numpy as np

    port = vs.free_port()
    names = comm_name("first"), comm_name("second")
    total_s = 2                                             # llm.LinkTotalTime in seconds (semantics.md §13); default 30
    fast = {"llm.LinkTotalTime": str(total_s)}
    with vs.Peer() as peer:
        peer.run(f"p = LLMDataDist(LLMRole.PROMPT, 1); p.init(support.v2_options({port}, **{fast!r}))\n"
                 "kv = [fill(90 + t, (8, 64)) for t in range(2)]\n"
                 "p.cache_manager.register_blocks_cache(CacheDesc(2, [8, 64], DataType.DT_UINT8), "
                 "[a.ctypes.data for a in kv], BlocksCacheKey(1, 0))")
        engine = LLMDataDist(LLMRole.DECODER, 2)
        engine.init(vs.v2_options(**fast))
        try:
            mine = [np.zeros((8, 64), dtype=np.uint8) for _ in range(2)]
            cache = engine.cache_manager.register_blocks_cache(CacheDesc(2, [8, 64], DataType.DT_UINT8),
                                                               [a.ctypes.data for a in mine])
            expected = [np.zeros((8, 64), dtype=np.uint8) for _ in range(2)]

            def pull_works(src: int, dst: int) -> None:
                engine.cache_manager.pull_blocks(BlocksCacheKey(1, 0), cache, [src], [dst])
                for t in range(2):
                    expected[t][dst] = vs.fill(90 + t, (8, 64))[src]
                    assert mine[t].tobytes() == expected[t].tobytes()

            if first == "communicator":
                first_id = engine.link(names[0], {1: 0, 2: 1}, RANK_TABLE)
                assert first_id == 1
                assert peer.run(f"c1 = p.link('{names[0]}', {{1: 0, 2: 1}}, support.RANK_TABLE)", "c1") == 1
                assert status_of(lambda: engine.query_register_mem_status(first_id).name) == "OK"
                assert status_of(lambda: peer.run(value="p.query_register_mem_status(c1).name")) == "OK"
                second_id = 2                                 # comm ids count per engine (semantics.md §10.6)
            else:
                assert engine.link_clusters([vs.cluster_info(1, port)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
                second_id = 1
            pull_works(1, 2)

            started = time.monotonic()
            assert engine.link(names[1], {1: 0, 2: 1}, RANK_TABLE) == second_id
            assert peer.run(f"c2 = p.link('{names[1]}', {{1: 0, 2: 1}}, support.RANK_TABLE)", "c2") == second_id
            early = engine.query_register_mem_status(second_id)
            assert time.monotonic() - started < total_s, "too slow to see PREPARING"
            assert early is RegisterMemStatus.PREPARING
            pull_works(5, 3)                                  # the first link works while it prepares
            assert status_of(lambda: engine.query_register_mem_status(second_id).name) == "FAILED"
            assert status_of(lambda: peer.run(value="p.query_register_mem_status(c2).name")) == "FAILED"
            pull_works(6, 4)                                  # and after it failed
            if first == "communicator":
                assert engine.query_register_mem_status(1) is RegisterMemStatus.OK
                assert peer.run(value="p.query_register_mem_status(c1).name") == "OK"

            engine.unlink(second_id)
            assert peer.run("p.unlink(c2)", "'unlinked'") == "unlinked"
            raises(LLMException, lambda: engine.query_register_mem_status(second_id), status=S.LLM_NOT_YET_LINK)
            pull_works(7, 5)                                  # unlink of the failed one left the first link
            raises(LLMException, lambda: engine.switch_role(LLMRole.PROMPT), status=S.LLM_EXIST_LINK)
            if first == "communicator":
                engine.unlink(1)
                assert peer.run("p.unlink(c1)", "'unlinked'") == "unlinked"
                raises(LLMException, lambda: engine.cache_manager.pull_blocks(BlocksCacheKey(1, 0), cache, [1], [2]),
                       status=S.LLM_NOT_YET_LINK)
            else:
                assert engine.unlink_clusters([vs.cluster_info(1, port)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
            engine.switch_role(LLMRole.PROMPT)                # no link is left (semantics.md §10.7)
        finally:
            engine.finalize()


def test_register_after_link_cannot_be_remote_accessible(v2: LLMDataDist) -> None:
    import numpy as np

    manager = v2.cache_manager
    comm_id = v2.link(comm_name("after_link"), {1: 0, 2: 1}, RANK_TABLE)
    assert comm_id == 1
    array = np.zeros((4, 16), dtype=np.uint8)
    desc = CacheDesc(1, [4, 16], DataType.DT_UINT8)
    lx(lambda: manager.register_blocks_cache(desc, [array.ctypes.data], remote_accessible=True),
       "you can not register remote accessible cache after link.")
    assert manager.register_blocks_cache(desc, [array.ctypes.data]).cache_id == 1
    v2.unlink(comm_id)


# ---------------------------------------------------------------------------
# python-api.md §10.6 switch_role, python-api.md §10.7 check_link_status
# ---------------------------------------------------------------------------


def test_v2_switch_role_checks_role_then_options(v2: LLMDataDist) -> None:
    raises(TypeError, lambda: v2.switch_role(1), "role")  # type: ignore[arg-type]
    raises(KeyError, lambda: v2.switch_role(None), "role")  # type: ignore[arg-type]
    raises(TypeError, lambda: v2.switch_role(LLMRole.PROMPT, [("a", "b")]), "switch_options")  # type: ignore
    lx(lambda: v2.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": "127.0.0.1"}), "ip:port")
    raises(ValueError, lambda: v2.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": "127.0.0.1:x"}), "port")
    lx(lambda: v2.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": "127.0.0.1:65536"}), "PR-27")


def test_v2_switch_role_needs_no_change_and_starts_a_listener(v2: LLMDataDist) -> None:
    v2.switch_role(LLMRole.DECODER)
    port = vs.free_port()
    v2.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": f"127.0.0.1:{port}"})
    with vs.Peer() as peer:
        peer.run("d = LLMDataDist(LLMRole.DECODER, 3); d.init(support.v2_options())")
        assert peer.run(f"r = d.link_clusters([support.cluster_info(2, {port})], 5000)",
                        "[int(r[0])] + [int(x) for x in r[1]]") == [0, 0]
        raises(LLMException, lambda: v2.switch_role(LLMRole.DECODER), status=S.LLM_EXIST_LINK)
        peer.run("d.finalize()")


def test_v1_switch_role_checks_in_the_vendor_order(v1_decoder: LLMDataDist) -> None:
    raises(TypeError, lambda: v1_decoder.switch_role(2), "role")  # type: ignore[arg-type]
    lx(lambda: v1_decoder.switch_role(LLMRole.DECODER, "not a dict"), "role not changed")  # type: ignore
    raises(TypeError, lambda: v1_decoder.switch_role(LLMRole.PROMPT, "x"), "switch_options")  # type: ignore
    lx(lambda: v1_decoder.switch_role(LLMRole.PROMPT, {}), "llm.listenIpInfo")
    lx(lambda: v1_decoder.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": "1.2.3.4"}), "ip:port")
    raises(RuntimeError, lambda: v1_decoder.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": "nohost:1"}),
           "Can not parse ip str:nohost")
    raises(ValueError, lambda: v1_decoder.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": "127.0.0.1:p"}), "port")


def test_v1_switch_role_to_prompt_without_options_is_param_invalid(v1_decoder: LLMDataDist) -> None:
    lx(lambda: v1_decoder.switch_role(LLMRole.PROMPT), "llm.listenIpInfo")
    lx(lambda: v1_decoder.switch_role(LLMRole.PROMPT, None), "llm.listenIpInfo")


def test_v1_switch_role_parses_the_listen_address_only_for_prompt() -> None:
    config = LLMConfig()
    config.device_id = 0
    config.listen_ip_info = f"127.0.0.1:{vs.free_port()}"
    config.enable_switch_role = True
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    engine.init(config.generate_options())
    try:
        # switching to DECODER or MIX hands the options on unread: no ip, no port check
        engine.switch_role(LLMRole.DECODER, {"llm.listenIpInfo": "not an address"})
        engine.switch_role(LLMRole.MIX, {"llm.listenIpInfo": "1.2.3.4:0"})
        assert engine.kv_cache_manager._role is LLMRole.MIX
    finally:
        engine.finalize()


def test_v1_switch_role_to_prompt_converts_the_ip_by_inet_aton(monkeypatch: pytest.MonkeyPatch) -> None:
    # what the Python layer hands the backend (the vendor's C++ reads llm.ListenIp and
    # llm.ListenPort); "127.1" is inet_aton's shorthand for 127.0.0.1
    port = vs.free_port()
    sent = []

    def record(handle: Any, role: int, array: Any, count: int, tag: str) -> None:
        sent.append((role, {ffi.string(array[i].key).decode(): ffi.string(array[i].value).decode()
                            for i in range(count)}))

    engine = LLMDataDist(LLMRole.DECODER, 2)
    engine.init(vs.v1_options())
    try:
        monkeypatch.setattr(_capi, "lldd_ext_switch_role", record)
        engine.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": f"127.1:{port}"})
        engine.switch_role(LLMRole.DECODER, {"llm.listenIpInfo": "127.1"})
    finally:
        monkeypatch.undo()
        engine.finalize()
    assert sent == [(1, {"llm.listenIpInfo": f"127.1:{port}", "llm.ListenIp": "16777343", "llm.ListenPort": str(port)}),
                    (2, {"llm.listenIpInfo": "127.1"})]


def test_v1_switch_role_to_prompt_with_an_inet_aton_shorthand_listens_there() -> None:
    # the mock engine takes the llm.ListenIp / llm.ListenPort the Python layer sends, so
    # "127.1" (which inet_aton accepts and inet_pton does not) works end to end
    port = vs.free_port()
    engine = LLMDataDist(LLMRole.DECODER, 2)
    engine.init(vs.v1_options(**{"llm.EnableSwitchRole": "1"}))
    try:
        engine.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": f"127.1:{port}"})
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass                        # the listener is up at 127.0.0.1
    finally:
        engine.finalize()


def test_v1_switch_role_changes_the_kv_cache_manager_role(v1_decoder: LLMDataDist) -> None:
    manager = v1_decoder.kv_cache_manager
    assert manager._role is LLMRole.DECODER
    v1_decoder.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": f"127.0.0.1:{vs.free_port()}"})
    assert manager._role is LLMRole.PROMPT
    lx(lambda: v1_decoder.switch_role(LLMRole.PROMPT, {}), "role not changed")
    v1_decoder.switch_role(LLMRole.DECODER, {})
    assert manager._role is LLMRole.DECODER


def test_v1_switch_role_needs_enable_switch_role_at_init() -> None:
    engine = LLMDataDist(LLMRole.DECODER, 2)
    engine.init(vs.v1_options())
    try:
        raises(LLMException, lambda: engine.switch_role(LLMRole.PROMPT, {"llm.listenIpInfo": "127.0.0.1:26001"}),
               status=S.LLM_FEATURE_NOT_ENABLED)
    finally:
        engine.finalize()


def test_check_link_status_is_v1_only_and_checks_a_uint64(v2: LLMDataDist) -> None:
    lx(lambda: v2.check_link_status(1), "check_link_status")


def test_check_link_status_reports_not_yet_link_then_returns_once_linked(v1_decoder: LLMDataDist) -> None:
    raises(TypeError, lambda: v1_decoder.check_link_status("1"), "remote_cluster_id")  # type: ignore[arg-type]
    raises(ValueError, lambda: v1_decoder.check_link_status(-1), "remote_cluster_id")
    raises(LLMException, lambda: v1_decoder.check_link_status(1), status=S.LLM_NOT_YET_LINK)
    port = vs.free_port()
    with vs.Peer() as peer:
        peer.run(f"p = LLMDataDist(LLMRole.PROMPT, 1); p.init(support.v1_options({port}))")
        assert v1_decoder.link_clusters([vs.cluster_info(1, port)], 5000) == (S.LLM_SUCCESS, [S.LLM_SUCCESS])
        assert v1_decoder.check_link_status(1) is None
        v1_decoder.unlink_clusters([vs.cluster_info(1, port)], 5000)
        peer.run("p.finalize()")


def test_check_link_status_on_a_v1_prompt_is_param_invalid() -> None:
    engine = LLMDataDist(LLMRole.PROMPT, 1)
    engine.init(vs.v1_options(vs.free_port()))
    try:
        lx(lambda: engine.check_link_status(2))
    finally:
        engine.finalize()
