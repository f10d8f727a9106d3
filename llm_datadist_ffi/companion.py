"""The companion: this project's lints, strict mode, traces and error remedies over the
vendor's own ``llm_datadist`` package, on an Ascend host.

::

    import llm_datadist_ffi.companion
    llm_datadist_ffi.companion.install()      # wraps the installed vendor package in place

    import llm_datadist                       # the vendor's, unchanged but for the wrapping

``install(module=None)`` wraps, at class level, the public methods of the vendor's
``LLMDataDist``, its v2 ``CacheManager``, its ``CacheTask`` and (lazily, when the
separate ``llm_datadist_v1`` package is imported) its v1 ``KvCacheManager`` — every name
of docs/reference/python-api.md (``WRAPPED``). A wrapped call, and only the outermost one
when the vendor's methods call each other, does this and nothing else:

* it runs the Python-side lint rules of that method, from the one source the mock tier
  uses too (``llm_datadist_ffi/_core/_lint_rules.py``), on the call's arguments: each finding is
  the rule's ``LintWarning``, or with ``LLM_DATADIST_FFI_STRICT=1`` the vendor's own
  ``LLMException`` with ``LLM_PARAM_INVALID`` (the rule's code), raised before the
  vendor's method is called;
* with ``LLM_DATADIST_FFI_TRACE=DIR`` it writes one Chrome-trace event per call in the
  mock tier's format (``trace merge``/``trace summary`` read both), with the bytes the
  call moves computed from the caches' descriptions and the block counts, marked
  ``"bytes_computed": true``;
* when the vendor raises its ``LLMException``, it adds a PEP 678 note with the code's
  meaning, whether it is recoverable and the remedy; type, ``status_code`` and message
  stay the vendor's;
* otherwise it hands the very argument objects to the vendor's method and returns its
  result unchanged. It never calls the vendor itself (no ``CacheDesc.size``: that is a
  native call) and never loads this project's mock library.

``uninstall()`` puts every original back (the same objects). ``install`` refuses with
``ImportError`` when no vendor package is importable, or when ``llm_datadist`` is this
project's own compat alias (where the checks are built in).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import sys
import threading
import time
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Tuple, Type

from ._core import _lint_rules as rules
from . import lint as _lint
from ._core import _trace
from .data_type import ELEMENT_BITS
from .status import info_for

__all__ = ["install", "uninstall", "is_installed", "wrapped_methods", "choose", "vendor_origin", "BACKENDS", "WRAPPED",
           "NOTE_PREFIX"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

#: the text every note the companion adds starts with
NOTE_PREFIX = "llm_datadist_ffi:"

_PULL_KEYWORDS = ("src_layer_range", "dst_layer_range", "tensor_num_per_layer")
_V1_PULL_CACHE_KEYWORDS = ("src_layer_range", "dst_layer_range", "src_cache_offset", "dst_cache_offset",
                           "tensor_num_per_layer")

Findings = List[rules.Finding]
Checker = Callable[..., Findings]

# ---- the lint checks of each method, in the vendor's signatures ------------------------------
# Each takes the method's own arguments (``self`` first) and returns the findings in the
# order the mock tier reports them.


def _v2_pull_cache(self: Any, cache_key: Any, cache: Any, batch_index: Any = 0, size: Any = -1,
                   **kwargs: Any) -> Findings:
    return (rules.ignored_keywords(kwargs, _PULL_KEYWORDS, "pull_cache", True)
            + rules.empty_layer_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"), "pull_cache"))


def _v2_pull_blocks(self: Any, src_cache_key: Any, dst_cache: Any, src_blocks: Any = (), dst_blocks: Any = (),
                    **kwargs: Any) -> Findings:
    if not kwargs:                         # the common call: only the block list to look at
        if type(dst_blocks) is list and len(set(dst_blocks)) == len(dst_blocks):
            return []                      # no block twice: PR-5 has nothing to say (the hot path)
        return rules.repeated_blocks(dst_blocks, "dst_blocks", "pull_blocks")
    return (rules.ignored_keywords(kwargs, _PULL_KEYWORDS, "pull_blocks", True)
            + rules.empty_layer_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"), "pull_blocks")
            + rules.repeated_blocks(dst_blocks, "dst_blocks", "pull_blocks"))


def _num_tensors(cache: Any) -> Any:
    return getattr(getattr(cache, "cache_desc", None), "num_tensors", None)


def _push_cache(self: Any, dst_cache_key: Any, src_cache: Any, src_batch_index: Any = 0,
                src_layer_range: Any = None, dst_layer_range: Any = None, size: Any = -1,
                tensor_num_per_layer: Any = 2) -> Findings:
    return rules.push_tensor_num(tensor_num_per_layer, _num_tensors(src_cache), src_layer_range, dst_layer_range,
                                 "push_cache")


def _push_blocks(self: Any, dst_cache_key: Any, src_cache: Any, src_blocks: Any = (), dst_blocks: Any = (),
                 src_layer_range: Any = None, dst_layer_range: Any = None, tensor_num_per_layer: Any = 2) -> Findings:
    return (rules.push_tensor_num(tensor_num_per_layer, _num_tensors(src_cache), src_layer_range, dst_layer_range,
                                  "push_blocks")
            + rules.repeated_blocks(dst_blocks, "dst_blocks", "push_blocks"))


def _transfer_cache_async(self: Any, src_cache: Any, layer_synchronizer: Any, transfer_configs: Any,
                          src_block_indices: Any = None, dst_block_indices: Any = None,
                          dst_block_memory_size: Any = None) -> Findings:
    return rules.repeated_blocks(dst_block_indices, "dst_block_indices", "transfer_cache_async")


def _allocate_cache(self: Any, cache_desc: Any, cache_keys: Any = ()) -> Findings:
    return rules.batch_dim(cache_desc, "cache_desc", "allocate_cache")


def _allocate_blocks_cache(self: Any, cache_desc: Any, blocks_cache_key: Any = None) -> Findings:
    return rules.batch_dim(cache_desc, "cache_desc", "allocate_blocks_cache")


def _remove_cache_key(self: Any, cache_key: Any) -> Findings:
    return rules.placeholder_key(cache_key, "remove_cache_key")


def _copy_blocks(self: Any, cache: Any, copy_block_info: Any) -> Findings:
    return rules.copy_pairs_findings(copy_block_info, "copy_blocks")


def _swap_blocks(self: Any, src_cache: Any, dst_cache: Any, src_to_dst: Any) -> Findings:
    return (rules.batch_dim(getattr(src_cache, "cache_desc", None), "src_cache.cache_desc", "swap_blocks")
            + rules.batch_dim(getattr(dst_cache, "cache_desc", None), "dst_cache.cache_desc", "swap_blocks")
            + rules.mapping_findings(src_to_dst, "swap_blocks"))


def _v1_pull_cache(self: Any, cache_key: Any, kv_cache: Any, batch_index: Any = 0, size: Any = -1,
                   **kwargs: Any) -> Findings:
    return (rules.ignored_keywords(kwargs, _V1_PULL_CACHE_KEYWORDS, "pull_cache", False)
            + rules.empty_layer_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"), "pull_cache"))


def _v1_pull_blocks(self: Any, prompt_cache_key: Any, decoder_kv_cache: Any, prompt_blocks: Any = (),
                    decoder_blocks: Any = (), **kwargs: Any) -> Findings:
    return (rules.ignored_keywords(kwargs, _PULL_KEYWORDS, "pull_blocks", False)
            + rules.empty_layer_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"), "pull_blocks")
            + rules.repeated_blocks(decoder_blocks, "decoder_blocks", "pull_blocks"))


def _v1_swap_blocks(self: Any, src: Any, dst: Any, src_to_dst: Any) -> Findings:
    return (rules.batch_dim(getattr(src, "cache_desc", None), "src.cache_desc", "swap_blocks")
            + rules.batch_dim(getattr(dst, "cache_desc", None), "dst.cache_desc", "swap_blocks")
            + rules.mapping_findings(src_to_dst, "swap_blocks"))


def _init(self: Any, options: Any) -> Findings:
    if not isinstance(options, dict):
        return []
    return (rules.sync_wait_time(options)
            + rules.option_keys(options, rules.VENDOR_OPTION_NAMES, "LLMDataDist.init"))


# ---- bytes a call moves, computed from descriptions (never asked of the vendor) ---------------

def _unit_bytes(cache: Any) -> Optional[Tuple[int, int]]:
    """(bytes of one batch or block of one tensor, tensor count) of ``cache``, from its
    description (the core cuts tensors by ``shape[0]``), or None."""
    desc = getattr(cache, "cache_desc", None)
    shape = getattr(desc, "shape", None)
    dtype = getattr(getattr(desc, "data_type", None), "value", None)
    num = getattr(desc, "num_tensors", None)
    bits = ELEMENT_BITS.get(dtype) if isinstance(dtype, int) else None
    if bits is None or not isinstance(num, int) or not isinstance(shape, (list, tuple)) or not shape \
            or not all(isinstance(d, int) and d > 0 for d in shape):
        return None
    elements = 1
    for dim in shape:
        elements *= dim
    return elements * bits // 8 // shape[0], num


def _tensors(layers: Any, n: Any, num: int) -> int:
    if isinstance(layers, range) and len(layers) and isinstance(n, int) and n > 0:
        return min(len(layers) * n, num)
    return num


def _bytes(kind: str, args: Tuple[Any, ...], kwargs: Dict[str, Any], bound: Optional[Dict[str, Any]]) -> Optional[int]:
    """Bytes a successful call of ``kind`` moved, or None where it cannot be computed;
    ``bound`` holds the call's arguments by name, without ``self``, in the vendor's order."""
    if bound is None:
        return None
    values = list(bound.values())
    get = bound.get
    extra = bound.get("kwargs") or {}
    if kind == "pull_blocks":
        unit, blocks = _unit_bytes(values[1]), values[3]
        layers, n = extra.get("dst_layer_range"), extra.get("tensor_num_per_layer", 2)
    elif kind == "pull_cache":
        unit, blocks = _unit_bytes(values[1]), None
        layers, n = extra.get("dst_layer_range"), extra.get("tensor_num_per_layer", 2)
        size = get("size")
        if unit is not None and isinstance(size, int) and size != -1:
            unit = (size, unit[1])
    elif kind in ("push_blocks", "push_cache"):
        unit = _unit_bytes(values[1])
        blocks = get("dst_blocks") if kind == "push_blocks" else None
        layers, n = get("src_layer_range"), get("tensor_num_per_layer", 2)
        if unit is not None and layers is None and isinstance(n, int) and n > 0:
            layers = range(0, unit[1] // n)
            if not len(layers):
                return 0
    elif kind in ("copy_blocks", "swap_blocks"):
        unit = _unit_bytes(values[0])
        mapping = values[1] if kind == "copy_blocks" else values[2]
        if not isinstance(mapping, dict):
            return None
        pairs = sum(len(v) for v in mapping.values()) if kind == "copy_blocks" else len(mapping)
        return None if unit is None else unit[0] * unit[1] * pairs
    else:
        return None
    if unit is None:
        return None
    count = 1 if blocks is None else (len(blocks) if isinstance(blocks, (list, tuple)) else None)
    if count is None:
        return None
    return unit[0] * _tensors(layers, n, unit[1]) * count


# ---- what is wrapped ------------------------------------------------------------------------

_LLM_DATADIST = ("init", "finalize", "link_clusters", "unlink_clusters", "link", "unlink",
                 "query_register_mem_status", "switch_role", "check_link_status")
_CACHE_MANAGER = ("check_cache_key", "register_cache", "register_blocks_cache", "unregister_cache", "pull_cache",
                  "pull_blocks", "push_cache", "push_blocks", "transfer_cache_async", "allocate_cache",
                  "allocate_blocks_cache", "deallocate_cache", "deallocate_blocks_cache", "remove_cache_key",
                  "copy_cache", "copy_blocks", "swap_blocks", "remap_registered_memory")
_KV_CACHE_MANAGER = ("check_cache_key", "is_initialized", "allocate_cache", "allocate_blocks_cache",
                     "deallocate_cache", "remove_cache_key", "pull_cache", "pull_blocks", "copy_cache",
                     "copy_blocks", "swap_blocks", "get_cache_tensors", "transfer_cache_async")

#: class name -> the method names the companion wraps
WRAPPED: Dict[str, Tuple[str, ...]] = {
    "LLMDataDist": _LLM_DATADIST, "CacheManager": _CACHE_MANAGER, "KvCacheManager": _KV_CACHE_MANAGER,
    # the task of transfer_cache_async: its per-destination statuses are traced as they come back
    "CacheTask": ("synchronize", "get_results"),
}

_CHECKS: Dict[Tuple[str, str], Checker] = {
    ("LLMDataDist", "init"): _init,
    ("CacheManager", "pull_cache"): _v2_pull_cache,
    ("CacheManager", "pull_blocks"): _v2_pull_blocks,
    ("CacheManager", "push_cache"): _push_cache,
    ("CacheManager", "push_blocks"): _push_blocks,
    ("CacheManager", "transfer_cache_async"): _transfer_cache_async,
    ("CacheManager", "allocate_cache"): _allocate_cache,
    ("CacheManager", "allocate_blocks_cache"): _allocate_blocks_cache,
    ("CacheManager", "remove_cache_key"): _remove_cache_key,
    ("CacheManager", "copy_blocks"): _copy_blocks,
    ("CacheManager", "swap_blocks"): _swap_blocks,
    ("KvCacheManager", "pull_cache"): _v1_pull_cache,
    ("KvCacheManager", "pull_blocks"): _v1_pull_blocks,
    ("KvCacheManager", "transfer_cache_async"): _transfer_cache_async,
    ("KvCacheManager", "allocate_cache"): _allocate_cache,
    ("KvCacheManager", "allocate_blocks_cache"): _allocate_blocks_cache,
    ("KvCacheManager", "remove_cache_key"): _remove_cache_key,
    ("KvCacheManager", "copy_blocks"): _copy_blocks,
    ("KvCacheManager", "swap_blocks"): _v1_swap_blocks,
}

#: the methods whose success moves bytes the companion can compute
_MOVES = frozenset({"pull_blocks", "pull_cache", "push_blocks", "push_cache", "copy_blocks", "swap_blocks"})

# A checker that meets an argument it cannot read raises one of these: then the vendor's
# own checks speak (they raise the vendor's TypeError or ValueError), not the companion.
_MALFORMED = (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError)


class _Vendor:
    """What the companion needs of the wrapped package: its exception and status enum."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.exception: Type[BaseException] = module.LLMException
        self.codes: Any = module.LLMStatusCode

    def code(self, project_code: Any) -> Any:
        """The vendor's member for a project status code: by name, else by value."""
        try:
            return self.codes[project_code.name]
        except KeyError:
            pass
        try:
            return self.codes(int(project_code))
        except ValueError:
            return self.codes["LLM_PARAM_INVALID"]


_local = threading.local()


def _report(vendor: _Vendor, findings: Findings) -> None:
    """Each finding as its rule's warning; in strict mode the first as the vendor's
    ``LLMException`` with the rule's code."""
    for rule, text in findings:
        if _lint.strict():
            category = _lint.RULES[rule].category
            make: Any = vendor.exception          # the vendor's class: status_code is keyword-only
            raise make(_lint.message(rule, text), status_code=vendor.code(category.status_code))
        _lint.lint(rule, text)


def _note_text(exc: BaseException) -> Optional[str]:
    code = getattr(exc, "status_code", None)
    try:
        info = info_for(getattr(code, "name", None) or int(code))   # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    recoverable = "recoverable" if info.recoverable else "not recoverable"
    return f"{NOTE_PREFIX} {info.python_name or info.cpp_name} ({info.value:#x}): {info.meaning} " \
           f"({recoverable}). Remedy: {info.remedy}"


def _add_note(exc: BaseException) -> None:
    """A PEP 678 note on a vendor exception (``__notes__`` before Python 3.11), once."""
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list) and any(isinstance(n, str) and n.startswith(NOTE_PREFIX) for n in notes):
        return
    text = _note_text(exc)
    if text is None:
        return
    if hasattr(exc, "add_note"):
        exc.add_note(text)
    elif isinstance(notes, list):
        notes.append(text)
    else:
        exc.__notes__ = [text]


def _status(result: Any, vendor: _Vendor) -> Tuple[str, int, Dict[str, Any]]:
    """The status a returned call ends with: the code it returned (link calls) or success."""
    codes = vendor.codes
    extra: Dict[str, Any] = {}
    if isinstance(result, codes):
        return result.name, int(result), extra
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], codes):
        if isinstance(result[1], (list, tuple)):
            extra["cluster_statuses"] = [getattr(r, "name", str(r)) for r in result[1]]
        return result[0].name, int(result[0]), extra
    if isinstance(result, list) and result and all(isinstance(r, codes) for r in result):
        # CacheTask.get_results: one status per destination; the call ends with the first failure
        extra["results"] = [r.name for r in result]
        failed = next((r for r in result if int(r) != 0), result[0])
        return failed.name, int(failed), extra
    return "LLM_SUCCESS", 0, extra


class _Tracer:
    """This process's companion trace, in the mock tier's event format."""

    def __init__(self, directory: str) -> None:
        self.recorder = _trace._Recorder(directory, count_bytes=False)

    def record(self, name: str, shape: Dict[str, Any], start_wall: int, start: int) -> None:
        duration = time.perf_counter_ns() - start
        self.recorder.write({"name": name, "cat": "llm_datadist_ffi", "ph": "X", "ts": start_wall // 1000,
                             "dur": round(duration / 1000, 3), "tid": threading.get_native_id(), "args": shape})


_Shape = Tuple[Dict[str, Any], Optional[Dict[str, Any]]]


def _shape(signature: inspect.Signature, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> _Shape:
    """The described arguments by parameter name (the mock tier's shape; no field that
    would make a vendor call) and the bound arguments, None when they do not bind."""
    try:
        call = signature.bind(*args, **kwargs)
    except TypeError:
        return {"args": [_trace.describe(v, fields=_SAFE_FIELDS) for v in args[1:]]}, None
    call.apply_defaults()
    bound = dict(list(call.arguments.items())[1:])
    shape: Dict[str, Any] = {}
    for key, value in bound.items():
        if signature.parameters[key].kind is inspect.Parameter.VAR_KEYWORD:
            shape.update((k, _trace.describe(v, k, fields=_SAFE_FIELDS)) for k, v in value.items())
        else:
            shape[key] = _trace.describe(value, key, fields=_SAFE_FIELDS)
    return shape, bound


def _wrap(vendor: _Vendor, owner: str, name: str, function: Callable[..., Any], static: bool) -> Callable[..., Any]:
    """The wrapper of one vendor method (``function`` the plain function)."""
    check = _CHECKS.get((owner, name))
    event = f"{owner}.{name}"
    moves = name in _MOVES
    exception = vendor.exception
    local = _local
    finalizing = sys.is_finalizing
    try:
        signature: Optional[inspect.Signature] = inspect.signature(function)
    except (TypeError, ValueError):
        signature = None

    def traced(args: Tuple[Any, ...], kwargs: Dict[str, Any], tracer: _Tracer) -> Any:
        shape: Dict[str, Any]
        bound: Optional[Dict[str, Any]]
        if signature is not None and not static:
            shape, bound = _shape(signature, args, kwargs)
        else:
            shape, bound = {"args": [_trace.describe(v, fields=_SAFE_FIELDS) for v in args]}, None
        start_wall, start = time.time_ns(), time.perf_counter_ns()
        try:
            if check is not None:
                _run_check(check, vendor, args, kwargs)
            result = function(*args, **kwargs)
        except BaseException as exc:
            code = getattr(exc, "status_code", None) if isinstance(exc, exception) else None
            if code is not None:
                shape["status"], shape["status_code"] = getattr(code, "name", str(code)), int(code)
            else:
                shape["status"], shape["error"] = type(exc).__name__, str(exc)[:300]
            tracer.record(event, shape, start_wall, start)
            raise
        shape["status"], shape["status_code"], extra = _status(result, vendor)
        shape.update(extra)
        if moves:
            moved = _bytes(name, args, kwargs, bound)
            if moved is not None:
                shape["bytes"], shape["bytes_computed"] = moved, True
        tracer.record(event, shape, start_wall, start)
        return result

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        if getattr(local, "depth", 0) or finalizing():
            return function(*args, **kwargs)          # called by another wrapped method, or at exit
        local.depth = 1
        try:
            tracer = _TRACER
            if tracer is not None:
                return traced(args, kwargs, tracer)
            if check is not None:
                try:
                    findings = check(*args, **kwargs)
                except _MALFORMED:
                    findings = None            # arguments the vendor's checks refuse
                if findings:
                    _report(vendor, findings)
            return function(*args, **kwargs)
        except exception as exc:
            _add_note(exc)
            raise
        finally:
            local.depth = 0

    call.__wrapped_by_companion__ = True          # type: ignore[attr-defined]
    return call


def _run_check(check: Checker, vendor: _Vendor, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
    try:
        findings = check(*args, **kwargs)
    except _MALFORMED:
        return                                     # arguments the vendor's checks refuse
    if findings:
        _report(vendor, findings)


#: the trace fields the companion reads of argument objects: the mock tier's but ``size``,
#: which the vendor's ``CacheDesc`` computes with a native call
_SAFE_FIELDS = tuple(f for f in _trace.FIELDS if f != "size")

_TRACE_DIR = os.environ.get(_trace.TRACE_ENV) or None
_TRACER: Optional[_Tracer] = _Tracer(_TRACE_DIR) if _TRACE_DIR else None


# ---- install / uninstall --------------------------------------------------------------------

class _Installation:
    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.vendor = _Vendor(module)
        #: (class, name, the class's own attribute or None when inherited)
        self.originals: List[Tuple[type, str, Any]] = []
        self.wrapped_classes: List[type] = []
        self.module_getattr: Any = None


_lock = threading.RLock()
_installed: Optional[_Installation] = None


def _is_project_module(module: ModuleType) -> bool:
    name = getattr(module, "__name__", "")
    path = getattr(module, "__file__", None) or ""
    return name.startswith("llm_datadist_ffi") or \
        (bool(path) and os.path.abspath(path).startswith(_PACKAGE_DIR + os.sep))


def _wrap_class(state: _Installation, cls: type, owner: str) -> None:
    if cls in state.wrapped_classes:
        return
    state.wrapped_classes.append(cls)
    for name in WRAPPED[owner]:
        own = cls.__dict__.get(name)
        member = own if own is not None else inspect.getattr_static(cls, name, None)
        if member is None or isinstance(member, (property, classmethod)):
            continue
        static = isinstance(member, staticmethod)
        function = member.__func__ if static else member
        if not callable(function) or getattr(function, "__wrapped_by_companion__", False):
            continue
        wrapper = _wrap(state.vendor, owner, name, function, static)
        state.originals.append((cls, name, own))
        setattr(cls, name, staticmethod(wrapper) if static else wrapper)


def _wrap_v1(state: _Installation) -> None:
    """Wraps the v1 ``KvCacheManager`` once its separate package is imported (never
    imports it: importing it is the vendor's decision)."""
    for name in ("llm_datadist_v1.kv_cache_manager", "llm_datadist_v1"):
        module = sys.modules.get(name)
        cls = getattr(module, "KvCacheManager", None) if module is not None else None
        if isinstance(cls, type):
            _wrap_class(state, cls, "KvCacheManager")


def _v1_hooks(state: _Installation) -> None:
    """After ``LLMDataDist.init`` and after the package's lazy ``__getattr__`` (which both
    import ``llm_datadist_v1``), look for the v1 manager."""
    original = state.module.__dict__.get("__getattr__")
    if callable(original):
        @functools.wraps(original)
        def module_getattr(name: str) -> Any:
            value = original(name)
            if name == "KvCacheManager" and _installed is state:
                with _lock:
                    _wrap_v1(state)
            return value
        state.module_getattr = original
        state.module.__getattr__ = module_getattr      # type: ignore[method-assign]


def _after_init_hook(state: _Installation, cls: type) -> None:
    wrapped = cls.__dict__.get("init")
    if wrapped is None:
        return

    @functools.wraps(wrapped)
    def init(*args: Any, **kwargs: Any) -> Any:
        try:
            return wrapped(*args, **kwargs)
        finally:
            if _installed is state and "llm_datadist_v1" in sys.modules:
                with _lock:
                    _wrap_v1(state)
    init.__wrapped_by_companion__ = True            # type: ignore[attr-defined]
    setattr(cls, "init", init)


def _find_module(module: Optional[ModuleType]) -> ModuleType:
    if module is None:
        loaded = sys.modules.get("llm_datadist")
        if loaded is not None and _is_project_module(loaded):
            module = loaded
        else:
            try:
                module = importlib.import_module("llm_datadist")
            except ImportError as exc:
                raise ImportError(
                    "llm_datadist_ffi.companion: the vendor's llm_datadist package cannot be imported "
                    f"({exc}); install the CANN toolkit's llm_datadist (and source its set_env.sh), or, without "
                    "an NPU, run on the mock with llm_datadist_ffi.compat.install()") from exc
    if _is_project_module(module):
        raise ImportError(
            "llm_datadist_ffi.companion: llm_datadist is this project's compat alias (llm_datadist_ffi.compat), "
            "whose checks are built in already; the companion wraps only the vendor's own package (call "
            "llm_datadist_ffi.compat.uninstall() first if the vendor's package is meant)")
    for name in ("LLMDataDist", "LLMException", "LLMStatusCode"):
        if name not in module.__dict__:
            raise ImportError(f"llm_datadist_ffi.companion: {module.__name__!r} has no {name}: not the vendor's "
                              "llm_datadist package")
    return module


def _cache_manager_class(module: ModuleType, engine: type) -> Optional[type]:
    """The v2 ``CacheManager``: the vendor does not export it; its engine module imports it."""
    for namespace in (module.__dict__, vars(sys.modules.get(engine.__module__, module))):
        found = namespace.get("CacheManager")
        if isinstance(found, type):
            return found
    return None


def install(module: Optional[ModuleType] = None) -> ModuleType:
    """Wrap the vendor's ``llm_datadist`` package (the importable one, or ``module``) in
    place; returns the module. Idempotent and thread-safe.

    Raises:
        ImportError: no vendor package is importable, or ``llm_datadist`` is this
            project's compat alias, or the package is already wrapped by another
            ``install(module)`` call with a different module.
    """
    global _installed
    with _lock:
        module = _find_module(module)
        if _installed is not None:
            if _installed.module is module:
                return module
            raise ImportError("llm_datadist_ffi.companion: already installed over "
                              f"{_installed.module.__name__!r}; uninstall() first")
        state = _Installation(module)
        engine = module.__dict__["LLMDataDist"]
        _wrap_class(state, engine, "LLMDataDist")
        cache_manager = _cache_manager_class(module, engine)
        if cache_manager is not None:
            _wrap_class(state, cache_manager, "CacheManager")
        task = module.__dict__.get("CacheTask")
        if isinstance(task, type):
            _wrap_class(state, task, "CacheTask")
        _after_init_hook(state, engine)
        _v1_hooks(state)
        _installed = state
        _wrap_v1(state)
        return module


def uninstall() -> None:
    """Put every original method back (the same objects); a no-op when not installed."""
    global _installed
    with _lock:
        state = _installed
        if state is None:
            return
        _installed = None
        for cls, name, own in reversed(state.originals):
            if own is None:
                if name in cls.__dict__:
                    delattr(cls, name)
            else:
                setattr(cls, name, own)
        if state.module_getattr is not None:
            state.module.__getattr__ = state.module_getattr   # type: ignore[method-assign]


def vendor_origin() -> Optional[str]:
    """Where the vendor's own ``llm_datadist`` package would be imported from, or None
    (not importable, or it is this project's compat alias)."""
    loaded = sys.modules.get("llm_datadist")
    if loaded is not None:
        origin: Optional[str] = getattr(loaded, "__file__", None)
    else:
        try:
            spec = importlib.util.find_spec("llm_datadist")
        except (ImportError, ValueError):
            return None
        origin = None if spec is None else spec.origin
    if not origin or os.path.abspath(origin).startswith(_PACKAGE_DIR + os.sep):
        return None
    return origin


#: what ``run`` and the pytest plugin's ``--lldd-backend`` choose from
BACKENDS = ("auto", "mock", "companion")


def choose(backend: str = "auto") -> str:
    """``"companion"`` or ``"mock"`` for ``backend`` (``auto``: the companion where the
    vendor's package is importable, the compat alias on the mock elsewhere)."""
    if backend != "auto":
        return backend
    return "companion" if vendor_origin() is not None else "mock"


def is_installed() -> bool:
    """Whether ``install()`` is in effect."""
    return _installed is not None


def wrapped_methods() -> List[str]:
    """``Class.method`` of every method wrapped now (the v1 manager once imported)."""
    state = _installed
    if state is None:
        return []
    return [f"{cls.__name__}.{name}" for cls, name, _ in state.originals]

