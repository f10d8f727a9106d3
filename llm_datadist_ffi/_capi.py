"""The thin tier: one Python function per C ABI function, with the C names.

This is the only module that calls ``lldd_lib`` (STYLE §2). Each function takes
ready-made cffi values, makes the call (cffi releases the GIL for its duration),
and turns a non-zero status into the ``LLMException`` subclass of that code at
once, in the calling thread, with the C side's thread-local last-error text
(STYLE §3). Link and unlink return their statuses instead of raising, as the
vendor's API does.
"""
from __future__ import annotations

from typing import Any

from ._loader import const, ffi, lldd_lib
from .status import LLMException, exception_for, map_status

CData = Any

__all__ = ["ffi", "const", "check", "last_error", "error"]


def last_error() -> str:
    """The calling thread's last-error text of the C library ("" if none)."""
    return ffi.string(lldd_lib.lldd_last_error()).decode("utf-8", "replace")


def error(status: int, tag: str) -> LLMException:
    """The exception for a non-zero ``status`` of call ``tag``, vendor-formatted."""
    detail = last_error() or "no detail"
    return exception_for(status, f"[{tag}] failed, error code is {map_status(status)}, {detail}.")


def check(status: int, tag: str) -> None:
    """Raise the exception of ``status`` unless it is ``LLM_SUCCESS``."""
    if status != 0:
        raise error(status, tag)


# ---- version, capabilities ------------------------------------------------------------------

def lldd_abi_version() -> int:
    return int(lldd_lib.lldd_abi_version())


def lldd_capabilities() -> int:
    return int(lldd_lib.lldd_capabilities())


def lldd_backend_name() -> str:
    return ffi.string(lldd_lib.lldd_backend_name()).decode()


# ---- engine life cycle ----------------------------------------------------------------------

def lldd_create(cluster_id: int, role: int, tag: str) -> CData:
    """Create an engine; the handle is destroyed by ``ffi.gc`` as a safety net."""
    out = ffi.new("lldd_engine **")
    check(lldd_lib.lldd_create(cluster_id, role, out), tag)
    return ffi.gc(out[0], lldd_lib.lldd_destroy)


def lldd_destroy(engine: CData) -> None:
    ffi.release(engine)          # runs lldd_destroy now, once


def lldd_initialize(engine: CData, options: CData, count: int, tag: str) -> None:
    check(lldd_lib.lldd_initialize(engine, options, count), tag)


def lldd_finalize(engine: CData) -> None:
    lldd_lib.lldd_finalize(engine)


def lldd_set_role(engine: CData, role: int, options: CData, count: int, tag: str) -> None:
    check(lldd_lib.lldd_set_role(engine, role, options, count), tag)


def lldd_link_clusters(engine: CData, clusters: CData, count: int, timeout: int) -> tuple[int, list[int]]:
    rets = ffi.new("lldd_status[]", max(count, 1))
    num = ffi.new("size_t *")
    status = lldd_lib.lldd_link_clusters(engine, clusters, count, timeout, rets, num)
    return int(status), [int(rets[i]) for i in range(num[0])]


def lldd_unlink_clusters(engine: CData, clusters: CData, count: int, timeout: int,
                         force: bool) -> tuple[int, list[int]]:
    rets = ffi.new("lldd_status[]", max(count, 1))
    num = ffi.new("size_t *")
    status = lldd_lib.lldd_unlink_clusters(engine, clusters, count, timeout, int(force), rets, num)
    return int(status), [int(rets[i]) for i in range(num[0])]


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
