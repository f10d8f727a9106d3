"""The vendor's ``llm_datadist.configs``: ``LLMRole``, ``LLMClusterInfo``, ``LlmConfig``.

``LlmConfig`` (also exported as ``LLMConfig``) collects engine options through typed
properties and turns them into the ``Dict[str, str]`` that ``LLMDataDist.init``
takes (docs/reference/python-api.md §4). Three vendor behaviours matter to clients and are kept:

* ``gen_options()``/``generate_options()`` return one dict object, the same on every
  call, and only ever add to it; clients add raw keys to it before ``init``;
* ``ge_options`` returns the dict it holds, so ``cfg.ge_options[k] = v`` adds an
  option;
* each property has its own notion of "unset" (``None``, ``""``, a default getter
  value) and its own emission rule; the table in ``_ROWS`` is in the vendor's
  emission order.

``LLMClusterInfo`` describes one peer for ``link_clusters``/``unlink_clusters``
(docs/reference/python-api.md §5); its IP lists hold ``(ip_int, port)`` tuples with the vendor's
little-endian IPv4 integers, which ``trans_str_ip`` (the vendor's module helper, also
used by client code) makes from ip text.

Pure Python: nothing here calls the native layer.
"""
from __future__ import annotations

import json
from enum import IntEnum
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ._vendor_checks import (
    INT32, UINT16, UINT32, UINT64, check_int, check_type, ip_to_int, none_error,
    raise_param_invalid, type_name,
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

    def __init__(self) -> None:
        self._remote_cluster_id: Optional[int] = None
        self._remote_role_type: Optional[Union[LLMRole, int]] = None
        self._local_ip_info_list: List[IpInfo] = []
        self._remote_ip_info_list: List[IpInfo] = []

    @property
    def remote_cluster_id(self) -> Optional[int]:
        """The peer's cluster id; ``None`` until set."""
        return self._remote_cluster_id

    @remote_cluster_id.setter
    def remote_cluster_id(self, value: int) -> None:
        """Raises ``TypeError`` (not an int, or ``None``) or ``ValueError`` (outside uint64)."""
        self._remote_cluster_id = check_int(value, "remote_cluster_id", UINT64)

    @property
    def remote_role_type(self) -> Optional[Union[LLMRole, int]]:
        """The peer's role as given; ``None`` until set. Never sent to the core."""
        return self._remote_role_type

    @remote_role_type.setter
    def remote_role_type(self, value: Union[LLMRole, int]) -> None:
        """Raises ``TypeError`` unless ``value`` is an ``LLMRole``, an ``int`` or ``None``."""
        check_type(value, (LLMRole, int), "remote_role_type")
        self._remote_role_type = value

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
        return (f"LLMClusterInfo(remote_cluster_id={self._remote_cluster_id!r}, "
                f"remote_role_type={self._remote_role_type!r}, "
                f"local_ip_info_list={self._local_ip_info_list!r}, "
                f"remote_ip_info_list={self._remote_ip_info_list!r})")


def _ip_info(ip: Union[str, int], port: int, side: str) -> IpInfo:
    check_type(ip, (str, int), f"{side} ip")
    checked_port = check_int(port, f"{side} port", UINT16)
    return (trans_str_ip(ip), checked_port)


# ---------------------------------------------------------------------------
# LlmConfig
# ---------------------------------------------------------------------------

# Marks a property that was never set (or was reset by ``None``) where the vendor
# distinguishes "unset" from every value a caller can store.
_UNSET: Any = object()


class LlmConfig:
    """Engine options for ``LLMDataDist.init`` (docs/reference/python-api.md §4). ``LLMConfig`` is
    the same class.

    Every setter checks its value as the vendor does; ``gen_options()`` (alias
    ``generate_options()``) emits the options of the properties that are set into one
    dict that is returned on every call.
    """

    def __init__(self) -> None:
        self._options: Dict[str, str] = {}
        self._ge_options: Dict[str, str] = {}
        self._device_id: Optional[Union[int, List[int], Tuple[int, ...]]] = None
        self._sync_kv_timeout: Optional[Union[int, str]] = None
        self._deploy_res_path: Optional[str] = ""
        self._buf_pool_cfg: Optional[str] = ""
        self._mem_pool_cfg: Optional[str] = ""
        self._host_mem_pool_cfg: Optional[str] = ""
        self._enable_cache_manager: Any = _UNSET
        self._enable_remote_cache_accessible: Any = _UNSET
        self._listen_ip_info: Optional[str] = ""
        self._link_total_time: Any = _UNSET
        self._link_retry_count: Any = _UNSET
        self._rdma_traffic_class: Optional[int] = None
        self._rdma_service_level: Optional[int] = None
        self._local_comm_res: Any = _UNSET
        self._transfer_backend: Any = _UNSET
        self._global_resource_config: Any = _UNSET
        self._cluster_info: str = ""
        self._cluster_info_emitted: str = ""
        self._output_max_size: Optional[int] = None
        self._enable_switch_role: Optional[bool] = False
        self._mem_utilization: float = 0.95

    # ---- ge_options ----------------------------------------------------------------------

    @property
    def ge_options(self) -> Dict[str, str]:
        """The dict of pass-through options (the object itself; ``{}`` until set)."""
        return self._ge_options

    @ge_options.setter
    def ge_options(self, value: Dict[str, str]) -> None:
        """Raises ``TypeError`` (not a dict, or a non-str key or value) or
        ``AttributeError`` (``None``, as in the vendor)."""
        if value is None:
            raise none_error("ge_options", "a dict of str to str", AttributeError)
        check_type(value, dict, "ge_options")
        for key, item in value.items():
            if not isinstance(key, str) or not isinstance(item, str):
                raise TypeError(f"ge_options keys and values must be str, got {key!r}: {item!r}")
        self._ge_options = value

    # ---- device_id -----------------------------------------------------------------------

    @property
    def device_id(self) -> Optional[Union[int, List[int], Tuple[int, ...]]]:
        """The device id, or the list of device ids, as given; ``None`` until set."""
        return self._device_id

    @device_id.setter
    def device_id(self, value: Union[int, List[int], Tuple[int, ...]]) -> None:
        """Raises ``TypeError`` (not an int or a list/tuple of int; ``None``),
        ``LLMException`` (``LLM_PARAM_INVALID``: an id < 0, or an empty list) or
        ``ValueError`` (an id above int32)."""
        if value is None:
            raise none_error("device_id", "an int or a list/tuple of int")
        if isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                if not isinstance(item, int):
                    raise TypeError(f"device_id[{index}] must be int, not {type_name(item)}")
            for index, item in enumerate(value):
                if item < 0:
                    raise_param_invalid(f"device_id[{index}] is {item}; device ids must be >= 0")
            for index, item in enumerate(value):
                check_int(item, f"device_id[{index}]", INT32)
            if not value:
                # The vendor emits str(value[0]) and fails with IndexError in gen_options.
                raise_param_invalid("device_id must not be an empty list")
        elif isinstance(value, int):
            if value < 0:
                raise_param_invalid(f"device_id is {value}; device ids must be >= 0")
            check_int(value, "device_id", INT32)
        else:
            raise TypeError(f"device_id must be int or a list/tuple of int, not {type_name(value)}")
        self._device_id = value

    # ---- sync_kv_timeout -----------------------------------------------------------------

    @property
    def sync_kv_timeout(self) -> Optional[Union[int, str]]:
        """The transfer timeout in ms as given (int or digit string); ``None`` until set."""
        return self._sync_kv_timeout

    @sync_kv_timeout.setter
    def sync_kv_timeout(self, value: Union[int, str]) -> None:
        """Raises ``TypeError`` (not int or str; ``None``), ``LLMException``
        (``LLM_PARAM_INVALID``: a str that is not all digits, or a value <= 0) or
        ``ValueError`` (above int32)."""
        if value is None:
            raise none_error("sync_kv_timeout", "an int or a digit string")
        check_type(value, (int, str), "sync_kv_timeout")
        if isinstance(value, str) and not value.isdigit():
            raise_param_invalid(f"sync_kv_timeout {value!r} must be a string of digits")
        try:
            number = int(value)
        except ValueError:  # str.isdigit() accepts digits int() rejects, e.g. "²"
            raise ValueError(f"sync_kv_timeout {value!r} is not a decimal integer") from None
        if number <= 0:
            raise_param_invalid(f"sync_kv_timeout is {number}; it must be > 0")
        check_int(number, "sync_kv_timeout", INT32)
        self._sync_kv_timeout = value

    # ---- plain string options, emitted when non-empty -------------------------------------

    @property
    def deploy_res_path(self) -> Optional[str]:
        """``llm.deployResPath`` (v1 path); ``""`` until set."""
        return self._deploy_res_path

    @deploy_res_path.setter
    def deploy_res_path(self, value: str) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``str`` or ``None``."""
        check_type(value, str, "deploy_res_path")
        self._deploy_res_path = value

    @property
    def buf_pool_cfg(self) -> Optional[str]:
        """``llm.BufPoolCfg`` (v1 path); ``""`` until set."""
        return self._buf_pool_cfg

    @buf_pool_cfg.setter
    def buf_pool_cfg(self, value: str) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``str`` or ``None``."""
        check_type(value, str, "buf_pool_cfg")
        self._buf_pool_cfg = value

    @property
    def mem_pool_cfg(self) -> Optional[str]:
        """``llm.MemPoolConfig``: JSON ``{"memory_size": ..., "page_shift": ...}``; ``""`` until set."""
        return self._mem_pool_cfg

    @mem_pool_cfg.setter
    def mem_pool_cfg(self, value: str) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``str`` or ``None``."""
        check_type(value, str, "mem_pool_cfg")
        self._mem_pool_cfg = value

    @property
    def host_mem_pool_cfg(self) -> Optional[str]:
        """``llm.HostMemPoolConfig``: JSON like ``mem_pool_cfg``; ``""`` until set."""
        return self._host_mem_pool_cfg

    @host_mem_pool_cfg.setter
    def host_mem_pool_cfg(self, value: str) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``str`` or ``None``."""
        check_type(value, str, "host_mem_pool_cfg")
        self._host_mem_pool_cfg = value

    @property
    def listen_ip_info(self) -> Optional[str]:
        """``llm.listenIpInfo``, e.g. ``"192.168.1.1:26000"``; ``""`` until set."""
        return self._listen_ip_info

    @listen_ip_info.setter
    def listen_ip_info(self, value: str) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``str`` or ``None``."""
        check_type(value, str, "listen_ip_info")
        self._listen_ip_info = value

    # ---- boolean switches emitted whenever set ---------------------------------------------

    @property
    def enable_cache_manager(self) -> bool:
        """``llm.EnableCacheManager``; ``False`` until set."""
        return False if self._enable_cache_manager is _UNSET else bool(self._enable_cache_manager)

    @enable_cache_manager.setter
    def enable_cache_manager(self, value: Optional[bool]) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``bool``; ``None`` resets to unset."""
        check_type(value, bool, "enable_cache_manager")
        self._enable_cache_manager = _UNSET if value is None else value

    @property
    def enable_remote_cache_accessible(self) -> bool:
        """``llm.EnableRemoteCacheAccessible`` (direct mode); ``False`` until set."""
        if self._enable_remote_cache_accessible is _UNSET:
            return False
        return bool(self._enable_remote_cache_accessible)

    @enable_remote_cache_accessible.setter
    def enable_remote_cache_accessible(self, value: Optional[bool]) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``bool``; ``None`` resets to unset."""
        check_type(value, bool, "enable_remote_cache_accessible")
        self._enable_remote_cache_accessible = _UNSET if value is None else value

    # ---- link options (v2) -----------------------------------------------------------------

    @property
    def link_total_time(self) -> int:
        """``llm.LinkTotalTime`` in seconds; ``0`` (use ``HCCL_CONNECT_TIMEOUT``) until set."""
        return 0 if self._link_total_time is _UNSET else int(self._link_total_time)

    @link_total_time.setter
    def link_total_time(self, value: int) -> None:
        """Raises ``TypeError`` (not an int; ``None``) or ``LLMException``
        (``LLM_PARAM_INVALID``: outside ``[0, 2**32-1]``)."""
        if value is None:
            raise none_error("link_total_time", "an int")
        check_type(value, int, "link_total_time")
        if not 0 <= value <= 2**32 - 1:
            raise_param_invalid(f"link_total_time is {value}; it must be in [0, {2**32 - 1}]")
        self._link_total_time = value

    @property
    def link_retry_count(self) -> int:
        """``llm.LinkRetryCount``; ``1`` until set."""
        return 1 if self._link_retry_count is _UNSET else int(self._link_retry_count)

    @link_retry_count.setter
    def link_retry_count(self, value: int) -> None:
        """Raises ``TypeError`` (not an int; ``None``) or ``LLMException``
        (``LLM_PARAM_INVALID``: outside ``[1, 100]``)."""
        if value is None:
            raise none_error("link_retry_count", "an int")
        check_type(value, int, "link_retry_count")
        if not 1 <= value <= 100:
            raise_param_invalid(f"link_retry_count is {value}; it must be in [1, 100]")
        self._link_retry_count = value

    @property
    def rdma_traffic_class(self) -> Optional[int]:
        """``llm.RdmaTrafficClass``; ``None`` until set."""
        return self._rdma_traffic_class

    @rdma_traffic_class.setter
    def rdma_traffic_class(self, value: int) -> None:
        """Raises ``TypeError`` (not an int; ``None``) or ``ValueError`` (outside uint32)."""
        self._rdma_traffic_class = check_int(value, "rdma_traffic_class", UINT32)

    @property
    def rdma_service_level(self) -> Optional[int]:
        """``llm.RdmaServiceLevel``; ``None`` until set."""
        return self._rdma_service_level

    @rdma_service_level.setter
    def rdma_service_level(self, value: int) -> None:
        """Raises ``TypeError`` (not an int; ``None``) or ``ValueError`` (outside uint32)."""
        self._rdma_service_level = check_int(value, "rdma_service_level", UINT32)

    # ---- string options emitted whenever set (also "") ----------------------------------

    @property
    def local_comm_res(self) -> str:
        """``llm.LocalCommRes``: the local rank table JSON or ``""``; ``""`` until set."""
        return "" if self._local_comm_res is _UNSET else str(self._local_comm_res)

    @local_comm_res.setter
    def local_comm_res(self, value: Optional[str]) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``str``; ``None`` resets to unset."""
        check_type(value, str, "local_comm_res")
        self._local_comm_res = _UNSET if value is None else value

    @property
    def transfer_backend(self) -> str:
        """``llm.TransferBackend`` (only ``"hixl"`` is accepted by the core); ``""`` until set."""
        return "" if self._transfer_backend is _UNSET else str(self._transfer_backend)

    @transfer_backend.setter
    def transfer_backend(self, value: Optional[str]) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``str``; ``None`` resets to unset."""
        check_type(value, str, "transfer_backend")
        self._transfer_backend = _UNSET if value is None else value

    @property
    def global_resource_config(self) -> str:
        """``llm.GlobalResourceConfig`` (passed to the HIXL backend); ``""`` until set."""
        return "" if self._global_resource_config is _UNSET else str(self._global_resource_config)

    @global_resource_config.setter
    def global_resource_config(self, value: Optional[str]) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``str``; ``None`` resets to unset."""
        check_type(value, str, "global_resource_config")
        self._global_resource_config = _UNSET if value is None else value

    # ---- v1-era options ------------------------------------------------------------------

    @property
    def cluster_info(self) -> str:
        """``llm.ClusterInfo`` JSON text as set; ``""`` until set."""
        return self._cluster_info

    @cluster_info.setter
    def cluster_info(self, value: str) -> None:
        """Parse the JSON and convert every ``listen_ip_info`` entry's ``"ip"``.

        Raises:
            TypeError: not a ``str`` (also ``None``, which the vendor's ``json.loads``
                rejects with ``TypeError``).
            json.JSONDecodeError: the text is not JSON (a ``ValueError``).
            RuntimeError: ``"Can not parse ip str:<ip>"`` for an unparsable ip.
        """
        if value is None:
            raise none_error("cluster_info", "a JSON str")
        check_type(value, str, "cluster_info")
        parsed = json.loads(value)
        if isinstance(parsed, dict) and "listen_ip_info" in parsed:
            entries = parsed["listen_ip_info"]
            if not isinstance(entries, list):
                raise TypeError(f"cluster_info listen_ip_info must be a JSON list, not {type_name(entries)}")
            for entry in entries:
                if isinstance(entry, dict) and isinstance(entry.get("ip"), str):
                    entry["ip"] = ip_to_int(entry["ip"])
        self._cluster_info = value
        self._cluster_info_emitted = json.dumps(parsed)

    @property
    def output_max_size(self) -> Optional[int]:
        """``llm.OutputMaxSize``; ``None`` until set."""
        return self._output_max_size

    @output_max_size.setter
    def output_max_size(self, value: Optional[int]) -> None:
        """Raises ``TypeError`` unless ``value`` is an ``int`` or ``None`` (unset)."""
        check_type(value, int, "output_max_size")
        self._output_max_size = value

    @property
    def enable_switch_role(self) -> Optional[bool]:
        """``llm.EnableSwitchRole`` (read by v1 only); ``False`` until set."""
        return self._enable_switch_role

    @enable_switch_role.setter
    def enable_switch_role(self, value: Optional[bool]) -> None:
        """Raises ``TypeError`` unless ``value`` is a ``bool`` or ``None``."""
        check_type(value, bool, "enable_switch_role")
        self._enable_switch_role = value

    @property
    def mem_utilization(self) -> float:
        """``llm.MemoryUtilization``; ``0.95`` until set. Always emitted."""
        return self._mem_utilization

    @mem_utilization.setter
    def mem_utilization(self, value: float) -> None:
        """Raises ``TypeError`` (not a float; an int is rejected too; ``None``) or
        ``LLMException`` (``LLM_PARAM_INVALID``: outside ``[0.0, 1.0]``)."""
        if value is None:
            raise none_error("mem_utilization", "a float")
        check_type(value, float, "mem_utilization")
        if not 0.0 <= value <= 1.0:
            raise_param_invalid(f"mem_utilization is {value}; it must be in [0.0, 1.0]")
        self._mem_utilization = value

    # ---- emission ------------------------------------------------------------------------

    @property
    def options(self) -> Dict[str, str]:
        """The accumulated options dict (the object ``gen_options()`` returns)."""
        return self._options

    def gen_options(self) -> Dict[str, str]:
        """Add the options of every set property to the options dict and return it.

        ``ge_options`` come first, then the properties in the vendor's order; a later
        key overwrites an earlier value in place. Keys are never removed, and the same
        dict object is returned on every call.
        """
        options = self._options
        for key, value in self._ge_options.items():
            options[key] = value
        for emit in _ROWS:
            for key, value in emit(self):
                options[key] = value
        return options

    def generate_options(self) -> Dict[str, str]:
        """Alias of ``gen_options()``."""
        return self.gen_options()

LLMConfig = LlmConfig

Emitter = Callable[[LlmConfig], Sequence[Tuple[str, str]]]


def _emit_device_id(cfg: LlmConfig) -> Sequence[Tuple[str, str]]:
    ids = cfg._device_id
    if ids is None:
        return ()
    if isinstance(ids, (list, tuple)):
        return (("ge.exec.deviceId", ";".join(str(i) for i in ids)),
                ("ge.session_device_id", str(ids[0])))
    return (("ge.exec.deviceId", str(ids)), ("ge.session_device_id", str(ids)))


def _if_not_none(key: str, attr: str) -> Emitter:
    def emit(cfg: LlmConfig) -> Sequence[Tuple[str, str]]:
        value = getattr(cfg, attr)
        return () if value is None else ((key, str(value)),)
    return emit


def _if_non_empty(key: str, attr: str) -> Emitter:
    def emit(cfg: LlmConfig) -> Sequence[Tuple[str, str]]:
        value = getattr(cfg, attr)
        return ((key, value),) if value else ()
    return emit


def _if_set_flag(key: str, attr: str) -> Emitter:
    def emit(cfg: LlmConfig) -> Sequence[Tuple[str, str]]:
        value = getattr(cfg, attr)
        return () if value is _UNSET else ((key, "1" if value else "0"),)
    return emit


def _if_set(key: str, attr: str) -> Emitter:
    def emit(cfg: LlmConfig) -> Sequence[Tuple[str, str]]:
        value = getattr(cfg, attr)
        return () if value is _UNSET else ((key, str(value)),)
    return emit


def _emit_switch_role(cfg: LlmConfig) -> Sequence[Tuple[str, str]]:
    return (("llm.EnableSwitchRole", "1"),) if cfg._enable_switch_role is True else ()


def _emit_mem_utilization(cfg: LlmConfig) -> Sequence[Tuple[str, str]]:
    return (("llm.MemoryUtilization", str(cfg._mem_utilization)),)


# The vendor's emission order after ge_options (docs/reference/python-api.md §4 table order).
_ROWS: Tuple[Emitter, ...] = (
    _emit_device_id,
    _if_not_none("llm.SyncKvCacheWaitTime", "_sync_kv_timeout"),
    _if_non_empty("llm.deployResPath", "_deploy_res_path"),
    _if_non_empty("llm.BufPoolCfg", "_buf_pool_cfg"),
    _if_non_empty("llm.MemPoolConfig", "_mem_pool_cfg"),
    _if_non_empty("llm.HostMemPoolConfig", "_host_mem_pool_cfg"),
    _if_set_flag("llm.EnableCacheManager", "_enable_cache_manager"),
    _if_set_flag("llm.EnableRemoteCacheAccessible", "_enable_remote_cache_accessible"),
    _if_non_empty("llm.listenIpInfo", "_listen_ip_info"),
    _if_set("llm.LinkTotalTime", "_link_total_time"),
    _if_set("llm.LinkRetryCount", "_link_retry_count"),
    _if_not_none("llm.RdmaTrafficClass", "_rdma_traffic_class"),
    _if_not_none("llm.RdmaServiceLevel", "_rdma_service_level"),
    _if_set("llm.LocalCommRes", "_local_comm_res"),
    _if_set("llm.TransferBackend", "_transfer_backend"),
    _if_set("llm.GlobalResourceConfig", "_global_resource_config"),
    _if_non_empty("llm.ClusterInfo", "_cluster_info_emitted"),
    _if_not_none("llm.OutputMaxSize", "_output_max_size"),
    _emit_switch_role,
    _emit_mem_utilization,
)
