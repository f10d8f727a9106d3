"""Fixtures of the C++ SDK's tests (docs/cpp.md); the helpers are in
tests/support/sdk_support.py.

- ``sdk``: the SDK under test and its flags (``sdk_support.find_sdk``);
- ``programs``: the C++ programs of ``programs/``, compiled once per session with the
  vendor samples' own options, two at a time.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict

import pytest

from sdk_support import NAMES, PROGRAMS, Sdk, compile_program, find_sdk


@pytest.fixture(scope="session")
def sdk() -> Sdk:
    return find_sdk()


@pytest.fixture(scope="session")
def programs(sdk: Sdk, tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    out = tmp_path_factory.mktemp("cpp_programs")
    with ThreadPoolExecutor(max_workers=2) as pool:
        built = {name: pool.submit(compile_program, sdk, PROGRAMS / f"{name}.cpp", out / name) for name in NAMES}
        return {name: job.result() for name, job in built.items()}
