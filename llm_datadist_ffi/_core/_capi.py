"""The thin tier: one Python function per C ABI function, with the C names.

This is the only module that calls ``lldd_lib`` (docs/design.md). Each function takes
ready-made cffi values, makes the call (cffi releases the GIL for its duration),
and turns a non-zero status into the ``LLMException`` subclass of that code at
once, in the calling thread, with the C side's thread-local last-error text
(docs/design.md). Link and unlink return their statuses instead of raising, as the
vendor's API does.
"""
from __future__ import annotations

import functools
import os
import logging
import threading
from typing import Any

from .. import lint
from ._loader import const, ffi, lldd_lib
from ..status import LLMException, LLMStatusCode, exception_for, map_status

CData = Any

__all__ = ["ffi", "const", "constants", "check", "last_error", "error"]


def constants(prefix: str) -> dict[str, int]:
    """The integer constants of the header fragments whose names start with ``prefix``,
    keyed by the rest of the name: ``constants("LLDD_ROLE_")["PROMPT"] == 1``."""
    return {name[len(prefix):]: int(getattr(lldd_lib, name)) for name in dir(lldd_lib) if name.startswith(prefix)}


def last_error() -> str:
    """The calling thread's last-error text of the C library ("" if none)."""
    return str(ffi.string(lldd_lib.lldd_last_error()).decode("utf-8", "replace"))


_log = logging.getLogger("llm_datadist_ffi._capi")   # the name it had before the module moved into _core/

# statuses that mean the peer or the link is gone or slow: logged as they are raised
_PEER_TROUBLE = frozenset(int(code) for code in (
    LLMStatusCode.LLM_WAIT_PROCESS_TIMEOUT, LLMStatusCode.LLM_TIMEOUT, LLMStatusCode.LLM_LINK_FAILED,
    LLMStatusCode.LLM_UNLINK_FAILED, LLMStatusCode.LLM_NOTIFY_PROMPT_UNLINK_FAILED, LLMStatusCode.LLM_LINK_BUSY))


def error(status: int, tag: str) -> LLMException:
    """The exception for a non-zero ``status`` of call ``tag``, vendor-formatted."""
    detail = last_error() or "no detail"
    exc = exception_for(status, f"[{tag}] failed, error code is {map_status(status)}, {detail}.")
    if status in _PEER_TROUBLE:
        _log.warning("%s", exc)
    return exc


def check(status: int, tag: str) -> None:
    """Report the engine's lints of the call, then raise the exception of ``status``
    unless it is ``LLM_SUCCESS``."""
    if _HAS_LINT_RECORD and lldd_lib.lldd_mock_lint_count():
        report_engine_lints()
    if status != 0:
        raise error(status, tag)


def report_engine_lints() -> None:
    """Warn for the lints the engine recorded in this thread since the last report.

    Rules that the Python layers check themselves (``lint.PYTHON_RULES``) were already
    reported before the call and are skipped here.
    """
    count = min(int(lldd_lib.lldd_mock_lint_count()), 8)
    records = [(int(lldd_lib.lldd_mock_lint_rule(i)),
                ffi.string(lldd_lib.lldd_mock_lint_text(i)).decode("utf-8", "replace"))
               for i in range(count)]
    lldd_lib.lldd_mock_lint_clear()
    lint.lint_engine_records(records, skip=lint.PYTHON_RULES)


# ---- version, capabilities ------------------------------------------------------------------

def lldd_abi_version() -> int:
    return int(lldd_lib.lldd_abi_version())


def lldd_capabilities() -> int:
    return int(lldd_lib.lldd_capabilities())


def lldd_backend_name() -> str:
    return str(ffi.string(lldd_lib.lldd_backend_name()).decode())


# ---- engine life cycle ----------------------------------------------------------------------

def _destroy_in(pid: int, engine: CData) -> None:
    # A child of fork() holds copies of its parent's handles: destroying one there
    # would act on an engine whose threads and sockets belong to the parent. The
    # garbage collector may run this on a thread that holds cffi's lock; the loader
    # resolved lldd_destroy at import, so the call does not take it (docs/design.md,
    # "Finalizers").
    if os.getpid() == pid:
        lldd_lib.lldd_destroy(engine)


def lldd_create(cluster_id: int, role: int, tag: str) -> CData:
    """Create an engine; the handle is destroyed by ``ffi.gc`` as a safety net, and
    only in the process that created it."""
    out = ffi.new("lldd_engine **")
    check(lldd_lib.lldd_create(cluster_id, role, out), tag)
    return ffi.gc(out[0], functools.partial(_destroy_in, os.getpid()))


def lldd_destroy(engine: CData) -> None:
    ffi.release(engine)          # runs the destructor now, once


def lldd_initialize(engine: CData, options: CData, count: int, tag: str) -> None:
    check(lldd_lib.lldd_initialize(engine, options, count), tag)


def lldd_finalize(engine: CData) -> None:
    lldd_lib.lldd_finalize(engine)


def lldd_set_role(engine: CData, role: int, options: CData, count: int, tag: str) -> None:
    check(lldd_lib.lldd_set_role(engine, role, options, count), tag)


_link_reports = threading.local()


def last_link_reasons() -> tuple[str, tuple[str, ...]]:
    """The calling thread's last link or unlink call: its own error text ("" on success)
    and, per cluster in the call's order, why it got its status ("" for a success)."""
    report: tuple[str, tuple[str, ...]] = getattr(_link_reports, "value", ("", ()))
    return report


def log_link_call(logger: logging.Logger, what: str, cluster_ids: list[Any], status: int,
                  rets: list[int]) -> tuple[str, tuple[str, ...]]:
    """Log the outcome of the link or unlink call that just returned in this thread, one
    line per cluster (INFO for a success, WARNING with the reason otherwise), and return
    its reasons (``last_link_reasons``)."""
    call_error, texts = last_link_reasons()
    for index, code in enumerate(rets):
        cluster = cluster_ids[index] if index < len(cluster_ids) else "?"
        if code == 0:
            logger.info("%s cluster %s: success", what, cluster)
        else:
            logger.warning("%s cluster %s: %s: %s", what, cluster, map_status(code).name,
                           texts[index] if index < len(texts) and texts[index] else call_error or "no detail")
    if status != 0 and not rets:
        logger.warning("%s: %s: %s", what, map_status(status).name, call_error or "no detail")
    return call_error, texts


def _note_link_reasons(status: int, rets: list[int]) -> None:
    """Record the reasons of the link or unlink call that just returned in this thread:
    the mock's per-cluster texts, else (another backend) its last-error text for each
    failed cluster."""
    call_error = last_error() if status != 0 else ""
    if _HAS_LINT_RECORD:
        count = int(lldd_lib.lldd_mock_link_reason_count())
        texts = [ffi.string(lldd_lib.lldd_mock_link_reason(i)).decode("utf-8", "replace") if i < count else ""
                 for i in range(len(rets))]
    else:
        texts = [call_error if r != 0 else "" for r in rets]
    _link_reports.value = (call_error, tuple(texts))


def lldd_link_clusters(engine: CData, clusters: CData, count: int, timeout: int) -> tuple[int, list[int]]:
    rets = ffi.new("lldd_status[]", max(count, 1))
    num = ffi.new("size_t *")
    status = lldd_lib.lldd_link_clusters(engine, clusters, count, timeout, rets, num)
    result = [int(rets[i]) for i in range(num[0])]
    _note_link_reasons(status, result)
    if _HAS_LINT_RECORD and lldd_lib.lldd_mock_lint_count():
        report_engine_lints()
    return int(status), result


def lldd_unlink_clusters(engine: CData, clusters: CData, count: int, timeout: int,
                         force: bool) -> tuple[int, list[int]]:
    rets = ffi.new("lldd_status[]", max(count, 1))
    num = ffi.new("size_t *")
    status = lldd_lib.lldd_unlink_clusters(engine, clusters, count, timeout, int(force), rets, num)
    result = [int(rets[i]) for i in range(num[0])]
    _note_link_reasons(status, result)
    if _HAS_LINT_RECORD and lldd_lib.lldd_mock_lint_count():
        report_engine_lints()
    return int(status), result


# ---- caches ---------------------------------------------------------------------------------

def lldd_allocate_cache(engine: CData, desc: CData, num_tensors: int, tag: str) -> tuple[int, list[int]]:
    cache_id = ffi.new("int64_t *")
    addrs = ffi.new("uint64_t[]", max(num_tensors, 1))
    check(lldd_lib.lldd_allocate_cache(engine, desc, cache_id, addrs, num_tensors), tag)
    return int(cache_id[0]), [int(addrs[i]) for i in range(num_tensors)]


def lldd_deallocate_cache(engine: CData, cache_id: int, tag: str) -> None:
    check(lldd_lib.lldd_deallocate_cache(engine, cache_id), tag)


def lldd_register_kv_cache(engine: CData, desc: CData, addrs: CData, count: int, tag: str) -> int:
    cache_id = ffi.new("int64_t *")
    check(lldd_lib.lldd_register_kv_cache(engine, desc, addrs, count, cache_id), tag)
    return int(cache_id[0])


def lldd_unregister_kv_cache(engine: CData, cache_id: int, tag: str) -> None:
    check(lldd_lib.lldd_unregister_kv_cache(engine, cache_id), tag)


# ---- data movement --------------------------------------------------------------------------

def lldd_pull_kv_cache(engine: CData, src: CData, dst: CData, batch_index: int, size: int,
                       ext: CData, tag: str) -> None:
    check(lldd_lib.lldd_pull_kv_cache(engine, src, dst, batch_index, size, ext), tag)


def lldd_pull_kv_blocks(engine: CData, src: CData, dst: CData, src_blocks: CData, n_src: int,
                        dst_blocks: CData, n_dst: int, ext: CData, tag: str) -> None:
    check(lldd_lib.lldd_pull_kv_blocks(engine, src, dst, src_blocks, n_src, dst_blocks, n_dst, ext), tag)


def lldd_push_kv_cache(engine: CData, src: CData, dst: CData, src_batch_index: int, size: int,
                       ext: CData, tag: str) -> None:
    check(lldd_lib.lldd_push_kv_cache(engine, src, dst, src_batch_index, size, ext), tag)


def lldd_push_kv_blocks(engine: CData, src: CData, dst: CData, src_blocks: CData, n_src: int,
                        dst_blocks: CData, n_dst: int, ext: CData, tag: str) -> None:
    check(lldd_lib.lldd_push_kv_blocks(engine, src, dst, src_blocks, n_src, dst_blocks, n_dst, ext), tag)


def lldd_copy_kv_cache(engine: CData, src: CData, dst: CData, src_batch_index: int,
                       dst_batch_index: int, offset: int, size: int, tag: str) -> None:
    check(lldd_lib.lldd_copy_kv_cache(engine, src, dst, src_batch_index, dst_batch_index, offset, size), tag)


def lldd_copy_kv_blocks(engine: CData, src: CData, dst: CData, src_blocks: CData, n_src: int,
                        dst_flat: CData, dst_lens: CData, n_lists: int, tag: str) -> None:
    check(lldd_lib.lldd_copy_kv_blocks(engine, src, dst, src_blocks, n_src, dst_flat, dst_lens, n_lists), tag)


# ---- mock control (LLDD_CAP_MOCK_CONTROL) ---------------------------------------------------

def mock_function(name: str) -> Any:
    """A ``lldd_mock_*`` function of the mock backend.

    Raises:
        LLMException: ``LLM_FEATURE_NOT_ENABLED`` on a backend without the mock's
            control interface.
    """
    if not lldd_capabilities() & const("LLDD_CAP_MOCK_CONTROL"):
        raise exception_for(
            const("LLM_FEATURE_NOT_ENABLED"),
            f"[{name}] is part of the mock backend's control interface, which the "
            f"{lldd_backend_name()} backend does not have",
        )
    return getattr(lldd_lib, name)


# ---- extension functions (include/lldd/ext.h, LLDD_CAP_EXT_KEYS) ---------------------------
#
# What only the vendor's Python layer has: cache keys, allocation with keys, the v1
# generation, per-layer pushes, swaps, rank-table links. The vendor-compatible API
# (llm_datadist_ffi._vendor.v2) is their only caller. A backend without the capability (the
# ascend shim over the public C++ class) answers LLM_FEATURE_NOT_ENABLED itself; a
# library whose cdef does not declare them yet gets the same code from here.

def _ext_function(name: str) -> Any:
    try:
        return getattr(lldd_lib, name)
    except AttributeError:
        raise exception_for(
            const("LLM_FEATURE_NOT_ENABLED"),
            f"[{name}] failed, error code is LLMStatusCode.LLM_FEATURE_NOT_ENABLED, the "
            f"{lldd_backend_name()} backend does not declare the extension function {name} "
            "(include/lldd/ext.h, capability LLDD_CAP_EXT_KEYS) that the vendor-compatible API needs.",
        ) from None


def new_keys(count: int) -> CData:
    """A zeroed ``lldd_key[count]`` (at least one element, so that it is never NULL)."""
    _ext_function("lldd_ext_initialize")
    return ffi.new("lldd_key[]", max(count, 1))


def lldd_ext_initialize(engine: CData, options: CData, count: int, tag: str) -> None:
    check(_ext_function("lldd_ext_initialize")(engine, options, count), tag)


def lldd_ext_switch_role(engine: CData, role: int, options: CData, count: int, tag: str) -> None:
    check(_ext_function("lldd_ext_switch_role")(engine, role, options, count), tag)


def lldd_ext_check_link_status(engine: CData, remote_cluster_id: int, tag: str) -> None:
    check(_ext_function("lldd_ext_check_link_status")(engine, remote_cluster_id), tag)


def lldd_ext_register_cache(engine: CData, desc: CData, addrs: CData, num_addrs: int, kind: int,
                            remote_accessible: bool, keys: CData, num_keys: int, tag: str) -> int:
    cache_id = ffi.new("int64_t *")
    check(_ext_function("lldd_ext_register_cache")(engine, desc, addrs, num_addrs, kind, int(remote_accessible),
                                                    keys, num_keys, cache_id), tag)
    return int(cache_id[0])


def lldd_ext_unregister_cache(engine: CData, cache_id: int, tag: str) -> None:
    check(_ext_function("lldd_ext_unregister_cache")(engine, cache_id), tag)


def lldd_ext_allocate_cache(engine: CData, desc: CData, kind: int, keys: CData, num_keys: int,
                            num_tensors: int, tag: str) -> tuple[int, list[int]]:
    function = _ext_function("lldd_ext_allocate_cache")
    cache_id = ffi.new("int64_t *")
    addrs = ffi.new("uint64_t[]", max(num_tensors, 1))
    check(function(engine, desc, kind, keys, num_keys, cache_id, addrs, num_tensors), tag)
    return int(cache_id[0]), [int(addrs[i]) for i in range(num_tensors)]


def lldd_ext_deallocate_cache(engine: CData, cache_id: int, tag: str) -> None:
    check(_ext_function("lldd_ext_deallocate_cache")(engine, cache_id), tag)


def lldd_ext_remove_cache_key(engine: CData, key: CData, tag: str) -> None:
    check(_ext_function("lldd_ext_remove_cache_key")(engine, key), tag)


def lldd_ext_pull(engine: CData, src: CData, dst_cache_id: int, batch_index: int, size: int,
                  src_blocks: CData, n_src_blocks: int, dst_blocks: CData, n_dst_blocks: int,
                  src_tensors: CData, n_src_tensors: int, dst_tensors: CData, n_dst_tensors: int,
                  src_cache_offset: int, dst_cache_offset: int, tensor_num_per_layer: int, tag: str) -> None:
    check(_ext_function("lldd_ext_pull")(engine, src, dst_cache_id, batch_index, size, src_blocks, n_src_blocks,
                                         dst_blocks, n_dst_blocks, src_tensors, n_src_tensors, dst_tensors,
                                         n_dst_tensors, src_cache_offset, dst_cache_offset,
                                         tensor_num_per_layer), tag)


def lldd_ext_push_layer(engine: CData, src_cache_id: int, src_batch_index: int, src_layer: int, dst: CData,
                        dst_layer: int, tensor_num_per_layer: int, src_blocks: CData, n_src_blocks: int,
                        dst_blocks: CData, n_dst_blocks: int, tag: str) -> None:
    check(_ext_function("lldd_ext_push_layer")(engine, src_cache_id, src_batch_index, src_layer, dst, dst_layer,
                                               tensor_num_per_layer, src_blocks, n_src_blocks, dst_blocks,
                                               n_dst_blocks), tag)


def lldd_ext_transfer_layer(engine: CData, src_cache_id: int, src_batch_index: int, layer: int,
                            dst_cluster_id: int, dst_addrs: CData, src_blocks: CData, n_src_blocks: int,
                            dst_blocks: CData, n_dst_blocks: int, dst_block_memory_size: int, tag: str) -> None:
    check(_ext_function("lldd_ext_transfer_layer")(engine, src_cache_id, src_batch_index, layer, dst_cluster_id,
                                                   dst_addrs, src_blocks, n_src_blocks, dst_blocks, n_dst_blocks,
                                                   dst_block_memory_size), tag)


def lldd_ext_copy_cache(engine: CData, dst_cache_id: int, src_cache_id: int, dst_batch_index: int,
                        src_batch_index: int, offset: int, size: int, tag: str) -> None:
    check(_ext_function("lldd_ext_copy_cache")(engine, dst_cache_id, src_cache_id, dst_batch_index,
                                               src_batch_index, offset, size), tag)


def lldd_ext_copy_blocks(engine: CData, cache_id: int, pairs: CData, num_pairs: int, tag: str) -> None:
    check(_ext_function("lldd_ext_copy_blocks")(engine, cache_id, pairs, num_pairs), tag)


def lldd_ext_swap_blocks(engine: CData, src_addrs: CData, dst_addrs: CData, num_tensors: int, block_size: int,
                         pairs: CData, num_pairs: int, swap_in: bool, tag: str) -> None:
    check(_ext_function("lldd_ext_swap_blocks")(engine, src_addrs, dst_addrs, num_tensors, block_size, pairs,
                                                num_pairs, int(swap_in)), tag)


def lldd_ext_link(engine: CData, comm_name: bytes, cluster_ids: CData, ranks: CData, num_members: int,
                  rank_table: bytes, tag: str) -> int:
    function = _ext_function("lldd_ext_link")
    comm_id = ffi.new("uint64_t *")
    check(function(engine, comm_name, cluster_ids, ranks, num_members, rank_table, comm_id), tag)
    return int(comm_id[0])


def lldd_ext_unlink(engine: CData, comm_id: int, tag: str) -> None:
    check(_ext_function("lldd_ext_unlink")(engine, comm_id), tag)


def lldd_ext_query_register_mem_status(engine: CData, comm_id: int, tag: str) -> int:
    function = _ext_function("lldd_ext_query_register_mem_status")
    status = ffi.new("uint32_t *")
    check(function(engine, comm_id, status), tag)
    return int(status[0])


def lldd_ext_remap_registered_memory(engine: CData, addrs: CData, sizes: CData, num: int, tag: str) -> None:
    check(_ext_function("lldd_ext_remap_registered_memory")(engine, addrs, sizes, num), tag)


def bytes_moved_counter() -> Any:
    """The mock's per-thread running total of bytes moved (``lldd_mock_bytes_moved``), as
    a function of no arguments, or None on a backend without it (the call traces leave
    the bytes out then)."""
    if not lldd_capabilities() & const("LLDD_CAP_MOCK_CONTROL") or not hasattr(lldd_lib, "lldd_mock_bytes_moved"):
        return None
    return lldd_lib.lldd_mock_bytes_moved


# The mock's lint record (include/lldd/mock.h); other backends have no lints.
_HAS_LINT_RECORD = bool(lldd_capabilities() & const("LLDD_CAP_MOCK_CONTROL")) and \
    hasattr(lldd_lib, "lldd_mock_lint_count") and hasattr(lldd_lib, "lldd_mock_link_reason_count")
