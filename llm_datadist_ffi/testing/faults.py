"""Which C function of the library each Python method calls, for fault injection.

The mock fails calls by C function name (``mock_control.inject_fault("lldd_ext_pull",
…)``); a connector's author thinks in the Python methods they call
(``cache_manager.pull_blocks``). ``FAULT_POINTS`` is the one table between the two:
``c_function("pull_blocks")`` is ``"lldd_ext_pull"``. A name may be qualified by its
class (``"LlmDataDist.allocate_cache"``) where the plain method name belongs to classes
that call different functions; a C name (``lldd_*``, ``acl*``) stands for itself.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

from ..status import LLMStatusCode
from . import topology
from .topology import EngineProcess

__all__ = ["FaultPoint", "FAULT_POINTS", "c_functions", "Faults"]


@dataclass(frozen=True)
class FaultPoint:
    """``owner.method`` (``owner``: a class's import path) fails when ``function`` fails."""

    owner: str
    method: str
    function: str

    @property
    def class_name(self) -> str:
        return self.owner.rpartition(".")[2]


_V2_ENGINE = "llm_datadist_ffi._vendor.v2.llm_datadist.LLMDataDist"
_V2_CACHES = "llm_datadist_ffi._vendor.v2.cache_manager.CacheManager"
_V1_CACHES = "llm_datadist_ffi._vendor.v1.cache_manager.KvCacheManager"
_NATIVE = "llm_datadist_ffi.native.LlmDataDist"


def _points(owner: str, pairs: List[Tuple[str, str]]) -> List[FaultPoint]:
    return [FaultPoint(owner, method, function) for method, function in pairs]


#: Every public method that calls a C function the mock can fail, with that function.
FAULT_POINTS: Tuple[FaultPoint, ...] = tuple(
    _points(_V2_ENGINE, [
        ("init", "lldd_ext_initialize"), ("link_clusters", "lldd_link_clusters"),
        ("unlink_clusters", "lldd_unlink_clusters"), ("link", "lldd_ext_link"), ("unlink", "lldd_ext_unlink"),
        ("switch_role", "lldd_ext_switch_role"), ("check_link_status", "lldd_ext_check_link_status"),
        ("query_register_mem_status", "lldd_ext_query_register_mem_status"),
    ])
    + _points(_V2_CACHES, [
        ("register_cache", "lldd_ext_register_cache"), ("register_blocks_cache", "lldd_ext_register_cache"),
        ("unregister_cache", "lldd_ext_unregister_cache"), ("pull_cache", "lldd_ext_pull"),
        ("pull_blocks", "lldd_ext_pull"), ("push_cache", "lldd_ext_push_layer"),
        ("push_blocks", "lldd_ext_push_layer"), ("transfer_cache_async", "lldd_ext_push_layer"),
        ("transfer_cache_async", "lldd_ext_transfer_layer"),
        ("allocate_cache", "lldd_ext_allocate_cache"), ("allocate_blocks_cache", "lldd_ext_allocate_cache"),
        ("deallocate_cache", "lldd_ext_deallocate_cache"),
        ("deallocate_blocks_cache", "lldd_ext_deallocate_cache"),
        ("remove_cache_key", "lldd_ext_remove_cache_key"), ("copy_cache", "lldd_ext_copy_cache"),
        ("copy_blocks", "lldd_ext_copy_blocks"), ("swap_blocks", "lldd_ext_swap_blocks"),
        ("remap_registered_memory", "lldd_ext_remap_registered_memory"),
    ])
    + _points(_V1_CACHES, [
        ("pull_cache", "lldd_ext_pull"), ("pull_blocks", "lldd_ext_pull"),
        ("allocate_cache", "lldd_ext_allocate_cache"), ("allocate_blocks_cache", "lldd_ext_allocate_cache"),
        ("deallocate_cache", "lldd_ext_deallocate_cache"), ("remove_cache_key", "lldd_ext_remove_cache_key"),
        ("copy_cache", "lldd_ext_copy_cache"), ("copy_blocks", "lldd_ext_copy_blocks"),
        ("swap_blocks", "lldd_ext_swap_blocks"),
    ])
    + _points(_NATIVE, [
        ("initialize", "lldd_initialize"), ("set_role", "lldd_set_role"),
        ("link_llm_clusters", "lldd_link_clusters"), ("unlink_llm_clusters", "lldd_unlink_clusters"),
        ("register_kv_cache", "lldd_register_kv_cache"), ("unregister_kv_cache", "lldd_unregister_kv_cache"),
        ("allocate_cache", "lldd_allocate_cache"), ("deallocate_cache", "lldd_deallocate_cache"),
        ("pull_kv_cache", "lldd_pull_kv_cache"), ("pull_kv_blocks", "lldd_pull_kv_blocks"),
        ("push_kv_cache", "lldd_push_kv_cache"), ("push_kv_blocks", "lldd_push_kv_blocks"),
        ("copy_kv_cache", "lldd_copy_kv_cache"), ("copy_kv_blocks", "lldd_copy_kv_blocks"),
    ])
)


def _by_name() -> Dict[str, List[str]]:
    table: Dict[str, List[str]] = {}
    for point in FAULT_POINTS:
        for name in (point.method, f"{point.class_name}.{point.method}"):
            functions = table.setdefault(name, [])
            if point.function not in functions:
                functions.append(point.function)
    return table


def c_functions(name: str) -> Tuple[str, ...]:
    """The C functions to fail for ``name``: a Python method (``"pull_blocks"``,
    ``"CacheManager.pull_blocks"``) or a C function name, which stands for itself.

    Raises:
        ValueError: ``name`` is neither a C function name nor a method of the table.
    """
    if name.startswith(("lldd_", "acl")):
        return (name,)
    functions = _by_name().get(name)
    if functions is None:
        raise ValueError(f"{name!r} is neither a C function nor a method of FAULT_POINTS")
    return tuple(functions)


class Faults:
    """Faults of a test, in this process or in the processes of a topology, undone by
    ``clear()`` (the ``faults`` fixture calls it after the test).

    ``fail("pull_blocks", LLMStatusCode.LLM_TIMEOUT, on=topo.decoders[0])`` makes the
    next call of ``pull_blocks`` in that process fail with ``LLM_TIMEOUT``; ``delay``
    makes an engine answer its peers late, ``drop_links`` closes its links abruptly,
    ``stop``/``resume`` freeze and thaw its process, ``kill`` ends it as a crash would.
    """

    def __init__(self) -> None:
        self._touched: List[EngineProcess] = []
        self._stopped: List[EngineProcess] = []
        self._here = False

    def fail(self, name: str, code: Union[LLMStatusCode, int], count: int = 1, skip: int = 0, *,
             on: Optional[EngineProcess] = None) -> Tuple[str, ...]:
        """Make the next ``count`` calls (after ``skip`` calls) of ``name`` — a method of
        ``FAULT_POINTS`` or a C function — fail with ``code``, in process ``on`` (this
        process by default). Returns the C functions armed.

        Raises:
            ValueError: an unknown name.
            LLMException: ``LLM_PARAM_INVALID`` for a code of 0.
        """
        functions = c_functions(name)
        for function in functions:
            if on is None:
                self._here = True
                topology._inject_fault(function, int(code), count, skip)
            else:
                self._touch(on)
                on.call(topology._inject_fault, function, int(code), count, skip)
        return functions

    def delay(self, on: EngineProcess, delay_ms: int) -> None:
        """Delay every answer the engine of ``on`` gives its peers by ``delay_ms``."""
        self._touch(on)
        on.call(topology._serve_delay, delay_ms)

    def drop_links(self, on: EngineProcess) -> None:
        """Close every link connection of the engine of ``on`` abruptly."""
        on.call(topology._drop_connections)

    def stop(self, on: EngineProcess) -> None:
        """Freeze the process ``on`` (SIGSTOP): its engine stops answering."""
        self._stopped.append(on)
        on.signal(signal.SIGSTOP)

    def resume(self, on: EngineProcess) -> None:
        """Thaw a process frozen by ``stop`` (SIGCONT)."""
        on.signal(signal.SIGCONT)
        if on in self._stopped:
            self._stopped.remove(on)

    def kill(self, on: EngineProcess) -> None:
        """End the process ``on`` at once (SIGKILL), as a crash would."""
        on.kill()

    def clear(self) -> None:
        """Thaw the stopped processes and disarm the faults and delays of every live one
        that is not in the middle of a call (a busy one ends with its topology)."""
        for process in self._stopped:
            process.signal(signal.SIGCONT)
        self._stopped.clear()
        for process in self._touched:
            if process.process.poll() is None and process._pending is None:
                process.call(topology._clear_faults)
                process.call(topology._serve_delay, 0)
        self._touched.clear()
        if self._here:
            topology._clear_faults()
            self._here = False

    def _touch(self, process: EngineProcess) -> None:
        if process not in self._touched:
            self._touched.append(process)
