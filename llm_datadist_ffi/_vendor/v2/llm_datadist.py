"""The vendor's ``llm_datadist.v2.llm_datadist``: the ``LLMDataDist`` engine class.

``LLMDataDist(role, cluster_id)`` creates nothing; ``init(options)`` makes the
process's one native engine (docs/reference/python-api.md §10.2) in the generation the options
select:

* **v2, CacheManager mode** — ``llm.EnableCacheManager == "1"`` after the defaults
  that ``llm.LocalCommRes`` brings; caches through ``cache_manager``;
* **v1, KvCacheManager mode** — otherwise; caches through ``kv_cache_manager``.

Only one ``LLMDataDist`` may be initialised per process (``LLM_FAILED`` otherwise);
``finalize`` frees the slot, and ``init`` may then run again on any instance,
creating a fresh engine whose cache and comm ids restart at 1. An ``atexit`` hook
finalizes the live instance, as the vendor's does.

Additions to the vendor's life cycle (docs/user-guide.md, "Processes"):

* ``with LLMDataDist(role, cluster_id) as datadist:`` finalizes on leaving the block.
* The process holds its engine weakly. The engine belongs to its ``LLMDataDist`` and
  to the ``cache_manager``/``kv_cache_manager`` objects taken from it; once none of
  them is referenced any more, garbage collection finalizes the engine and the slot
  is free for the next ``init`` (the vendor keeps an abandoned engine, and so the slot,
  until the process ends).
* ``fork()``: the child starts with no engine. Its copies of the parent's objects are
  not initialised, nothing of the parent's engine is finalized or freed from the
  child, and the child's first ``init`` creates its own engine.

Links come in two kinds: one-sided (``link_clusters``/``unlink_clusters``, both
generations), which return ``(status, [status per cluster])`` and never raise for a
link failure, and the rank-table communicator (``link``/``unlink``/
``query_register_mem_status``, v2), whose state goes ``PREPARING`` → ``OK`` (or
``FAILED``) once every member has called ``link``.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
import warnings
import weakref
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Union

from ..._core import _capi
from ... import lint
from ..._core import _lint_rules as _rules
from ..._core._trace import traced
from ..._core._marshal import ClusterEntry, Endpoint, c_array, c_clusters, c_options
from .._vendor_checks import (
    INT32, UINT32, UINT64, check_int, check_type, int_to_ip, ip_to_int, none_error, raise_param_invalid,
    type_name,
)
from ..configs import ROLE_OPTION_TEXT, LLMClusterInfo, LLMRole
from ...status import LLMException, LLMStatusCode, exception_for, map_status
from .. import _native
from ..v1.cache_manager import KvCacheManager
from .cache_manager import CacheManager
from .llm_types import RegisterMemStatus

__all__ = ["LLMDataDist"]

_NOT_INITIALIZED = "llm datadist is not initialized"
_INIT_TAG = "LLMDataDist.init"
_MAX_SYNC_WAIT_MS = 2**31 - 1



#: The option keys the vendor's package and its core read at ``init`` (lint OPT-1 names
#: the closest one for a misspelt key; other keys pass unchanged, as the vendor's do).
_log = logging.getLogger("llm_datadist_ffi.v2.llm_datadist")   # the documented logger name (before vendor/)

#: the option keys OPT-1 compares against (the one list, shared with the companion)
VENDOR_OPTION_NAMES = _rules.VENDOR_OPTION_NAMES

def _option_not_str(name: str, key: Any, value: Any) -> TypeError:
    # the vendor's binding converts to std::map<std::string, std::string>
    return TypeError(f"{name} keys and values must be str, got {key!r}: {value!r} "
                     f"({type_name(key)}: {type_name(value)})")


def _endpoints(infos: List[Any], name: str) -> List[Endpoint]:
    """The vendor's ``(ip, port)`` pairs (the ip an int, as ``ip_to_int`` makes it) as
    the dotted text and port C reads.

    Raises:
        TypeError: an ip outside uint32 or a port outside uint16 (the core's types).
    """
    endpoints = []
    for index, (ip, port) in enumerate(infos):
        if not isinstance(ip, int) or not 0 <= ip <= 2**32 - 1:
            raise TypeError(f"{name}[{index}]: ip {ip!r} is not an IPv4 address (the core takes a uint32)")
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise TypeError(f"{name}[{index}]: port {port!r} is not a uint16")
        endpoints.append((int_to_ip(ip).encode(), port))
    return endpoints


def _require_str_option(options: Dict[str, Any], key: str) -> str:
    value = options[key]
    if not isinstance(value, str):
        raise TypeError(f"option {key} must be a str, not {type_name(value)}")
    return value


def _listen_port(value: str, key: str, text: str, low: int) -> int:
    """The port part of a listen option: ``int()`` of it (``ValueError``), then PR-27's
    range [low, 65535] (``LLM_PARAM_INVALID``)."""
    try:
        port = int(text)
    except ValueError:
        raise ValueError(f"option {key}={value!r}: the port {text!r} is not an integer") from None
    if not low <= port <= 65535:
        raise_param_invalid(f"option {key}={value!r}: port {port} is outside [{low}, 65535] (PR-27)")
    return port


def _parse_listen(value: str, key: str) -> Tuple[str, int]:
    """``"ip:port"`` as the vendor splits it: exactly one ``":"``, ``int()`` of the port.

    Raises:
        LLMException: ``LLM_PARAM_INVALID`` unless the text splits into exactly two
            parts, or (PR-27) when the port is outside [0, 65535] (port 0: an
            ephemeral listener, or none with HIXL; docs/semantics.md E-26).
        ValueError: the port is not a number (the vendor's ``int()``).
    """
    parts = value.split(":")
    if len(parts) != 2:
        raise_param_invalid(f"option {key}={value!r} must be \"ip:port\" (exactly one ':'; IPv6 is not "
                            "supported from Python)")
    return parts[0], _listen_port(value, key, parts[1], 0)


def _parse_v1_listen(value: str) -> Tuple[int, int]:
    """The v1 ``switch_role`` parse of ``"ip:port"``: the split (LX), the ip by the
    IPv4 rule (``RuntimeError``), the port by ``int()`` (``ValueError``), PR-27 (LX)."""
    parts = value.split(":")
    if len(parts) != 2:
        raise_param_invalid(f"option llm.listenIpInfo={value!r} must be \"ip:port\"")
    ip_int = ip_to_int(parts[0])
    return ip_int, _listen_port(value, "llm.listenIpInfo", parts[1], 1)


def _check_sync_wait_time(options: Dict[str, Any]) -> None:
    if "llm.SyncKvCacheWaitTime" not in options:
        return
    value = _require_str_option(options, "llm.SyncKvCacheWaitTime")
    if not (value.isdigit() and value.isascii()) or int(value) > _MAX_SYNC_WAIT_MS:
        raise_param_invalid(f"option llm.SyncKvCacheWaitTime={value!r} must be a decimal integer in "
                            f"[0, {_MAX_SYNC_WAIT_MS}] milliseconds (PR-26)")
    for rule, text in _rules.sync_wait_time(options):
        lint.lint(rule, text)


def _check_v1_options(options: Dict[str, Any], role: LLMRole) -> None:
    """The vendor's v1 checks on ``ge.exec.deviceId`` and ``llm.listenIpInfo``, kept
    without the cluster-info file they feed in the vendor (project rule, python-api.md §10.2)."""
    if "ge.exec.deviceId" not in options:
        raise_param_invalid("option ge.exec.deviceId is required when llm.EnableCacheManager is not \"1\" "
                            "(the KvCacheManager generation)")
    device_text = _require_str_option(options, "ge.exec.deviceId")
    device_ids = device_text.split(";")
    for device in device_ids:
        if not (device.isdigit() and device.isascii()):
            raise_param_invalid(f"option ge.exec.deviceId={device_text!r}: device id {device!r} is not a "
                                "non-negative decimal integer")
    if role is not LLMRole.PROMPT:
        return
    if "llm.listenIpInfo" not in options:
        raise_param_invalid("option llm.listenIpInfo is required for a PROMPT engine when "
                            "llm.EnableCacheManager is not \"1\" (one \"ip:port\" per device id)")
    listen_text = _require_str_option(options, "llm.listenIpInfo")
    entries = listen_text.split(";")
    if len(entries) != len(device_ids):
        raise_param_invalid(f"option llm.listenIpInfo={listen_text!r} holds {len(entries)} \"ip:port\" entries "
                            f"but ge.exec.deviceId={device_text!r} names {len(device_ids)} devices")
    for entry in entries:
        parts = entry.split(":")
        if len(parts) != 2 or not (parts[1].isdigit() and parts[1].isascii()):
            raise_param_invalid(f"option llm.listenIpInfo entry {entry!r} is not \"ip:port\"")
        try:
            ip_to_int(parts[0])
        except RuntimeError:
            raise_param_invalid(f"option llm.listenIpInfo entry {entry!r}: {parts[0]!r} is not an IPv4 address")
        if not 1 <= int(parts[1]) <= 65535:
            raise_param_invalid(f"option llm.listenIpInfo entry {entry!r}: port {int(parts[1])} is outside "
                                "[1, 65535] (PR-27)")


class _EngineLife:
    """The lifetime of one initialised engine: the ``LLMDataDist`` and the managers
    taken from it hold it, and the engine is finalized once it is collected."""

    __slots__ = ("__weakref__",)


#: manager -> the life of the engine it was made for (weak keys: a manager holds its
#: engine's life without the manager classes knowing about it).
_LIFE_OF_MANAGER: "weakref.WeakKeyDictionary[Any, _EngineLife]" = weakref.WeakKeyDictionary()


class _LiveInstance:
    """``LLMDataDist.llm_engine_instance``: the initialised instance, held weakly."""

    def __get__(self, obj: object, owner: type) -> Optional["LLMDataDist"]:
        ref = LLMDataDist._instance_ref
        return None if ref is None else ref()


def _release_engine(state: _native.EngineState) -> None:
    """Finalize the engine of ``state`` unless that was done already: the end of its
    life, by garbage collection or at interpreter exit (``weakref.finalize``)."""
    with LLMDataDist._lifecycle_lock:
        handle, state.handle = state.handle, None
        if _native.current() is state:
            _native.set_current(None)
    if handle is not None:
        _capi.lldd_finalize(handle)
    state.kept.clear()


@traced
class LLMDataDist:
    """The engine: ``LLMDataDist(role: LLMRole, cluster_id: int)``.

    Construction creates no engine; ``init`` does. Every method except ``init``,
    ``finalize`` and ``cluster_id`` raises ``RuntimeError("llm datadist is not
    initialized")`` before ``init`` and after ``finalize``. As an addition to the
    vendor's class, ``with LLMDataDist(...) as datadist:`` finalizes on exit, and an
    engine nobody refers to is finalized by garbage collection (module docstring).
    """

    llm_engine_instance: ClassVar[_LiveInstance] = _LiveInstance()
    """The currently initialised instance, or ``None`` (read on the class)."""

    _instance_ref: ClassVar[Optional["weakref.ReferenceType[LLMDataDist]"]] = None
    _lifecycle_lock: ClassVar[threading.RLock] = threading.RLock()

    def __init__(self, role: LLMRole, cluster_id: int) -> None:
        """Raises:
            TypeError: ``role`` is not an ``LLMRole`` (a plain int is rejected), or
                ``cluster_id`` is not an int.
            ValueError: ``cluster_id`` is outside uint64.
        """
        check_type(role, LLMRole, "role")
        self._cluster_id = check_int(cluster_id, "cluster_id", UINT64)
        self._role: Optional[LLMRole] = role
        self._initialized = False
        self._state: Optional[_native.EngineState] = None
        self._cache_manager: Optional[CacheManager] = None
        self._kv_cache_manager: Optional[KvCacheManager] = None
        self._link_reasons: Tuple[str, Tuple[str, ...]] = ("", ())
        self._life: Optional[_EngineLife] = None

    def __enter__(self) -> "LLMDataDist":
        return self

    def __exit__(self, *exc: object) -> None:
        self.finalize()

    @property
    def cluster_id(self) -> int:
        """The cluster id given to the constructor."""
        return self._cluster_id

    # ---- life cycle ---------------------------------------------------------------------

    def _check_initialized(self) -> _native.EngineState:
        state = self._state
        if not self._initialized or state is None:
            raise RuntimeError(_NOT_INITIALIZED)
        return state

    def _role_text(self) -> str:
        role = self._role
        if role is None:
            raise none_error("role", "an LLMRole", KeyError)
        return ROLE_OPTION_TEXT[role]

    def init(self, options: Dict[str, str]) -> None:
        """Create and initialise the native engine (docs/reference/python-api.md §10.2).

        Already initialised: returns at once, ignoring ``options``. The caller's dict
        is never modified.

        Raises:
            LLMException: ``LLM_FAILED`` when another ``LLMDataDist`` of this process is
                initialised; ``LLM_PARAM_INVALID`` for an option rule broken in Python
                (``ge.flowGraphMemMaxSize``, ``llm.LocalCommRes`` without CacheManager
                mode, ``llm.TransferBackend`` requirements, ``llm.listenIpInfo``
                format, PR-26, PR-27, and in v1 ``ge.exec.deviceId`` and the Prompt's
                ``llm.listenIpInfo``); the core's code when the native init fails.
            TypeError: ``options`` is not a dict, or holds a key or value that is not a
                ``str``.
            AttributeError: ``options`` is ``None`` (the vendor reads it after its type
                check, which lets ``None`` through).
            ValueError: the port of ``llm.listenIpInfo`` is not a number.
            KeyError: the instance was constructed with ``role=None``.
        """
        with LLMDataDist._lifecycle_lock:
            if self._initialized:
                return
            live = _native.current()
            if live is not None:
                other = LLMDataDist.llm_engine_instance
                holder = (f"another LLMDataDist of this process is initialised (cluster id {live.cluster_id}); "
                          "finalize it first") if other is not None else (
                          f"the engine of an LLMDataDist that is gone (cluster id {live.cluster_id}) lives on "
                          "through its cache_manager or kv_cache_manager; drop those references or keep the "
                          "LLMDataDist and finalize it")
                raise exception_for(int(LLMStatusCode.LLM_FAILED), f"Cannot init multiple LLMDataDists: {holder}")
            check_type(options, dict, "options")
            if options is None:   # the vendor's type check lets it through; its next step reads it
                raise none_error("options", "a dict", AttributeError)
            if "ge.flowGraphMemMaxSize" in options:
                value = _require_str_option(options, "ge.flowGraphMemMaxSize")
                if "," in value:
                    raise_param_invalid(f"option ge.flowGraphMemMaxSize={value!r} must be one size, without ','")
                if not value.isdigit():
                    raise_param_invalid(f"option ge.flowGraphMemMaxSize={value!r} must be all digits")
            final: Dict[str, Any] = dict(options)
            final["llm.Role"] = self._role_text()
            if "llm.LocalCommRes" in final:
                final.setdefault("llm.EnableCacheManager", "1")
                final.setdefault("llm.EnableRemoteCacheAccessible", "1")
            cache_manager_mode = final.get("llm.EnableCacheManager") == "1"
            if "llm.LocalCommRes" in final and not cache_manager_mode:
                raise_param_invalid("option llm.LocalCommRes needs CacheManager mode, but llm.EnableCacheManager is "
                                    f"{final.get('llm.EnableCacheManager')!r}")
            if "llm.TransferBackend" in final:
                if not cache_manager_mode:
                    raise_param_invalid("option llm.TransferBackend needs llm.EnableCacheManager=\"1\"")
                final.setdefault("llm.EnableRemoteCacheAccessible", "1")
                if final["llm.EnableRemoteCacheAccessible"] != "1":
                    raise_param_invalid("option llm.TransferBackend needs llm.EnableRemoteCacheAccessible=\"1\", got "
                                        f"{final['llm.EnableRemoteCacheAccessible']!r}")
                if "llm.listenIpInfo" not in final:
                    raise_param_invalid("option llm.TransferBackend needs llm.listenIpInfo")
            if cache_manager_mode:
                if "llm.listenIpInfo" in final:
                    ip, port = _parse_listen(_require_str_option(final, "llm.listenIpInfo"), "llm.listenIpInfo")
                    final["llm.ListenIp"] = ip
                    final["llm.ListenPort"] = str(port)
            else:
                _check_v1_options(final, self._role)  # type: ignore[arg-type]
            _check_sync_wait_time(final)
            lint.check_option_keys(options, VENDOR_OPTION_NAMES, "LLMDataDist.init")
            array, count, keep = c_options(final, "options", _option_not_str)
            handle = _capi.lldd_create(self._cluster_id, int(self._role),  # type: ignore[arg-type]
                                       _INIT_TAG)
            try:
                _capi.lldd_ext_initialize(handle, array, count, _INIT_TAG)
            except BaseException:
                _capi.lldd_destroy(handle)
                raise
            del keep
            state = _native.EngineState(handle, self._cluster_id, final)
            _native.set_current(state)
            self._state = state
            if state.cache_manager_mode:
                self._cache_manager = CacheManager(state)
                self._kv_cache_manager = None
            else:
                self._kv_cache_manager = KvCacheManager(state, self._role)  # type: ignore[arg-type]
                self._cache_manager = None
            life = _EngineLife()
            weakref.finalize(life, _release_engine, state)
            for manager in (self._cache_manager, self._kv_cache_manager):
                if manager is not None:
                    _LIFE_OF_MANAGER[manager] = life
            self._life = life
            self._initialized = True
            LLMDataDist._instance_ref = weakref.ref(self)

    def _drop_state(self) -> None:
        """Marks both managers finalized and forgets the engine state (``finalize``, and
        a forked child's copy of the parent's engine)."""
        for manager in (self._cache_manager, self._kv_cache_manager):
            if manager is not None:
                manager._mark_finalized()
        self._initialized = False
        self._state = None
        self._life = None

    def finalize(self) -> None:
        """Finalize the engine: every link is dropped locally, every cache freed.

        Not initialised: a no-op (so calling it twice is safe). The native status is
        ignored, as in the vendor. Afterwards ``init`` may be called again.
        """
        with LLMDataDist._lifecycle_lock:
            if not self._initialized:
                return
            state = self._state
            self._drop_state()
            if LLMDataDist.llm_engine_instance is self:
                LLMDataDist._instance_ref = None
            if state is not None:
                if _native.current() is state:
                    _native.set_current(None)
                handle, state.handle = state.handle, None
                if handle is not None:
                    _capi.lldd_finalize(handle)
                state.kept.clear()

    # ---- managers -----------------------------------------------------------------------

    @property
    def cache_manager(self) -> CacheManager:
        """The v2 ``CacheManager`` of the live engine.

        Raises:
            RuntimeError: not initialised.
            LLMException: ``LLM_PARAM_INVALID`` when the engine is not in CacheManager mode.
        """
        state = self._check_initialized()
        if not state.cache_manager_mode or self._cache_manager is None:
            raise_param_invalid("cache_manager is not supported when llm.EnableCacheManager is not configured.")
        return self._cache_manager

    @property
    def kv_cache_manager(self) -> KvCacheManager:
        """The v1 ``KvCacheManager`` of the live engine.

        Raises:
            RuntimeError: not initialised.
            LLMException: ``LLM_PARAM_INVALID`` when the engine is in CacheManager mode.
        """
        state = self._check_initialized()
        if state.cache_manager_mode or self._kv_cache_manager is None:
            raise_param_invalid("kv_cache_manager is not supported when llm.EnableCacheManager is configured; "
                                "use cache_manager")
        return self._kv_cache_manager

    # ---- one-sided links ----------------------------------------------------------------

    def _check_link_args(self, clusters: Any, timeout: Any) -> None:
        check_int(timeout, "timeout", INT32)
        if timeout <= 0:
            raise_param_invalid(f"timeout is {timeout}; it must be > 0 milliseconds")
        check_type(clusters, (list, tuple), "clusters", allow_none=False)
        for index, cluster in enumerate(clusters):
            if not isinstance(cluster, LLMClusterInfo):
                raise TypeError(f"clusters[{index}] must be LLMClusterInfo, not {type_name(cluster)}")

    @staticmethod
    def _remote_id(cluster: LLMClusterInfo, index: int, state: _native.EngineState) -> int:
        value = cluster.remote_cluster_id
        if state.cache_manager_mode:
            return check_int(value, f"clusters[{index}].remote_cluster_id", UINT64)
        if not isinstance(value, int) or not UINT64[1] <= value <= UINT64[2]:
            raise TypeError(f"clusters[{index}].remote_cluster_id is {value!r}; the core takes a uint64")
        return int(value)

    @staticmethod
    def _c_clusters(entries: List[Tuple[int, List[Any], List[Any]]]) -> Tuple[Any, int, List[Any]]:
        """``(remote id, local (ip, port) list, remote list)`` per cluster for C; the vendor
        never sends the role type."""
        checked: List[ClusterEntry] = []
        for index, (remote_id, local, remote) in enumerate(entries):
            checked.append((remote_id, 0, _endpoints(local, f"clusters[{index}].local_ip_info_list"),
                            _endpoints(remote, f"clusters[{index}].remote_ip_info_list")))
        return c_clusters(checked)

    def link_clusters(self, clusters: Union[List[LLMClusterInfo], Tuple[LLMClusterInfo, ...]],
                      timeout: int = 3000) -> Tuple[LLMStatusCode, List[LLMStatusCode]]:
        """Link to peer clusters, each at its ``remote_ip_info_list[0]``.

        Returns ``(status, [status per cluster])`` after the vendor's mapping rule;
        link failures are reported, never raised. An empty ``clusters`` gives
        ``(LLM_PARAM_INVALID, [])``.

        Raises:
            RuntimeError: not initialised.
            TypeError: ``timeout`` not an int; ``clusters`` not a list/tuple of
                ``LLMClusterInfo``; (v2) a ``remote_cluster_id`` not set.
            ValueError: ``timeout`` outside int32; (v2) a ``remote_cluster_id`` outside
                uint64.
            LLMException: ``LLM_PARAM_INVALID`` for ``timeout <= 0``, or (v2) a cluster
                without a local IP entry while no non-empty ``llm.LocalCommRes`` was
                given.
        """
        state = self._check_initialized()
        self._check_link_args(clusters, timeout)
        entries = []
        for index, cluster in enumerate(clusters):
            if state.cache_manager_mode and not cluster.local_ip_info_list and not state.local_comm_res_set:
                raise_param_invalid(f"clusters[{index}].local_ip_info_list is empty; append_local_ip_info is "
                                    "required unless a non-empty llm.LocalCommRes was given")
            remote_id = self._remote_id(cluster, index, state)
            entries.append((remote_id, list(cluster.local_ip_info_list), list(cluster.remote_ip_info_list)))
        array, count, keep = self._c_clusters(entries)
        status, rets = _capi.lldd_link_clusters(_native.engine_for("link_clusters", LLMStatusCode.LLM_FAILED),
                                                array, count, timeout)
        del keep
        self._link_reasons = _capi.log_link_call(_log, "link_clusters", [e[0] for e in entries], status, rets)
        return map_status(status), [map_status(r) for r in rets]

    def unlink_clusters(self, clusters: Union[List[LLMClusterInfo], Tuple[LLMClusterInfo, ...]],
                        timeout: int = 3000, force: bool = False) -> Tuple[LLMStatusCode, List[LLMStatusCode]]:
        """Unlink peer clusters; ``force`` drops only the local side (no network).

        Returns ``(status, [status per cluster])`` like ``link_clusters``. In v2 the
        local IP list is never sent.

        Raises:
            RuntimeError: not initialised.
            TypeError: ``timeout`` not an int; ``clusters`` not a list/tuple of
                ``LLMClusterInfo``; ``force`` not a bool; a ``remote_cluster_id`` not set.
            ValueError: ``timeout`` outside int32, a ``remote_cluster_id`` outside uint64.
            LLMException: ``LLM_PARAM_INVALID`` for ``timeout <= 0``.
        """
        state = self._check_initialized()
        self._check_link_args(clusters, timeout)
        check_type(force, bool, "force", allow_none=False)
        entries = []
        for index, cluster in enumerate(clusters):
            remote_id = check_int(cluster.remote_cluster_id, f"clusters[{index}].remote_cluster_id", UINT64)
            local = [] if state.cache_manager_mode else list(cluster.local_ip_info_list)
            entries.append((remote_id, local, list(cluster.remote_ip_info_list)))
        array, count, keep = self._c_clusters(entries)
        status, rets = _capi.lldd_unlink_clusters(_native.engine_for("unlink_clusters", LLMStatusCode.LLM_FAILED),
                                                  array, count, timeout, force)
        del keep
        self._link_reasons = _capi.log_link_call(_log, "unlink_clusters", [e[0] for e in entries], status, rets)
        return map_status(status), [map_status(r) for r in rets]

    @property
    def link_reasons(self) -> Tuple[str, Tuple[str, ...]]:
        """Why the last ``link_clusters``/``unlink_clusters`` of this object gave what it
        gave: the call's own error text ("" when it succeeded) and, per cluster in the
        call's order, the reason of its status ("" for a success). An addition to the
        vendor's class; the ``llm_datadist_ffi.v2.llm_datadist`` logger logs the same."""
        return self._link_reasons

    # ---- rank-table links (v2) ----------------------------------------------------------

    def _check_cache_manager_mode(self, what: str) -> _native.EngineState:
        state = self._check_initialized()
        if not state.cache_manager_mode:
            raise_param_invalid(f"{what} is not supported when llm.EnableCacheManager is not configured.")
        return state

    def link(self, comm_name: str, cluster_rank_info: Dict[int, int], rank_table: str) -> int:
        """Join the rank-table communicator ``comm_name``; every member calls this
        with the same arguments. Returns the comm id (1, 2, … per engine); poll
        ``query_register_mem_status`` until ``OK`` before transferring.

        Raises:
            RuntimeError: not initialised.
            TypeError: ``comm_name`` not a str, ``cluster_rank_info`` not a dict of
                int to int, ``rank_table`` not a str.
            ValueError: a cluster id outside uint64 or a rank outside uint32.
            LLMException: ``LLM_PARAM_INVALID`` in v1 mode, for an empty or too long
                (>= 128) ``comm_name``, fewer than 2 or more than 4 members, ranks not
                in ascending order; from the core ``LLM_PARAM_INVALID`` (the local
                cluster is not a member, 512 communicators, a rank table that is not
                JSON), ``LLM_LINK_FAILED``, ``LLM_FEATURE_NOT_ENABLED``.
        """
        self._check_cache_manager_mode("link")
        check_type(comm_name, str, "comm_name", allow_none=False)
        if not comm_name:
            raise_param_invalid("comm_name must not be empty")
        if len(comm_name) >= 128:
            raise_param_invalid(f"comm_name has {len(comm_name)} characters; it must have fewer than 128")
        check_type(cluster_rank_info, dict, "cluster_rank_info", allow_none=False)
        for key, value in cluster_rank_info.items():
            if not isinstance(key, int) or not isinstance(value, int):
                raise TypeError(f"cluster_rank_info must map int to int, got {key!r}: {value!r}")
        if len(cluster_rank_info) > 4:
            raise_param_invalid(f"cluster_rank_info has {len(cluster_rank_info)} members; at most 4 are supported")
        for key, value in cluster_rank_info.items():
            check_int(key, "cluster_rank_info cluster id", UINT64)
            check_int(value, f"cluster_rank_info[{key}] rank", UINT32)
        check_type(rank_table, str, "rank_table", allow_none=False)
        if len(cluster_rank_info) < 2:
            raise_param_invalid(f"cluster_rank_info has {len(cluster_rank_info)} member(s); at least 2 are needed")
        ranks = list(cluster_rank_info.values())
        if any(later < earlier for earlier, later in zip(ranks, ranks[1:])):
            raise_param_invalid(f"cluster_rank_info ranks {ranks} must be in ascending order of insertion")
        ids = c_array(UINT64, list(cluster_rank_info.keys()))
        rank_array = c_array(UINT32, ranks)
        comm_id = _capi.lldd_ext_link(_native.engine_for("link", LLMStatusCode.LLM_FAILED), comm_name.encode(),
                                      ids, rank_array, len(ranks), rank_table.encode(), "link")
        if self._cache_manager is not None:
            self._cache_manager.set_is_call_linked()
        return comm_id

    def _check_comm_id(self, comm_id: Any, what: str) -> int:
        self._check_cache_manager_mode(what)
        check_type(comm_id, int, "comm_id", allow_none=False)
        return check_int(comm_id, "comm_id", UINT64)

    def unlink(self, comm_id: int) -> None:
        """Leave the communicator ``comm_id`` (waits for its preparation to stop).

        Raises:
            RuntimeError: not initialised.
            TypeError: ``comm_id`` not an int. ValueError: outside uint64.
            LLMException: ``LLM_PARAM_INVALID`` in v1 mode; ``LLM_NOT_YET_LINK`` for an
                unknown comm id; ``LLM_UNLINK_FAILED``.
        """
        value = self._check_comm_id(comm_id, "unlink")
        _capi.lldd_ext_unlink(_native.engine_for("unlink", LLMStatusCode.LLM_FAILED), value, "unlink")

    def query_register_mem_status(self, comm_id: int) -> RegisterMemStatus:
        """The state of communicator ``comm_id``: ``PREPARING`` until every member
        has joined and exchanged memory, then ``OK`` — or ``FAILED`` (a member did not
        join within ``llm.LinkTotalTime``).

        Raises:
            RuntimeError: not initialised.
            TypeError: ``comm_id`` not an int. ValueError: outside uint64.
            LLMException: ``LLM_PARAM_INVALID`` in v1 mode; ``LLM_NOT_YET_LINK`` for an
                unknown comm id.
        """
        value = self._check_comm_id(comm_id, "query_register_mem_status")
        raw = _capi.lldd_ext_query_register_mem_status(
            _native.engine_for("query_register_mem_status", LLMStatusCode.LLM_FAILED), value,
            "query_register_mem_status")
        try:
            return RegisterMemStatus(raw)
        except ValueError:
            return RegisterMemStatus.FAILED

    # ---- role ---------------------------------------------------------------------------

    def switch_role(self, role: LLMRole, switch_options: Optional[Dict[str, str]] = None) -> None:
        """Change the role; with ``llm.listenIpInfo`` in ``switch_options`` the engine
        listens there (v2: without it, a running listener stops).

        Raises:
            RuntimeError: not initialised.
            TypeError: ``role`` not an ``LLMRole``; ``switch_options`` not a dict.
            KeyError: ``role`` is ``None`` (the vendor's role lookup).
            ValueError: the port of ``llm.listenIpInfo`` is not a number.
            RuntimeError: (v1) the ip of ``llm.listenIpInfo`` cannot be parsed.
            LLMException: ``LLM_PARAM_INVALID`` for a malformed ``llm.listenIpInfo``
                (PR-27 included), (v1) an unchanged role or a switch to PROMPT without
                ``llm.listenIpInfo`` (also with no ``switch_options`` at all); from the
                core ``LLM_EXIST_LINK`` while a link lives, (v1)
                ``LLM_FEATURE_NOT_ENABLED`` without ``llm.EnableSwitchRole="1"``.

        In v1 ``llm.listenIpInfo`` is read only when switching to PROMPT (its ip by
        ``inet_aton``, so ``"127.1"`` parses); switching to another role hands the
        options to the core unread, as the vendor does.
        """
        state = self._check_initialized()
        check_type(role, LLMRole, "role")
        if role is None:
            raise none_error("role", "an LLMRole", KeyError)
        options: Dict[str, Any]
        if state.cache_manager_mode:
            check_type(switch_options, dict, "switch_options")
            options = dict(switch_options or {})
            if "llm.listenIpInfo" in options:
                ip, port = _parse_listen(_require_str_option(options, "llm.listenIpInfo"), "llm.listenIpInfo")
                options["llm.ListenIp"] = ip
                options["llm.ListenPort"] = str(port)
        else:
            if role == self._role:
                raise_param_invalid(f"role not changed: the engine is already {role}")
            check_type(switch_options, dict, "switch_options")
            options = dict(switch_options or {})
            # v1 reads the listen address only when switching to PROMPT; for the other
            # roles the options go to the core as they are
            if role is LLMRole.PROMPT:
                if "llm.listenIpInfo" not in options:
                    raise_param_invalid('Failed to switch to Prompt, option "llm.listenIpInfo" must be specified')
                ip_int, port = _parse_v1_listen(_require_str_option(options, "llm.listenIpInfo"))
                options["llm.ListenIp"] = str(ip_int)
                options["llm.ListenPort"] = str(port)
        array, count, keep = c_options(options, "switch_options", _option_not_str)
        _capi.lldd_ext_switch_role(_native.engine_for("switch_role", LLMStatusCode.LLM_FAILED), int(role),
                                   array, count, "switch_role")
        del keep
        self._role = role
        if self._kv_cache_manager is not None:
            self._kv_cache_manager._role = role

    def check_link_status(self, remote_cluster_id: int) -> None:
        """(v1) Return normally when a link to ``remote_cluster_id`` exists.

        Raises:
            RuntimeError: not initialised.
            TypeError: not an int. ValueError: outside uint64.
            LLMException: ``LLM_PARAM_INVALID`` in CacheManager mode or (core) on a
                non-DECODER engine; ``LLM_NOT_YET_LINK`` without a link.
        """
        state = self._check_initialized()
        if state.cache_manager_mode:
            raise_param_invalid("check_link_status is not supported when llm.EnableCacheManager is configured.")
        value = check_int(remote_cluster_id, "remote_cluster_id", UINT64)
        _capi.lldd_ext_check_link_status(_native.engine_for("check_link_status", LLMStatusCode.LLM_FAILED), value,
                                         "check_link_status")

    def __repr__(self) -> str:
        state = "initialized" if self._initialized else "not initialized"
        return f"LLMDataDist(role={self._role}, cluster_id={self._cluster_id}, {state})"


def _finalize_at_exit() -> None:
    """The vendor's atexit hook: finalize the live instance; an ``LLMException`` from
    it only warns."""
    instance = LLMDataDist.llm_engine_instance
    if instance is None:
        return
    try:
        instance.finalize()
    except LLMException as exc:
        warnings.warn(f"LLMDataDist.finalize at exit failed: {exc}", RuntimeWarning, stacklevel=1)


atexit.register(_finalize_at_exit)


def _forget_parent_engine() -> None:
    """In the child of ``fork()``: no engine. The parent's instance, if the child still
    refers to it, is left not initialised; its engine is neither used nor finalized
    here (its threads and sockets are the parent's). Locks a parent thread held at the
    fork would stay held in the child, so the lock is made anew."""
    LLMDataDist._lifecycle_lock = threading.RLock()
    instance = LLMDataDist.llm_engine_instance
    LLMDataDist._instance_ref = None
    if instance is not None:
        instance._drop_state()


os.register_at_fork(after_in_child=_forget_parent_engine)
