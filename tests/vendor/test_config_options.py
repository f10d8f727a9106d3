"""The declared options of ``LLMConfig`` and the descriptors behind them (``_options.py``).

The options dict is rendered from the ``Option`` declarations of the class, so these
tests hold the declarations and the dict against each other (nothing declared is left
out of the dict, nothing in the dict is undeclared) and both against the vendor's
table of python-api.md §4, written out here by hand: property names in table order, and the whole
dict of a fresh and of a fully set config.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import pytest

from llm_datadist_ffi._vendor._options import Checked, Option, declared_options, int_in, of_type, reset_by_none
from llm_datadist_ffi._vendor._vendor_checks import UINT32
from llm_datadist_ffi._vendor.configs import LLMConfig

# The vendor's python-api.md §4 table, in its order (``options`` is the read-only result, not an option).
VENDOR_PROPERTIES = [
    "ge_options", "device_id", "sync_kv_timeout", "deploy_res_path", "buf_pool_cfg", "mem_pool_cfg",
    "host_mem_pool_cfg", "enable_cache_manager", "enable_remote_cache_accessible", "listen_ip_info",
    "link_total_time", "link_retry_count", "rdma_traffic_class", "rdma_service_level", "local_comm_res",
    "transfer_backend", "global_resource_config", "cluster_info", "output_max_size", "enable_switch_role",
    "mem_utilization",
]

# One value per option that makes it emit; chosen to hit the rules' edges: False and 0
# and "" are emitted once set, a str timeout is kept as written, ids are joined.
FULL: Dict[str, Any] = {
    "ge_options": {"ge.flowGraphMemMaxSize": "2147483648"},
    "device_id": [0, 1],
    "sync_kv_timeout": "0500",
    "deploy_res_path": "/opt/deploy",
    "buf_pool_cfg": '{"buf_cfg": []}',
    "mem_pool_cfg": '{"memory_size": 1073741824, "page_shift": 16}',
    "host_mem_pool_cfg": '{"memory_size": 4096}',
    "enable_cache_manager": False,
    "enable_remote_cache_accessible": True,
    "listen_ip_info": "192.168.1.2:26000",
    "link_total_time": 0,
    "link_retry_count": 100,
    "rdma_traffic_class": 132,
    "rdma_service_level": 4,
    "local_comm_res": "",
    "transfer_backend": "hixl",
    "global_resource_config": '{"a": 1}',
    "cluster_info": '{"cluster_id": 1, "listen_ip_info": [{"ip": "192.168.1.2", "port": 26000}]}',
    "output_max_size": 1024,
    "enable_switch_role": True,
    "mem_utilization": 0.9,
}

# What python-api.md §4 says FULL emits, in emission order ("192.168.1.2" is 0x0201A8C0 = 33663168).
FULL_OPTIONS: List[Tuple[str, str]] = [
    ("ge.flowGraphMemMaxSize", "2147483648"),
    ("ge.exec.deviceId", "0;1"),
    ("ge.session_device_id", "0"),
    ("llm.SyncKvCacheWaitTime", "0500"),
    ("llm.deployResPath", "/opt/deploy"),
    ("llm.BufPoolCfg", '{"buf_cfg": []}'),
    ("llm.MemPoolConfig", '{"memory_size": 1073741824, "page_shift": 16}'),
    ("llm.HostMemPoolConfig", '{"memory_size": 4096}'),
    ("llm.EnableCacheManager", "0"),
    ("llm.EnableRemoteCacheAccessible", "1"),
    ("llm.listenIpInfo", "192.168.1.2:26000"),
    ("llm.LinkTotalTime", "0"),
    ("llm.LinkRetryCount", "100"),
    ("llm.RdmaTrafficClass", "132"),
    ("llm.RdmaServiceLevel", "4"),
    ("llm.LocalCommRes", ""),
    ("llm.TransferBackend", "hixl"),
    ("llm.GlobalResourceConfig", '{"a": 1}'),
    ("llm.ClusterInfo", '{"cluster_id": 1, "listen_ip_info": [{"ip": 33663168, "port": 26000}]}'),
    ("llm.OutputMaxSize", "1024"),
    ("llm.EnableSwitchRole", "1"),
    ("llm.MemoryUtilization", "0.9"),
]


def configured(values: Dict[str, Any]) -> LLMConfig:
    cfg = LLMConfig()
    for name, value in values.items():
        setattr(cfg, name, value)
    return cfg


def declared_names() -> List[str]:
    return [option.name for option in declared_options(LLMConfig)]


# ---------------------------------------------------------------------------
# The declarations against the vendor's table
# ---------------------------------------------------------------------------


def test_llm_config_declares_the_vendor_properties_in_the_vendor_order() -> None:
    assert declared_names() == VENDOR_PROPERTIES


def test_every_declared_option_is_an_attribute_of_the_class_under_its_own_name() -> None:
    for option in declared_options(LLMConfig):
        assert vars(LLMConfig)[option.name] is option


def test_the_fully_set_values_cover_every_declared_option() -> None:
    # FULL must name each option, or the two-way test below would not see a new one.
    assert sorted(FULL) == sorted(declared_names())


# ---------------------------------------------------------------------------
# The declarations against the generated dict
# ---------------------------------------------------------------------------


def test_every_declared_key_is_in_the_dict_of_a_fully_set_config_and_every_key_in_it_is_declared() -> None:
    options = configured(FULL).gen_options()
    declared = {key for option in declared_options(LLMConfig) for key in option.keys}
    passed_through = set(FULL["ge_options"])
    assert declared - set(options) == set()
    assert set(options) - declared - passed_through == set()


@pytest.mark.parametrize("name", VENDOR_PROPERTIES)
def test_one_set_option_adds_only_its_own_keys_to_a_fresh_config_dict(name: str) -> None:
    option = vars(LLMConfig)[name]
    fresh = set(LLMConfig().gen_options())
    added = set(configured({name: FULL[name]}).gen_options()) - fresh
    own = set(FULL["ge_options"]) if name == "ge_options" else set(option.keys)
    assert added == own - fresh


def test_the_keys_of_the_declarations_are_the_vendor_keys() -> None:
    assert [(option.name, option.keys) for option in declared_options(LLMConfig)] == [
        ("ge_options", ()),
        ("device_id", ("ge.exec.deviceId", "ge.session_device_id")),
        ("sync_kv_timeout", ("llm.SyncKvCacheWaitTime",)),
        ("deploy_res_path", ("llm.deployResPath",)),
        ("buf_pool_cfg", ("llm.BufPoolCfg",)),
        ("mem_pool_cfg", ("llm.MemPoolConfig",)),
        ("host_mem_pool_cfg", ("llm.HostMemPoolConfig",)),
        ("enable_cache_manager", ("llm.EnableCacheManager",)),
        ("enable_remote_cache_accessible", ("llm.EnableRemoteCacheAccessible",)),
        ("listen_ip_info", ("llm.listenIpInfo",)),
        ("link_total_time", ("llm.LinkTotalTime",)),
        ("link_retry_count", ("llm.LinkRetryCount",)),
        ("rdma_traffic_class", ("llm.RdmaTrafficClass",)),
        ("rdma_service_level", ("llm.RdmaServiceLevel",)),
        ("local_comm_res", ("llm.LocalCommRes",)),
        ("transfer_backend", ("llm.TransferBackend",)),
        ("global_resource_config", ("llm.GlobalResourceConfig",)),
        ("cluster_info", ("llm.ClusterInfo",)),
        ("output_max_size", ("llm.OutputMaxSize",)),
        ("enable_switch_role", ("llm.EnableSwitchRole",)),
        ("mem_utilization", ("llm.MemoryUtilization",)),
    ]


# ---------------------------------------------------------------------------
# The whole dict, pinned
# ---------------------------------------------------------------------------


def test_a_fresh_config_emits_exactly_the_memory_utilization_default() -> None:
    assert list(LLMConfig().gen_options().items()) == [("llm.MemoryUtilization", "0.95")]


def test_a_fully_set_config_emits_exactly_the_vendor_dict_in_the_vendor_order() -> None:
    assert list(configured(FULL).gen_options().items()) == FULL_OPTIONS


def test_a_fully_set_config_reads_back_what_was_set() -> None:
    cfg = configured(FULL)
    assert {name: getattr(cfg, name) for name in VENDOR_PROPERTIES} == FULL


RESET_BY_NONE = {"enable_cache_manager": "llm.EnableCacheManager",
                 "enable_remote_cache_accessible": "llm.EnableRemoteCacheAccessible",
                 "local_comm_res": "llm.LocalCommRes", "transfer_backend": "llm.TransferBackend",
                 "global_resource_config": "llm.GlobalResourceConfig"}


def test_options_reset_by_none_read_their_default_and_are_left_out_of_the_dict() -> None:
    cfg = configured(FULL)
    for name in RESET_BY_NONE:
        setattr(cfg, name, None)
    assert [getattr(cfg, name) for name in RESET_BY_NONE] == [False, False, "", "", ""]
    assert list(cfg.gen_options().items()) == [
        (key, value) for key, value in FULL_OPTIONS if key not in RESET_BY_NONE.values()]


# ---------------------------------------------------------------------------
# The descriptors themselves
# ---------------------------------------------------------------------------


class Sample:
    count = Checked(int_in(UINT32), doc="A count, never defaulted.")
    label = Checked(of_type(str), default="none", doc="A label.")
    flag = Option("x.Flag", check=reset_by_none(bool), default=False, emit=lambda k, v, s: [(k[0], str(v))],
                  doc="A flag that None resets.")


def test_a_checked_attribute_without_default_is_missing_until_set() -> None:
    with pytest.raises(AttributeError, match="'Sample' object has no attribute 'count'"):
        Sample().count


def test_a_checked_attribute_checks_under_its_own_name_and_keeps_the_old_value_on_failure() -> None:
    sample = Sample()
    sample.count = 7
    with pytest.raises(ValueError, match="count is -1, outside the uint32 range"):
        sample.count = -1
    assert sample.count == 7


def test_a_checked_attribute_gives_its_default_until_set_and_stores_none_when_none_passes() -> None:
    sample = Sample()
    assert sample.label == "none"
    sample.label = None  # type: ignore[assignment]
    assert sample.label is None
    assert not Sample().__dict__


def test_none_puts_a_resettable_option_back_to_its_default_and_to_unset() -> None:
    sample = Sample()
    sample.flag = True
    assert (sample.flag, Sample.flag.is_set(sample)) == (True, True)
    sample.flag = None
    assert (sample.flag, Sample.flag.is_set(sample)) == (False, False)


def test_the_class_attribute_is_the_descriptor_carrying_the_docstring() -> None:
    assert isinstance(LLMConfig.device_id, Option)
    assert LLMConfig.device_id.__doc__ == "The device id, or the list of device ids, as given; ``None`` until set."
    assert Sample.count.__doc__ == "A count, never defaulted."


def test_each_config_gets_its_own_ge_options_dict() -> None:
    first, second = LLMConfig(), LLMConfig()
    first.ge_options["a"] = "1"
    assert second.ge_options == {}
    assert first.ge_options is not second.ge_options


def test_the_declared_options_of_a_subclass_follow_those_of_its_base() -> None:
    class Extended(LLMConfig):
        extra = Option(
            "x.Extra", check=of_type(str), default=None, emit=lambda k, v, s: [(k[0], str(v))] if v else [],
            doc="An option of the subclass.")

    assert [option.name for option in declared_options(Extended)] == VENDOR_PROPERTIES + ["extra"]
    cfg = Extended()
    cfg.extra = "e"
    assert list(cfg.gen_options().items()) == [("llm.MemoryUtilization", "0.95"), ("x.Extra", "e")]
