"""Topologies of engine processes for tests: any number of Prompts and Decoders.

The vendor's API allows one initialised engine per process, so a test of a transfer
needs several processes. ``Topology.start(prompts=2, decoders=1)`` starts one process
per engine and returns when every engine listens::

    with Topology.start(prompts=1, decoders=1) as topo:
        topo.decoders[0].call(pull_from, topo.prompts[0].cluster_id)

``call(fn, *args)`` runs a module-level function in that process and returns its value;
an exception raised there is raised here with its own type and message (the child's
traceback is its ``__cause__``). Inside the process, ``here()`` is the process's engine
and what it knows of the others (``here().link(cluster_id)`` links to one of them). A
process of the vendor-compatible API has ``llm_datadist_ffi.compat.install()`` in effect, so
code written for the vendor's ``llm_datadist`` package runs there unchanged.

How a process lives:

- it is started with ``subprocess`` (never ``fork``: engines do not survive one), in a
  session of its own, so that the whole process group can be ended;
- it speaks length-prefixed pickle frames over its stdin and stdout; what the test's
  functions print goes to its stderr, which is kept in a file and shown when startup
  fails or a call cannot be answered;
- it picks a free port for its listener (asks the OS, and picks another when the port
  was taken between the question and the listen), creates and initialises its engine,
  then reports ready; a process that does not report ready within ``startup_timeout``
  seconds fails the start, with its stderr in the error;
- it asks the kernel to kill it when its parent dies (Linux), so a test runner that is
  killed leaves no engine behind;
- ``close()`` closes its stdin (it finalizes its engine and exits), then after a grace
  period sends SIGTERM, then SIGKILL, to its process group.

Other hosts: engines with a ``host`` other than 127.0.0.1 listen on that address, and
``remote`` peers (``RemotePeer``: address and cluster id of an engine this topology did
not start, e.g. on another machine) are known to every process for linking. The mock
moves bytes between processes with ``process_vm_readv`` when it can; across hosts
(and network namespaces) it must use its socket path, so a topology with a remote peer,
a non-loopback host or a ``launcher`` sets ``LLDD_MOCK_NO_PROCESS_VM=1`` in its processes.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import IO, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Type

__all__ = [
    "PROMPT", "DECODER", "API_V2", "API_NATIVE", "EngineSpec", "RemotePeer", "PeerAddress", "Here", "here",
    "EngineProcess", "Pending", "Topology", "TopologyError", "RemoteError", "RemoteTraceback", "default_options",
]

PROMPT = "prompt"
DECODER = "decoder"
#: The vendor-compatible API (``llm_datadist.LLMDataDist``, cache-manager mode).
API_V2 = "v2"
#: The native API (``llm_datadist_ffi.native.LlmDataDist``).
API_NATIVE = "native"

_LOOPBACK = "127.0.0.1"
_SOCKET_PATH_ENV = "LLDD_MOCK_NO_PROCESS_VM"
_HEADER = struct.Struct("!Q")
_PORT_ATTEMPTS = 20


class TopologyError(RuntimeError):
    """A process of a topology did not start, answer or end as it should."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a topology process (its ``__cause__``)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RemoteError(Exception):
    """Stands for an exception of a topology process that could not be pickled;
    ``type_name`` is its class's import path, ``message`` its ``str()``."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(type_name, message)
        self.type_name = type_name
        self.message = message

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}"


@dataclass(frozen=True)
class PeerAddress:
    """Where an engine listens, as every process of a topology knows it."""

    role: str
    cluster_id: int
    host: str
    port: int


@dataclass(frozen=True)
class RemotePeer:
    """An engine this topology did not start (another host, another container).

    ``address`` is ``"ip:port"`` of its listener. The topology cannot run functions
    there; its processes can link to it.
    """

    address: str
    cluster_id: int
    role: str = PROMPT

    def peer_address(self) -> PeerAddress:
        host, _, port = self.address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"RemotePeer address must be 'ip:port', got {self.address!r}")
        return PeerAddress(self.role, self.cluster_id, host, int(port))


@dataclass(frozen=True)
class EngineSpec:
    """One engine process: its role, cluster id and API, where it listens and how it starts.

    ``options`` are added to (and override) ``default_options``; ``launcher`` is a command
    prefix for the process (``["nsenter", "--net=/proc/123/ns/net", "--"]``, ``["ip",
    "netns", "exec", "b"]``); ``env`` is added to its environment.
    """

    role: str
    cluster_id: int
    api: str = API_V2
    host: str = _LOOPBACK
    options: Mapping[str, str] = field(default_factory=dict)
    launcher: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.role not in (PROMPT, DECODER):
            raise ValueError(f"role must be {PROMPT!r} or {DECODER!r}, got {self.role!r}")
        if self.api not in (API_V2, API_NATIVE):
            raise ValueError(f"api must be {API_V2!r} or {API_NATIVE!r}, got {self.api!r}")


def default_options(api: str) -> Dict[str, str]:
    """The options an engine of ``api`` is initialised with before ``EngineSpec.options``
    (the listener is added by the process): device 0 and, for the vendor API, the
    cache-manager mode with a 5 s wait time of synchronous transfers."""
    if api == API_NATIVE:
        from ..native import OPTION_DEVICE_ID
        return {OPTION_DEVICE_ID: "0"}
    return {"llm.EnableCacheManager": "1", "ge.exec.deviceId": "0", "llm.SyncKvCacheWaitTime": "5000"}


# ---------------------------------------------------------------------------------------
# Inside a topology process
# ---------------------------------------------------------------------------------------

class _OfSpec:
    """What an engine's spec says, read through the object that stands for the engine
    (``Here`` inside its process, ``EngineProcess`` in the test's)."""

    spec: EngineSpec

    @property
    def role(self) -> str:
        """``PROMPT`` or ``DECODER``."""
        return self.spec.role

    @property
    def cluster_id(self) -> int:
        return self.spec.cluster_id


class Here(_OfSpec):
    """The engine of this topology process and what it knows of the others.

    ``engine`` is an ``llm_datadist.LLMDataDist`` (vendor API) or an
    ``llm_datadist_ffi.native.LlmDataDist``; ``peers`` maps every other engine's cluster
    id (remote peers included) to its address; ``state`` keeps the test's objects
    (caches, arrays) from one call to the next.
    """

    def __init__(self, spec: EngineSpec, engine: Any, port: int) -> None:
        self.spec = spec
        self.engine = engine
        self.port = port
        self.peers: Dict[int, PeerAddress] = {}
        self.state: Dict[str, Any] = {}

    @property
    def api(self) -> str:
        return self.spec.api

    def cluster_info(self, cluster_id: int) -> Any:
        """The cluster information that links this engine to peer ``cluster_id``, of this
        process's API (``LLMClusterInfo`` or ``native.ClusterInfo``)."""
        peer = self.peers[cluster_id]
        if self.spec.api == API_NATIVE:
            from .. import native
            return native.ClusterInfo(cluster_id, 0, [native.IpInfo(self.spec.host, 0)],
                                      [native.IpInfo(peer.host, peer.port)])
        from ..vendor import LLMClusterInfo
        info = LLMClusterInfo()
        info.remote_cluster_id = cluster_id
        info.append_local_ip_info(self.spec.host, 0)
        info.append_remote_ip_info(peer.host, peer.port)
        return info

    def link(self, *cluster_ids: int, timeout_ms: int = 5000) -> None:
        """Link this engine to the peers ``cluster_ids``.

        Raises:
            LLMException: the first failed cluster's status (or the call's own).
        """
        self._links(cluster_ids, timeout_ms, unlink=False)

    def unlink(self, *cluster_ids: int, timeout_ms: int = 5000) -> None:
        """Unlink this engine from the peers ``cluster_ids``; raises as ``link``."""
        self._links(cluster_ids, timeout_ms, unlink=True)

    def _links(self, cluster_ids: Sequence[int], timeout_ms: int, unlink: bool) -> None:
        from ..status import LLMStatusCode, exception_for
        infos = [self.cluster_info(c) for c in cluster_ids]
        if self.spec.api == API_NATIVE:
            method = self.engine.unlink_llm_clusters if unlink else self.engine.link_llm_clusters
        else:
            method = self.engine.unlink_clusters if unlink else self.engine.link_clusters
        status, rets = method(infos, timeout_ms)
        for cluster_id, ret in zip(cluster_ids, rets):
            if int(ret) != 0:
                what = "unlink from" if unlink else "link to"
                raise exception_for(int(ret), f"{what} cluster {cluster_id}: {LLMStatusCode(int(ret)).name}")
        if int(status) != 0:
            raise exception_for(int(status), f"{'unlink' if unlink else 'link'}: status {int(status):#x}")


_here: Optional[Here] = None


def here() -> Here:
    """This topology process's engine and peers.

    Raises:
        RuntimeError: called outside a process that a ``Topology`` started.
    """
    if _here is None:
        raise RuntimeError("here() is only available inside a process started by a Topology")
    return _here


def _set_peers(peers: List[PeerAddress]) -> None:
    me = here()
    me.peers = {p.cluster_id: p for p in peers if p.cluster_id != me.cluster_id}


def _engine_handle(me: Here) -> Any:
    """The C handle of this process's engine, for the mock's control functions."""
    if me.api == API_NATIVE:
        return me.engine._engine()
    from .._vendor import _native
    return _native.engine_for("topology")


def _inject_fault(function_name: str, code: int, count: int, skip: int) -> None:
    from .. import mock_control
    mock_control.inject_fault(function_name, code, count, skip)


def _clear_faults() -> None:
    from .. import mock_control
    mock_control.clear_faults()


def _serve_delay(delay_ms: int) -> None:
    from .._core import _capi
    _capi.check(_capi.mock_function("lldd_mock_set_serve_delay")(_engine_handle(here()), delay_ms),
                "mock.set_serve_delay")


def _drop_connections() -> None:
    from .._core import _capi
    _capi.check(_capi.mock_function("lldd_mock_drop_connections")(_engine_handle(here())),
                "mock.drop_connections")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _start_engine(spec: EngineSpec) -> Tuple[Any, int]:
    """Creates and initialises the engine of ``spec`` on a free port of its host."""
    from ..status import LLMException, LLMStatusCode
    options = {**default_options(spec.api), **spec.options}
    if spec.api == API_NATIVE:
        from .. import native
        engine: Any = native.LlmDataDist(spec.cluster_id, native.LlmRole[spec.role.upper()])
        initialize: Callable[[Dict[str, str]], Any] = engine.initialize
        listen_key = native.OPTION_LISTEN_IP_INFO
    else:
        # code written for the vendor's package runs here as it would on a device host
        from .. import compat
        compat.install()
        from ..vendor import LLMDataDist, LLMRole      # what ``llm_datadist`` now names
        engine = LLMDataDist(LLMRole[spec.role.upper()], spec.cluster_id)
        initialize = engine.init
        listen_key = "llm.listenIpInfo"
    for _ in range(_PORT_ATTEMPTS):
        port = _free_port(spec.host)
        try:
            initialize({**options, listen_key: f"{spec.host}:{port}"})
            return engine, port
        except LLMException as exc:
            # LLM_FAILED is the listener's "address already in use": another process took
            # the port after we asked; any other status is the options' fault.
            if exc.status_code != LLMStatusCode.LLM_FAILED or "in use" not in str(exc):
                raise
    raise TopologyError(f"no free port on {spec.host} after {_PORT_ATTEMPTS} attempts")


def _resolve(ref: Tuple[str, str, Optional[str]]) -> Callable[..., Any]:
    """The function named by ``(module, qualname, file)``; the module is imported by name,
    or loaded from its file when its name is not importable here (pytest's importlib mode
    names test modules after their path)."""
    module_name, qualname, filename = ref
    module: Optional[ModuleType] = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            if filename is None:
                raise
            spec = importlib.util.spec_from_file_location(module_name, filename)
            if spec is None or spec.loader is None:
                raise
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{module_name}.{qualname} is not callable")
    return target  # type: ignore[no-any-return]


def _write_frame(stream: IO[bytes], message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read_frame_blocking(stream: IO[bytes]) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    return pickle.loads(stream.read(size))


def _error_frame(exc: BaseException) -> Tuple[str, Any, str]:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        payload: Any = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(payload)
    except Exception:  # noqa: BLE001 - any exception may fail to (un)pickle; send its text
        payload = pickle.dumps(RemoteError(f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc)))
    return ("err", payload, text)


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent ends (prctl PR_SET_PDEATHSIG).

    The kernel ties this to the parent's thread that started the process: a topology
    started in a thread ends when that thread does, so start it in the thread that
    closes it (pytest's fixtures and tests share one)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)


def _child_main() -> None:
    """The program of a topology process (started by ``EngineProcess``)."""
    global _here
    _die_with_parent()
    # The frames use the original stdout; anything the test's functions print goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = os.fdopen(os.dup(0), "rb")
    boot = _read_frame_blocking(inp)
    for entry in reversed(boot["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    from ..lint import LintWarning
    warnings.simplefilter(boot["lint"], LintWarning)
    spec: EngineSpec = boot["spec"]
    try:
        engine, port = _start_engine(spec)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        _write_frame(out, _error_frame(exc))
        return
    _here = Here(spec, engine, port)
    _write_frame(out, ("ready", {"pid": os.getpid(), "port": port}))
    while True:
        try:
            request = _read_frame_blocking(inp)
        except EOFError:
            break
        _, ref, args, kwargs = request
        try:
            value = _resolve(ref)(*args, **kwargs)
            frame: Any = ("ok", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception as exc:  # noqa: BLE001 - every failure of the test's function goes back to the test
            frame = _error_frame(exc)
        _write_frame(out, frame)
    _here = None
    close = getattr(engine, "close", None) or engine.finalize
    close()


# ---------------------------------------------------------------------------------------
# The test's side
# ---------------------------------------------------------------------------------------

def _reference(fn: Callable[..., Any]) -> Tuple[str, str, Optional[str]]:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise TypeError(f"{fn!r} must be a module-level function (it is found by name in the engine process)")
    if module == "__main__":
        raise TypeError(f"{fn!r} is defined in __main__; define it in an importable module")
    filename = getattr(sys.modules.get(module), "__file__", None)
    return module, qualname, filename


def _package_root() -> str:
    return str(Path(__file__).resolve().parent.parent.parent)


class Pending:
    """A call sent to a topology process whose answer has not been read yet."""

    def __init__(self, process: "EngineProcess", what: str) -> None:
        self._process = process
        self._what = what
        self._done = False

    def result(self, timeout: Optional[float] = None) -> Any:
        """The function's value, or its exception raised here.

        Raises:
            TopologyError: no answer within ``timeout`` seconds (the topology's call
                timeout by default; the process is then killed) or the process ended.
        """
        if self._done:
            raise TopologyError(f"the answer to {self._what} was already read")
        self._done = True
        seconds = self._process.call_timeout if timeout is None else timeout
        frame = self._process._read_frame(time.monotonic() + seconds, self._what)
        self._process._pending = None
        return _unpack(frame)


def _unpack(frame: Any) -> Any:
    kind = frame[0]
    if kind == "ok":
        return pickle.loads(frame[1])
    if kind == "err":
        exc = pickle.loads(frame[1])
        raise exc from RemoteTraceback(frame[2])
    raise TopologyError(f"unexpected frame {kind!r}")


class EngineProcess(_OfSpec):
    """One engine in its own process: ``call(fn, *args)`` runs ``fn`` there."""

    def __init__(self, spec: EngineSpec, index: int, lint: str, extra_env: Mapping[str, str],
                 call_timeout: float) -> None:
        self.spec = spec
        #: ``prompt0``, ``decoder1`` …: the process's name in messages
        self.name = f"{spec.role}{index}"
        self.call_timeout = call_timeout
        self.port = 0
        self._pending: Optional[Pending] = None
        self._buffer = b""
        self._stderr = tempfile.TemporaryFile()
        path = os.pathsep.join(p for p in (_package_root(), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path, **extra_env, **spec.env}
        command = [*spec.launcher, sys.executable, "-c",
                   "from llm_datadist_ffi.testing.topology import _child_main; _child_main()"]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._stderr, env=env, start_new_session=True)
        assert self.process.stdin is not None
        _write_frame(self.process.stdin, {"spec": spec, "sys_path": list(sys.path), "lint": lint})

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def address(self) -> PeerAddress:
        return PeerAddress(self.spec.role, self.spec.cluster_id, self.spec.host, self.port)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run the module-level function ``fn(*args, **kwargs)`` in this process.

        Returns:
            What ``fn`` returned (pickled there, unpickled here).

        Raises:
            Exception: what ``fn`` raised, with its type and message; the process's
                traceback is its ``__cause__``.
            TopologyError: the process did not answer within the call timeout (it is
                killed) or ended.
        """
        return self.start(fn, *args, **kwargs).result()

    def start(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Pending:
        """Send ``fn(*args, **kwargs)`` to this process and return at once; ``result()``
        of the returned ``Pending`` waits for it. One call at a time per process."""
        if self._pending is not None:
            raise TopologyError(f"{self.name} is still running {self._pending._what}")
        if self.process.poll() is not None:
            raise TopologyError(f"{self.name} has ended (exit code {self.process.returncode}){self._stderr_tail()}")
        what = f"{getattr(fn, '__qualname__', fn)!s} in {self.name}"
        assert self.process.stdin is not None
        try:
            _write_frame(self.process.stdin, ("call", _reference(fn), args, kwargs))
        except BrokenPipeError:
            raise TopologyError(f"{self.name} has ended{self._stderr_tail()}") from None
        self._pending = Pending(self, what)
        return self._pending

    def stderr(self) -> str:
        """What the process wrote to its stderr so far."""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def stderr_if_open(self) -> str:
        """``stderr()`` while the topology is open, ``""`` after ``close()``."""
        return "" if self._stderr.closed else self.stderr()

    def _stderr_tail(self, limit: int = 4000) -> str:
        text = self.stderr()
        return f"; its stderr:\n{text[-limit:]}" if text.strip() else "; its stderr is empty"

    def _read_frame(self, deadline: float, what: str) -> Any:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while True:
            if len(self._buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(self._buffer)
                if len(self._buffer) >= _HEADER.size + size:
                    frame = pickle.loads(self._buffer[_HEADER.size:_HEADER.size + size])
                    self._buffer = self._buffer[_HEADER.size + size:]
                    return frame
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise TopologyError(f"{what}: no answer within the time allowed; the process was killed"
                                    f"{self._stderr_tail()}")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    code = self.process.wait()
                    raise TopologyError(f"{what}: the process ended (exit code {code}){self._stderr_tail()}")
                self._buffer += chunk

    def _wait_ready(self, deadline: float) -> None:
        frame = self._read_frame(deadline, f"startup of {self.name}")
        if frame[0] == "ready":
            self.port = int(frame[1]["port"])
            return
        _unpack(frame)   # raises the startup error of the process

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the process (SIGSTOP to stop it, SIGCONT to resume it)."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signum)

    def kill(self) -> None:
        """End the process and its process group at once (SIGKILL), as a crash would."""
        self._signal_group(signal.SIGKILL)
        self.process.wait()

    def _signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass              # the group has no process left

    def _close_pipes(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except BrokenPipeError:
                    pass      # the process had ended with unread input
        self._stderr.close()


class Topology:
    """Engine processes started together; ``prompts`` and ``decoders`` in start order.

    ``lint`` is the ``warnings`` action for ``LintWarning`` in the processes
    (``"error"``, ``"default"``, ``"ignore"`` …).
    """

    def __init__(self, processes: List[EngineProcess], remote: Sequence[RemotePeer], grace: float) -> None:
        self.processes = processes
        self.remote = [r.peer_address() for r in remote]
        self.grace = grace
        self._closed = False

    @property
    def prompts(self) -> List[EngineProcess]:
        return [p for p in self.processes if p.role == PROMPT]

    @property
    def decoders(self) -> List[EngineProcess]:
        return [p for p in self.processes if p.role == DECODER]

    @classmethod
    def start(cls, prompts: int = 1, decoders: int = 1, *, api: str = API_V2, host: str = _LOOPBACK,
              options: Optional[Mapping[str, str]] = None, env: Optional[Mapping[str, str]] = None,
              remote: Sequence[RemotePeer] = (),
              specs: Optional[Sequence[EngineSpec]] = None, lint: str = "error", startup_timeout: float = 30.0,
              call_timeout: float = 60.0, grace: float = 5.0) -> "Topology":
        """Start ``prompts`` Prompt and ``decoders`` Decoder engines (cluster ids 1, 2, …
        in that order) of ``api`` on ``host`` with ``options`` and ``env`` (added to the
        environment of the processes), or exactly the engines of ``specs``.

        Raises:
            TopologyError: a process did not report ready within ``startup_timeout``
                seconds or ended; every process started is ended first.
            Exception: the exception a process's engine raised while it started.
            ValueError: two engines with one cluster id.
        """
        if specs is None:
            roles = [PROMPT] * prompts + [DECODER] * decoders
            specs = [EngineSpec(role, i + 1, api, host, dict(options or {}), env=dict(env or {}))
                     for i, role in enumerate(roles)]
        ids = [s.cluster_id for s in specs] + [r.cluster_id for r in remote]
        if len(set(ids)) != len(ids):
            raise ValueError(f"cluster ids must differ, got {ids}")
        cross_host = bool(remote) or any(s.host != _LOOPBACK or s.launcher for s in specs)
        extra_env = {_SOCKET_PATH_ENV: "1"} if cross_host else {}
        counts: Dict[str, int] = {}
        processes: List[EngineProcess] = []
        topology = cls(processes, remote, grace)
        try:
            for spec in specs:
                index = counts.get(spec.role, 0)
                counts[spec.role] = index + 1
                processes.append(EngineProcess(spec, index, lint, extra_env, call_timeout))
            deadline = time.monotonic() + startup_timeout
            for process in processes:
                process._wait_ready(deadline)
            addresses = [p.address for p in processes] + topology.remote
            for process in processes:
                process.call(_set_peers, addresses)
        except BaseException:
            topology.close()
            raise
        return topology

    def __iter__(self) -> Iterator[EngineProcess]:
        return iter(self.processes)

    def close(self) -> None:
        """End every process: EOF on its stdin (it finalizes its engine and exits), after
        ``grace`` seconds SIGTERM to its process group, one second later SIGKILL. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for process in self.processes:
            process._signal_group(signal.SIGCONT)     # a stopped process cannot see EOF
            if process.process.stdin is not None:
                try:
                    process.process.stdin.close()
                except BrokenPipeError:
                    pass
        self._wait_all(time.monotonic() + self.grace)
        for signum, seconds in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 10.0)):
            for process in self.processes:
                if process.process.poll() is None:
                    process._signal_group(signum)
            self._wait_all(time.monotonic() + seconds)
        for process in self.processes:
            # what the process started itself (its group) does not outlive it
            process._signal_group(signal.SIGKILL)
            process._close_pipes()

    def _wait_all(self, deadline: float) -> None:
        for process in self.processes:
            try:
                process.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass          # the next signal deals with it

    def __enter__(self) -> "Topology":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()
