"""Randomised byte checks of lldd_ext_pull (C2C, B2B, C2B, with layer ranges) in both
v2 modes against a numpy model written from docs/reference/semantics.md §8.2-§8.4: every destination
byte the rules name is the source byte they name, every other byte is unchanged.
Direct mode addresses a contiguous source batch with the destination stride (PR-6) and
reads batch 0 for cache-to-blocks whatever the key names (PR-16, a lint: refused under
LLM_DATADIST_FFI_STRICT=1); the cache-to-blocks chunk listed last is cut to the source
tensor size mod the block size, and chunks past the source batch are refused (PR-16).
Block lists may hold out-of-range destinations: then PARAM_INVALID and no byte
changes (PR-4); repeated destinations are copied in list order, the last write wins
(PR-5, a lint: refused like PR-4 under LLM_DATADIST_FFI_STRICT=1).
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, strategies as st

from llm_datadist_ffi import LLMStatusCode as S


import ext_support as xs
from lint_support import STRICT_ENV
pytestmark = pytest.mark.mock_only(reason="raw calls of the mock's extension functions")


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    form = draw(st.sampled_from(["C2C", "B2B", "C2B"]))
    direct = draw(st.booleans())
    n = draw(st.sampled_from([1, 2]))
    layers_src = draw(st.integers(1, 3))
    layers_dst = draw(st.integers(1, 3))
    block = draw(st.sampled_from([4, 8, 12]))
    s_stride = block if form == "B2B" else draw(st.sampled_from([block, 2 * block, 2 * block + 4]))
    s_count = draw(st.integers(1, 5))
    d_count = draw(st.integers(1, 6))
    scen: dict[str, Any] = {"form": form, "direct": direct, "n": n, "ns": layers_src * n, "nd": layers_dst * n,
                            "block": block, "s_stride": s_stride, "s_count": s_count, "d_count": d_count,
                            "seed": draw(st.integers(0, 2**16))}
    ranged = draw(st.booleans()) or layers_src != layers_dst
    if ranged:
        span = draw(st.integers(1, min(layers_src, layers_dst)))
        scen["src_layer"] = draw(st.integers(0, layers_src - span))
        scen["dst_layer"] = draw(st.integers(0, layers_dst - span))
        scen["span"] = span
    if form == "C2C":
        scen["src_batch"] = draw(st.integers(0, s_count - 1))
        scen["dst_batch"] = draw(st.integers(0, d_count - 1))
        scen["size"] = draw(st.one_of(st.just(-1), st.integers(1, min(block, s_stride))))
    elif form == "B2B":
        k = draw(st.integers(1, 6))
        scen["sblk"] = draw(st.lists(st.integers(0, s_count), min_size=k, max_size=k))      # s_count: out of range
        scen["dblk"] = draw(st.lists(st.integers(0, d_count), min_size=k, max_size=k))
    else:
        chunks = -(-s_stride // block)
        k = draw(st.integers(1, chunks))
        scen["src_batch"] = draw(st.integers(0, s_count - 1))
        scen["dblk"] = draw(st.lists(st.integers(0, d_count), min_size=k, max_size=k))
    return scen


def expected(scen: dict[str, Any], src: list[np.ndarray], dst: list[np.ndarray]) -> tuple[int, list[np.ndarray]]:
    """The model: (status, destination tensors afterwards)."""
    out = [d.copy() for d in dst]
    n, form, block = scen["n"], scen["form"], scen["block"]
    if "span" in scen:
        pairs = [(scen["src_layer"] * n + i, scen["dst_layer"] * n + i) for i in range(scen["span"] * n)]
    else:
        pairs = [(i, i) for i in range(scen["nd"])]
    strict = os.environ.get(STRICT_ENV) == "1"
    if form in ("B2B", "C2B"):
        dblk = scen["dblk"]
        repeated = len(set(dblk)) != len(dblk)
        if (repeated and strict) or max(dblk) >= scen["d_count"]:
            return S.LLM_PARAM_INVALID, out
        if form == "B2B" and max(scen["sblk"]) >= scen["s_count"]:
            return S.LLM_PARAM_INVALID, out
    lengths: list[int] = []
    if form == "C2B":
        # semantics.md §8.4 as the device: full blocks, the one listed last cut to TS mod block when
        # that is not 0; all of them inside the one source batch (PR-16, guard)
        remainder = scen["s_count"] * scen["s_stride"] % block
        lengths = [block] * (len(scen["dblk"]) - 1) + [remainder or block]
        if sum(lengths) > scen["s_stride"]:
            return S.LLM_PARAM_INVALID, out
        if scen["direct"] and scen["src_batch"] != 0 and strict:
            return S.LLM_PARAM_INVALID, out      # PR-16, a lint: the device reads batch 0
    for s, d in pairs:
        if form == "C2C":
            length = block if scen["size"] == -1 else scen["size"]
            # PR-6: direct mode addresses the source batch with the destination stride
            so = scen["src_batch"] * (block if scen["direct"] else scen["s_stride"])
            do = scen["dst_batch"] * block
            out[d][do:do + length] = src[s][so:so + length]
        elif form == "B2B":
            for sb, db in zip(scen["sblk"], scen["dblk"]):
                out[d][db * block:(db + 1) * block] = src[s][sb * block:(sb + 1) * block]
        else:
            base = 0 if scen["direct"] else scen["src_batch"] * scen["s_stride"]
            for k, (db, length) in enumerate(zip(scen["dblk"], lengths)):
                out[d][db * block:db * block + length] = src[s][base + k * block:base + k * block + length]
    return S.LLM_SUCCESS, out


@given(scen=scenarios())
def test_pull_bytes_match_the_model(scen: dict[str, Any]) -> None:
    x = xs.Ext()
    try:
        mode = xs.v2_options(direct=scen["direct"])
        p, port = x.listening(1, {**mode, "llm.Role": "Prompt"})
        d = x.engine(2, mode)
        rng = np.random.default_rng(scen["seed"])
        src = [rng.integers(0, 256, scen["s_count"] * scen["s_stride"], dtype=np.uint8) for _ in range(scen["ns"])]
        dst = [rng.integers(0, 256, scen["d_count"] * scen["block"], dtype=np.uint8) for _ in range(scen["nd"])]
        src_kind = xs.KIND_BLOCKS if scen["form"] == "B2B" else xs.KIND_CACHE
        dst_kind = xs.KIND_CACHE if scen["form"] == "C2C" else xs.KIND_BLOCKS
        status, src_id = x.register(p, src, src_kind, shape=[scen["s_count"], scen["s_stride"]],
                                    keys=[x.blocks_key()] if src_kind == xs.KIND_BLOCKS else [])
        assert status == 0
        status, dst_id = x.register(d, dst, dst_kind, shape=[scen["d_count"], scen["block"]])
        assert status == 0
        assert x.link(d, [(1, port)]) == (0, [0])
        n = scen["n"]
        kwargs: dict[str, Any] = {"n": n}
        if "span" in scen:
            kwargs["src_tensors"] = [scen["src_layer"] * n + i for i in range(scen["span"] * n)]
            kwargs["dst_tensors"] = [scen["dst_layer"] * n + i for i in range(scen["span"] * n)]
        if scen["form"] == "C2C":
            key = x.by_id(1, src_id, scen["src_batch"])
            kwargs.update(batch_index=scen["dst_batch"], size=scen["size"])
        elif scen["form"] == "B2B":
            key = x.blocks_key(1)
            kwargs.update(src_blocks=scen["sblk"], dst_blocks=scen["dblk"])
        else:
            key = x.by_id(1, src_id, scen["src_batch"])
            kwargs.update(dst_blocks=scen["dblk"])
        want_status, want = expected(scen, src, dst)
        assert x.pull(d, key, dst_id, **kwargs) == want_status, x.last_error()
        for got, exp in zip(dst, want):
            assert (got == exp).all()
    finally:
        x.close()
