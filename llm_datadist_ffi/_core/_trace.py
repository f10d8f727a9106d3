"""Call traces: every public call as a Chrome trace event, one file per process.

``LLM_DATADIST_FFI_TRACE=DIR`` is read once, when this module is first imported — that
is when the first API module (``llm_datadist_ffi.native`` or the vendor-compatible
API) is imported. With it set, the classes marked with :func:`traced` get each public
method wrapped, and every call the user makes (not the calls those methods make to one
another) becomes one complete event ("ph": "X") in ``DIR/trace-<pid>-<start µs>.json``:
the method, the process and thread, start and duration in microseconds, the shape of
the arguments (ids, counts, layer ranges, key kinds; never an address or a buffer's
contents), the status the call ended with, and the bytes the backend moved for it.
Without the variable, :func:`traced` returns the class untouched: tracing costs nothing.

The file is a Chrome trace in the JSON array form whose closing bracket may be left
out, written one event per line with one ``write`` each: a process that is killed
leaves every event it finished, readable by ``chrome://tracing``, Perfetto and
``python -m llm_datadist_ffi trace merge`` (llm_datadist_ffi.testing.trace), which joins
the files of all processes into one timeline.

Bytes come from the mock backend's per-thread running total (``lldd_mock_bytes_moved``,
read before and after the call); on a backend without it the field is left out.
"""
from __future__ import annotations

import contextlib
import enum
import functools
import inspect
import json
import logging
import os
import re
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, TypeVar

TRACE_ENV = "LLM_DATADIST_FFI_TRACE"

#: the directory of this process's trace, or None when tracing is off
DIRECTORY: Optional[str] = os.environ.get(TRACE_ENV) or None

_Class = TypeVar("_Class", bound=type)

# Attributes of argument objects that say what a call addressed. Anything else (tensor
# addresses, memory objects, buffers) stays out of the trace.
_FIELDS = (
    "cluster_id", "remote_cluster_id", "dst_cluster_id", "cache_id", "batch_index", "src_batch_index",
    "req_id", "prefix_id", "model_id", "num_tensors", "shape", "data_type", "placement", "is_blocks_cache",
    "src_layer_range", "dst_layer_range", "tensor_num_per_layer", "cache_key", "cache_desc", "size",
)
_LIST_ITEMS = 16
_SECRET = re.compile(r"secret|password|token", re.IGNORECASE)


def describe(value: Any, name: str = "", depth: int = 0) -> Any:
    """The JSON shape of one argument: numbers and ids as they are, sequences of numbers
    (block lists, addresses) as their count (a shape and an inclusive layer pair as they
    are), ranges as [start, stop), option maps as they are but for secrets, objects as
    their type and the fields of ``_FIELDS`` they have. Nothing named like an address
    gets in."""
    if "addr" in name or "buffer" in name:
        return {"count": len(value)} if isinstance(value, (list, tuple)) else "(address)"
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "..."
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"bytes": len(value)}
    if isinstance(value, range):
        return {"range": [value.start, value.stop]}
    if hasattr(value, "dtype") and hasattr(value, "shape"):     # numpy arrays, tensors
        shape = [int(d) for d in value.shape]
        return {"count": shape[0]} if len(shape) == 1 else {"array": shape}
    if isinstance(value, dict):
        if all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            # an option map; a shared secret (llm_datadist_ffi.mock.LinkSecret) stays out
            return {k: "(secret)" if _SECRET.search(k) else v for k, v in value.items()}
        return {"count": len(value)}
    if isinstance(value, (list, tuple)):
        if all(isinstance(item, int) and not isinstance(item, enum.Enum) for item in value):
            if name == "shape" or (isinstance(value, tuple) and len(value) == 2):
                return list(value)                                 # an inclusive layer pair
            return {"count": len(value)}
        if depth >= 2:
            return {"count": len(value)}
        return [describe(item, name, depth + 1) for item in value[:_LIST_ITEMS]] + (
            [{"more": len(value) - _LIST_ITEMS}] if len(value) > _LIST_ITEMS else [])
    out: Dict[str, Any] = {"type": type(value).__name__}
    if depth < 3:
        for field in _FIELDS:
            try:
                member = getattr(value, field)
            except Exception:  # noqa: BLE001 - a property that cannot answer is left out
                continue
            if not callable(member):
                out[field] = describe(member, field, depth + 1)
    return out


def _status_of(result: Any) -> Tuple[str, int, Dict[str, Any]]:
    """The status a call that returned ends with: the code it returned (link calls), else success."""
    from ..status import LLMStatusCode

    extra: Dict[str, Any] = {}
    code: Any = LLMStatusCode.LLM_SUCCESS
    if isinstance(result, LLMStatusCode):
        code = result
    elif isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], LLMStatusCode):
        code = result[0]
        if isinstance(result[1], list):
            extra["cluster_statuses"] = [getattr(r, "name", str(r)) for r in result[1]]
    return code.name, int(code), extra


def _status_of_error(exc: BaseException) -> Tuple[str, Optional[int]]:
    from ..status import LLMException, map_status

    if isinstance(exc, LLMException):
        code = map_status(int(exc.status_code))
        return getattr(code, "name", str(code)), int(exc.status_code)
    return type(exc).__name__, None


class _Recorder:
    """This process's trace file: opened at the first event, written a line per event."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        # reentrant: a finalizer (a cache's __del__) that the garbage collector runs while
        # this thread writes may make a traced call of its own
        self.lock = threading.RLock()
        self.fd: Optional[int] = None
        self.pid = 0
        self.threads: set[int] = set()
        self.local = threading.local()
        self._bytes: Optional[Callable[[], int]] = None
        self._bytes_known = False
        self.broken = False                    # writing failed once: the trace stops there

    def depth(self) -> int:
        """How many traced calls this thread is inside."""
        value: int = getattr(self.local, "depth", 0)
        return value

    def bytes_moved(self) -> Optional[int]:
        if not self._bytes_known:
            from . import _capi

            self._bytes = _capi.bytes_moved_counter()
            self._bytes_known = True
        return None if self._bytes is None else self._bytes()

    def _open_locked(self) -> int:
        pid = os.getpid()
        if self.fd is not None and self.pid == pid:
            return self.fd
        # first event, or the first in a child of fork(): a file of this process's own
        os.makedirs(self.directory, exist_ok=True)
        start = time.time_ns() // 1000
        path = os.path.join(self.directory, f"trace-{pid}-{start}.json")
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.pid = pid
        self.threads = set()
        program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
        os.write(self.fd, b"[\n" + self._line({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                               "args": {"name": f"{program} (pid {pid})"}}))
        return self.fd

    @staticmethod
    def _line(event: Dict[str, Any]) -> bytes:
        return (json.dumps(event, separators=(",", ":"), default=str) + ",\n").encode()

    def after_fork_in_child(self) -> None:
        """A child of fork() starts a file of its own, with a lock no parent thread holds."""
        self.lock = threading.RLock()
        self.fd = None

    def _stop(self, exc: OSError) -> None:
        # a trace must never fail the call it records: say so once, then record nothing
        self.broken = True
        # the documented logger name, which it kept when this module moved into _core/
        logging.getLogger("llm_datadist_ffi._trace").warning(
            "cannot write the call trace to %s (%s); tracing stops in process %d", self.directory, exc, os.getpid())

    def write(self, event: Dict[str, Any]) -> None:
        pid, tid = os.getpid(), event["tid"]
        event["pid"] = pid
        line = self._line(event)
        with self.lock:
            if self.broken:
                return
            try:
                fd = self._open_locked()
                lines = b""
                if tid not in self.threads:
                    self.threads.add(tid)
                    lines += self._line({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                         "args": {"name": threading.current_thread().name}})
                os.write(fd, lines + line)
            except OSError as exc:
                self._stop(exc)

    def name_process(self, label: str) -> None:
        with self.lock:
            if self.broken:
                return
            try:
                fd = self._open_locked()
                os.write(fd, self._line({"ph": "M", "name": "process_name", "pid": self.pid, "tid": 0,
                                         "args": {"name": f"{label} (pid {self.pid})"}}))
            except OSError as exc:
                self._stop(exc)


_recorder: Optional[_Recorder] = _Recorder(DIRECTORY) if DIRECTORY else None
if _recorder is not None:
    os.register_at_fork(after_in_child=_recorder.after_fork_in_child)


@contextlib.contextmanager
def _event(name: str, args: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
    """Records the enclosed work as one event named ``name`` (outermost calls only)."""
    recorder = _recorder
    assert recorder is not None
    local = recorder.local
    before = recorder.bytes_moved()
    start_wall = time.time_ns()
    start = time.perf_counter_ns()
    local.depth = recorder.depth() + 1
    try:
        yield args
    except BaseException as exc:
        status, code = _status_of_error(exc)
        args["status"] = status
        if code is not None:
            args["status_code"] = code
        else:
            args["error"] = str(exc)[:300]
        raise
    else:
        args.setdefault("status", "LLM_SUCCESS")
        args.setdefault("status_code", 0)
    finally:
        duration = time.perf_counter_ns() - start
        after = recorder.bytes_moved()
        if before is not None and after is not None:
            args["bytes"] = after - before
        try:
            # still "inside" while writing: a finalizer run now is part of this call
            recorder.write({"name": name, "cat": "llm_datadist_ffi", "ph": "X", "ts": start_wall // 1000,
                            "dur": round(duration / 1000, 3), "tid": threading.get_native_id(), "args": args})
        finally:
            local.depth -= 1


def _shape(signature: inspect.Signature, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The described arguments of a method call by parameter name, without ``self``;
    keywords taken by ``**kwargs`` (the vendor's layer ranges) appear under their own names."""
    call = signature.bind(*args, **kwargs)
    call.apply_defaults()
    bound = call.arguments
    shape: Dict[str, Any] = {}
    for key, value in list(bound.items())[1:]:
        if signature.parameters[key].kind is inspect.Parameter.VAR_KEYWORD:
            shape.update((k, describe(v, k)) for k, v in value.items())
        else:
            shape[key] = describe(value, key)
    return shape


def _wrap(owner: str, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    signature = inspect.signature(method)
    event_name = f"{owner}.{name}"

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        recorder = _recorder
        if recorder is None or recorder.depth():
            return method(*args, **kwargs)        # a call made by another traced method
        try:
            shape = _shape(signature, args, kwargs)
        except TypeError:                         # the call itself will say what is wrong
            shape = {"args": [describe(value) for value in args[1:]]}
        with _event(event_name, shape) as out:
            result = method(*args, **kwargs)
            out["status"], out["status_code"], extra = _status_of(result)
            out.update(extra)
        if name == "__init__" and "role" in shape and "cluster_id" in shape:
            recorder.name_process(f"{shape['role']} cluster {shape['cluster_id']}")
        return result

    return call


def traced(cls: _Class) -> _Class:
    """Class decorator: with tracing on, wrap the class's public methods (and the
    constructor of an engine class, the one that takes a ``cluster_id``) so that each
    call is recorded; else return ``cls`` untouched."""
    if _recorder is None:
        return cls
    for name, member in list(vars(cls).items()):
        if isinstance(member, (staticmethod, classmethod, property)) or not inspect.isfunction(member):
            continue
        if name.startswith("_") and not (name == "__init__" and "cluster_id" in inspect.signature(member).parameters):
            continue
        setattr(cls, name, _wrap(cls.__name__, name, member))
    return cls


def span(name: str, **shape: Any) -> "contextlib.AbstractContextManager[Any]":
    """One event for work that is not a method call (a layer of ``transfer_cache_async``
    on its worker thread); nothing when tracing is off."""
    if _recorder is None or _recorder.depth():
        return contextlib.nullcontext()
    return _event(name, {key: describe(value, key) for key, value in shape.items()})


__all__: List[str] = ["TRACE_ENV", "DIRECTORY", "describe", "traced", "span"]
