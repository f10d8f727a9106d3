"""The vendor's ``llm_datadist.configs``: ``LLMRole``, ``LLMClusterInfo``, ``LlmConfig``.

``LlmConfig`` (also exported as ``LLMConfig``) collects engine options through typed
attributes and turns them into the ``Dict[str, str]`` that ``LLMDataDist.init``
takes (docs/reference/python-api.md §4). Three vendor behaviours matter to clients and are kept:

* ``gen_options()``/``generate_options()`` return one dict object, the same on every
  call, and only ever add to it; clients add raw keys to it before ``init``;
* ``ge_options`` returns the dict it holds, so ``cfg.ge_options[k] = v`` adds an
  option;
* each option has its own notion of "unset" (``None``, ``""``, a default getter
  value) and its own emission rule.

Each option is declared once, as an ``Option`` (``_options.py``) holding its keys,
check, default and emission rule; the declarations are in the vendor's emission order,
and ``gen_options()`` renders them in that order.

``LLMClusterInfo`` describes one peer for ``link_clusters``/``unlink_clusters``
(docs/reference/python-api.md §5); its IP lists hold ``(ip_int, port)`` tuples with the vendor's
little-endian IPv4 integers, which ``trans_str_ip`` (the vendor's module helper, also
used by client code) makes from ip text.

Pure Python: nothing here calls the native layer.
"""
from __future__ import annotations

import json
from enum import IntEnum
from typing import Any, Dict, List, Optional, Tuple, Union

from ._options import (
    Check, Checked, Option, always, flag_when_set, int_in, of_type, render_options, reset_by_none, verbatim,
    when_non_empty, when_not_none, when_set, when_true,
)
from ._vendor_checks import (
    INT32, UINT16, UINT64, UINT32, check_int, check_type, ip_to_int, none_error, raise_param_invalid, type_name,
)

__all__ = ["LLMRole", "LLMClusterInfo", "LlmConfig", "LLMConfig"]


class LLMRole(IntEnum):
    """The engine role. Members compare equal to ints; ``str()`` gives ``"LLMRole.PROMPT"``."""

    PROMPT = 1
    DECODER = 2
    MIX = 3

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, format_spec: str) -> str:
        return format(str(self), format_spec)


#: The role text the vendor passes to its core as ``llm.Role``.
ROLE_OPTION_TEXT: Dict[LLMRole, str] = {
    LLMRole.PROMPT: "Prompt", LLMRole.DECODER: "Decoder", LLMRole.MIX: "Mix",
}


def trans_str_ip(ip: Any) -> Any:
    """The vendor's helper for one ip: text becomes its little-endian IPv4 integer
    (``inet_aton``, so shorthand forms such as ``"127.1"`` parse), anything else is
    returned unchanged.

    Raises:
        RuntimeError: ``"Can not parse ip str:<ip>"`` for text that does not parse.
    """
    if isinstance(ip, str):
        return ip_to_int(ip)
    return ip


IpInfo = Tuple[Optional[int], int]
"""One ``(ip_int, port)`` entry of an ``LLMClusterInfo`` IP list; the ip is ``None``
when ``None`` was appended (the vendor stores it)."""


class LLMClusterInfo:
    """One peer cluster for ``link_clusters``/``unlink_clusters`` (docs/reference/python-api.md §5).

    ``LLMClusterInfo()`` takes no arguments; fill it with ``remote_cluster_id`` and the
    ``append_*_ip_info`` methods.
    """

    remote_cluster_id = Checked(
        int_in(UINT64), default=None,
        doc="The peer's cluster id; ``None`` until set. The setter raises ``TypeError`` (not an "
            "int, or ``None``) or ``ValueError`` (outside uint64).")
    remote_role_type = Checked(
        of_type(LLMRole, int), default=None,
        doc="The peer's role as given; ``None`` until set. Never sent to the core. The setter "
            "raises ``TypeError`` unless the value is an ``LLMRole``, an ``int`` or ``None``.")

    def __init__(self) -> None:
        self._local_ip_info_list: List[IpInfo] = []
        self._remote_ip_info_list: List[IpInfo] = []

    @property
    def local_ip_info_list(self) -> List[IpInfo]:
        """The list object of local ``(ip_int, port)`` entries."""
        return self._local_ip_info_list

    @property
    def remote_ip_info_list(self) -> List[IpInfo]:
        """The list object of remote ``(ip_int, port)`` entries."""
        return self._remote_ip_info_list

    def append_local_ip_info(self, ip: Union[str, int], port: int) -> None:
        """Append a local address; ``ip`` is dotted IPv4 text or the vendor's ip integer.

        Raises:
            TypeError: ``ip`` is neither ``str`` nor ``int`` (``None`` is stored as
                ``None``), or ``port`` is not an int.
            ValueError: ``port`` is outside uint16.
            RuntimeError: ``"Can not parse ip str:<ip>"`` for unparsable ip text.
        """
        self._local_ip_info_list.append(_ip_info(ip, port, "local"))

    def append_remote_ip_info(self, ip: Union[str, int], port: int) -> None:
        """Append a remote address; same rules as ``append_local_ip_info``.

        Raises:
            TypeError: ``ip`` is neither ``str`` nor ``int``, or ``port`` is not an int.
            ValueError: ``port`` is outside uint16.
            RuntimeError: ``"Can not parse ip str:<ip>"`` for unparsable ip text.
        """
        self._remote_ip_info_list.append(_ip_info(ip, port, "remote"))

    def __repr__(self) -> str:
        return (f"LLMClusterInfo(remote_cluster_id={self.remote_cluster_id!r}, "
                f"remote_role_type={self.remote_role_type!r}, "
                f"local_ip_info_list={self._local_ip_info_list!r}, "
                f"remote_ip_info_list={self._remote_ip_info_list!r})")


def _ip_info(ip: Union[str, int], port: int, side: str) -> IpInfo:
    check_type(ip, (str, int), f"{side} ip")
    checked_port = check_int(port, f"{side} port", UINT16)
    return (trans_str_ip(ip), checked_port)


# ---------------------------------------------------------------------------
# LlmConfig
# ---------------------------------------------------------------------------

DeviceIds = Union[int, List[int], Tuple[int, ...]]


def _check_ge_options(name: str, value: Dict[str, str]) -> Dict[str, str]:
    """Raises ``TypeError`` (not a dict, or a non-str key or value) or ``AttributeError``
    (``None``, as in the vendor)."""
    if value is None:
        raise none_error(name, "a dict of str to str", AttributeError)
    check_type(value, dict, name)
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"{name} keys and values must be str, got {key!r}: {item!r}")
    return value


def _check_device_id(name: str, value: DeviceIds) -> DeviceIds:
    """Raises ``TypeError`` (not an int or a list/tuple of int; ``None``),
    ``LLMException`` (``LLM_PARAM_INVALID``: an id < 0, or an empty list) or
    ``ValueError`` (an id above int32)."""
    if value is None:
        raise none_error(name, "an int or a list/tuple of int")
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            if not isinstance(item, int):
                raise TypeError(f"{name}[{index}] must be int, not {type_name(item)}")
        for index, item in enumerate(value):
            if item < 0:
                raise_param_invalid(f"{name}[{index}] is {item}; device ids must be >= 0")
        for index, item in enumerate(value):
            check_int(item, f"{name}[{index}]", INT32)
        if not value:
            # The vendor emits str(value[0]) and fails with IndexError in gen_options.
            raise_param_invalid(f"{name} must not be an empty list")
    elif isinstance(value, int):
        if value < 0:
            raise_param_invalid(f"{name} is {value}; device ids must be >= 0")
        check_int(value, name, INT32)
    else:
        raise TypeError(f"{name} must be int or a list/tuple of int, not {type_name(value)}")
    return value


def _emit_device_id(keys: Tuple[str, ...], ids: Optional[DeviceIds], is_set: bool) -> List[Tuple[str, str]]:
    exec_key, session_key = keys
    if ids is None:
        return []
    if isinstance(ids, (list, tuple)):
        return [(exec_key, ";".join(str(i) for i in ids)), (session_key, str(ids[0]))]
    return [(exec_key, str(ids)), (session_key, str(ids))]


def _check_sync_kv_timeout(name: str, value: Union[int, str]) -> Union[int, str]:
    """Raises ``TypeError`` (not int or str; ``None``), ``LLMException``
    (``LLM_PARAM_INVALID``: a str that is not all digits, or a value <= 0) or
    ``ValueError`` (above int32)."""
    if value is None:
        raise none_error(name, "an int or a digit string")
    check_type(value, (int, str), name)
    if isinstance(value, str) and not value.isdigit():
        raise_param_invalid(f"{name} {value!r} must be a string of digits")
    try:
        number = int(value)
    except ValueError:  # str.isdigit() accepts digits int() rejects, e.g. "²"
        raise ValueError(f"{name} {value!r} is not a decimal integer") from None
    if number <= 0:
        raise_param_invalid(f"{name} is {number}; it must be > 0")
    check_int(number, name, INT32)
    return value


def _int_between(low: int, high: int) -> Check[int, int]:
    """An int in ``[low, high]``: ``TypeError`` (not an int; ``None``), else
    ``LLMException`` (``LLM_PARAM_INVALID``) outside the bounds."""
    def check(name: str, value: int) -> int:
        if value is None:
            raise none_error(name, "an int")
        check_type(value, int, name)
        if not low <= value <= high:
            raise_param_invalid(f"{name} is {value}; it must be in [{low}, {high}]")
        return value
    return check


def _cluster_info_json(text: str) -> str:
    """The text the vendor emits for ``cluster_info``: the JSON with every
    ``listen_ip_info`` entry's ``"ip"`` made an ip integer."""
    parsed = json.loads(text)
    if isinstance(parsed, dict) and "listen_ip_info" in parsed:
        entries = parsed["listen_ip_info"]
        if not isinstance(entries, list):
            raise TypeError(f"cluster_info listen_ip_info must be a JSON list, not {type_name(entries)}")
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get("ip"), str):
                entry["ip"] = ip_to_int(entry["ip"])
    return json.dumps(parsed)


def _check_cluster_info(name: str, value: str) -> str:
    """Parse the JSON and convert its ips, to fail here rather than in ``gen_options``.

    Raises:
        TypeError: not a ``str`` (also ``None``, which the vendor's ``json.loads``
            rejects with ``TypeError``).
        json.JSONDecodeError: the text is not JSON (a ``ValueError``).
        RuntimeError: ``"Can not parse ip str:<ip>"`` for an unparsable ip.
    """
    if value is None:
        raise none_error(name, "a JSON str")
    check_type(value, str, name)
    _cluster_info_json(value)
    return value


def _emit_cluster_info(keys: Tuple[str, ...], text: str, is_set: bool) -> List[Tuple[str, str]]:
    # The setter checked the text, so converting it again cannot fail; text that parses
    # is never empty, so "" means unset.
    return [(keys[0], _cluster_info_json(text))] if text else []


def _check_mem_utilization(name: str, value: float) -> float:
    """Raises ``TypeError`` (not a float; an int is rejected too; ``None``) or
    ``LLMException`` (``LLM_PARAM_INVALID``: outside ``[0.0, 1.0]``)."""
    if value is None:
        raise none_error(name, "a float")
    check_type(value, float, name)
    if not 0.0 <= value <= 1.0:
        raise_param_invalid(f"{name} is {value}; it must be in [0.0, 1.0]")
    return value


class LlmConfig:
    """Engine options for ``LLMDataDist.init`` (docs/reference/python-api.md §4). ``LLMConfig`` is
    the same class.

    Every setter checks its value as the vendor does; ``gen_options()`` (alias
    ``generate_options()``) emits the options of the attributes that are set into one
    dict that is returned on every call. The options are declared below in the
    vendor's emission order, which is the order ``gen_options()`` follows.
    """

    ge_options = Option(
        check=_check_ge_options, factory=dict[str, str], emit=verbatim,
        doc="The dict of pass-through options (the object itself; ``{}`` until set); "
            "``cfg.ge_options[key] = value`` adds an option.")
    device_id = Option(
        "ge.exec.deviceId", "ge.session_device_id", check=_check_device_id, default=None, emit=_emit_device_id,
        doc="The device id, or the list of device ids, as given; ``None`` until set.")
    sync_kv_timeout = Option(
        "llm.SyncKvCacheWaitTime", check=_check_sync_kv_timeout, default=None, emit=when_not_none,
        doc="The transfer timeout in ms as given (int or digit string); ``None`` until set.")
    deploy_res_path = Option(
        "llm.deployResPath", check=of_type(str), default="", emit=when_non_empty,
        doc="``llm.deployResPath`` (v1 path); ``\"\"`` until set.")
    buf_pool_cfg = Option(
        "llm.BufPoolCfg", check=of_type(str), default="", emit=when_non_empty,
        doc="``llm.BufPoolCfg`` (v1 path); ``\"\"`` until set.")
    mem_pool_cfg = Option(
        "llm.MemPoolConfig", check=of_type(str), default="", emit=when_non_empty,
        doc="``llm.MemPoolConfig``: JSON ``{\"memory_size\": ..., \"page_shift\": ...}``; ``\"\"`` until set.")
    host_mem_pool_cfg = Option(
        "llm.HostMemPoolConfig", check=of_type(str), default="", emit=when_non_empty,
        doc="``llm.HostMemPoolConfig``: JSON like ``mem_pool_cfg``; ``\"\"`` until set.")
    enable_cache_manager = Option(
        "llm.EnableCacheManager", check=reset_by_none(bool), default=False, emit=flag_when_set,
        doc="``llm.EnableCacheManager``; ``False`` until set; ``None`` resets to unset.")
    enable_remote_cache_accessible = Option(
        "llm.EnableRemoteCacheAccessible", check=reset_by_none(bool), default=False, emit=flag_when_set,
        doc="``llm.EnableRemoteCacheAccessible`` (direct mode); ``False`` until set; ``None`` resets to unset.")
    listen_ip_info = Option(
        "llm.listenIpInfo", check=of_type(str), default="", emit=when_non_empty,
        doc="``llm.listenIpInfo``, e.g. ``\"192.168.1.1:26000\"``; ``\"\"`` until set.")
    # As the vendor's getters, these give back the value set, unconverted: a bool set as a
    # count reads back as True (the dict holds str(value), "True"), a str subclass as itself.
    link_total_time = Option(
        "llm.LinkTotalTime", check=_int_between(0, 2**32 - 1), default=0, emit=when_set,
        doc="``llm.LinkTotalTime`` in seconds; ``0`` (use ``HCCL_CONNECT_TIMEOUT``) until set.")
    link_retry_count = Option(
        "llm.LinkRetryCount", check=_int_between(1, 100), default=1, emit=when_set,
        doc="``llm.LinkRetryCount``; ``1`` until set.")
    rdma_traffic_class = Option(
        "llm.RdmaTrafficClass", check=int_in(UINT32), default=None, emit=when_not_none,
        doc="``llm.RdmaTrafficClass``; ``None`` until set.")
    rdma_service_level = Option(
        "llm.RdmaServiceLevel", check=int_in(UINT32), default=None, emit=when_not_none,
        doc="``llm.RdmaServiceLevel``; ``None`` until set.")
    local_comm_res = Option(
        "llm.LocalCommRes", check=reset_by_none(str), default="", emit=when_set,
        doc="``llm.LocalCommRes``: the local rank table JSON or ``\"\"``; ``\"\"`` until set; "
            "``None`` resets to unset.")
    transfer_backend = Option(
        "llm.TransferBackend", check=reset_by_none(str), default="", emit=when_set,
        doc="``llm.TransferBackend`` (only ``\"hixl\"`` is accepted by the core); ``\"\"`` until set; "
            "``None`` resets to unset.")
    global_resource_config = Option(
        "llm.GlobalResourceConfig", check=reset_by_none(str), default="", emit=when_set,
        doc="``llm.GlobalResourceConfig`` (passed to the HIXL backend); ``\"\"`` until set; "
            "``None`` resets to unset.")
    cluster_info = Option(
        "llm.ClusterInfo", check=_check_cluster_info, default="", emit=_emit_cluster_info,
        doc="``llm.ClusterInfo`` JSON text as set; ``\"\"`` until set. Emitted with every "
            "``listen_ip_info`` entry's ``\"ip\"`` made an ip integer.")
    output_max_size = Option(
        "llm.OutputMaxSize", check=of_type(int), default=None, emit=when_not_none,
        doc="``llm.OutputMaxSize``; ``None`` until set.")
    enable_switch_role = Option(
        "llm.EnableSwitchRole", check=of_type(bool), default=False, emit=when_true,
        doc="``llm.EnableSwitchRole`` (read by v1 only); ``False`` until set.")
    mem_utilization = Option(
        "llm.MemoryUtilization", check=_check_mem_utilization, default=0.95, emit=always,
        doc="``llm.MemoryUtilization``; ``0.95`` until set. Always emitted.")

    def __init__(self) -> None:
        self._options: Dict[str, str] = {}

    @property
    def options(self) -> Dict[str, str]:
        """The accumulated options dict (the object ``gen_options()`` returns)."""
        return self._options

    def gen_options(self) -> Dict[str, str]:
        """Add the options of every set attribute to the options dict and return it.

        ``ge_options`` come first, then the other options in the vendor's order; a later
        key overwrites an earlier value in place. Keys are never removed, and the same
        dict object is returned on every call.
        """
        return render_options(self, self._options)

    def generate_options(self) -> Dict[str, str]:
        """Alias of ``gen_options()``."""
        return self.gen_options()


LLMConfig = LlmConfig
