"""Every finalizer of the package runs to its end when the garbage collector calls it on
a thread that holds cffi's lock (the collector runs wherever the thread allocates: inside
``ffi.new`` parsing a type, for one), and frees what it owns there.

cffi resolves a library name, and parses a type named by a string, on first use under
that lock, which is not reentrant: a finalizer doing either for the first time would wait
for itself forever. The loader resolves every name at import and the free paths use only
types parsed at import (docs/design.md, "Finalizers"). Each check runs in a fresh
process, where no earlier call has resolved or parsed anything the free path needs, and
in a bounded subprocess, so that a regression fails instead of hanging the run.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from paths import REPO

# Each probe's setup builds ``obj``, an object whose finalizer frees something; the
# probe drops it while holding cffi's lock and prints "freed" when ``gone()`` (defined by
# the setup) says the thing is gone afterwards.
_TEMPLATE = """
import gc
from llm_datadist_ffi._core._loader import ffi
from llm_datadist_ffi import mock_control
{setup}
with ffi._lock:
    del obj
    gc.collect()
print("freed" if gone() else "kept")
"""


_ENGINES_GONE = "def gone():\n    return mock_control.live_engines() == 0\n"


def _acl(make: str) -> str:
    return ("from llm_datadist_ffi import acl\nacl.init()\nacl.set_device(0)\n"
            f"obj = {make}\ndef gone():\n    return mock_control.live_allocations() == 0\n")


_V1 = """
from llm_datadist_ffi.vendor import CacheDesc, DataType, LLMDataDist, LLMRole, Placement
datadist = LLMDataDist(LLMRole.DECODER, 2)
datadist.init({"ge.exec.deviceId": "0", "llm.SyncKvCacheWaitTime": "5000", "ge.flowGraphMemMaxSize": "67108864"})
"""

PROBES = {
    # the engine handle's ffi.gc destructor (llm_datadist_ffi/_core/_capi.py)
    "engine_handle": "from llm_datadist_ffi._core import _capi\nobj = _capi.lldd_create(1, 1, 'probe')\n"
                     + _ENGINES_GONE,
    # native.LlmDataDist's weakref.finalize
    "native_engine": "from llm_datadist_ffi import native\nobj = native.LlmDataDist(1, 1)\n" + _ENGINES_GONE,
    # the vendor tier: an LLMDataDist nobody refers to is finalized by its life token
    "vendor_engine_life": _V1 + "obj = datadist\ndel datadist\n" + _ENGINES_GONE,
    # KvCache.__del__ deallocates its cache: the pool holds one 48 MiB cache at a time,
    # so the second allocation raises unless the first cache was freed
    "vendor_kv_cache": _V1 + textwrap.dedent("""
        manager = datadist.kv_cache_manager
        desc = CacheDesc(1, (24 * 2**20,), DataType.DT_FLOAT16, Placement.DEVICE)
        obj = manager.allocate_cache(desc)
        def gone():
            manager.deallocate_cache(manager.allocate_cache(desc))
            return True
    """),
    # acl.DeviceBuffer's safety net (aclrtFree)
    "acl_device_buffer": _acl("acl.DeviceBuffer(64)"),
    # acl.shared_array's memory, freed with its last array (aclrtFreeHost)
    "acl_shared_array": _acl("acl.shared_array(64)"),
}


@pytest.mark.mock_only(reason="counts engines and allocations through the mock's control interface")
@pytest.mark.parametrize("name", sorted(PROBES))
def test_a_finalizer_run_under_cffis_lock_frees_without_waiting_for_it(name: str) -> None:
    script = _TEMPLATE.format(setup=PROBES[name])
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "freed", run.stderr
