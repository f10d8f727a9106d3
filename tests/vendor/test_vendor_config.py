"""``LLMRole``, ``LLMConfig``/``LlmConfig`` and ``LLMClusterInfo``: docs/reference/python-api.md §2, §4, §5.

Every property of the python-api.md §4 table is tested for its unset value, its setter checks in
order, its option key and its emission rule; expected option dicts are written out
literally.
"""
from __future__ import annotations

import inspect
import json
from enum import IntEnum
from typing import Any, Callable, Optional

import pytest

from llm_datadist_ffi._vendor.configs import ROLE_OPTION_TEXT, LLMClusterInfo, LLMConfig, LLMRole, LlmConfig
from llm_datadist_ffi.status import LLMException, LLMStatusCode

PARAM_INVALID = 0x5010B005
DEFAULT = {"llm.MemoryUtilization": "0.95"}  # what a fresh config always emits


def raises_lx(call: Callable[[], Any], match: Optional[str] = None) -> LLMException:
    with pytest.raises(LLMException, match=match) as info:
        call()
    assert info.value.status_code == PARAM_INVALID
    assert info.value.status_code is LLMStatusCode.LLM_PARAM_INVALID
    assert not isinstance(info.value, (TypeError, ValueError, AttributeError))
    return info.value


def raises(exc_type: type, call: Callable[[], Any], match: Optional[str] = None) -> BaseException:
    with pytest.raises(exc_type, match=match) as info:
        call()
    assert not isinstance(info.value, LLMException)
    if exc_type is RuntimeError:
        assert type(info.value) is RuntimeError
    return info.value


def setter(cfg: Any, name: str, value: Any) -> Callable[[], None]:
    return lambda: setattr(cfg, name, value)


def emitted(**props: Any) -> dict[str, str]:
    cfg = LLMConfig()
    for name, value in props.items():
        setattr(cfg, name, value)
    return dict(cfg.gen_options())


# ---------------------------------------------------------------------------
# python-api.md §2 LLMRole
# ---------------------------------------------------------------------------


def test_llm_role_is_an_int_enum_prompt_decoder_mix() -> None:
    assert issubclass(LLMRole, IntEnum)
    assert [(m.name, m.value) for m in LLMRole] == [("PROMPT", 1), ("DECODER", 2), ("MIX", 3)]
    assert LLMRole.DECODER == 2


def test_llm_role_str_gives_the_qualified_name() -> None:
    assert str(LLMRole.PROMPT) == "LLMRole.PROMPT"
    assert f"{LLMRole.MIX}" == "LLMRole.MIX"
    assert LLMRole.PROMPT.name == "PROMPT"


def test_role_text_for_the_core_is_prompt_decoder_mix() -> None:
    assert ROLE_OPTION_TEXT == {LLMRole.PROMPT: "Prompt", LLMRole.DECODER: "Decoder", LLMRole.MIX: "Mix"}


# ---------------------------------------------------------------------------
# python-api.md §4 LLMConfig: the object
# ---------------------------------------------------------------------------


def test_llm_config_is_the_same_class_as_llm_config_lower() -> None:
    assert LLMConfig is LlmConfig


def test_llm_config_takes_no_arguments() -> None:
    assert list(inspect.signature(LLMConfig).parameters) == []
    raises(TypeError, lambda: LLMConfig(1))


def test_fresh_config_emits_only_mem_utilization() -> None:
    assert LLMConfig().gen_options() == {"llm.MemoryUtilization": "0.95"}


def test_gen_options_generate_options_and_options_are_one_dict_object() -> None:
    cfg = LLMConfig()
    first = cfg.gen_options()
    assert cfg.generate_options() is first
    assert cfg.options is first
    assert cfg.gen_options() is first


def test_options_is_read_only() -> None:
    raises(AttributeError, setter(LLMConfig(), "options", {}))


def test_options_is_empty_before_the_first_gen_options() -> None:
    assert LLMConfig().options == {}


def test_keys_are_never_removed_from_the_options() -> None:
    cfg = LLMConfig()
    cfg.listen_ip_info = "1.1.1.1:26000"
    cfg.enable_cache_manager = True
    cfg.gen_options()
    cfg.listen_ip_info = ""
    cfg.enable_cache_manager = None
    assert cfg.gen_options() == {"llm.EnableCacheManager": "1", "llm.listenIpInfo": "1.1.1.1:26000",
                                 "llm.MemoryUtilization": "0.95"}


def test_client_keys_added_to_the_returned_dict_stay() -> None:
    cfg = LLMConfig()
    options = cfg.generate_options()
    options["llm.RdmaServiceLevel"] = "4"
    assert cfg.gen_options()["llm.RdmaServiceLevel"] == "4"


def test_unset_getter_values() -> None:
    cfg = LLMConfig()
    assert cfg.ge_options == {}
    assert cfg.device_id is None
    assert cfg.sync_kv_timeout is None
    assert cfg.deploy_res_path == ""
    assert cfg.buf_pool_cfg == ""
    assert cfg.mem_pool_cfg == ""
    assert cfg.host_mem_pool_cfg == ""
    assert cfg.enable_cache_manager is False
    assert cfg.enable_remote_cache_accessible is False
    assert cfg.listen_ip_info == ""
    assert cfg.link_total_time == 0
    assert cfg.link_retry_count == 1
    assert cfg.rdma_traffic_class is None
    assert cfg.rdma_service_level is None
    assert cfg.local_comm_res == ""
    assert cfg.transfer_backend == ""
    assert cfg.global_resource_config == ""
    assert cfg.cluster_info == ""
    assert cfg.output_max_size is None
    assert cfg.enable_switch_role is False
    assert cfg.mem_utilization == 0.95


def test_emission_order_is_ge_options_then_the_table_rows() -> None:
    cfg = LLMConfig()
    cfg.mem_utilization = 0.5
    cfg.enable_switch_role = True
    cfg.output_max_size = 10
    cfg.cluster_info = "{}"
    cfg.global_resource_config = "{}"
    cfg.transfer_backend = "hixl"
    cfg.local_comm_res = ""
    cfg.rdma_service_level = 4
    cfg.rdma_traffic_class = 132
    cfg.link_retry_count = 3
    cfg.link_total_time = 60
    cfg.listen_ip_info = "1.1.1.1:26000"
    cfg.enable_remote_cache_accessible = True
    cfg.enable_cache_manager = True
    cfg.host_mem_pool_cfg = "h"
    cfg.mem_pool_cfg = "m"
    cfg.buf_pool_cfg = "b"
    cfg.deploy_res_path = "/d"
    cfg.sync_kv_timeout = 5000
    cfg.device_id = 1
    cfg.ge_options = {"ge.flowGraphMemMaxSize": "1024", "z.first": "1"}
    assert list(cfg.gen_options().items()) == [
        ("ge.flowGraphMemMaxSize", "1024"),
        ("z.first", "1"),
        ("ge.exec.deviceId", "1"),
        ("ge.session_device_id", "1"),
        ("llm.SyncKvCacheWaitTime", "5000"),
        ("llm.deployResPath", "/d"),
        ("llm.BufPoolCfg", "b"),
        ("llm.MemPoolConfig", "m"),
        ("llm.HostMemPoolConfig", "h"),
        ("llm.EnableCacheManager", "1"),
        ("llm.EnableRemoteCacheAccessible", "1"),
        ("llm.listenIpInfo", "1.1.1.1:26000"),
        ("llm.LinkTotalTime", "60"),
        ("llm.LinkRetryCount", "3"),
        ("llm.RdmaTrafficClass", "132"),
        ("llm.RdmaServiceLevel", "4"),
        ("llm.LocalCommRes", ""),
        ("llm.TransferBackend", "hixl"),
        ("llm.GlobalResourceConfig", "{}"),
        ("llm.ClusterInfo", "{}"),
        ("llm.OutputMaxSize", "10"),
        ("llm.EnableSwitchRole", "1"),
        ("llm.MemoryUtilization", "0.5"),
    ]


def test_a_row_overwrites_a_ge_option_of_the_same_key_which_keeps_its_position() -> None:
    cfg = LLMConfig()
    cfg.ge_options = {"llm.listenIpInfo": "old", "a": "b"}
    cfg.listen_ip_info = "2.2.2.2:1"
    assert list(cfg.gen_options().items()) == [("llm.listenIpInfo", "2.2.2.2:1"), ("a", "b"),
                                              ("llm.MemoryUtilization", "0.95")]


# ---------------------------------------------------------------------------
# ge_options
# ---------------------------------------------------------------------------


def test_ge_options_are_emitted_verbatim() -> None:
    assert emitted(ge_options={"ge.flowGraphMemMaxSize": "2048", "x": "y"}) == {
        "ge.flowGraphMemMaxSize": "2048", "x": "y", **DEFAULT}


def test_ge_options_getter_returns_the_dict_itself_so_items_can_be_added() -> None:
    cfg = LLMConfig()
    cfg.ge_options["hixl.key"] = "1"
    mine = {"a": "1"}
    cfg.gen_options()
    cfg.ge_options = mine
    assert cfg.ge_options is mine
    mine["b"] = "2"
    assert cfg.gen_options() == {"hixl.key": "1", **DEFAULT, "a": "1", "b": "2"}


@pytest.mark.parametrize("value", [[("a", "b")], "a=b", {"a": 1}, {1: "a"}])
def test_ge_options_must_be_a_dict_of_str_to_str(value: Any) -> None:
    raises(TypeError, setter(LLMConfig(), "ge_options", value), "ge_options")


def test_ge_options_none_raises_attribute_error() -> None:
    raises(AttributeError, setter(LLMConfig(), "ge_options", None), "ge_options")


# ---------------------------------------------------------------------------
# device_id
# ---------------------------------------------------------------------------


def test_device_id_int_is_emitted_under_both_keys() -> None:
    assert emitted(device_id=3) == {"ge.exec.deviceId": "3", "ge.session_device_id": "3", **DEFAULT}


@pytest.mark.parametrize("ids", [[0, 1], (0, 1)])
def test_device_id_list_joins_exec_ids_and_uses_the_first_for_the_session(ids: Any) -> None:
    assert emitted(device_id=ids) == {"ge.exec.deviceId": "0;1", "ge.session_device_id": "0", **DEFAULT}


def test_device_id_getter_returns_what_was_set() -> None:
    cfg = LLMConfig()
    ids = [2, 3]
    cfg.device_id = ids
    assert cfg.device_id is ids


@pytest.mark.parametrize("value, exc, match", [
    ("0", TypeError, "device_id"), (1.0, TypeError, "device_id"), (None, TypeError, "device_id"),
    ([0, "1"], TypeError, r"device_id\[1\]"), (-1, LLMException, "device_id"),
    ([0, -1], LLMException, r"device_id\[1\]"), (2**31, ValueError, "device_id"),
    ([2**31], ValueError, r"device_id\[0\]")])
def test_device_id_checks(value: Any, exc: type, match: str) -> None:
    if exc is LLMException:
        raises_lx(setter(LLMConfig(), "device_id", value), match)
    else:
        raises(exc, setter(LLMConfig(), "device_id", value), match)


def test_device_id_accepts_int32_max() -> None:
    assert emitted(device_id=2147483647)["ge.exec.deviceId"] == "2147483647"


def test_device_id_list_checks_item_types_then_signs_then_ranges() -> None:
    raises(TypeError, setter(LLMConfig(), "device_id", [-1, "a"]), r"device_id\[1\]")
    raises_lx(setter(LLMConfig(), "device_id", [2**31, -1]), r"device_id\[1\]")


def test_device_id_empty_list_is_param_invalid() -> None:
    raises_lx(setter(LLMConfig(), "device_id", []), "empty")


# ---------------------------------------------------------------------------
# sync_kv_timeout
# ---------------------------------------------------------------------------


def test_sync_kv_timeout_int_is_emitted_as_text() -> None:
    assert emitted(sync_kv_timeout=5000) == {"llm.SyncKvCacheWaitTime": "5000", **DEFAULT}


def test_sync_kv_timeout_str_is_kept_as_written() -> None:
    assert emitted(sync_kv_timeout="0500") == {"llm.SyncKvCacheWaitTime": "0500", **DEFAULT}


@pytest.mark.parametrize("value, exc, match", [
    (1.5, TypeError, "sync_kv_timeout"), (None, TypeError, "sync_kv_timeout"),
    ("abc", LLMException, "digits"), ("-5", LLMException, "digits"), (" 5", LLMException, "digits"),
    (0, LLMException, "> 0"), ("0", LLMException, "> 0"), ("000", LLMException, "> 0"), (-3, LLMException, "> 0"),
    (2**31, ValueError, "int32"), ("2147483648", ValueError, "int32")])
def test_sync_kv_timeout_checks(value: Any, exc: type, match: str) -> None:
    if exc is LLMException:
        raises_lx(setter(LLMConfig(), "sync_kv_timeout", value), match)
    else:
        raises(exc, setter(LLMConfig(), "sync_kv_timeout", value), match)


def test_sync_kv_timeout_accepts_int32_max() -> None:
    assert emitted(sync_kv_timeout="2147483647") == {"llm.SyncKvCacheWaitTime": "2147483647", **DEFAULT}


# ---------------------------------------------------------------------------
# String options emitted when non-empty
# ---------------------------------------------------------------------------

NON_EMPTY_STR = [("deploy_res_path", "llm.deployResPath"), ("buf_pool_cfg", "llm.BufPoolCfg"),
                 ("mem_pool_cfg", "llm.MemPoolConfig"), ("host_mem_pool_cfg", "llm.HostMemPoolConfig"),
                 ("listen_ip_info", "llm.listenIpInfo")]


@pytest.mark.parametrize("name, key", NON_EMPTY_STR)
def test_string_option_is_emitted_when_non_empty(name: str, key: str) -> None:
    assert emitted(**{name: "v"}) == {key: "v", **DEFAULT}
    assert emitted(**{name: ""}) == DEFAULT


@pytest.mark.parametrize("name, key", NON_EMPTY_STR)
def test_string_option_stores_none_and_emits_nothing_for_it(name: str, key: str) -> None:
    cfg = LLMConfig()
    setattr(cfg, name, None)
    assert getattr(cfg, name) is None
    assert cfg.gen_options() == DEFAULT


@pytest.mark.parametrize("name, key", NON_EMPTY_STR)
def test_string_option_rejects_a_non_str(name: str, key: str) -> None:
    raises(TypeError, setter(LLMConfig(), name, 1), name)


def test_mem_pool_cfg_json_is_passed_through() -> None:
    pool = '{"memory_size": 1073741824, "page_shift": 16}'
    assert emitted(mem_pool_cfg=pool)["llm.MemPoolConfig"] == pool


def test_listen_ip_info_key_starts_with_a_lower_case_l() -> None:
    assert "llm.listenIpInfo" in emitted(listen_ip_info="192.168.1.1:26000")


# ---------------------------------------------------------------------------
# Boolean switches emitted whenever set
# ---------------------------------------------------------------------------

FLAGS = [("enable_cache_manager", "llm.EnableCacheManager"),
         ("enable_remote_cache_accessible", "llm.EnableRemoteCacheAccessible")]


@pytest.mark.parametrize("name, key", FLAGS)
def test_flag_is_emitted_as_1_or_0_once_set(name: str, key: str) -> None:
    assert emitted(**{name: True}) == {key: "1", **DEFAULT}
    assert emitted(**{name: False}) == {key: "0", **DEFAULT}


@pytest.mark.parametrize("name, key", FLAGS)
def test_flag_none_resets_to_unset(name: str, key: str) -> None:
    cfg = LLMConfig()
    setattr(cfg, name, True)
    setattr(cfg, name, None)
    assert getattr(cfg, name) is False
    assert cfg.gen_options() == DEFAULT


@pytest.mark.parametrize("name, key", FLAGS)
@pytest.mark.parametrize("value", [1, "1", 1.0])
def test_flag_must_be_a_bool(name: str, key: str, value: Any) -> None:
    raises(TypeError, setter(LLMConfig(), name, value), name)


@pytest.mark.parametrize("name, key", FLAGS)
def test_flag_getter_returns_the_value(name: str, key: str) -> None:
    cfg = LLMConfig()
    setattr(cfg, name, True)
    assert getattr(cfg, name) is True


# ---------------------------------------------------------------------------
# link_total_time, link_retry_count
# ---------------------------------------------------------------------------


def test_link_total_time_is_emitted_once_set_even_0() -> None:
    assert emitted(link_total_time=0) == {"llm.LinkTotalTime": "0", **DEFAULT}
    assert emitted(link_total_time=4294967295) == {"llm.LinkTotalTime": "4294967295", **DEFAULT}


@pytest.mark.parametrize("value, exc", [("1", TypeError), (1.0, TypeError), (None, TypeError),
                                        (-1, LLMException), (2**32, LLMException)])
def test_link_total_time_checks(value: Any, exc: type) -> None:
    if exc is LLMException:
        raises_lx(setter(LLMConfig(), "link_total_time", value), "link_total_time")
    else:
        raises(exc, setter(LLMConfig(), "link_total_time", value), "link_total_time")


def test_link_retry_count_is_emitted_once_set() -> None:
    assert emitted(link_retry_count=1) == {"llm.LinkRetryCount": "1", **DEFAULT}
    assert emitted(link_retry_count=100) == {"llm.LinkRetryCount": "100", **DEFAULT}


@pytest.mark.parametrize("value, exc", [("1", TypeError), (None, TypeError), (0, LLMException),
                                        (101, LLMException)])
def test_link_retry_count_checks(value: Any, exc: type) -> None:
    if exc is LLMException:
        raises_lx(setter(LLMConfig(), "link_retry_count", value), "link_retry_count")
    else:
        raises(exc, setter(LLMConfig(), "link_retry_count", value), "link_retry_count")


class Text(str):
    """A str subclass: the vendor's getters give back the very object set."""


def test_getters_give_back_the_value_set_unconverted_as_the_vendors_do() -> None:
    cfg = LLMConfig()
    cfg.link_total_time = True                 # a bool is an int to the vendor's check
    cfg.link_retry_count = True
    assert cfg.link_total_time is True and cfg.link_retry_count is True
    assert cfg.generate_options()["llm.LinkTotalTime"] == "True"
    for name in ("local_comm_res", "transfer_backend", "global_resource_config"):
        value = Text("x")
        setattr(cfg, name, value)
        assert getattr(cfg, name) is value, name


def test_link_getters_return_the_value_once_set() -> None:
    cfg = LLMConfig()
    cfg.link_total_time = 1080
    cfg.link_retry_count = 80
    assert (cfg.link_total_time, cfg.link_retry_count) == (1080, 80)


# ---------------------------------------------------------------------------
# rdma_traffic_class, rdma_service_level
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name, key", [("rdma_traffic_class", "llm.RdmaTrafficClass"),
                                       ("rdma_service_level", "llm.RdmaServiceLevel")])
def test_rdma_option_is_a_uint32_emitted_once_set(name: str, key: str) -> None:
    assert emitted(**{name: 0}) == {key: "0", **DEFAULT}
    assert emitted(**{name: 4294967295}) == {key: "4294967295", **DEFAULT}
    raises(TypeError, setter(LLMConfig(), name, "4"), name)
    raises(TypeError, setter(LLMConfig(), name, None), name)
    raises(ValueError, setter(LLMConfig(), name, -1), name)
    raises(ValueError, setter(LLMConfig(), name, 2**32), name)


# ---------------------------------------------------------------------------
# String options emitted whenever set, also ""
# ---------------------------------------------------------------------------

SET_STR = [("local_comm_res", "llm.LocalCommRes"), ("transfer_backend", "llm.TransferBackend"),
           ("global_resource_config", "llm.GlobalResourceConfig")]


@pytest.mark.parametrize("name, key", SET_STR)
def test_set_string_option_is_emitted_even_empty(name: str, key: str) -> None:
    assert emitted(**{name: ""}) == {key: "", **DEFAULT}
    assert emitted(**{name: "x"}) == {key: "x", **DEFAULT}


@pytest.mark.parametrize("name, key", SET_STR)
def test_set_string_option_none_resets_to_unset(name: str, key: str) -> None:
    cfg = LLMConfig()
    setattr(cfg, name, "x")
    setattr(cfg, name, None)
    assert getattr(cfg, name) == ""
    assert cfg.gen_options() == DEFAULT


@pytest.mark.parametrize("name, key", SET_STR)
def test_set_string_option_rejects_a_non_str(name: str, key: str) -> None:
    raises(TypeError, setter(LLMConfig(), name, 0), name)


# ---------------------------------------------------------------------------
# cluster_info, output_max_size, enable_switch_role, mem_utilization
# ---------------------------------------------------------------------------


def test_cluster_info_listen_ips_are_converted_little_endian() -> None:
    text = '{"cluster_id": 0, "listen_ip_info": [{"ip": "1.2.3.4", "port": 26000}, {"ip": 5, "port": 1}]}'
    cfg = LLMConfig()
    cfg.cluster_info = text
    assert cfg.cluster_info == text
    assert json.loads(cfg.gen_options()["llm.ClusterInfo"]) == {
        "cluster_id": 0, "listen_ip_info": [{"ip": 67305985, "port": 26000}, {"ip": 5, "port": 1}]}


def test_cluster_info_without_listen_ips_is_dumped_unchanged() -> None:
    assert emitted(cluster_info='{"a": [1, 2]}') == {"llm.ClusterInfo": '{"a": [1, 2]}', **DEFAULT}


def test_cluster_info_invalid_json_raises_json_decode_error_a_value_error() -> None:
    error = raises(json.JSONDecodeError, setter(LLMConfig(), "cluster_info", "{not json"))
    assert isinstance(error, ValueError)


def test_cluster_info_unparsable_ip_raises_plain_runtime_error() -> None:
    raises(RuntimeError, setter(LLMConfig(), "cluster_info", '{"listen_ip_info": [{"ip": "not-an-ip"}]}'),
           "^Can not parse ip str:not-an-ip$")


@pytest.mark.parametrize("value", [5, None, {"a": 1}])
def test_cluster_info_must_be_a_str(value: Any) -> None:
    raises(TypeError, setter(LLMConfig(), "cluster_info", value), "cluster_info")


def test_output_max_size_is_emitted_when_not_none() -> None:
    assert emitted(output_max_size=1024) == {"llm.OutputMaxSize": "1024", **DEFAULT}
    assert emitted(output_max_size=None) == DEFAULT
    raises(TypeError, setter(LLMConfig(), "output_max_size", "1"), "output_max_size")


def test_enable_switch_role_is_emitted_only_when_true() -> None:
    assert emitted(enable_switch_role=True) == {"llm.EnableSwitchRole": "1", **DEFAULT}
    assert emitted(enable_switch_role=False) == DEFAULT
    assert emitted(enable_switch_role=None) == DEFAULT
    raises(TypeError, setter(LLMConfig(), "enable_switch_role", 1), "enable_switch_role")


def test_mem_utilization_is_always_emitted() -> None:
    assert emitted(mem_utilization=0.5) == {"llm.MemoryUtilization": "0.5"}
    assert emitted(mem_utilization=0.0) == {"llm.MemoryUtilization": "0.0"}
    assert emitted(mem_utilization=1.0) == {"llm.MemoryUtilization": "1.0"}


@pytest.mark.parametrize("value, exc", [(1, TypeError), ("0.5", TypeError), (None, TypeError),
                                        (1.5, LLMException), (-0.1, LLMException), (float("nan"), LLMException)])
def test_mem_utilization_checks(value: Any, exc: type) -> None:
    if exc is LLMException:
        raises_lx(setter(LLMConfig(), "mem_utilization", value), "mem_utilization")
    else:
        raises(exc, setter(LLMConfig(), "mem_utilization", value), "mem_utilization")


def test_a_failed_setter_keeps_the_previous_value() -> None:
    cfg = LLMConfig()
    cfg.sync_kv_timeout = 100
    raises_lx(setter(cfg, "sync_kv_timeout", 0))
    assert cfg.sync_kv_timeout == 100


# ---------------------------------------------------------------------------
# python-api.md §5 LLMClusterInfo
# ---------------------------------------------------------------------------


def test_cluster_info_takes_no_arguments_and_starts_empty() -> None:
    assert list(inspect.signature(LLMClusterInfo).parameters) == []
    info = LLMClusterInfo()
    assert info.remote_cluster_id is None
    assert info.remote_role_type is None
    assert info.local_ip_info_list == [] and info.remote_ip_info_list == []


def test_remote_cluster_id_is_a_uint64() -> None:
    info = LLMClusterInfo()
    info.remote_cluster_id = 18446744073709551615
    assert info.remote_cluster_id == 18446744073709551615
    raises(TypeError, setter(info, "remote_cluster_id", None), "remote_cluster_id")
    raises(TypeError, setter(info, "remote_cluster_id", "1"), "remote_cluster_id")
    raises(ValueError, setter(info, "remote_cluster_id", -1), "remote_cluster_id")
    raises(ValueError, setter(info, "remote_cluster_id", 2**64), "remote_cluster_id")


def test_remote_role_type_accepts_role_int_or_none() -> None:
    info = LLMClusterInfo()
    info.remote_role_type = LLMRole.PROMPT
    assert info.remote_role_type is LLMRole.PROMPT
    info.remote_role_type = 7
    assert info.remote_role_type == 7
    info.remote_role_type = None
    assert info.remote_role_type is None
    raises(TypeError, setter(info, "remote_role_type", "PROMPT"), "remote_role_type")


@pytest.mark.parametrize("ip, expected", [("1.2.3.4", 67305985), ("192.168.1.2", 0x0201A8C0),
                                          ("127.1", 16777343), ("0.0.0.0", 0), ("255.255.255.255", 4294967295)])
def test_append_ip_info_converts_ipv4_little_endian(ip: str, expected: int) -> None:
    info = LLMClusterInfo()
    info.append_local_ip_info(ip, 26000)
    info.append_remote_ip_info(ip, 26001)
    assert info.local_ip_info_list == [(expected, 26000)]
    assert info.remote_ip_info_list == [(expected, 26001)]


def test_append_ip_info_keeps_an_int_ip_unchanged() -> None:
    info = LLMClusterInfo()
    info.append_local_ip_info(2**40, 1)
    assert info.local_ip_info_list == [(2**40, 1)]


def test_append_ip_info_stores_a_none_ip() -> None:
    info = LLMClusterInfo()
    info.append_remote_ip_info(None, 1)
    assert info.remote_ip_info_list == [(None, 1)]


def test_append_ip_info_accepts_port_0_and_65535() -> None:
    info = LLMClusterInfo()
    info.append_local_ip_info("1.1.1.1", 0)
    info.append_local_ip_info("1.1.1.1", 65535)
    assert [port for _, port in info.local_ip_info_list] == [0, 65535]


@pytest.mark.parametrize("method", ["append_local_ip_info", "append_remote_ip_info"])
def test_append_ip_info_checks(method: str) -> None:
    info = LLMClusterInfo()
    append = getattr(info, method)
    raises(TypeError, lambda: append(1.5, 1), "ip")
    raises(TypeError, lambda: append("1.1.1.1", "1"), "port")
    raises(TypeError, lambda: append("1.1.1.1", None), "port")
    raises(ValueError, lambda: append("1.1.1.1", 65536), "port")
    raises(ValueError, lambda: append("1.1.1.1", -1), "port")
    raises(RuntimeError, lambda: append("bad", 1), "^Can not parse ip str:bad$")
    assert info.local_ip_info_list == [] and info.remote_ip_info_list == []


def test_append_ip_info_checks_ip_type_then_port_then_parses_the_ip() -> None:
    info = LLMClusterInfo()
    raises(TypeError, lambda: info.append_local_ip_info(1.5, -1), "ip")
    raises(ValueError, lambda: info.append_local_ip_info("bad", -1), "port")


def test_ip_info_lists_are_the_same_objects_in_append_order() -> None:
    info = LLMClusterInfo()
    local = info.local_ip_info_list
    info.append_local_ip_info("1.0.0.0", 1)
    info.append_local_ip_info("2.0.0.0", 2)
    assert info.local_ip_info_list is local
    assert local == [(1, 1), (2, 2)]
    assert info.remote_ip_info_list is info.remote_ip_info_list


def test_ip_info_lists_are_read_only_properties() -> None:
    raises(AttributeError, setter(LLMClusterInfo(), "local_ip_info_list", []))
    raises(AttributeError, setter(LLMClusterInfo(), "remote_ip_info_list", []))
