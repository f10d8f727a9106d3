"""Two engines for the tests of behaviours read from the vendor's sources
(tests/vendor/test_vendor_sources.py, test_vendor_push_order.py): one in this process,
one in a ``vendor_peer.py`` process, with blocks caches filled from seeds."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from llm_datadist_ffi import LLMStatusCode
from llm_datadist_ffi.vendor import BlocksCacheKey, Cache, CacheDesc, DataType, LLMConfig, LLMDataDist, LLMRole

import vendor_support as vs
from vendor_support import fill

S = LLMStatusCode
P_ID, D_ID = 1, 2
BLOCKS, BLOCK_BYTES, TENSORS = 8, 64, 2


def omni_decoder_options(ip: str, backend: Optional[str]) -> Dict[str, str]:
    """A Decoder's options as omni-infer builds them on HIXL hosts: ``listen_ip_info``
    with port 0, the cache manager and remote access on."""
    config = LLMConfig()
    config.device_id = 0
    config.enable_cache_manager = True
    config.enable_remote_cache_accessible = True
    config.listen_ip_info = f"{ip}:0"
    if backend is not None:
        config.transfer_backend = backend
    return config.generate_options()


class Local:
    """The engine of this process and the numpy memory of its caches."""

    def __init__(self, options: Dict[str, str], role: LLMRole = LLMRole.DECODER, cluster_id: int = D_ID) -> None:
        self.engine = LLMDataDist(role, cluster_id)
        self.engine.init(options)
        self.cm = self.engine.cache_manager
        self.memory: List[np.ndarray] = []

    def blocks_cache(self, seed: int = -1, key: Optional[BlocksCacheKey] = None,
                     remote_accessible: Optional[bool] = None) -> Tuple[Cache, List[np.ndarray]]:
        arrays = [fill(seed + t if seed >= 0 else -1, (BLOCKS, BLOCK_BYTES)) for t in range(TENSORS)]
        self.memory += arrays
        desc = CacheDesc(TENSORS, [BLOCKS, BLOCK_BYTES], DataType.DT_UINT8)
        cache = self.cm.register_blocks_cache(desc, [a.ctypes.data for a in arrays], key, remote_accessible)
        return cache, arrays

    def link(self, port: int, remote_cluster_id: int = P_ID) -> None:
        assert self.engine.link_clusters([vs.cluster_info(remote_cluster_id, port)], 5000) == \
            (S.LLM_SUCCESS, [S.LLM_SUCCESS])


def start_prompt(peer: Any, port: int, **extra: str) -> None:
    peer.run(f"p = LLMDataDist(LLMRole.PROMPT, {P_ID}); p.init(support.v2_options({port}, **{extra!r})); "
             "cm = p.cache_manager; keep = []")


def prompt_blocks(peer: Any, name: str, seed: int, key: str = "BlocksCacheKey(1, 0)") -> int:
    """A blocks cache in the peer, filled from ``seed`` and bound to ``key``; its id."""
    return int(peer.run(f"arrays_{name} = [fill({seed} + t, ({BLOCKS}, {BLOCK_BYTES})) for t in range({TENSORS})]; "
                        f"keep.append(arrays_{name}); {name} = cm.register_blocks_cache(CacheDesc({TENSORS}, "
                        f"[{BLOCKS}, {BLOCK_BYTES}], DataType.DT_UINT8), [a.ctypes.data for a in arrays_{name}], "
                        f"{key})", f"{name}.cache_id"))


def pulled(arrays: List[np.ndarray], seed: int, src: List[int], dst: List[int]) -> None:
    """Blocks ``dst`` of every tensor hold blocks ``src`` of the source filled from ``seed``;
    every other byte is still zero."""
    for t, array in enumerate(arrays):
        expected = np.zeros((BLOCKS, BLOCK_BYTES), np.uint8)
        expected[dst] = fill(seed + t, (BLOCKS, BLOCK_BYTES))[src]
        assert array.tobytes() == expected.tobytes()
