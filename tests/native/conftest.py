"""Fixtures of the native tier's modules.

- ``x``: the mock's extension functions called raw (``ext_support.Ext``), for the
  ``test_ext_*`` modules; every engine it made is destroyed after the test.
"""
from __future__ import annotations

from typing import Iterator

import pytest

import ext_support as xs


@pytest.fixture
def x() -> Iterator[xs.Ext]:
    ext = xs.Ext()
    yield ext
    ext.close()
