"""The mock backend's control interface, for tests (include/lldd/mock.h).

Deterministic device sizes, fault injection ("make the next pull fail with
LLM_TIMEOUT"), slow or vanished peers, and leak accounting. Every function raises
``LLMException(LLM_FEATURE_NOT_ENABLED)`` on a backend without this interface (the
ascend shim), so tests that need it say so with the ``mock_only`` marker.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator, Union

from ._core import _capi
from .native import LlmDataDist
from .status import LLMStatusCode

if TYPE_CHECKING:
    from ._vendor.v2.llm_datadist import LLMDataDist

__all__ = [
    "set_device_count", "set_device_capacity", "inject_fault", "clear_faults", "fault",
    "set_serve_delay", "drop_connections", "live_allocations", "live_engines", "set_link_pace", "bytes_moved",
]


def set_device_count(count: int) -> None:
    """Number of mock devices (default 8); only before the first ACL call (A-2)."""
    _capi.check(_capi.mock_function("lldd_mock_set_device_count")(count), "mock.set_device_count")


def set_device_capacity(nbytes: int) -> None:
    """Memory per mock device (default 64 GiB); only before the first ACL call (A-3)."""
    _capi.check(_capi.mock_function("lldd_mock_set_device_capacity")(nbytes), "mock.set_device_capacity")


def inject_fault(function_name: str, code: Union[LLMStatusCode, int], count: int = 1, skip: int = 0) -> None:
    """Make ``function_name`` (a C name such as ``"lldd_pull_kv_blocks"`` or
    ``"aclrtMalloc"``) return ``code`` for ``count`` calls after ``skip`` calls.

    Raises:
        LLMException: ``LLM_PARAM_INVALID`` for an unknown function name or code 0.
    """
    fn = _capi.mock_function("lldd_mock_inject_fault")
    _capi.check(fn(function_name.encode(), int(code) & 0xFFFFFFFF, count, skip), "mock.inject_fault")


def clear_faults() -> None:
    """Disarm every injected fault."""
    _capi.mock_function("lldd_mock_clear_faults")()


@contextlib.contextmanager
def fault(function_name: str, code: Union[LLMStatusCode, int], count: int = 1, skip: int = 0) -> Iterator[None]:
    """``with fault("lldd_pull_kv_cache", LLMStatusCode.LLM_TIMEOUT): ...``; cleared on exit."""
    inject_fault(function_name, code, count, skip)
    try:
        yield
    finally:
        clear_faults()


def set_serve_delay(engine: LlmDataDist, delay_ms: int) -> None:
    """Delay every answer ``engine`` gives its peers, so their calls time out."""
    fn = _capi.mock_function("lldd_mock_set_serve_delay")
    with engine._held() as handle:
        _capi.check(fn(handle, delay_ms), "mock.set_serve_delay")


def drop_connections(engine: LlmDataDist) -> None:
    """Close every link connection of ``engine`` abruptly, as if its process died."""
    fn = _capi.mock_function("lldd_mock_drop_connections")
    with engine._held() as handle:
        _capi.check(fn(handle), "mock.drop_connections")


LINK_PATHS = {0: "none", 1: "same-process", 2: "process_vm", 3: "socket", 4: "shared"}


def link_path(engine: LlmDataDist, cluster_id: int) -> str:
    """How ``engine``'s link to ``cluster_id`` moves bytes: ``"none"`` (no such link),
    ``"same-process"``, ``"process_vm"`` (a peer the kernel identified, docs/security.md
    §2.2) or ``"socket"`` (any other peer)."""
    fn = _capi.mock_function("lldd_mock_link_path")
    with engine._held() as handle:
        return LINK_PATHS[int(fn(handle, cluster_id))]


def last_transfer_path(engine: LlmDataDist, cluster_id: int) -> str:
    """How the last transfer over ``engine``'s link to ``cluster_id`` that moved bytes
    moved them: ``"none"`` (no such link, or no transfer yet), ``"same-process"``,
    ``"shared"`` (copies between this process's mappings of the peer's library memory,
    docs/security.md §2.7), ``"process_vm"`` or ``"socket"``."""
    fn = _capi.mock_function("lldd_mock_last_transfer_path")
    with engine._held() as handle:
        return LINK_PATHS[int(fn(handle, cluster_id))]


def live_allocations() -> int:
    """Live mock-ACL allocations in this process (user and pool memory)."""
    return int(_capi.mock_function("lldd_mock_live_allocations")())


def live_engines() -> int:
    """Engines created and not yet destroyed in this process."""
    return int(_capi.mock_function("lldd_mock_live_engines")())


def set_link_pace(engine: Union[LlmDataDist, "LLMDataDist"], cluster_id: int, bytes_per_second: int,
                  latency_us: int = 0) -> None:
    """Pace the transfers ``engine`` starts over its link to ``cluster_id``: each takes at
    least ``latency_us`` + bytes / ``bytes_per_second`` (0: no bandwidth limit), and one
    that would take longer than the engine's ``llm.SyncKvCacheWaitTime`` moves nothing and
    raises ``LLM_TIMEOUT`` when the wait time is over. Overrides the engine's options
    ``llm_datadist_ffi.mock.LinkBandwidth`` and ``llm_datadist_ffi.mock.LinkLatencyUs`` for
    this cluster, for the engine's life. ``engine`` is a native ``LlmDataDist`` or the
    vendor-compatible ``LLMDataDist`` (its live engine).

    Raises:
        LLMException: ``LLM_PARAM_INVALID`` for a latency above one hour or a 65th cluster;
            ``LLM_FAILED`` for a vendor-compatible ``LLMDataDist`` that is not initialised.
    """
    fn = _capi.mock_function("lldd_mock_set_link_pace")
    tag = "mock.set_link_pace"
    if isinstance(engine, LlmDataDist):
        with engine._held() as handle:
            _capi.check(fn(handle, cluster_id, bytes_per_second, latency_us), tag)
        return
    from ._vendor import _native

    handle = _native.engine_for(tag, LLMStatusCode.LLM_FAILED)
    _capi.check(fn(handle, cluster_id, bytes_per_second, latency_us), tag)


def bytes_moved() -> int:
    """The bytes this thread's transfers and copies have moved so far (a running total):
    the difference across a call is what that call moved."""
    return int(_capi.mock_function("lldd_mock_bytes_moved")())
