"""An independent reference model of docs/reference/semantics.md for the native layer.

The oracle answers two questions about a call on ``llm_datadist_ffi.native``, given
the state of every engine (initialised or not, options, pools, caches, links and
their table copies, the package's record of its own caches):

* which outcome the call must have: success, a ``TypeError``/``ValueError`` raised by
  the Python layer (docs/semantics.md N-1), or an ``LLMException`` with a given
  ``status_code``, following the check order of the Python layer (N-2), the C++ API
  layer (docs/reference/cpp-api.md §6) and the engine (docs/reference/semantics.md §8.0);
* on success (and for the layers a push wrote before a failing one, semantics.md §8.12), exactly
  which bytes move: a list of ``Copy(dst_tensor, dst_offset, src_tensor, src_offset,
  length)`` between the call's source and destination caches.

It imports nothing from ``llm_datadist_ffi`` (the vendor's numbers it needs are written
out by hand in ``codes``) and shares no code with the package or the mock: it is the
executable statement of the rules, written from the specification alone. ``World``
holds the state and takes the calls; ``memory`` applies the copies to byte buffers.

The vendor-compatible Python layer has its own modules, imported by their suites
(docs/testing.md §9): ``vendor_checks`` (the vendor's Python-side checks in order),
``vendor_local`` (one engine's local calls and key bindings), ``vendor_v2`` (two v2
engines: keys, reference counts, both transfer modes, the table copy), ``vendor_v1``
(two v1 engines: roles, offsets, keys) and ``vendor_life`` (``LLMDataDist`` life cycle
and links). The drivers that make the calls on the package (``native_driver``,
``vendor_local_driver``) live in ``tests/support``, outside the oracle.
"""
from .dtypes import Layout, tensor_layout
from .memory import apply_copies
from .model import (DEFAULT_EXT, CacheModel, EngineModel, Ext, LinkEnd, Pool, World)
from .outcome import Copy, Outcome

__all__ = [
    "Layout", "tensor_layout", "apply_copies", "DEFAULT_EXT", "CacheModel", "EngineModel", "Ext", "LinkEnd",
    "Pool", "World", "Copy", "Outcome",
]
