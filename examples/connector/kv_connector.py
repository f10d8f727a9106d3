"""A small KV connector in the style of vLLM-Ascend's LLM-DataDist connector.

It is written against the vendor's ``llm_datadist`` API, as a connector on an Ascend
host is; on a machine without one, ``llm_datadist_ffi.compat.install()`` (done by the
pytest plugin's topology processes) makes ``import llm_datadist`` this package's mock.

The life of a connector, on each engine:

1. ``register_layers``: one blocks cache per layer, two tensors (K and V) of
   ``[num_blocks, block_elements]``; a Prompt registers each under
   ``BlocksCacheKey(its cluster id, model_id=layer)``, so that a Decoder names a layer
   by the Prompt's cluster id and the layer number.
2. ``link``: the Decoder links to the Prompts it pulls from.
3. ``pull``: the Decoder pulls a request's block table layer by layer: block
   ``src_blocks[k]`` of the Prompt into block ``dst_blocks[k]`` of its own cache.
4. ``release``: unlink and unregister, in the reverse order.

A failed pull raises ``KVTransferError`` naming the request, the layer and the Prompt,
and carrying the library's own status code: the scheduler decides on that code (retry
on ``LLM_TIMEOUT``, drop the Prompt on ``LLM_LINK_FAILED`` …), so it must not be
flattened into one message.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

import llm_datadist
from llm_datadist import BlocksCacheKey, CacheDesc, DataType, LLMException, LLMStatusCode, Placement

_DATA_TYPES = {np.dtype(np.float16): DataType.DT_FLOAT16, np.dtype(np.float32): DataType.DT_FLOAT,
               np.dtype(np.int8): DataType.DT_INT8, np.dtype(np.uint8): DataType.DT_UINT8}


class KVTransferError(Exception):
    """A pull of one layer of a request failed; ``status_code`` is the library's."""

    def __init__(self, request_id: str, layer: int, cluster_id: int, status_code: LLMStatusCode, detail: str) -> None:
        super().__init__(request_id, layer, cluster_id, status_code, detail)
        self.request_id = request_id
        self.layer = layer
        self.cluster_id = cluster_id
        self.status_code = status_code
        self.detail = detail

    def __str__(self) -> str:
        return (f"request {self.request_id}: pull of layer {self.layer} from cluster {self.cluster_id} "
                f"failed with {self.status_code.name}: {self.detail}")


class KVConnector:
    """The KV caches of one engine (``llm_datadist.LLMDataDist``, initialised) and its pulls."""

    def __init__(self, engine: llm_datadist.LLMDataDist, cluster_id: int, is_prompt: bool) -> None:
        self.engine = engine
        self.cluster_id = cluster_id
        self.is_prompt = is_prompt
        self.caches: List[Any] = []
        self.linked: Dict[int, Any] = {}

    def register_layers(self, layers: Sequence[Tuple[np.ndarray, np.ndarray]]) -> None:
        """Register the (K, V) arrays of every layer, one blocks cache per layer."""
        manager = self.engine.cache_manager
        for layer, (k, v) in enumerate(layers):
            if k.shape != v.shape or k.dtype != v.dtype or not (k.flags.c_contiguous and v.flags.c_contiguous):
                raise ValueError(f"layer {layer}: K and V must be C-contiguous arrays of one shape and type")
            desc = CacheDesc(2, list(k.shape), _DATA_TYPES[k.dtype], Placement.DEVICE)
            addresses = [k.ctypes.data, v.ctypes.data]
            if self.is_prompt:
                cache = manager.register_blocks_cache(desc, addresses, BlocksCacheKey(self.cluster_id, layer))
            else:
                cache = manager.register_blocks_cache(desc, addresses)
            self.caches.append(cache)

    def link(self, cluster_infos: Sequence[Any], timeout_ms: int = 5000) -> None:
        """Link to the Prompts of ``cluster_infos`` (``llm_datadist.LLMClusterInfo``)."""
        ret, rets = self.engine.link_clusters(list(cluster_infos), timeout_ms)
        failed = [(info.remote_cluster_id, LLMStatusCode(r)) for info, r in zip(cluster_infos, rets)
                  if r != LLMStatusCode.LLM_SUCCESS]
        if failed or ret != LLMStatusCode.LLM_SUCCESS:
            raise RuntimeError(f"link failed: {ret!r}, per cluster {failed}")
        for info in cluster_infos:
            self.linked[info.remote_cluster_id] = info

    def pull(self, request_id: str, cluster_id: int, src_blocks: Sequence[int], dst_blocks: Sequence[int]) -> None:
        """Pull the blocks of one request from Prompt ``cluster_id``, layer by layer.

        Raises:
            KVTransferError: a layer's pull failed (its ``status_code`` is the library's).
        """
        manager = self.engine.cache_manager
        for layer, cache in enumerate(self.caches):
            try:
                manager.pull_blocks(BlocksCacheKey(cluster_id, layer), cache, src_blocks=list(src_blocks),
                                    dst_blocks=list(dst_blocks))
            except LLMException as exc:
                raise KVTransferError(request_id, layer, cluster_id, exc.status_code, str(exc)) from exc

    def release(self) -> None:
        """Unlink every Prompt and unregister every cache."""
        if self.linked:
            self.engine.unlink_clusters(list(self.linked.values()), 5000)
            self.linked.clear()
        for cache in reversed(self.caches):
            self.engine.cache_manager.unregister_cache(cache.cache_id)
        self.caches.clear()
