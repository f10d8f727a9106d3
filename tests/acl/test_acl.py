"""The ACL runtime subset through ``llm_datadist_ffi.acl``: every row of docs/reference/acl.md §6
and every mock rule A-1 … A-9 of acl.md §7, with exact codes and exact bytes.

Rows about NULL out-parameters cannot be reached through the Python tiers (they
return out-parameters instead of taking them), so those few tests call the raw
``acl_lib`` with ``ffi.NULL``.

ACL state is process-wide: ``aclInit``'s reference count and the configuration of
the first successful ``aclInit`` (docs/reference/acl.md §6), and the device count and capacity
that may only be set before the first ACL call (A-2, A-3). Tests of those run a
fresh interpreter (``fresh_process``). Tests in this process use device 0 from the
``device`` fixture, or a device of their own that they first reset by force.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule,
                                 run_state_machine_as_test)

import llm_datadist_ffi
from llm_datadist_ffi import acl, mock_control
from llm_datadist_ffi._core._loader import acl_lib, ffi
from llm_datadist_ffi.acl import AclError

mock_only = pytest.mark.mock_only

T = TypeVar("T")
GiB = 1 << 30
SIZE_MAX = 2 ** (8 * ffi.sizeof("size_t")) - 1

# docs/reference/acl.md §5 values, written out as an independent check of the declarations.
SUCCESS = 0
INVALID_PARAM = 100000
REPEAT_INITIALIZE = 100002
INVALID_FILE = 100003
REPEAT_FINALIZE = 100037
RT_PARAM_INVALID = 107000
RT_INVALID_DEVICEID = 107001
RT_CONTEXT_NULL = 107002
RT_STREAM_CONTEXT = 107003
RT_MEMORY_ALLOCATION = 207001
RT_STREAM_SYNC_TIMEOUT = 507046
LLM_PARAM_INVALID = 0x5010B005


# ---- helpers ----------------------------------------------------------------------------------

def in_thread(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a new thread (no current device, no error message yet) and
    return its result or raise its exception here."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:   # carried to the calling thread and re-raised there
            box["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def acl_code(fn: Callable[..., Any], *args: Any) -> int:
    """The status of a call: 0, or the code of the AclError it raised."""
    try:
        fn(*args)
    except AclError as exc:
        return exc.code
    return SUCCESS


def raises_acl(code: int, fn: Callable[..., Any], *args: Any) -> AclError:
    with pytest.raises(AclError) as info:
        fn(*args)
    assert info.value.code == code, str(info.value)
    return info.value


PREAMBLE = """
import json, sys
from llm_datadist_ffi import acl, mock_control
from llm_datadist_ffi.acl import AclError
def code(fn, *args):
    try:
        fn(*args)
    except AclError as exc:
        return exc.code
    return 0
"""


def fresh_process(body: str, tmp_path: Path | None = None) -> Any:
    """Run ``body`` in a new interpreter with the same package and backend; it sets
    ``result``, which comes back through JSON."""
    package_root = str(Path(llm_datadist_ffi.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    script = PREAMBLE + textwrap.dedent(body) + "\nprint('RESULT=' + json.dumps(result))\n"
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          # never the source tree: '' on sys.path would shadow the installed package
                          cwd=str(tmp_path) if tmp_path else tempfile.gettempdir(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT=")][-1]
    return json.loads(line[len("RESULT="):])


@pytest.fixture
def device() -> Iterator[int]:
    """Device 0 current in this thread for the test; no allocation may leak."""
    before = mock_control.live_allocations() if llm_datadist_ffi.backend == "mock" else 0
    acl.set_device(0)
    yield 0
    acl.reset_device(0)
    if llm_datadist_ffi.backend == "mock":
        assert mock_control.live_allocations() == before, "the test leaked ACL allocations"


@pytest.fixture
def own_device() -> Iterator[int]:
    """Device 7 with no reference left, for tests that count references."""
    acl.reset_device_force(7)
    yield 7
    acl.reset_device_force(7)


@pytest.fixture
def allocations(device: int) -> Iterator[Callable[..., int]]:
    """``alloc(size, host=False)``: memory freed after the test unless already freed."""
    made: list[tuple[int, bool]] = []

    def alloc(size: int, host: bool = False) -> int:
        ptr = acl.malloc_host(size) if host else acl.malloc(size)
        made.append((ptr, host))
        return ptr

    yield alloc
    for ptr, host in made:
        code = acl_code(acl.free_host if host else acl.free, ptr)
        assert code in (SUCCESS, RT_PARAM_INVALID)   # RT_PARAM_INVALID: the test freed it itself


def write(ptr: int, data: bytes) -> None:
    src = np.frombuffer(data, dtype=np.uint8)
    acl.memcpy(ptr, len(data), src.ctypes.data, len(data), acl.ACL_MEMCPY_HOST_TO_DEVICE)


def read(ptr: int, n: int) -> bytes:
    out = np.zeros(n, dtype=np.uint8)
    acl.memcpy(out.ctypes.data, n, ptr, n, acl.ACL_MEMCPY_DEVICE_TO_HOST)
    return out.tobytes()


# ---- declarations, codes, AclError --------------------------------------------------------------

def test_the_module_exports_every_enumerator_of_the_acl_declarations() -> None:
    names: dict[str, int] = {}
    for enum_type in ("aclrtMemcpyKind", "aclrtMemMallocPolicy", "aclrtMemAttr"):
        names.update(ffi.typeof(enum_type).relements)
    names.update({n: int(getattr(acl_lib, n)) for n in dir(acl_lib) if n.startswith(("ACL_ERROR_", "ACL_RT_"))})
    names["ACL_SUCCESS"] = 0
    assert {name: getattr(acl, name, None) for name in names} == names


def test_status_constants_have_the_vendor_values() -> None:
    assert (acl.ACL_SUCCESS, acl.ACL_ERROR_INVALID_PARAM, acl.ACL_ERROR_REPEAT_INITIALIZE,
            acl.ACL_ERROR_INVALID_FILE, acl.ACL_ERROR_REPEAT_FINALIZE) == (0, 100000, 100002, 100003, 100037)
    assert (acl.ACL_ERROR_RT_PARAM_INVALID, acl.ACL_ERROR_RT_INVALID_DEVICEID, acl.ACL_ERROR_RT_CONTEXT_NULL,
            acl.ACL_ERROR_RT_STREAM_CONTEXT, acl.ACL_ERROR_RT_MEMORY_ALLOCATION,
            acl.ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) == (107000, 107001, 107002, 107003, 207001, 507046)
    assert (acl.ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE, acl.ACL_MEM_MALLOC_HUGE1G_ONLY_P2P,
            acl.ACL_MEM_ACCESS_USER_SPACE_READONLY, acl.ACL_MEM_P2P_HUGE1G) == (5, 7, 0x100000, 17)


def test_code_name_gives_the_vendor_name_of_each_code_and_none_for_others() -> None:
    assert acl.code_name(0) == "ACL_SUCCESS"
    assert acl.code_name(100000) == "ACL_ERROR_INVALID_PARAM"
    assert acl.code_name(107002) == "ACL_ERROR_RT_CONTEXT_NULL"
    assert acl.code_name(507053) == "ACL_ERROR_RT_DEVICE_MEM_ERROR"
    assert acl.code_name(123) is None


def test_acl_error_carries_code_name_message_and_function() -> None:
    exc = AclError(107001, "deviceId 99 is not a valid device", "aclrtSetDevice")
    assert isinstance(exc, RuntimeError)
    assert (exc.code, exc.name, exc.message, exc.function) == (
        107001, "ACL_ERROR_RT_INVALID_DEVICEID", "deviceId 99 is not a valid device", "aclrtSetDevice")
    assert str(exc) == ("aclrtSetDevice failed: ACL_ERROR_RT_INVALID_DEVICEID (107001): "
                        "deviceId 99 is not a valid device")
    assert str(AclError(42)) == "unknown ACL status (42)"


def test_a_failed_call_raises_acl_error_with_the_library_message() -> None:
    exc = raises_acl(RT_INVALID_DEVICEID, acl.set_device, -1)
    assert exc.function == "aclrtSetDevice"
    assert exc.message == acl.recent_error_message()
    assert exc.message is not None and "deviceId -1" in exc.message


# ---- aclInit, aclFinalize, aclFinalizeReference (acl.md §6, A-1) -----------------------------------------

def test_init_without_configuration_succeeds_with_one_reference() -> None:
    result = fresh_process("""
        result = [code(acl.aclInit, None), acl.finalize_reference(), code(acl.finalize_reference)]
    """)
    assert result == [SUCCESS, 0, REPEAT_FINALIZE]


def test_init_with_an_empty_path_means_no_configuration() -> None:
    result = fresh_process("""
        result = [code(acl.aclInit, ""), acl.finalize_reference()]
    """)
    assert result == [SUCCESS, 0]


def test_init_with_a_missing_file_is_invalid_file(tmp_path: Path) -> None:
    exc = raises_acl(INVALID_FILE, acl.init, tmp_path / "absent.json")
    assert exc.message is not None and "absent.json" in exc.message


def test_init_with_a_directory_is_invalid_file(tmp_path: Path) -> None:
    raises_acl(INVALID_FILE, acl.init, tmp_path)


def test_init_while_initialised_returns_repeat_initialize_and_adds_a_reference() -> None:
    result = fresh_process("""
        result = [code(acl.aclInit, None), code(acl.aclInit, None), code(acl.aclInit, None),
                  acl.finalize_reference(), acl.finalize_reference(), acl.finalize_reference(),
                  code(acl.finalize_reference), code(acl.finalize)]
    """)
    # The last aclFinalizeReference finalised ACL, so aclFinalize finds it finalised.
    assert result == [SUCCESS, REPEAT_INITIALIZE, REPEAT_INITIALIZE, 2, 1, 0, REPEAT_FINALIZE, REPEAT_FINALIZE]


def test_pythonic_init_reports_whether_it_initialised() -> None:
    result = fresh_process("""
        result = [acl.init(), acl.init(), acl.finalize_reference()]
    """)
    assert result == [True, False, 1]


def test_init_after_finalize_initialises_again() -> None:
    result = fresh_process("""
        result = [code(acl.aclInit, None), code(acl.finalize), code(acl.aclInit, None), acl.finalize_reference()]
    """)
    assert result == [SUCCESS, SUCCESS, SUCCESS, 0]


def test_finalize_without_init_succeeds_once_and_then_repeat_finalize() -> None:
    result = fresh_process("""
        result = [code(acl.finalize), code(acl.finalize), code(acl.finalize_reference)]
    """)
    assert result == [SUCCESS, REPEAT_FINALIZE, REPEAT_FINALIZE]


def test_finalize_drops_every_reference_at_once() -> None:
    result = fresh_process("""
        result = [code(acl.aclInit, None), code(acl.aclInit, None), code(acl.finalize),
                  code(acl.finalize_reference), code(acl.finalize)]
    """)
    assert result == [SUCCESS, REPEAT_INITIALIZE, SUCCESS, REPEAT_FINALIZE, REPEAT_FINALIZE]


def test_finalize_reference_accepts_a_null_count() -> None:
    result = fresh_process("""
        from llm_datadist_ffi._core._loader import acl_lib, ffi
        result = [code(acl.aclInit, None), code(acl.aclInit, None),
                  acl_lib.aclFinalizeReference(ffi.NULL), acl_lib.aclFinalizeReference(ffi.NULL),
                  acl_lib.aclFinalizeReference(ffi.NULL)]
    """)
    assert result == [SUCCESS, REPEAT_INITIALIZE, SUCCESS, SUCCESS, REPEAT_FINALIZE]


@mock_only(reason="A-1: the mock compares configuration files byte for byte without parsing them")
def test_reinit_with_a_configuration_of_different_content_is_invalid_param(tmp_path: Path) -> None:
    (tmp_path / "first.json").write_bytes(b'{"dump": {}}')
    (tmp_path / "copy.json").write_bytes(b'{"dump": {}}')
    (tmp_path / "other.json").write_bytes(b'{"dump": {} }')
    result = fresh_process("""
        result = [code(acl.init, "first.json"), code(acl.finalize), code(acl.init, "other.json"),
                  code(acl.init, None), code(acl.init, "copy.json"), code(acl.finalize)]
    """, tmp_path)
    assert result == [SUCCESS, SUCCESS, INVALID_PARAM, INVALID_PARAM, SUCCESS, SUCCESS]


@mock_only(reason="A-1: no configuration counts as empty content in the mock's comparison")
def test_reinit_compares_against_the_first_successful_init_only(tmp_path: Path) -> None:
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "full.json").write_bytes(b"{}")
    result = fresh_process("""
        result = [code(acl.init, "absent.json"), code(acl.init, None), code(acl.finalize),
                  code(acl.init, "empty.json"), code(acl.finalize), code(acl.init, "full.json")]
    """, tmp_path)
    assert result == [INVALID_FILE, SUCCESS, SUCCESS, SUCCESS, SUCCESS, INVALID_PARAM]


@mock_only(reason="A-1: the mock accepts any readable file without interpreting it")
def test_init_accepts_any_readable_file_without_parsing_it(tmp_path: Path) -> None:
    (tmp_path / "garbage.json").write_bytes(b"\x00\xff not json {")
    result = fresh_process("""
        result = [code(acl.init, "garbage.json"), code(acl.finalize)]
    """, tmp_path)
    assert result == [SUCCESS, SUCCESS]


# ---- aclGetRecentErrMsg (acl.md §6, A-8) ------------------------------------------------------------------

def test_recent_error_message_is_none_in_a_thread_that_has_not_failed() -> None:
    assert in_thread(acl.recent_error_message) is None


def test_recent_error_message_is_the_calling_threads_own() -> None:
    barrier = threading.Barrier(2)

    def fail_then_read(device_id: int) -> tuple[str | None, str | None]:
        exc = raises_acl(RT_INVALID_DEVICEID, acl.set_device, device_id)
        barrier.wait()          # both threads have failed before either reads
        return exc.message, acl.recent_error_message()

    results: dict[int, tuple[str | None, str | None]] = {}
    threads = [threading.Thread(target=lambda d=d: results.__setitem__(d, fail_then_read(d))) for d in (-5, -6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for device_id in (-5, -6):
        message, later = results[device_id]
        assert message == later
        assert message is not None and f"deviceId {device_id} " in message


def test_recent_error_message_survives_reads_and_later_successes(device: int) -> None:
    exc = raises_acl(INVALID_PARAM, acl.malloc, 0)
    assert acl.get_device() == device
    assert acl.recent_error_message() == exc.message
    assert acl.recent_error_message() == exc.message


@mock_only(reason="A-8: the mock shares one message buffer between ACL and LLM-DataDist")
def test_recent_error_message_reports_llm_datadist_failures_too() -> None:
    def fail() -> str | None:
        with pytest.raises(llm_datadist_ffi.LLMException) as info:
            mock_control.inject_fault("no_such_function", 1)
        assert info.value.status_code == LLM_PARAM_INVALID
        return acl.recent_error_message()

    message = in_thread(fail)
    assert message is not None and '"no_such_function"' in message


# ---- devices (acl.md §6, A-2, A-9) ------------------------------------------------------------------------

@pytest.mark.parametrize("device_id", [-1, 8, 2 ** 31 - 1])
@mock_only(reason="A-2: the mock has 8 devices")
def test_set_device_rejects_an_id_that_is_not_a_device(device_id: int) -> None:
    exc = raises_acl(RT_INVALID_DEVICEID, acl.set_device, device_id)
    assert exc.message is not None and f"deviceId {device_id}" in exc.message and "0 .. 7" in exc.message


@mock_only(reason="A-2: the mock has 8 devices by default")
def test_device_count_is_eight() -> None:
    assert acl.get_device_count() == 8


def test_get_device_count_rejects_a_null_count() -> None:
    assert acl_lib.aclrtGetDeviceCount(ffi.NULL) == INVALID_PARAM


def test_get_device_rejects_a_null_device_id() -> None:
    assert acl_lib.aclrtGetDevice(ffi.NULL) == INVALID_PARAM


def test_a_thread_without_set_device_has_no_current_device() -> None:
    raises_acl(RT_CONTEXT_NULL, lambda: in_thread(acl.get_device))


def test_the_current_device_belongs_to_the_calling_thread_only(device: int) -> None:
    def use_device_3() -> tuple[int, int]:
        acl.set_device(3)
        try:
            return acl.get_device(), in_thread(lambda: acl_code(acl.get_device))
        finally:
            acl.reset_device(3)

    assert in_thread(use_device_3) == (3, RT_CONTEXT_NULL)
    assert acl.get_device() == device


def test_set_device_switches_the_current_device(own_device: int) -> None:
    def switch() -> list[int]:
        acl.set_device(1)
        acl.set_device(own_device)
        seen = [acl.get_device()]
        acl.set_device(1)
        seen.append(acl.get_device())
        acl.reset_device(1)
        acl.reset_device(1)
        return seen

    assert in_thread(switch) == [own_device, 1]


def test_reset_device_releases_the_device_with_its_last_reference(own_device: int) -> None:
    def count_down() -> list[int]:
        acl.set_device(own_device)
        acl.set_device(own_device)
        acl.reset_device(own_device)
        seen = [acl.get_device()]
        acl.reset_device(own_device)
        seen.append(acl_code(acl.get_device))
        return seen

    assert in_thread(count_down) == [own_device, RT_CONTEXT_NULL]


def test_last_reset_ends_the_device_for_every_thread(own_device: int) -> None:
    acl.set_device(own_device)
    assert in_thread(lambda: acl.reset_device(own_device)) is None
    raises_acl(RT_CONTEXT_NULL, acl.get_device)


def test_reset_device_force_releases_every_reference(own_device: int) -> None:
    def force() -> int:
        for _ in range(3):
            acl.set_device(own_device)
        acl.reset_device_force(own_device)
        return acl_code(acl.get_device)

    assert in_thread(force) == RT_CONTEXT_NULL


@mock_only(reason="A-9: an unbalanced reset is the mock's rule")
def test_reset_of_a_device_without_references_succeeds_without_effect(own_device: int) -> None:
    acl.reset_device(own_device)
    acl.reset_device(own_device)
    acl.reset_device_force(own_device)

    def set_once_reset_once() -> int:
        acl.set_device(own_device)
        acl.reset_device(own_device)
        return acl_code(acl.get_device)

    assert in_thread(set_once_reset_once) == RT_CONTEXT_NULL


@pytest.mark.parametrize("reset", [acl.reset_device, acl.reset_device_force])
@mock_only(reason="A-2: the mock has 8 devices")
def test_reset_rejects_an_id_that_is_not_a_device(reset: Callable[[int], None]) -> None:
    raises_acl(RT_INVALID_DEVICEID, reset, 8)


@mock_only(reason="A-9: allocations outlive the device's last reference on the mock")
def test_memory_stays_valid_after_the_devices_last_reference_goes(own_device: int) -> None:
    def allocate_reset_and_read() -> bytes:
        acl.set_device(own_device)
        ptr = acl.malloc(16)
        write(ptr, bytes(range(16)))
        acl.reset_device(own_device)
        assert acl_code(acl.get_device) == RT_CONTEXT_NULL
        acl.set_device(own_device)
        data = read(ptr, 16)
        acl.free(ptr)
        acl.reset_device(own_device)
        return data

    assert in_thread(allocate_reset_and_read) == bytes(range(16))


def test_synchronize_device_needs_a_current_device(device: int) -> None:
    acl.synchronize_device()
    raises_acl(RT_CONTEXT_NULL, lambda: in_thread(acl.synchronize_device))


@pytest.mark.parametrize("bad", [2 ** 31, -(2 ** 31) - 1])
def test_device_ids_outside_int32_are_rejected_before_c(bad: int) -> None:
    with pytest.raises(ValueError, match="device_id"):
        acl.set_device(bad)


def test_device_ids_must_be_integers() -> None:
    with pytest.raises(TypeError, match="device_id"):
        acl.set_device("0")  # type: ignore[arg-type]


# ---- aclrtMalloc, aclrtMallocHost (acl.md §6, A-3, A-4) -------------------------------------------------------

def test_malloc_rejects_a_null_out_pointer(device: int) -> None:
    assert acl_lib.aclrtMalloc(ffi.NULL, 16, 0) == INVALID_PARAM


def test_malloc_rejects_size_zero(device: int) -> None:
    exc = raises_acl(INVALID_PARAM, acl.malloc, 0)
    assert exc.message is not None and "size" in exc.message


@mock_only(reason="the overflow boundary is reached before A-3's capacity check")
@pytest.mark.parametrize("policy, padding", [(acl.ACL_MEM_MALLOC_HUGE_FIRST, 32),
                                             (acl.ACL_MEM_MALLOC_HUGE1G_ONLY, 0),
                                             (acl.ACL_MEM_MALLOC_HUGE1G_ONLY_P2P, 0)])
def test_malloc_rejects_a_size_whose_rounding_and_padding_overflow(device: int, policy: int, padding: int) -> None:
    largest = SIZE_MAX - 31 - padding
    raises_acl(INVALID_PARAM, acl.malloc, largest + 1, policy)
    raises_acl(RT_MEMORY_ALLOCATION, acl.malloc, largest, policy)   # no overflow: too big for the device


def test_malloc_needs_a_current_device() -> None:
    raises_acl(RT_CONTEXT_NULL, lambda: in_thread(lambda: acl.malloc(16)))


@mock_only(reason="A-3: 64 GiB per mock device")
def test_malloc_beyond_the_free_memory_is_memory_allocation(device: int) -> None:
    free_now = acl.get_mem_info().free
    exc = raises_acl(RT_MEMORY_ALLOCATION, acl.malloc, free_now + 1)
    assert exc.message is not None and "A-3" in exc.message


@pytest.mark.parametrize("policy", [acl.ACL_MEM_MALLOC_HUGE_ONLY | acl.ACL_MEM_TYPE_HIGH_BAND_WIDTH,
                                    acl.ACL_MEM_MALLOC_NORMAL_ONLY_P2P, acl.ACL_MEM_ACCESS_USER_SPACE_READONLY,
                                    99])
def test_malloc_accepts_policy_flags_and_unknown_policies(allocations: Callable[..., int], policy: int) -> None:
    ptr = acl.malloc(100, policy)
    acl.free(ptr)


def test_malloc_host_rejects_a_null_out_pointer_and_size_zero(device: int) -> None:
    assert acl_lib.aclrtMallocHost(ffi.NULL, 16) == INVALID_PARAM
    raises_acl(INVALID_PARAM, acl.malloc_host, 0)


def test_malloc_host_needs_a_current_device() -> None:
    raises_acl(RT_CONTEXT_NULL, lambda: in_thread(lambda: acl.malloc_host(16)))


@mock_only(reason="A-4: mock allocations are exactly the requested size")
@pytest.mark.parametrize("size", [1, 31, 32, 33, 1000])
def test_an_allocation_is_exactly_the_requested_size(allocations: Callable[..., int], size: int) -> None:
    ptr = allocations(size)
    write(ptr, bytes(range(256)) * (size // 256) + bytes(range(size % 256)))
    raises_acl(RT_PARAM_INVALID, write, ptr, bytes(size + 1))
    raises_acl(RT_PARAM_INVALID, read, ptr + 1, size)
    assert read(ptr, size) == bytes(range(256)) * (size // 256) + bytes(range(size % 256))


@pytest.mark.parametrize("size, kind", [(-1, "ValueError"), (SIZE_MAX + 1, "ValueError"), (1.5, "TypeError")])
def test_malloc_sizes_outside_size_t_are_rejected_before_c(device: int, size: Any, kind: str) -> None:
    with pytest.raises({"ValueError": ValueError, "TypeError": TypeError}[kind], match="size"):
        acl.malloc(size)


# ---- aclrtFree, aclrtFreeHost (acl.md §6, A-6) -------------------------------------------------------------

@pytest.mark.parametrize("free", [acl.free, acl.free_host])
def test_free_rejects_null(free: Callable[[int], None]) -> None:
    raises_acl(INVALID_PARAM, free, 0)


@mock_only(reason="A-6")
def test_double_free_is_reported(device: int) -> None:
    ptr = acl.malloc(64)
    acl.free(ptr)
    exc = raises_acl(RT_PARAM_INVALID, acl.free, ptr)
    assert exc.message is not None and hex(ptr) in exc.message and "double free" in exc.message


@mock_only(reason="A-6")
def test_freeing_an_interior_pointer_is_reported_and_frees_nothing(allocations: Callable[..., int]) -> None:
    ptr = allocations(64)
    exc = raises_acl(RT_PARAM_INVALID, acl.free, ptr + 8)
    assert exc.message is not None and hex(ptr + 8) in exc.message and "8 bytes inside" in exc.message
    write(ptr, bytes(64))   # still live
    acl.free(ptr)


@mock_only(reason="A-6")
def test_freeing_unknown_memory_is_reported() -> None:
    array = np.zeros(64, dtype=np.uint8)
    exc = raises_acl(RT_PARAM_INVALID, acl.free, array.ctypes.data)
    assert exc.message is not None and "unknown pointer" in exc.message


@mock_only(reason="A-6")
def test_free_only_frees_malloc_memory_and_free_host_only_malloc_host_memory(
        allocations: Callable[..., int]) -> None:
    device_ptr = allocations(64)
    host_ptr = allocations(64, host=True)
    exc = raises_acl(RT_PARAM_INVALID, acl.free, host_ptr)
    assert exc.message is not None and "aclrtFreeHost" in exc.message
    exc = raises_acl(RT_PARAM_INVALID, acl.free_host, device_ptr)
    assert exc.message is not None and "free it with aclrtFree" in exc.message
    acl.free(device_ptr)
    acl.free_host(host_ptr)


@mock_only(reason="A-6 and docs/semantics.md ACL-7")
def test_freeing_a_pointer_just_past_an_allocation_is_reported(allocations: Callable[..., int]) -> None:
    ptr = allocations(40)
    exc = raises_acl(RT_PARAM_INVALID, acl.free, ptr + 40)
    assert exc.message is not None and "0 bytes past the end" in exc.message


@mock_only(reason="docs/semantics.md ACL-8: remembered freed memory is not handed out again")
def test_freed_memory_is_not_reused_while_it_is_remembered(device: int) -> None:
    freed = set()
    for _ in range(50):
        ptr = acl.malloc(48)
        acl.free(ptr)
        freed.add(ptr)
    assert len(freed) == 50
    live = [acl.malloc(48) for _ in range(50)]
    assert freed.isdisjoint(live)
    for ptr in live:
        acl.free(ptr)


@mock_only(reason="docs/semantics.md ACL-8: large freed buffers are remembered too")
def test_a_copy_into_a_large_freed_buffer_is_reported_rather_than_faulting(device: int) -> None:
    size = 128 << 20
    ptr = acl.malloc(size)
    acl.memset(ptr, size, 0x5A, size)
    acl.free(ptr)
    host = np.ones(4096, dtype=np.uint8)
    exc = raises_acl(RT_PARAM_INVALID, acl.memcpy, ptr + size - 4096, 4096, host.ctypes.data, 4096,
                     acl.ACL_MEMCPY_HOST_TO_DEVICE)
    assert exc.message is not None and "use after free" in exc.message and f"+{size})" in exc.message


@mock_only(reason="lldd_mock_live_allocations is the mock's leak accounting")
def test_live_allocations_count_every_allocation_until_it_is_freed(device: int) -> None:
    before = mock_control.live_allocations()
    device_ptr = acl.malloc(10)
    host_ptr = acl.malloc_host(10)
    assert mock_control.live_allocations() == before + 2
    acl.free(device_ptr)
    raises_acl(RT_PARAM_INVALID, acl.free, device_ptr)
    assert mock_control.live_allocations() == before + 1
    acl.free_host(host_ptr)
    assert mock_control.live_allocations() == before


# ---- aclrtMemcpy, aclrtMemcpyAsync (acl.md §6, A-5, A-7) ---------------------------------------------------------

def copy_sync(dst: int, dest_max: int, src: int, count: int, kind: int) -> None:
    acl.memcpy(dst, dest_max, src, count, kind)


def copy_async(dst: int, dest_max: int, src: int, count: int, kind: int) -> None:
    acl.memcpy_async(dst, dest_max, src, count, kind)


COPIES = pytest.mark.parametrize("copy", [copy_sync, copy_async], ids=["aclrtMemcpy", "aclrtMemcpyAsync"])


@COPIES
def test_a_copy_of_zero_bytes_succeeds_without_any_other_check(copy: Callable[..., None]) -> None:
    assert in_thread(lambda: copy(0, 0, 0, 0, 99)) is None


@COPIES
def test_a_copy_rejects_null_addresses(device: int, copy: Callable[..., None]) -> None:
    buf = np.zeros(8, dtype=np.uint8)
    exc = raises_acl(INVALID_PARAM, copy, 0, 8, buf.ctypes.data, 8, acl.ACL_MEMCPY_HOST_TO_HOST)
    assert exc.message is not None and "dst is NULL" in exc.message
    exc = raises_acl(INVALID_PARAM, copy, buf.ctypes.data, 8, 0, 8, acl.ACL_MEMCPY_HOST_TO_HOST)
    assert exc.message is not None and "src is NULL" in exc.message


@COPIES
@pytest.mark.parametrize("kind", [acl.ACL_MEMCPY_INNER_DEVICE_TO_DEVICE, acl.ACL_MEMCPY_INTER_DEVICE_TO_DEVICE, 8])
def test_a_copy_rejects_kinds_outside_zero_to_five(allocations: Callable[..., int], copy: Callable[..., None],
                                                   kind: int) -> None:
    a, b = allocations(64), allocations(64)
    raises_acl(INVALID_PARAM, copy, a, 64, b, 64, kind)


@COPIES
def test_a_copy_needs_a_current_device(copy: Callable[..., None]) -> None:
    a, b = np.zeros(8, dtype=np.uint8), np.ones(8, dtype=np.uint8)
    raises_acl(RT_CONTEXT_NULL, lambda: in_thread(
        lambda: copy(a.ctypes.data, 8, b.ctypes.data, 8, acl.ACL_MEMCPY_HOST_TO_HOST)))
    assert a.tolist() == [0] * 8


@COPIES
@pytest.mark.parametrize("dest_max, count", [(0, 1), (7, 8)])
def test_a_copy_rejects_count_above_dest_max(device: int, copy: Callable[..., None], dest_max: int,
                                             count: int) -> None:
    a, b = np.zeros(8, dtype=np.uint8), np.ones(8, dtype=np.uint8)
    raises_acl(RT_PARAM_INVALID, copy, a.ctypes.data, dest_max, b.ctypes.data, count, acl.ACL_MEMCPY_HOST_TO_HOST)
    assert a.tolist() == [0] * 8


@COPIES
def test_a_copy_onto_itself_succeeds(allocations: Callable[..., int], copy: Callable[..., None]) -> None:
    ptr = allocations(16)
    write(ptr, b"0123456789abcdef")
    copy(ptr, 16, ptr, 16, acl.ACL_MEMCPY_DEVICE_TO_DEVICE)
    assert read(ptr, 16) == b"0123456789abcdef"


@COPIES
def test_copies_move_exact_bytes_in_every_direction(allocations: Callable[..., int],
                                                    copy: Callable[..., None]) -> None:
    host_in = np.frombuffer(bytes(range(200, 256)) + bytes(range(72)), dtype=np.uint8).copy()
    host_out = np.full(128, 0xEE, dtype=np.uint8)
    dev_a, dev_b = allocations(128), allocations(128)
    pinned = allocations(128, host=True)
    copy(dev_a, 128, host_in.ctypes.data, 128, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    copy(dev_b + 64, 64, dev_a, 64, acl.ACL_MEMCPY_DEVICE_TO_DEVICE)
    copy(pinned, 128, dev_b + 64, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST)
    copy(host_out.ctypes.data + 10, 118, pinned, 64, acl.ACL_MEMCPY_HOST_TO_HOST)
    assert host_out.tobytes() == b"\xee" * 10 + host_in.tobytes()[:64] + b"\xee" * 54


@COPIES
@pytest.mark.parametrize("kind", [acl.ACL_MEMCPY_DEFAULT, acl.ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE])
def test_default_kinds_accept_any_live_placement(allocations: Callable[..., int], copy: Callable[..., None],
                                                 kind: int) -> None:
    dev, pinned = allocations(64), allocations(64, host=True)
    host = np.arange(64, dtype=np.uint8)
    out = np.zeros(64, dtype=np.uint8)
    copy(dev, 64, host.ctypes.data, 64, kind)
    copy(pinned, 64, dev, 64, kind)
    copy(out.ctypes.data, 64, pinned, 64, kind)
    assert out.tolist() == list(range(64))


@mock_only(reason="A-5")
@COPIES
def test_a_copy_into_freed_memory_is_use_after_free(allocations: Callable[..., int],
                                                    copy: Callable[..., None]) -> None:
    ptr = acl.malloc(64)
    acl.free(ptr)
    host = np.zeros(64, dtype=np.uint8)
    exc = raises_acl(RT_PARAM_INVALID, copy, ptr + 16, 16, host.ctypes.data, 16, acl.ACL_MEMCPY_DEFAULT)
    assert exc.message is not None and hex(ptr + 16) in exc.message and "use after free" in exc.message
    exc = raises_acl(RT_PARAM_INVALID, copy, host.ctypes.data, 64, ptr, 16, acl.ACL_MEMCPY_DEVICE_TO_HOST)
    assert exc.message is not None and "src" in exc.message and "use after free" in exc.message


@mock_only(reason="A-5")
@COPIES
def test_a_copy_past_the_end_of_an_allocation_is_reported(allocations: Callable[..., int],
                                                          copy: Callable[..., None]) -> None:
    ptr = allocations(64)
    host = np.zeros(128, dtype=np.uint8)
    exc = raises_acl(RT_PARAM_INVALID, copy, ptr + 60, 128, host.ctypes.data, 8, acl.ACL_MEMCPY_HOST_TO_DEVICE)
    assert exc.message is not None and "runs 4 bytes past the end" in exc.message and hex(ptr) in exc.message


@mock_only(reason="docs/semantics.md ACL-7")
@COPIES
def test_a_copy_that_starts_outside_and_runs_into_an_allocation_is_reported(
        allocations: Callable[..., int], copy: Callable[..., None]) -> None:
    ptr = allocations(64)
    host = np.zeros(64, dtype=np.uint8)
    exc = raises_acl(RT_PARAM_INVALID, copy, host.ctypes.data, 64, ptr - 16, 32, acl.ACL_MEMCPY_DEFAULT)
    assert exc.message is not None and "runs into" in exc.message


@mock_only(reason="docs/semantics.md ACL-7: the guard zone after each allocation")
@COPIES
@pytest.mark.parametrize("past_end", [0, 1, 63])
def test_a_copy_that_starts_at_or_just_past_the_end_of_an_allocation_is_reported(
        allocations: Callable[..., int], copy: Callable[..., None], past_end: int) -> None:
    ptr = allocations(100)
    host = np.zeros(8, dtype=np.uint8)
    exc = raises_acl(RT_PARAM_INVALID, copy, ptr + 100 + past_end, 8, host.ctypes.data, 8, acl.ACL_MEMCPY_DEFAULT)
    assert exc.message is not None and f"lies {past_end} bytes past the end" in exc.message
    exc = raises_acl(RT_PARAM_INVALID, acl.memset, ptr + 100 + past_end, 8, 0, 1)
    assert exc.message is not None and hex(ptr) in exc.message


@mock_only(reason="A-5: device-side pointers must be aclrtMalloc memory")
@COPIES
@pytest.mark.parametrize("kind, side", [(acl.ACL_MEMCPY_HOST_TO_DEVICE, "dst"),
                                        (acl.ACL_MEMCPY_DEVICE_TO_HOST, "src"),
                                        (acl.ACL_MEMCPY_DEVICE_TO_DEVICE, "dst"),
                                        (acl.ACL_MEMCPY_DEVICE_TO_DEVICE, "src")])
@pytest.mark.parametrize("placement", ["numpy", "malloc_host"])
def test_the_device_side_of_a_copy_must_be_malloc_memory(
        allocations: Callable[..., int], copy: Callable[..., None], kind: int, side: str, placement: str) -> None:
    array = np.zeros(64, dtype=np.uint8)
    host = array.ctypes.data if placement == "numpy" else allocations(64, host=True)
    dev = allocations(64)
    dst, src = (host, dev) if side == "dst" else (dev, host)
    exc = raises_acl(RT_PARAM_INVALID, copy, dst, 64, src, 64, kind)
    assert exc.message is not None and f"{side} {hex(host)}" in exc.message and "device memory" in exc.message


@mock_only(reason="A-5: host-to-host copies may not touch aclrtMalloc memory")
@COPIES
@pytest.mark.parametrize("side", ["dst", "src"])
def test_a_host_to_host_copy_rejects_malloc_memory(allocations: Callable[..., int], copy: Callable[..., None],
                                                   side: str) -> None:
    dev = allocations(64)
    pinned = allocations(64, host=True)
    dst, src = (dev, pinned) if side == "dst" else (pinned, dev)
    exc = raises_acl(RT_PARAM_INVALID, copy, dst, 64, src, 64, acl.ACL_MEMCPY_HOST_TO_HOST)
    assert exc.message is not None and f"{side} {hex(dev)}" in exc.message and "needs host memory" in exc.message


@mock_only(reason="A-7: mock streams are synchronous")
def test_an_async_copy_has_completed_when_it_returns(allocations: Callable[..., int]) -> None:
    stream = acl.create_stream()
    try:
        dev = allocations(64)
        host = np.arange(64, dtype=np.uint8)
        out = np.zeros(64, dtype=np.uint8)
        acl.memcpy_async(dev, 64, host.ctypes.data, 64, acl.ACL_MEMCPY_HOST_TO_DEVICE, stream)
        acl.memcpy_async(out.ctypes.data, 64, dev, 64, acl.ACL_MEMCPY_DEVICE_TO_HOST, stream)
        assert out.tolist() == list(range(64))
        acl.synchronize_stream(stream)
    finally:
        acl.destroy_stream(stream)


@mock_only(reason="A-7: a destroyed stream is unknown to the mock")
def test_an_async_copy_on_a_destroyed_stream_is_rejected(allocations: Callable[..., int]) -> None:
    stream = acl.create_stream()
    acl.destroy_stream(stream)
    a, b = allocations(64), allocations(64)
    exc = raises_acl(RT_PARAM_INVALID, acl.memcpy_async, a, 64, b, 64, acl.ACL_MEMCPY_DEVICE_TO_DEVICE, stream)
    assert exc.message is not None and hex(stream) in exc.message


@mock_only(reason="docs/semantics.md ACL-5")
def test_an_async_copy_on_a_stream_of_another_device_is_stream_context(allocations: Callable[..., int]) -> None:
    stream = acl.create_stream()
    a, b = allocations(64), allocations(64)
    try:
        def on_device_1() -> int:
            acl.set_device(1)
            try:
                return acl_code(acl.memcpy_async, a, 64, b, 64, acl.ACL_MEMCPY_DEVICE_TO_DEVICE, stream)
            finally:
                acl.reset_device(1)

        assert in_thread(on_device_1) == RT_STREAM_CONTEXT
    finally:
        acl.destroy_stream(stream)


@mock_only(reason="docs/reference/acl.md §6: on-chip device-to-device async copies need 64-byte alignment")
def test_an_async_device_to_device_copy_needs_64_byte_aligned_addresses(allocations: Callable[..., int]) -> None:
    a, b = allocations(256), allocations(256)
    assert a % 64 == 0 and b % 64 == 0
    acl.memcpy_async(a + 64, 128, b + 128, 64, acl.ACL_MEMCPY_DEVICE_TO_DEVICE)
    raises_acl(RT_PARAM_INVALID, acl.memcpy_async, a + 32, 128, b, 64, acl.ACL_MEMCPY_DEVICE_TO_DEVICE)
    raises_acl(RT_PARAM_INVALID, acl.memcpy_async, a, 128, b + 8, 64, acl.ACL_MEMCPY_DEFAULT)
    acl.memcpy(a + 32, 128, b + 8, 64, acl.ACL_MEMCPY_DEVICE_TO_DEVICE)   # the synchronous copy has no such rule


# ---- aclrtMemset (acl.md §6, A-5) ------------------------------------------------------------------------

def test_memset_of_zero_bytes_succeeds_without_any_other_check() -> None:
    assert in_thread(lambda: acl.memset(0, 0, 7, 0)) is None


def test_memset_rejects_null(device: int) -> None:
    raises_acl(INVALID_PARAM, acl.memset, 0, 8, 0, 8)


def test_memset_needs_a_current_device() -> None:
    array = np.zeros(8, dtype=np.uint8)
    raises_acl(RT_CONTEXT_NULL, lambda: in_thread(lambda: acl.memset(array.ctypes.data, 8, 1, 8)))


@mock_only(reason="A-5: count > maxCount")
def test_memset_rejects_count_above_max_count(allocations: Callable[..., int]) -> None:
    ptr = allocations(16)
    write(ptr, bytes(16))
    raises_acl(RT_PARAM_INVALID, acl.memset, ptr, 8, 1, 9)
    assert read(ptr, 16) == bytes(16)


@pytest.mark.parametrize("value, byte", [(0xAB, 0xAB), (0x1AB, 0xAB), (-1, 0xFF), (0, 0)])
def test_memset_sets_each_byte_to_the_low_byte_of_value(allocations: Callable[..., int], value: int,
                                                        byte: int) -> None:
    ptr = allocations(32)
    write(ptr, b"\x11" * 32)
    acl.memset(ptr + 4, 28, value, 20)
    assert read(ptr, 32) == b"\x11" * 4 + bytes([byte]) * 20 + b"\x11" * 8


def test_memset_works_on_host_memory_too(allocations: Callable[..., int]) -> None:
    array = np.zeros(16, dtype=np.uint8)
    acl.memset(array.ctypes.data, 16, 7, 16)
    pinned = allocations(16, host=True)
    acl.memset(pinned, 16, 9, 16)
    acl.memcpy(array.ctypes.data, 16, pinned, 8, acl.ACL_MEMCPY_HOST_TO_HOST)
    assert array.tolist() == [9] * 8 + [7] * 8


@mock_only(reason="A-5")
def test_memset_of_freed_memory_or_past_the_end_is_reported(allocations: Callable[..., int]) -> None:
    live = allocations(32)
    exc = raises_acl(RT_PARAM_INVALID, acl.memset, live + 16, 32, 0, 17)
    assert exc.message is not None and "runs 1 bytes past the end" in exc.message
    freed = acl.malloc(32)
    acl.free(freed)
    exc = raises_acl(RT_PARAM_INVALID, acl.memset, freed, 32, 0, 32)
    assert exc.message is not None and "use after free" in exc.message


# ---- aclrtGetMemInfo (acl.md §6, A-3) --------------------------------------------------------------------

def test_get_mem_info_rejects_null_outputs(device: int) -> None:
    size = ffi.new("size_t *")
    assert acl_lib.aclrtGetMemInfo(acl.ACL_HBM_MEM, ffi.NULL, size) == INVALID_PARAM
    assert acl_lib.aclrtGetMemInfo(acl.ACL_HBM_MEM, size, ffi.NULL) == INVALID_PARAM


def test_get_mem_info_needs_a_current_device() -> None:
    raises_acl(RT_CONTEXT_NULL, lambda: in_thread(acl.get_mem_info))


@mock_only(reason="A-3")
def test_get_mem_info_rejects_an_attribute_outside_the_enum(device: int) -> None:
    raises_acl(RT_PARAM_INVALID, acl.get_mem_info, 18)


@mock_only(reason="A-3: capacity minus the requested sizes of live allocations, for every attribute")
def test_get_mem_info_accounts_the_exact_requested_sizes_for_every_attribute(own_device: int) -> None:
    attrs = sorted(ffi.typeof("aclrtMemAttr").relements.values())

    def account() -> list[list[acl.MemInfo]]:
        acl.set_device(own_device)
        snapshots = [[acl.get_mem_info(attr) for attr in attrs]]
        first, second = acl.malloc(1000), acl.malloc(33)
        pinned = acl.malloc_host(5000)          # host memory is not device memory
        snapshots.append([acl.get_mem_info(attr) for attr in attrs])
        acl.free(first)
        snapshots.append([acl.get_mem_info(attr) for attr in attrs])
        acl.free(second)
        acl.free_host(pinned)
        snapshots.append([acl.get_mem_info(attr) for attr in attrs])
        acl.reset_device(own_device)
        return snapshots

    total = 64 * GiB
    snapshots = in_thread(account)
    assert snapshots == [[(total - used, total)] * 18 for used in (0, 1033, 33, 0)]


@mock_only(reason="A-3: accounting is per device")
def test_allocations_count_against_their_own_device_only(allocations: Callable[..., int]) -> None:
    ptr = allocations(4096)
    def free_on_device_1() -> int:
        acl.set_device(1)
        try:
            return acl.get_mem_info().free
        finally:
            acl.reset_device(1)

    assert in_thread(free_on_device_1) == 64 * GiB
    acl.free(ptr)


# ---- streams (acl.md §6, A-7) ----------------------------------------------------------------------------

def test_stream_functions_reject_null_handles(device: int) -> None:
    assert acl_lib.aclrtCreateStream(ffi.NULL) == INVALID_PARAM
    raises_acl(INVALID_PARAM, acl.destroy_stream, 0)


def test_synchronizing_the_default_stream_succeeds(device: int) -> None:
    acl.synchronize_stream()
    acl.synchronize_stream(None, timeout_ms=-1)
    acl.synchronize_stream(None, timeout_ms=0)


@mock_only(reason="A-7")
@pytest.mark.parametrize("timeout_ms", [None, -1, 0, 100])
def test_a_live_stream_synchronizes_and_a_destroyed_one_is_rejected(device: int, timeout_ms: int | None) -> None:
    stream = acl.create_stream()
    acl.synchronize_stream(stream, timeout_ms)
    acl.destroy_stream(stream)
    exc = raises_acl(RT_PARAM_INVALID, acl.synchronize_stream, stream, timeout_ms)
    assert exc.message is not None and hex(stream) in exc.message
    raises_acl(RT_PARAM_INVALID, acl.destroy_stream, stream)


@mock_only(reason="A-7: an unknown handle")
def test_an_unknown_stream_handle_is_rejected(device: int) -> None:
    array = np.zeros(8, dtype=np.uint8)
    raises_acl(RT_PARAM_INVALID, acl.synchronize_stream, array.ctypes.data)
    raises_acl(RT_PARAM_INVALID, acl.destroy_stream, array.ctypes.data)


@mock_only(reason="docs/semantics.md ACL-5")
def test_a_timeout_below_minus_one_is_invalid_param(device: int) -> None:
    raises_acl(INVALID_PARAM, acl.synchronize_stream, None, -2)


@mock_only(reason="docs/semantics.md ACL-4")
def test_create_stream_needs_a_current_device() -> None:
    raises_acl(RT_CONTEXT_NULL, lambda: in_thread(acl.create_stream))


def test_each_stream_gets_its_own_handle(device: int) -> None:
    streams = [acl.create_stream() for _ in range(5)]
    assert len(set(streams)) == 5 and 0 not in streams
    for stream in streams:
        acl.destroy_stream(stream)


@mock_only(reason="§6: the last reset releases the device's streams")
def test_the_last_reset_of_a_device_releases_its_streams(own_device: int) -> None:
    def create_and_reset() -> int:
        acl.set_device(own_device)
        stream = acl.create_stream()
        acl.reset_device(own_device)
        return stream

    stream = in_thread(create_and_reset)
    raises_acl(RT_PARAM_INVALID, acl.destroy_stream, stream)


# ---- version, SoC name -------------------------------------------------------------------------------

@mock_only(reason="the mock reports the current toolkit's ACL version")
def test_the_version_is_1_17_0() -> None:
    assert acl.has_get_version
    assert acl.get_version() == (1, 17, 0)


def test_get_version_rejects_null_outputs() -> None:
    number = ffi.new("int32_t *")
    assert acl_lib.aclrtGetVersion(ffi.NULL, number, number) == INVALID_PARAM
    assert acl_lib.aclrtGetVersion(number, number, ffi.NULL) == INVALID_PARAM


@mock_only(reason="the mock's fixed SoC name")
def test_the_soc_name_is_the_mocks_fixed_name() -> None:
    assert acl.has_get_soc_name
    assert acl.get_soc_name() == "Ascend910B4-mock"


# ---- fault injection ------------------------------------------------------------------------------

FAULTED_CALLS: dict[str, Callable[[], Any]] = {
    "aclInit": lambda: acl.aclInit(None),
    "aclFinalize": acl.aclFinalize,
    "aclFinalizeReference": acl.aclFinalizeReference,
    "aclrtSetDevice": lambda: acl.aclrtSetDevice(0),
    "aclrtResetDevice": lambda: acl.aclrtResetDevice(0),
    "aclrtResetDeviceForce": lambda: acl.aclrtResetDeviceForce(0),
    "aclrtGetDevice": acl.aclrtGetDevice,
    "aclrtGetDeviceCount": acl.aclrtGetDeviceCount,
    "aclrtSynchronizeDevice": acl.aclrtSynchronizeDevice,
    "aclrtMalloc": lambda: acl.aclrtMalloc(8, 0),
    "aclrtMallocHost": lambda: acl.aclrtMallocHost(8),
    "aclrtFree": lambda: acl.aclrtFree(0),
    "aclrtFreeHost": lambda: acl.aclrtFreeHost(0),
    "aclrtMemcpy": lambda: acl.aclrtMemcpy(0, 0, 0, 0, 0),
    "aclrtMemcpyAsync": lambda: acl.aclrtMemcpyAsync(0, 0, 0, 0, 0, 0),
    "aclrtMemset": lambda: acl.aclrtMemset(0, 0, 0, 0),
    "aclrtGetMemInfo": lambda: acl.aclrtGetMemInfo(0),
    "aclrtCreateStream": acl.aclrtCreateStream,
    "aclrtDestroyStream": lambda: acl.aclrtDestroyStream(0),
    "aclrtSynchronizeStream": lambda: acl.aclrtSynchronizeStream(0),
    "aclrtSynchronizeStreamWithTimeout": lambda: acl.aclrtSynchronizeStreamWithTimeout(0, 0),
    "aclrtGetVersion": acl.aclrtGetVersion,
}


def test_every_failing_acl_function_has_a_fault_case() -> None:
    # aclGetRecentErrMsg and aclrtGetSocName return strings and cannot fail with a code.
    declared = [name for name in dir(acl_lib)
                if name.startswith("acl") and name not in ("aclGetRecentErrMsg", "aclrtGetSocName")]
    assert sorted(FAULTED_CALLS) == sorted(declared)


@mock_only(reason="fault injection is part of the mock's control interface")
@pytest.mark.parametrize("name", sorted(FAULTED_CALLS))
def test_an_injected_fault_makes_the_call_fail_with_that_code_once(name: str) -> None:
    def fail_once() -> tuple[int, str | None]:
        acl.set_device(0)   # in its own thread, so that the calls below change nothing else
        try:
            with mock_control.fault(name, acl.ACL_ERROR_RT_DEVICE_MEM_ERROR, count=1, skip=0):
                exc = raises_acl(acl.ACL_ERROR_RT_DEVICE_MEM_ERROR, FAULTED_CALLS[name])
            return exc.code, exc.message
        finally:
            acl.reset_device(0)

    code, message = in_thread(fail_once)
    assert code == 507053
    assert message == f"{name}: injected fault, status 0x0007BCAD"


@mock_only(reason="fault injection is part of the mock's control interface")
def test_an_injected_fault_lets_skipped_calls_through_first(device: int) -> None:
    with mock_control.fault("aclrtMalloc", RT_MEMORY_ALLOCATION, count=1, skip=1):
        ptr = acl.malloc(8)
        raises_acl(RT_MEMORY_ALLOCATION, acl.malloc, 8)
        second = acl.malloc(8)
    acl.free(ptr)
    acl.free(second)


# ---- settings, in a fresh process ---------------------------------------------------------

@mock_only(reason="A-2: lldd_mock_set_device_count")
def test_the_device_count_can_be_set_before_the_first_acl_call_only() -> None:
    result = fresh_process("""
        from llm_datadist_ffi import LLMException
        def status(fn, *args):
            try:
                fn(*args)
            except LLMException as exc:
                return exc.status_code
            return 0
        result = [status(mock_control.set_device_count, 0), status(mock_control.set_device_count, 1025),
                  status(mock_control.set_device_count, 2), acl.get_device_count(),
                  code(acl.set_device, 1), code(acl.set_device, 2),
                  status(mock_control.set_device_count, 4), acl.get_device_count()]
    """)
    assert result == [LLM_PARAM_INVALID, LLM_PARAM_INVALID, SUCCESS, 2, SUCCESS, RT_INVALID_DEVICEID,
                      LLM_PARAM_INVALID, 2]


@mock_only(reason="docs/semantics.md ACL-2")
def test_version_soc_name_and_error_text_do_not_freeze_the_device_settings() -> None:
    result = fresh_process("""
        result = [acl.get_version(), acl.get_soc_name(), acl.recent_error_message()]
        mock_control.set_device_count(3)
        mock_control.set_device_capacity(4096)
        acl.set_device(2)
        result += [acl.get_device_count(), list(acl.get_mem_info())]
    """)
    assert result == [[1, 17, 0], "Ascend910B4-mock", None, 3, [4096, 4096]]


@mock_only(reason="A-3: lldd_mock_set_device_capacity")
def test_the_device_capacity_can_be_set_before_the_first_acl_call_only() -> None:
    result = fresh_process("""
        from llm_datadist_ffi import LLMException
        def status(fn, *args):
            try:
                fn(*args)
            except LLMException as exc:
                return exc.status_code
            return 0
        MiB = 1 << 20
        result = [status(mock_control.set_device_capacity, 0), status(mock_control.set_device_capacity, MiB)]
        acl.set_device(0)
        result.append(list(acl.get_mem_info()))
        big = acl.malloc(MiB - 100)
        result += [code(acl.malloc, 101), list(acl.get_mem_info())]
        pinned = acl.malloc_host(10 * MiB)       # host memory does not count
        last = acl.malloc(100)
        result += [list(acl.get_mem_info()), code(acl.malloc, 1)]
        acl.free(big)
        result += [list(acl.get_mem_info()), status(mock_control.set_device_capacity, 2 * MiB)]
        acl.free(last); acl.free_host(pinned)
    """)
    mib = 1 << 20
    assert result == [LLM_PARAM_INVALID, SUCCESS, [mib, mib], RT_MEMORY_ALLOCATION, [100, mib], [0, mib],
                      RT_MEMORY_ALLOCATION, [mib - 100, mib], LLM_PARAM_INVALID]


# ---- the Pythonic tier -----------------------------------------------------------------------------

def test_a_device_buffer_round_trips_bytes_and_arrays(device: int) -> None:
    with acl.DeviceBuffer(64) as buf:
        assert buf.size == 64 and not buf.closed
        buf.write(b"\x00" * 64)
        buf.write(b"hello", offset=3)
        buf.write(np.arange(4, dtype=np.int32), offset=16)
        assert buf.read(10) == b"\x00\x00\x00hello\x00\x00"
        assert buf.to_numpy(np.int32, (4,), offset=16).tolist() == [0, 1, 2, 3]
        assert buf.read(offset=60) == b"\x00" * 4
        assert buf.read(0, offset=64) == b""
        assert len(buf.read()) == 64
    assert buf.closed


@mock_only(reason="lldd_mock_live_allocations")
def test_a_device_buffer_frees_its_memory_on_close_and_when_collected(device: int) -> None:
    before = mock_control.live_allocations()
    buf = acl.DeviceBuffer(32)
    ptr = buf.ptr
    assert mock_control.live_allocations() == before + 1
    buf.close()
    buf.close()
    assert mock_control.live_allocations() == before
    raises_acl(RT_PARAM_INVALID, acl.free, ptr)
    acl.DeviceBuffer(32)          # dropped at once: the safety net frees it
    assert mock_control.live_allocations() == before


def test_a_device_buffer_rejects_ranges_it_does_not_hold_before_calling_c(device: int) -> None:
    with acl.DeviceBuffer(16) as buf:
        with pytest.raises(ValueError, match="exceeds the buffer size 16"):
            buf.write(b"x" * 17)
        with pytest.raises(ValueError, match="exceeds the buffer size 16"):
            buf.write(b"x", offset=16)
        with pytest.raises(ValueError, match="exceeds the buffer size 16"):
            buf.read(4, offset=13)
        with pytest.raises(ValueError, match="exceeds the buffer size 16"):
            buf.to_numpy(np.float32, (5,))
        with pytest.raises(ValueError, match="offset"):
            buf.read(1, offset=-1)
        with pytest.raises(ValueError, match="C-contiguous"):
            buf.write(np.zeros((4, 4), dtype=np.uint8)[:, ::2])


def test_a_closed_device_buffer_refuses_access(device: int) -> None:
    buf = acl.DeviceBuffer(8)
    buf.close()
    for action in (lambda: buf.ptr, lambda: buf.read(1), lambda: buf.write(b"x"), lambda: buf.to_numpy("u1", 1)):
        with pytest.raises(ValueError, match="closed"):
            action()


def test_a_device_buffer_needs_a_current_device_for_allocation_and_copies(device: int) -> None:
    raises_acl(RT_CONTEXT_NULL, lambda: in_thread(lambda: acl.DeviceBuffer(8)))
    with acl.DeviceBuffer(8) as buf:
        raises_acl(RT_CONTEXT_NULL, lambda: in_thread(lambda: buf.write(b"x")))


def test_device_buffers_work_from_many_threads_at_once() -> None:
    def worker(seed: int) -> bool:
        acl.set_device(seed % 4)
        try:
            rng = np.random.default_rng(seed)
            for _ in range(50):
                data = rng.integers(0, 256, size=int(rng.integers(1, 4096)), dtype=np.uint8)
                with acl.DeviceBuffer(data.size) as buf:
                    buf.write(data)
                    if buf.read() != data.tobytes():
                        return False
            return True
        finally:
            acl.reset_device(seed % 4)

    results: list[bool] = []
    threads = [threading.Thread(target=lambda s=s: results.append(worker(s))) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [True] * 8


# ---- stateful: allocations against a model ---------------------------------------------------------------

class AllocationMachine(RuleBasedStateMachine):
    """Random allocations, writes, reads and frees; the mock must agree with a model
    that holds a copy of every live allocation and remembers the freed ones."""

    live = Bundle("live")

    def __init__(self) -> None:
        super().__init__()
        acl.set_device(0)
        self.baseline = mock_control.live_allocations()
        self.model: dict[int, bytearray] = {}
        self.freed: list[int] = []
        self.host: dict[int, bool] = {}

    @rule(target=live, size=st.integers(1, 300), host=st.booleans())
    def allocate(self, size: int, host: bool) -> int:
        ptr = acl.malloc_host(size) if host else acl.malloc(size)
        assert ptr not in self.model
        self.model[ptr] = bytearray(size)
        self.host[ptr] = host
        acl.memset(ptr, size, 0, size)
        return ptr

    @rule(ptr=live, data=st.data())
    def write_some(self, ptr: int, data: st.DataObject) -> None:
        size = len(self.model[ptr])
        offset = data.draw(st.integers(0, size))
        payload = data.draw(st.binary(min_size=0, max_size=size + 8))
        src = np.frombuffer(payload, dtype=np.uint8) if payload else np.zeros(1, dtype=np.uint8)
        code = acl_code(acl.memcpy, ptr + offset, size + 8, src.ctypes.data, len(payload), acl.ACL_MEMCPY_DEFAULT)
        if offset + len(payload) <= size or not payload:
            assert code == SUCCESS
            self.model[ptr][offset:offset + len(payload)] = payload
        else:
            assert code == RT_PARAM_INVALID

    @rule(ptr=live, data=st.data())
    def read_some(self, ptr: int, data: st.DataObject) -> None:
        size = len(self.model[ptr])
        offset = data.draw(st.integers(0, size - 1))
        count = data.draw(st.integers(1, size + 8))
        out = np.zeros(count, dtype=np.uint8)
        code = acl_code(acl.memcpy, out.ctypes.data, count, ptr + offset, count, acl.ACL_MEMCPY_DEFAULT)
        if offset + count <= size:
            assert code == SUCCESS
            assert out.tobytes() == bytes(self.model[ptr][offset:offset + count])
        else:
            assert code == RT_PARAM_INVALID

    @rule(ptr=consumes(live))
    def free(self, ptr: int) -> None:
        (acl.free_host if self.host[ptr] else acl.free)(ptr)
        del self.model[ptr]
        self.freed.append(ptr)

    @precondition(lambda self: bool(self.freed))
    @rule(data=st.data())
    def touch_freed(self, data: st.DataObject) -> None:
        ptr = data.draw(st.sampled_from(self.freed))
        out = np.zeros(1, dtype=np.uint8)
        assert acl_code(acl.memcpy, out.ctypes.data, 1, ptr, 1, acl.ACL_MEMCPY_DEFAULT) == RT_PARAM_INVALID
        assert acl_code(acl.free, ptr) == RT_PARAM_INVALID
        assert acl_code(acl.free_host, ptr) == RT_PARAM_INVALID

    @invariant()
    def live_allocations_are_counted(self) -> None:
        assert mock_control.live_allocations() == self.baseline + len(self.model)

    def teardown(self) -> None:
        for ptr in list(self.model):
            (acl.free_host if self.host[ptr] else acl.free)(ptr)
        acl.reset_device(0)


@mock_only(reason="A-4, A-5, A-6 against a model of the mock's allocation table")
def test_the_allocation_table_agrees_with_a_model() -> None:
    run_state_machine_as_test(AllocationMachine)  # type: ignore[no-untyped-call]


def test_a_process_that_freed_much_mock_memory_can_still_fork() -> None:
    """Freed memory is held back for use-after-free reports (docs/reference/acl.md). Held
    heap memory must not keep a commit charge: under the kernel's default overcommit
    heuristic, fork() refuses to copy a mapping whose charge exceeds the machine's
    memory, so 28 GiB of heap memory allocated and freed made every later fork() of the
    process fail with ENOMEM (seen as a test process that could no longer fork)."""
    result = fresh_process("""
        import os
        acl.set_device(0)
        keep = [acl.malloc(64 << 20) for _ in range(256)]     # every arena chunk taken: the heap from here
        for _ in range(14):
            acl.free(acl.malloc(2 << 30))
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        for address in keep:
            acl.free(address)
        result = os.waitstatus_to_exitcode(status)
    """)
    assert result == 0
