"""Peer-side helpers of the v1 suites (``test_property_vendor_v1.py``,
``test_stateful_vendor_life.py``), imported in the peer process (``vendor_peer.py``).

The peer holds one ``LLMDataDist`` at a time and its caches by name. Arguments and
results are plain JSON values: keys travel as tuples (``("key", cluster, req, model,
prefix)``, ``("byid", cluster, cache_id, batch)``, ``("blocks", cluster, model)``),
layer ranges as ``[start, stop]``; the tests compare what comes back with the
oracle. Every cache is filled from a seed with ``vendor_support.fill`` so that the
test knows its bytes without reading them.
"""
from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Optional

import llm_datadist as ld  # the package's vendor module (compat.install() ran in vendor_peer.py)
import vendor_support as vs

engine: Optional[Any] = None
caches: Dict[str, Any] = {}
ROLES = {"PROMPT": ld.LLMRole.PROMPT, "DECODER": ld.LLMRole.DECODER, "MIX": ld.LLMRole.MIX}


def start(role: str, cluster_id: int, port: Optional[int], options: Optional[Dict[str, str]] = None,
          v2: bool = False) -> None:
    """Initialise a new engine of ``role`` (v1 unless ``v2``); the old one is finalized."""
    global engine
    stop()
    made = ld.LLMDataDist(ROLES[role], cluster_id)
    base = vs.v2_options(port) if v2 else vs.v1_options(port)
    base.update(options or {})
    made.init(base)
    engine = made


def stop() -> None:
    global engine
    caches.clear()
    if engine is not None:
        engine.finalize()
        engine = None


def key(spec: List[Any]) -> Any:
    kind = spec[0]
    if kind == "key":
        return ld.CacheKey(spec[1], spec[2], spec[3], spec[4])
    if kind == "byid":
        return ld.CacheKeyByIdAndIndex(spec[1], spec[2], spec[3])
    return ld.BlocksCacheKey(spec[1], spec[2])


def allocate(name: str, num: int, shape: List[int], keys: List[List[Any]], blocks: bool,
             blocks_key: Optional[List[Any]], seed: int) -> List[Any]:
    """Allocate, fill tensor ``t`` with ``fill(seed + t)``; ``[cache_id, addresses]``."""
    assert engine is not None
    manager = engine.kv_cache_manager
    desc = ld.CacheDesc(num, list(shape), ld.DataType.DT_UINT8)
    if blocks:
        cache = manager.allocate_blocks_cache(desc, None if blocks_key is None else key(blocks_key))
    else:
        cache = manager.allocate_cache(desc, [key(k) for k in keys])
    size = shape[0] * shape[1]
    for t in range(num):
        ctypes.memmove(cache.per_device_tensor_addrs[0][t], vs.fill(seed + t, size).tobytes(), size)
    caches[name] = cache
    return [cache.cache_id, list(cache.per_device_tensor_addrs[0])]


def deallocate(name: str) -> None:
    assert engine is not None
    engine.kv_cache_manager.deallocate_cache(caches[name])


def dump(addrs: List[int], size: int) -> str:
    """The bytes of the tensors at ``addrs`` (``size`` each), as hex."""
    return b"".join(ctypes.string_at(a, size) for a in addrs).hex()


def link(remote: int, port: int, timeout: int = 5000) -> List[Any]:
    assert engine is not None
    status, rets = engine.link_clusters([vs.cluster_info(remote, port)], timeout)
    return [int(status), [int(r) for r in rets]]


def unlink(remote: int, port: int, force: bool = False) -> List[Any]:
    assert engine is not None
    status, rets = engine.unlink_clusters([vs.cluster_info(remote, port)], 5000, force)
    return [int(status), [int(r) for r in rets]]


def ranges(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(kwargs)
    for word in ("src_layer_range", "dst_layer_range"):
        if out.get(word) is not None:
            out[word] = range(*out[word])
    return out


def pull_cache(spec: List[Any], dst: str, batch: int, size: int, kwargs: Dict[str, Any]) -> None:
    assert engine is not None
    engine.kv_cache_manager.pull_cache(key(spec), caches[dst], batch, size, **ranges(kwargs))


def remove_cache_key(spec: List[Any]) -> None:
    assert engine is not None
    engine.kv_cache_manager.remove_cache_key(key(spec))
