"""Where the parts of the test tree are, for the programs the tests start.

pytest puts ``tests/`` (the oracle, the fuzzer) and ``tests/support/`` (the helper
modules) on ``sys.path`` through the ``pythonpath`` of its configuration. A program a
test starts does not inherit ``sys.path``: a helper file run as a program finds its
siblings in its own folder, and any other child gets the same two folders from
``helper_env``, set where it is spawned.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
REPO = TESTS.parent


def helper_env(env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """``os.environ`` (updated with ``env``) whose ``PYTHONPATH`` starts with the folders
    the pytest configuration puts on ``sys.path``."""
    full = {**os.environ, **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), str(SUPPORT), full.get("PYTHONPATH", "")) if p)
    return full
