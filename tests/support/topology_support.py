"""Functions the topology tests run inside engine processes (found there by name).

Caches are ``[blocks, 64]`` uint8 arrays whose bytes come from a seed (``content``), so
the test side computes what a pull must leave without asking the package.
"""
from __future__ import annotations

import os
import subprocess
import time
from typing import List

import numpy as np

from llm_datadist_ffi.testing.topology import here

BLOCKS, WIDTH = 8, 64


def content(seed: int) -> np.ndarray:
    if seed < 0:
        return np.zeros((BLOCKS, WIDTH), np.uint8)
    return np.random.default_rng(seed).integers(0, 256, (BLOCKS, WIDTH), dtype=np.uint8)


def register(seed: int) -> int:
    """Registers one blocks cache of one tensor holding ``content(seed)``; its cache id.
    A Prompt's is keyed by its cluster id (model 0)."""
    me = here()
    array = content(seed)
    me.state["array"] = array
    if me.api == "native":
        from llm_datadist_ffi import native
        desc = native.CacheDesc(1, native.DataType.DT_UINT8, [BLOCKS, WIDTH], native.CachePlacement.DEVICE)
        return int(me.engine.register_kv_cache(desc, [array.ctypes.data]))
    import llm_datadist
    desc = llm_datadist.CacheDesc(1, [BLOCKS, WIDTH], llm_datadist.DataType.DT_UINT8, llm_datadist.Placement.DEVICE)
    manager = me.engine.cache_manager
    if me.role == "prompt":
        cache = manager.register_blocks_cache(desc, [array.ctypes.data], llm_datadist.BlocksCacheKey(me.cluster_id, 0))
    else:
        cache = manager.register_blocks_cache(desc, [array.ctypes.data])
    me.state["cache"] = cache
    return int(cache.cache_id)


def link(*cluster_ids: int) -> None:
    here().link(*cluster_ids)


def pull_blocks(cluster_id: int, src_cache_id: int, dst_cache_id: int, src: List[int], dst: List[int]) -> bytes:
    """Pulls blocks ``src`` of the peer's cache into blocks ``dst`` of ours; our bytes."""
    me = here()
    if me.api == "native":
        from llm_datadist_ffi import native
        me.engine.pull_kv_blocks(native.CacheIndex(cluster_id, src_cache_id), native.Cache(dst_cache_id), src, dst)
    else:
        import llm_datadist
        me.engine.cache_manager.pull_blocks(llm_datadist.BlocksCacheKey(cluster_id, 0), me.state["cache"],
                                            src_blocks=src, dst_blocks=dst, tensor_num_per_layer=1)
    return bytes(me.state["array"].tobytes())


def identity() -> List[object]:
    """What this process is: [role, cluster id, api, pid, peers' cluster ids]."""
    me = here()
    return [me.role, me.cluster_id, me.api, os.getpid(), sorted(me.peers)]


def raise_value_error(text: str) -> None:
    raise ValueError(text)


def sleep_forever_with_a_child() -> None:
    """Starts a grandchild (``sleep``), writes both pids to stderr, then hangs."""
    child = subprocess.Popen(["sleep", "600"])
    os.write(2, f"PIDS {os.getpid()} {child.pid}\n".encode())
    time.sleep(600)


def ignore_sigterm_and_hang() -> None:
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.write(2, b"IGNORING SIGTERM\n")
    time.sleep(600)


def add(a: int, b: int, *, times: int = 1) -> int:
    return (a + b) * times


class Unpicklable(Exception):
    """An exception that cannot cross a process boundary (it holds a lock)."""

    def __init__(self, text: str) -> None:
        import threading
        super().__init__(text)
        self.lock = threading.Lock()


def raise_unpicklable(text: str) -> None:
    raise Unpicklable(text)
