"""Engines and the life of the process: garbage collection, interpreter exit, ``with``,
and ``fork()`` (docs/user-guide.md, "Processes").

A finalized engine closes its listening socket, so "is this engine finalized?" is
answered from outside the package: does 127.0.0.1:port still accept a connection?
"""
from __future__ import annotations

import ctypes
import gc
import os
import select
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from typing import Callable, Iterator

import pytest

import vendor_support as vs
from llm_datadist_ffi import native
from llm_datadist_ffi.status import LLMStatusCode
from llm_datadist_ffi.vendor import CacheDesc, DataType, LLMDataDist, LLMException, LLMRole

# The tests fork a process whose engines run threads; Python >= 3.12 warns about any such
# fork, and what they check is exactly that it is safe for the engines.
fork_warning = pytest.mark.filterwarnings("ignore:.*use of fork\\(\\) may lead to deadlocks:DeprecationWarning")

# The vendor-compatible API runs on the mock's extension functions (the ascend shim answers
# LLM_FEATURE_NOT_ENABLED for them), and the fork handling of listening sockets is the mock's.
vendor_api = pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions")
mock_fork = pytest.mark.mock_only(reason="closing the child's copies of listening sockets is the mock's fork handler")


def accepts(port: int) -> bool:
    """Whether something listens on 127.0.0.1:port. A connection from the port to itself
    (TCP's simultaneous open, when the kernel picks the freed port as the source port of
    this very connect) is no listener."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        return s.connect_ex(("127.0.0.1", port)) == 0 and s.getsockname()[1] != port


@pytest.fixture(autouse=True)
def no_engine_left() -> Iterator[None]:
    yield
    gc.collect()
    leftover = LLMDataDist.llm_engine_instance
    if leftover is not None:
        leftover.finalize()
        pytest.fail("a test left an initialised LLMDataDist behind")


def in_child(body: Callable[[], None], wait_fd: int = -1) -> int:
    """Fork; the child runs ``body`` (and, with ``wait_fd``, first blocks until that
    descriptor is readable) and exits with 0, or 1 after printing its traceback to
    stderr. Returns the child's pid."""
    pid = os.fork()
    if pid == 0:                                   # the child: never returns into pytest
        code = 1
        try:
            body()
            if wait_fd >= 0:
                os.read(wait_fd, 1)
            code = 0
        except BaseException:                      # reported to the parent through the exit code
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def exit_code(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


# ---- garbage collection -------------------------------------------------------------------

@vendor_api
def test_an_engine_nobody_refers_to_is_finalized_when_collected() -> None:
    port = vs.free_port()
    datadist = LLMDataDist(LLMRole.PROMPT, 1)
    datadist.init(vs.v2_options(port))
    assert accepts(port)
    del datadist
    gc.collect()
    assert not accepts(port)
    assert LLMDataDist.llm_engine_instance is None
    another = LLMDataDist(LLMRole.PROMPT, 2)
    another.init(vs.v2_options(port))
    assert LLMDataDist.llm_engine_instance is another
    another.finalize()


@vendor_api
def test_a_cache_manager_keeps_its_engine_alive_after_its_llmdatadist_is_gone() -> None:
    port = vs.free_port()
    datadist = LLMDataDist(LLMRole.PROMPT, 1)
    datadist.init(vs.v2_options(port, pool=True))
    cache_manager = datadist.cache_manager
    del datadist
    gc.collect()
    assert accepts(port)
    assert LLMDataDist.llm_engine_instance is None
    vs.raises(LLMException, lambda: LLMDataDist(LLMRole.DECODER, 2).init(vs.v2_options()),
              "lives on through its cache_manager", LLMStatusCode.LLM_FAILED)
    desc = CacheDesc(1, [4, 8], DataType.DT_UINT8)
    cache = cache_manager.allocate_cache(desc)
    assert cache.cache_id == 1
    del cache_manager, cache
    gc.collect()
    assert not accepts(port)
    another = LLMDataDist(LLMRole.DECODER, 2)
    another.init(vs.v2_options())
    assert LLMDataDist.llm_engine_instance is another
    another.finalize()


def test_a_native_engine_nobody_refers_to_is_finalized_when_collected() -> None:
    port = vs.free_port()
    engine = native.LlmDataDist(1, native.LlmRole.PROMPT)
    engine.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})
    assert accepts(port)
    del engine
    gc.collect()
    assert not accepts(port)


# ---- with ---------------------------------------------------------------------------------

@vendor_api
def test_leaving_a_with_block_finalizes_the_llmdatadist() -> None:
    port = vs.free_port()
    with LLMDataDist(LLMRole.PROMPT, 1) as datadist:
        datadist.init(vs.v2_options(port))
        assert LLMDataDist.llm_engine_instance is datadist
        assert accepts(port)
    assert LLMDataDist.llm_engine_instance is None
    assert not accepts(port)
    vs.raises(RuntimeError, lambda: datadist.cache_manager, "llm datadist is not initialized")


@vendor_api
def test_an_exception_in_a_with_block_still_finalizes_and_propagates() -> None:
    port = vs.free_port()
    with pytest.raises(KeyError, match="inside"):
        with LLMDataDist(LLMRole.PROMPT, 1) as datadist:
            datadist.init(vs.v2_options(port))
            raise KeyError("inside")
    assert LLMDataDist.llm_engine_instance is None
    assert not accepts(port)


# ---- interpreter exit ---------------------------------------------------------------------

AT_EXIT = """
import atexit, socket, sys
port = int(sys.argv[1])

def report():                      # registered first, so it runs after the package's hooks
    with socket.socket() as s:
        s.settimeout(2.0)
        print("listening" if s.connect_ex(("127.0.0.1", port)) == 0 else "closed", flush=True)

atexit.register(report)
{body}
print("initialised", flush=True)
"""

AT_EXIT_BODIES = {
    "native": """
from llm_datadist_ffi import native
engine = native.LlmDataDist(1, native.LlmRole.PROMPT)
engine.initialize({"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{port}"})
""",
    "vendor": """
from llm_datadist_ffi.vendor import LLMDataDist, LLMRole
datadist = LLMDataDist(LLMRole.PROMPT, 1)
datadist.init({"llm.EnableCacheManager": "1", "ge.exec.deviceId": "0", "llm.listenIpInfo": f"127.0.0.1:{port}"})
""",
    "vendor, only its cache_manager kept": """
from llm_datadist_ffi.vendor import LLMDataDist, LLMRole
datadist = LLMDataDist(LLMRole.PROMPT, 1)
datadist.init({"llm.EnableCacheManager": "1", "ge.exec.deviceId": "0", "llm.listenIpInfo": f"127.0.0.1:{port}"})
kept = datadist.cache_manager
del datadist
""",
}


@pytest.mark.parametrize("kind", [pytest.param(kind, marks=[vendor_api] if kind.startswith("vendor") else [])
                                  for kind in sorted(AT_EXIT_BODIES)])
def test_an_engine_still_alive_at_interpreter_exit_is_finalized(kind: str) -> None:
    script = AT_EXIT.format(body=textwrap.dedent(AT_EXIT_BODIES[kind]))
    result = subprocess.run([sys.executable, "-c", script, str(vs.free_port())], capture_output=True, text=True,
                            timeout=60, cwd=tempfile.gettempdir())
    assert (result.returncode, result.stdout, result.stderr) == (0, "initialised\nclosed\n", "")


# ---- fork ---------------------------------------------------------------------------------

@vendor_api
@fork_warning
def test_a_child_forked_after_init_starts_without_an_engine_and_initialises_its_own() -> None:
    parent_port, child_port = vs.free_port(), vs.free_port()
    datadist = LLMDataDist(LLMRole.PROMPT, 1)
    datadist.init(vs.v2_options(parent_port))

    def child() -> None:
        assert LLMDataDist.llm_engine_instance is None
        vs.raises(RuntimeError, lambda: datadist.cache_manager, "llm datadist is not initialized")
        datadist.finalize()                          # a no-op here: the parent's engine is not touched
        own = LLMDataDist(LLMRole.PROMPT, 2)
        own.init(vs.v2_options(child_port, pool=True))
        assert LLMDataDist.llm_engine_instance is own
        assert own.cache_manager.allocate_cache(CacheDesc(1, [4, 8], DataType.DT_UINT8)).cache_id == 1
        assert accepts(child_port)
        own.finalize()

    pid = in_child(child)
    assert exit_code(pid) == 0
    # the parent's engine still serves: a Decoder of this process links to it
    assert LLMDataDist.llm_engine_instance is datadist
    with native.LlmDataDist(9, native.LlmRole.DECODER) as decoder:
        decoder.initialize({native.OPTION_DEVICE_ID: "1"})
        cluster = native.ClusterInfo(1, 0, [native.IpInfo("127.0.0.1", 0)], [native.IpInfo("127.0.0.1", parent_port)])
        assert decoder.link_llm_clusters([cluster], 5000) == (LLMStatusCode.LLM_SUCCESS, [LLMStatusCode.LLM_SUCCESS])
        assert decoder.unlink_llm_clusters([cluster], 5000)[0] == LLMStatusCode.LLM_SUCCESS
    datadist.finalize()


@fork_warning
def test_a_native_engine_of_the_parent_is_unusable_in_the_child_and_closing_it_there_leaves_it_alone() -> None:
    port = vs.free_port()
    engine = native.LlmDataDist(1, native.LlmRole.PROMPT)
    engine.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})

    def child() -> None:
        vs.raises(RuntimeError, lambda: engine.register_kv_cache(native.CacheDesc(1, native.DataType.DT_UINT8, [4]),
                                                                 [0]), "before a fork")
        engine.close()
        own = native.LlmDataDist(2, native.LlmRole.PROMPT)
        own.initialize({native.OPTION_DEVICE_ID: "0"})
        own.close()

    assert exit_code(in_child(child)) == 0
    assert accepts(port)
    engine.close()
    assert not accepts(port)


@mock_fork
@fork_warning
def test_a_child_does_not_keep_the_parents_port_bound_after_the_parent_finalizes() -> None:
    port = vs.free_port()
    first = native.LlmDataDist(1, native.LlmRole.PROMPT)
    first.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})
    release_r, release_w = os.pipe()
    pid = in_child(lambda: None, wait_fd=release_r)  # lives on until told to exit
    try:
        first.close()
        assert not accepts(port)
        second = native.LlmDataDist(2, native.LlmRole.PROMPT)
        second.initialize({native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{port}"})
        assert accepts(port)
        second.close()
    finally:
        os.write(release_w, b"x")
        assert exit_code(pid) == 0
        os.close(release_r)
        os.close(release_w)


# The child is held in a fork handler of its own that runs before the mock's (glibc runs
# child handlers in the order they were registered, and this one is registered before the
# package loads the mock): getchar() returns when the test closes the script's stdin. So
# the child's copy of the listening socket stays open for as long as the test wants, which
# is what a busy machine does by not scheduling the child for a while.
FORK_HELD_BEFORE_THE_MOCKS_HANDLER = """
import ctypes, os, socket, sys
port = int(sys.argv[1])
libc = ctypes.CDLL(None)
libc.__register_atfork.argtypes = [ctypes.c_void_p] * 4
assert libc.__register_atfork(None, None, ctypes.cast(libc.getchar, ctypes.c_void_p), None) == 0
from llm_datadist_ffi import native
engine = native.LlmDataDist(1, native.LlmRole.PROMPT)
engine.initialize({"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{port}"})
print("forking", flush=True)
pid = os.fork()
if pid == 0:
    os._exit(0)
print("forked", flush=True)
engine.close()
with socket.socket() as s:
    s.settimeout(2.0)
    listening = s.connect_ex(("127.0.0.1", port)) == 0 and s.getsockname()[1] != port
print("listening" if listening else "closed", flush=True)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def read_from(fd: int, seconds: float, until: bytes | None = None) -> bytes:
    """What fd delivers within `seconds`, stopping early at its end or once `until` was read."""
    data = b""
    left = seconds
    while until is None or until not in data:
        started = time.monotonic()
        if not select.select([fd], [], [], max(left, 0.0))[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
        left -= time.monotonic() - started
    return data


@mock_fork
@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "__register_atfork"),
                    reason="holding the child before the mock's fork handler needs glibc's __register_atfork")
def test_fork_returns_in_the_parent_only_once_the_child_has_closed_its_copy_of_the_listening_socket() -> None:
    with subprocess.Popen([sys.executable, "-c", FORK_HELD_BEFORE_THE_MOCKS_HANDLER, str(vs.free_port())],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                          cwd=tempfile.gettempdir()) as script:
        assert script.stdout is not None
        started = read_from(script.stdout.fileno(), 60.0, until=b"forking\n")
        while_held = read_from(script.stdout.fileno(), 1.0)   # the child is held all this second
        rest, errors = script.communicate(timeout=60)           # closes stdin: the child goes on
    assert (started, while_held) == (b"forking\n", b"")
    assert (script.returncode, rest, errors) == (0, b"forked\nclosed\n0\n", b"")
