"""A native push whose local source was registered after the link (docs/semantics.md
E-11, PR-32): a HIXL client refuses the source it never registered when the transfer
starts, so the destination's lookup answers first; the default backend keeps the guard
at the local cache's remote-access step (E-12)."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import pytest

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import native
from llm_datadist_ffi.native import Cache, CacheDesc, CacheIndex

import engine_support as sup

Engines = Callable[..., native.LlmDataDist]
DESC = CacheDesc(2, native.DataType.DT_UINT8, [4, 16])


@pytest.mark.rules("PR-32", "E-11", "E-12", "E-5")
@pytest.mark.parametrize("backend", ["hixl", None])
def test_a_native_push_source_registered_after_the_link_is_refused_where_its_backend_refuses_it(
        engines: Engines, backend: Optional[str]) -> None:
    extra = {native.OPTION_TRANSFER_BACKEND: backend} if backend else {}
    server = engines(2, role=native.LlmRole.DECODER, options=dict(extra), listen=True)
    client = engines(1, options=dict(extra), listen=True)
    dst = [np.zeros((4, 16), np.uint8) for _ in range(2)]
    did = server.register_kv_cache(DESC, dst)
    assert client.link_llm_clusters([sup.cluster(2, server.listen_port)])[0] == S.LLM_SUCCESS
    sid = client.register_kv_cache(DESC, [np.full((4, 16), 7, np.uint8) for _ in range(2)])   # after the link
    unknown = sup.status_of(client.push_kv_blocks, Cache(sid, cache_desc=DESC), CacheIndex(2, did + 5), [0], [1])
    assert unknown == (S.LLM_KV_CACHE_NOT_EXIST if backend else S.LLM_PARAM_INVALID)
    assert sup.status_of(client.push_kv_blocks, Cache(sid, cache_desc=DESC), CacheIndex(2, did), [0], [1]) == S.LLM_PARAM_INVALID
    assert all(not d.any() for d in dst)                                  # nothing moved
