"""Shared fixtures and settings of the test suite.

- Hypothesis profiles by ``HYPOTHESIS_PROFILE``: ``default`` (fast, for local runs and
  .ci/run), ``ci`` (more examples) and ``thorough`` (many more; run before a release).
- ``--run-slow`` enables tests marked ``slow``.
- ``mock_only`` tests need the mock backend's control interface or a mock-only
  project rule; on another backend they are skipped with the reason given in
  the marker (they cannot run there; nothing is hidden).
- ``engines``: a factory of native engines that are closed after the test, and that
  checks no engine or mock-ACL allocation leaked.
"""
from __future__ import annotations

import gc
import os
import socket
from typing import Callable, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import llm_datadist_ffi
from llm_datadist_ffi import native

settings.register_profile("default", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", max_examples=150, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False, help="run tests marked slow")


def pytest_report_header(config: pytest.Config) -> list[str]:
    from llm_datadist_ffi._core._loader import loaded
    return [f"llm_datadist_ffi {llm_datadist_ffi.__file__}: backend={loaded.name} lldd={loaded.lldd_path}",
            f"hypothesis profile: {settings._current_profile}"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run_slow = config.getoption("--run-slow")
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow test: run with --run-slow"))
        marker = item.get_closest_marker("mock_only")
        if marker is not None and llm_datadist_ffi.backend != "mock":
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "mock backend only")
            item.add_marker(pytest.mark.skip(reason=f"mock_only: {reason}"))


@pytest.fixture
def free_port() -> Callable[[], int]:
    """A function returning a TCP port on 127.0.0.1 that was free a moment ago."""
    def pick() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    return pick


@pytest.fixture
def engines() -> Iterator[Callable[..., native.LlmDataDist]]:
    """Factory ``engines(cluster_id, role=PROMPT, options=None, listen=False)``.

    With ``options`` given (or ``listen=True``) the engine is initialised; ``listen``
    adds ``llm.ListenIpInfo`` on a free 127.0.0.1 port (read it back from
    ``engine.listen_port``). Every engine is closed after the test; on the mock backend
    the test then fails if more engines or mock-ACL allocations are alive than before it.
    """
    made: list[native.LlmDataDist] = []
    gc.collect()              # what earlier tests dropped unclosed is not this test's leak
    before = _live_mock_objects()

    def make(cluster_id: int, role: native.LlmRole = native.LlmRole.PROMPT,
             options: dict[str, str] | None = None, listen: bool = False,
             device_id: int = 0) -> native.LlmDataDist:
        engine = native.LlmDataDist(cluster_id, role)
        made.append(engine)
        if options is not None or listen:
            opts = {native.OPTION_DEVICE_ID: str(device_id), **(options or {})}
            if listen:
                for _ in range(20):
                    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                        s.bind(("127.0.0.1", 0))
                        port = int(s.getsockname()[1])
                    opts[native.OPTION_LISTEN_IP_INFO] = f"127.0.0.1:{port}"
                    try:
                        engine.initialize(opts)
                        break
                    except llm_datadist_ffi.LLMException as exc:   # port taken meanwhile: try another
                        if exc.status_code != llm_datadist_ffi.LLMStatusCode.LLM_FAILED:
                            raise
                else:
                    raise RuntimeError("no free port found for a listener")
                engine.listen_port = port  # type: ignore[attr-defined]
            else:
                engine.initialize(opts)
        return engine

    yield make
    for engine in made:
        engine.close()
    if before is not None:
        gc.collect()          # an engine the test dropped unclosed is freed by its finalizer
        after = _live_mock_objects()
        assert after == before, f"the test leaked engines or mock-ACL allocations: {before} before, {after} after"


def _live_mock_objects() -> dict[str, int] | None:
    """The mock's live engines and ACL allocations; None on another backend."""
    if llm_datadist_ffi.backend != "mock":
        return None
    from llm_datadist_ffi import mock_control
    return {"engines": mock_control.live_engines(), "allocations": mock_control.live_allocations()}


def link_info(remote_cluster_id: int, port: int) -> native.ClusterInfo:
    """ClusterInfo for a peer listening on 127.0.0.1:port."""
    return native.ClusterInfo(remote_cluster_id, 0, [native.IpInfo("127.0.0.1", 0)],
                              [native.IpInfo("127.0.0.1", port)])


def numpy_cache(num_tensors: int, shape: tuple[int, ...], dtype: str = "uint8",
                fill: str = "random", seed: int = 0) -> list[np.ndarray]:
    """``num_tensors`` C-contiguous arrays of one shape: random bytes or zeros."""
    rng = np.random.default_rng(seed)
    arrays = []
    for _ in range(num_tensors):
        if fill == "random":
            raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
            arrays.append(raw.view(dtype).reshape(shape))
        else:
            arrays.append(np.zeros(shape, dtype=dtype))
    return arrays


@pytest.fixture(autouse=True)
def _empty_lint_record() -> Iterator[None]:
    """Raw C-ABI calls of a test leave their lints in the mock's per-thread record, which
    the package would report at its next call: each test starts and ends with it empty."""
    clear = _lint_clear()
    if clear is not None:
        clear()
    yield
    if clear is not None:
        clear()


def _lint_clear() -> Callable[[], None] | None:
    from llm_datadist_ffi._core import _capi
    return _capi.lldd_lib.lldd_mock_lint_clear if _capi._HAS_LINT_RECORD else None
