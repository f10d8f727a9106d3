"""The Python-side lint rules as functions of a call's arguments: the one source.

Each function here decides one lint rule of docs/semantics.md from plain values (ints,
ranges, lists, dicts, option maps) and returns its findings, ``(rule, text)`` pairs,
without reporting them. Two callers report what they return:

* the mock tier's vendor-compatible API, at its own check points, through
  ``lint.lint`` (a warning, or its refusal under ``LLM_DATADIST_FFI_STRICT=1``);
* ``llm_datadist_ffi.companion``, which wraps the vendor's own ``llm_datadist`` package
  on an Ascend host and reports the same findings before the vendor's method runs.

So the texts, the rule ids and the decisions are the same on a laptop and on a device.
Nothing here imports a backend, a project class or the vendor's package: arguments
are read duck-typed, and a function given something malformed (a wrong type, a
missing attribute) returns no finding, because there the caller's own checks (the
mock's, or the vendor's) decide with their own error.

Which rules can fire on a device, and why the others cannot, is ``DEVICE``.
"""
from __future__ import annotations

import difflib
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

__all__ = [
    "Finding", "DEVICE", "INVALID_ID", "VENDOR_OPTION_NAMES", "ignored_keywords", "empty_layer_range",
    "empty_layer_ranges", "push_tensor_num",
    "repeated_block", "repeated_blocks", "mapping_findings", "copy_pairs_findings", "batch_dim",
    "cache_key_problem", "placeholder_key", "sync_wait_time", "option_keys",
]

#: a finding: the rule id and the text that names the parameter and the value
Finding = Tuple[str, str]

#: the invalid id of a cache key (``2**64 - 1``)
INVALID_ID = 2 ** 64 - 1

_OFFSET_KEYWORDS = ("src_cache_offset", "dst_cache_offset")

#: the option keys of ``LLMDataDist.init`` that OPT-1 compares a key against: the
#: vendor's, and the mock's own (which the vendor ignores as any unknown key)
VENDOR_OPTION_NAMES = (
    "llm.EnableCacheManager", "llm.EnableRemoteCacheAccessible", "llm.listenIpInfo", "llm.ListenIpInfo",
    "llm.ListenIp", "llm.ListenPort", "ge.exec.deviceId", "llm.DeviceId", "llm.SyncKvCacheWaitTime",
    "ge.flowGraphMemMaxSize", "llm.BufPoolCfg", "llm.MemPoolConfig", "llm.HostMemPoolConfig", "llm.LocalCommRes",
    "llm.TransferBackend", "llm.EnableSwitchRole", "llm.deployResPath", "llm.ClusterInfo", "llm.LinkTotalTime",
    "llm.LinkRetryCount", "llm.RdmaTrafficClass", "llm.RdmaServiceLevel", "llm.MemoryUtilization",
    "llm.OutputMaxSize", "llm.Role", "llm.GlobalResourceConfig", "llm_datadist_ffi.mock.NativePool",
    "llm_datadist_ffi.mock.LinkBandwidth", "llm_datadist_ffi.mock.LinkLatencyUs",
)

#: rule id -> "" when the rule fires on a device (through the companion), else why not
DEVICE: Dict[str, str] = {
    "PR-1": "native API only (the C++ class's KvCacheExtParam); the vendor's Python layer never builds one",
    "PR-2": "",
    "PR-3": "",
    "PR-5": "",
    "PR-8": "",
    "PR-11": "native API only (the C++ class's KvCacheExtParam)",
    "PR-16": "needs the peer's cache table (which source batch the peer's cache resolves to), which only "
             "the mock's engine sees",
    "PR-17": "cannot arise through the vendor's Python layer: its DataType has no sub-byte type, so every "
             "tensor's byte size is a multiple of shape[0] (native API only)",
    "PR-18": "",
    "PR-20": "needs the peer's cache table (whether model 0 has a blocks cache there)",
    "PR-21": "needs the engine's key table (keys bound by other calls and by the peer's pushes)",
    "PR-23": "needs the engine's cache table (whether the library allocated the cache)",
    "PR-25": "",
    "PR-26": "",
    "PR-28": "needs the listener's real cluster id, which only the peer knows",
    "PR-33": "native API only (a native push's caller-side cache description)",
    "PR-41": "",
    "OPT-1": "",
    "PR-43": "needs the registered array's dtype: the vendor's register_cache takes addresses (plain "
             "ints), so only this package's tiers, which also take numpy arrays, see one",
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def ignored_keywords(kwargs: Mapping[str, Any], allowed: Sequence[str], tag: str, v2: bool) -> List[Finding]:
    """PR-8: keyword arguments the call does not read (the vendor ignores them); in a
    v2 call the v1 offsets have a text of their own."""
    found: List[Finding] = []
    for word in kwargs:
        if word in allowed:
            continue
        if v2 and word in _OFFSET_KEYWORDS:
            found.append(("PR-8", f"[{tag}] {word} is ignored in CacheManager mode (only the v1 "
                                  "kv_cache_manager.pull_cache reads offsets)"))
        else:
            found.append(("PR-8", f"[{tag}] keyword argument {word!r} is ignored; {tag} reads only "
                                  f"{', '.join(allowed)}"))
    return found


def empty_layer_range(layers: Any, name: str, tag: str) -> List[Finding]:
    """PR-2: a pull's layer range ``name`` that is an empty ``range`` (which means every
    layer). A range whose step is not 1 is left to the callers' checks."""
    if isinstance(layers, range) and layers.step == 1 and len(layers) == 0:
        return [("PR-2", f"[{tag}] {name} {layers!r} is empty")]
    return []


def empty_layer_ranges(src: Any, dst: Any, tag: str) -> List[Finding]:
    """PR-2 of both layer ranges of a pull."""
    return empty_layer_range(src, "src_layer_range", tag) + empty_layer_range(dst, "dst_layer_range", tag)


def push_tensor_num(n: Any, num_tensors: Any, src_range: Any, dst_range: Any, tag: str) -> List[Finding]:
    """PR-3: a push without layer ranges whose ``tensor_num_per_layer`` exceeds the
    source cache's tensor count, so that the default range is empty and nothing moves."""
    if not (_is_int(n) and _is_int(num_tensors)) or n <= 0 or src_range is not None or dst_range is not None:
        return []
    if n > num_tensors:
        return [("PR-3", f"[{tag}] tensor_num_per_layer ({n}) is larger than the source cache's "
                         f"{num_tensors} tensors, so the default layer range is empty")]
    return []


def repeated_block(blocks: Iterable[int]) -> Optional[int]:
    """The smallest block listed more than once in ``blocks`` (ints), or None."""
    values = list(blocks)
    if len(set(values)) == len(values):
        return None
    seen: set[int] = set()
    repeats = {v for v in values if v in seen or seen.add(v)}   # type: ignore[func-returns-value]
    return min(repeats)


def repeated_blocks(blocks: Any, name: str, tag: str,
                    find: Optional[Callable[[Any], Optional[int]]] = None) -> List[Finding]:
    """PR-5: a destination block list naming a block twice. ``blocks`` is a list or
    tuple of int, or whatever ``find`` (which returns the smallest repeated block)
    reads: the mock's converted block arrays."""
    if find is None:
        if not isinstance(blocks, (list, tuple)) or len(set(blocks)) == len(blocks) or \
                not all(_is_int(b) for b in blocks):
            return []                      # no repeat (the common case: one set, no scan), or not ints
        find = repeated_block
    repeated = find(blocks)
    return [] if repeated is None else [("PR-5", f"[{tag}] {name} contains block {repeated} more than once")]


def mapping_findings(src_to_dst: Any, tag: str) -> List[Finding]:
    """PR-25 and PR-5 of ``swap_blocks``: an empty mapping, a destination mapped twice."""
    if not isinstance(src_to_dst, dict):
        return []
    found: List[Finding] = []
    if not src_to_dst:
        found.append(("PR-25", f"[{tag}] src_to_dst is empty"))
    values = list(src_to_dst.values())
    if len(set(values)) != len(values):
        repeated = min(v for v in values if values.count(v) > 1)
        found.append(("PR-5", f"[{tag}] src_to_dst maps several blocks to destination block {repeated}"))
    return found


def copy_pairs_findings(copy_block_info: Any, tag: str) -> List[Finding]:
    """PR-25 and PR-5 of ``copy_blocks``: a mapping that expands to no pair, a
    destination block named twice (over all sources)."""
    if not isinstance(copy_block_info, dict) or \
            not all(isinstance(dsts, (list, tuple)) for dsts in copy_block_info.values()):
        return []
    dsts = [dst for targets in copy_block_info.values() for dst in targets]
    found: List[Finding] = []
    if not dsts:
        found.append(("PR-25", f"[{tag}] copy_block_info expands to no block pair"))
    repeated = repeated_block(dsts)
    if repeated is not None:
        found.append(("PR-5", f"[{tag}] copy_block_info names destination block {repeated} more than once"))
    return found


def batch_dim(cache_desc: Any, name: str, tag: str) -> List[Finding]:
    """PR-18: a cache description whose ``batch_dim_index`` is not 0 (the core uses
    ``shape[0]`` regardless)."""
    value = getattr(cache_desc, "batch_dim", 0)
    if _is_int(value) and value != 0:
        return [("PR-18", f"[{tag}] {name}.batch_dim_index is {value}")]
    return []


def _valid_id(value: Any) -> bool:
    return _is_int(value) and 0 <= value != INVALID_ID


def cache_key_problem(req_id: Any, prefix_id: Any) -> Optional[str]:
    """What makes a ``CacheKey`` invalid for a pull (neither or both of ``req_id`` and
    ``prefix_id`` valid; an id is invalid when it is < 0 or ``2**64-1``), or None."""
    req_valid, prefix_valid = _valid_id(req_id), _valid_id(prefix_id)
    if not req_valid and not prefix_valid:
        return f"one of req id and prefix id should contain valid value, got req_id={req_id}, prefix_id={prefix_id}"
    if req_valid and prefix_valid:
        return (f"only one of req id and prefix id should contain valid value, "
                f"got req_id={req_id}, prefix_id={prefix_id}")
    return None


def placeholder_key(cache_key: Any, tag: str) -> List[Finding]:
    """PR-41: ``remove_cache_key`` of a key with neither or both ids valid, which the
    core takes for the blocks key of its model (or the prefix key)."""
    req_id, prefix_id = getattr(cache_key, "req_id", None), getattr(cache_key, "prefix_id", None)
    if not (_is_int(req_id) and _is_int(prefix_id)):
        return []
    problem = cache_key_problem(req_id, prefix_id)
    return [] if problem is None else [("PR-41", f"[{tag}] {problem}")]


def sync_wait_time(options: Any, tag: str = "") -> List[Finding]:
    """PR-26: ``llm.SyncKvCacheWaitTime`` of 0 milliseconds (every wait ends at once).
    A value that is not a decimal string is left to the callers' checks."""
    if not isinstance(options, dict):
        return []
    value = options.get("llm.SyncKvCacheWaitTime")
    if not isinstance(value, str) or not (value.isdigit() and value.isascii()) or int(value) != 0:
        return []
    prefix = f"[{tag}] " if tag else ""
    return [("PR-26", f"{prefix}option llm.SyncKvCacheWaitTime={value!r} is 0 milliseconds")]


def option_keys(options: Iterable[Any], known: Iterable[str], tag: str) -> List[Finding]:
    """OPT-1: each key that is not one of ``known`` but looks like one (the same key in
    another case, or a close spelling), naming the key it resembles. Keys that resemble
    none of ``known`` are left alone: the vendor's libraries read many more options
    (``ge.*`` among them) than a binding can list."""
    names = sorted(set(known))
    folded = {name.lower(): name for name in names}
    found: List[Finding] = []
    for key in options:
        if not isinstance(key, str) or key in folded.values():
            continue
        match = folded.get(key.lower())
        if match is None:
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.85)
            match = close[0] if close else None
        if match is not None:
            found.append(("OPT-1", f"[{tag}] option key {key!r} is not read (did you mean {match!r}?)"))
    return found
