"""Fixtures of the vendor tier's modules.

- ``no_engine_left``: fails a test that leaves an initialised ``LLMDataDist`` in the
  process (the vendor's API allows one per process, so it would break the next test);
  a module asks for it with ``pytest.mark.usefixtures("no_engine_left")``, which the
  modules with a module-scoped engine cannot.
- ``pair``: a v2 engine here (cluster 2, DECODER) and one in a peer process (cluster 1,
  PROMPT), driven side by side with the oracle's ``vendor_v2`` world
  (``vendor_v2_peer_support.Pair``); one per module, as starting the peer is slow.
- ``x``: the mock's extension functions called raw (``ext_support.Ext``), for the
  ``test_ext_*`` modules (the C extension API under the vendor tier, include/lldd/ext.h);
  every engine it made is destroyed after the test.
"""
from __future__ import annotations

from typing import Iterator

import pytest

import ext_support as xs
import vendor_v2_peer_support as v2s
from llm_datadist_ffi.vendor import LLMDataDist
from oracle import vendor_v2


@pytest.fixture
def no_engine_left() -> Iterator[None]:
    yield
    leftover = LLMDataDist.llm_engine_instance
    if leftover is not None:
        leftover.finalize()
        pytest.fail("a test left an initialised LLMDataDist behind")


@pytest.fixture(scope="module")
def pair() -> Iterator[v2s.Pair]:
    yield from v2s.module_pair(vendor_v2)


@pytest.fixture
def x() -> Iterator[xs.Ext]:
    ext = xs.Ext()
    yield ext
    ext.close()
