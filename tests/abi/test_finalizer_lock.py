"""An engine handle dropped while cffi holds its lock on the same thread (the garbage
collector runs finalizers wherever it runs: inside ``ffi.new`` parsing a type, for one)
is destroyed without waiting for that lock: the destroy function is looked up once at
import (llm_datadist_ffi/_core/_capi.py). The check runs in a fresh process, where no
earlier call has resolved the function yet."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from paths import REPO

PROBE = textwrap.dedent("""
    import gc
    from llm_datadist_ffi._core import _capi
    from llm_datadist_ffi._core._loader import ffi
    handle = _capi.lldd_create(1, 1, "probe")
    with ffi._lock:                   # as while cffi parses a type on this thread
        del handle
        gc.collect()                  # the engine's destructor runs here
    print("destroyed")
""")


@pytest.mark.mock_only(reason="creates a bare engine handle through the package's C layer")
def test_an_engine_destroyed_by_the_garbage_collector_under_cffis_lock_does_not_wait_for_it() -> None:
    run = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "destroyed"
