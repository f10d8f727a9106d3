"""Support for the vendor-API tests (tests/vendor/test_vendor_*.py).

- ``fill``: the reproducible content of a cache tensor, so that a test computes the
  bytes a peer holds from the seed alone;
- ``Peer``: an engine in another process (``vendor_peer.py``), driven by Python
  statements; the vendor's API allows one initialised engine per process;
- ``raises``: ``pytest.raises`` with the exact exception type, status code and a
  fragment of the message; ``linted``: the call warns one rule's ``LintWarning``;
  ``strict_mode``: ``LLM_DATADIST_FFI_STRICT=1`` for a block;
- option and cluster helpers for 127.0.0.1.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional, Tuple, Type

import numpy as np

import ports

SUPPORT = Path(__file__).resolve().parent

#: A rank table for the rank-table link (the mock only parses it as JSON, PR-39).
RANK_TABLE = '{"version": "1.0", "server_count": "1", "server_list": []}'


def fill(seed: int, shape: Any) -> np.ndarray:
    """Random bytes of ``shape`` from ``seed`` (zeros for a negative seed)."""
    if seed < 0:
        return np.zeros(shape, dtype=np.uint8)
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def free_port() -> int:
    """A port to listen on (ports.free_port: below the ephemeral range)."""
    return ports.free_port()


class PeerError(Exception):
    """A command that failed in the peer; carries what the peer reported."""

    def __init__(self, answer: Dict[str, Any]) -> None:
        super().__init__(f"{answer['type']}({answer.get('status')}): {answer['message']}\n{answer.get('traceback')}")
        self.type = answer["type"]
        self.status = answer.get("status")
        self.message = answer["message"]


class Peer:
    """An engine in another process, driven by Python statements (``vendor_peer.py``)."""

    def __init__(self, env: Optional[Dict[str, str]] = None) -> None:
        full_env = dict(os.environ)
        full_env.update(env or {})
        #: the lint rule ids the last command warned about in the peer
        self.last_lints: frozenset = frozenset()
        self.process = subprocess.Popen(
            [sys.executable, str(SUPPORT / "vendor_peer.py")], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, cwd=tempfile.gettempdir(), env=full_env)

    def run(self, code: str = "", value: Optional[str] = None) -> Any:
        """Execute ``code`` in the peer and return ``value`` evaluated there.

        Raises:
            PeerError: the peer raised.
        """
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"code": code, "value": value}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the peer process exited with {self.process.wait()}")
        answer = json.loads(line)
        self.last_lints = frozenset(answer.get("lints", ()))
        if not answer["ok"]:
            raise PeerError(answer)
        return answer["value"]

    def error(self, code: str) -> PeerError:
        """Run ``code``, which must raise in the peer; the error."""
        try:
            self.run(code)
        except PeerError as exc:
            return exc
        raise AssertionError(f"the peer ran {code!r} without an error")

    def bytes_of(self, expression: str) -> bytes:
        """The bytes of a numpy array named by ``expression`` in the peer."""
        return bytes.fromhex(self.run(value=f"bytes(np.ascontiguousarray({expression}).view(np.uint8)).hex()"))

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> "Peer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def raises(exc_type: Type[BaseException], call: Callable[[], Any], fragment: str = "",
           status: Any = None) -> BaseException:
    """``call()`` must raise exactly ``exc_type`` (not a subclass of another builtin),
    with ``fragment`` in the message and, for an ``LLMException``, ``status``."""
    import pytest

    from llm_datadist_ffi import LLMException

    with pytest.raises(exc_type) as info:
        call()
    error = info.value
    if exc_type in (TypeError, ValueError, AttributeError, KeyError, RuntimeError):
        assert not isinstance(error, LLMException), f"{error!r} is an LLMException"
    assert isinstance(error, exc_type)
    if fragment:
        assert fragment in str(error), f"{fragment!r} not in {str(error)!r}"
    if status is not None:
        assert isinstance(error, LLMException)
        assert error.status_code == status, f"{error.status_code!r} != {status!r}: {error}"
    return error


def linted(rule: str, call: Callable[[], Any], fragment: str = "") -> Any:
    """``call()`` must warn the ``LintWarning`` of ``rule`` (``"PR-18"`` …) and no other
    warning, with ``fragment`` in a message; returns what the call returned."""
    import warnings

    from llm_datadist_ffi import lint

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        result = call()
    categories = {type(w.message) for w in record}
    assert categories == {lint.warning_class(rule)}, f"{rule}: warned {[str(w.message) for w in record]}"
    if fragment:
        assert any(fragment in str(w.message) for w in record), f"{fragment!r} not in {[str(w.message) for w in record]}"
    return result


@contextlib.contextmanager
def strict_mode() -> Iterator[None]:
    """``LLM_DATADIST_FFI_STRICT=1`` for the block: every lint is its old refusal."""
    from llm_datadist_ffi import lint

    old = os.environ.get(lint.STRICT_ENV)
    os.environ[lint.STRICT_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ[lint.STRICT_ENV]
        else:
            os.environ[lint.STRICT_ENV] = old


def lx(call: Callable[[], Any], fragment: str = "", status: Any = None) -> BaseException:
    """``call()`` must raise ``LLMException`` with ``LLM_PARAM_INVALID`` (or ``status``)."""
    from llm_datadist_ffi import LLMException, LLMStatusCode

    return raises(LLMException, call, fragment, LLMStatusCode.LLM_PARAM_INVALID if status is None else status)


def v2_options(port: Optional[int] = None, direct: bool = True, pool: bool = False,
               host_pool: bool = False, **extra: str) -> Dict[str, str]:
    """Options of a CacheManager-mode engine (direct mode unless ``direct=False``)."""
    options = {"llm.EnableCacheManager": "1", "llm.EnableRemoteCacheAccessible": "1" if direct else "0",
               "ge.exec.deviceId": "0", "llm.SyncKvCacheWaitTime": "5000"}
    if port is not None:
        options["llm.listenIpInfo"] = f"127.0.0.1:{port}"
    if pool:
        options["llm.MemPoolConfig"] = '{"memory_size": 67108864, "page_shift": 12}'
    if host_pool:
        options["llm.HostMemPoolConfig"] = '{"memory_size": 67108864, "page_shift": 12}'
    options.update(extra)
    return options


def v1_options(port: Optional[int] = None, **extra: str) -> Dict[str, str]:
    """Options of a KvCacheManager-mode engine (a Prompt listens on ``port``)."""
    options = {"ge.exec.deviceId": "0", "llm.SyncKvCacheWaitTime": "5000",
               "ge.flowGraphMemMaxSize": "67108864"}
    if port is not None:
        options["llm.listenIpInfo"] = f"127.0.0.1:{port}"
    options.update(extra)
    return options


def cluster_info(remote_cluster_id: Optional[int], port: int, local: bool = True) -> Any:
    """An ``LLMClusterInfo`` for a peer listening on 127.0.0.1:``port``."""
    from llm_datadist_ffi.vendor import LLMClusterInfo

    info = LLMClusterInfo()
    if remote_cluster_id is not None:
        info.remote_cluster_id = remote_cluster_id
    if local:
        info.append_local_ip_info("127.0.0.1", 0)
    info.append_remote_ip_info("127.0.0.1", port)
    return info


#: the lint rule ids of the last observed call (set by the suites' ``observed`` helpers;
#: ``None``: not observed, so not compared)
LAST_LINTS: Optional[frozenset] = None
LINT_ID = re.compile(r"\((PR-\d+|OPT-\d+)[;)]")


def lint_ids(records: Any) -> frozenset:
    """The rule ids named by the lint warnings among ``records`` (``warnings`` records)."""
    from llm_datadist_ffi import LintWarning
    return frozenset(m.group(1) for r in records if issubclass(r.category, LintWarning)
                     for m in [LINT_ID.search(str(r.message))] if m is not None)


def observed(call: Callable[[], Any], errors: Tuple[type, ...] = (TypeError, ValueError)) -> Tuple[str, Any]:
    """What a call did: ``("ok", value)``, ``("status", code)`` or ``("error", type name)`` for
    one of ``errors``; the rule ids of its lint warnings go to ``LAST_LINTS`` for ``expect``."""
    global LAST_LINTS
    import warnings

    from llm_datadist_ffi import LintWarning, LLMException

    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always", LintWarning)
        try:
            return "ok", call()
        except LLMException as exc:
            return "status", exc.status_code
        except errors as exc:
            return "error", type(exc).__name__
        finally:
            LAST_LINTS = lint_ids(records)


def expect(outcome: Any, got: Tuple[str, Any], what: str) -> None:
    """Compare an observed ``("ok", value)``, ``("status", code)`` or ``("error", type name)``
    with an oracle ``Outcome``: its Python error type, else its status (any value on success)."""
    from llm_datadist_ffi import LLMStatusCode
    if outcome.python_error is not None:
        wanted: Tuple[str, Any] = ("error", outcome.python_error.__name__)
    elif outcome.status == LLMStatusCode.LLM_SUCCESS:
        wanted = ("ok", got[1] if got[0] == "ok" else None)
    else:
        wanted = ("status", outcome.status)
    assert got == wanted, f"{what}: got {got}, the oracle says {outcome.describe()}"
    global LAST_LINTS
    seen, LAST_LINTS = LAST_LINTS, None
    if seen is not None:
        assert seen == frozenset(outcome.lints), \
            f"{what}: the package warned {sorted(seen)}, the oracle expects the lints {sorted(outcome.lints)}"

