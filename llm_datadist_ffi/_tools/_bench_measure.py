"""What the benchmark suite measures with, apart from the engines: its memory, its floors.

* **Memory kinds.** ``user`` memory is numpy arrays the caller registers;
  ``library`` memory comes from the runtime's allocator (``acl.malloc``), which is
  what the library hands out to its users. Both are filled with one value per block
  (``pattern``), so that a block that lands in the wrong place is seen, and both are
  read through numpy views to check the bytes.
* **Floors.** A transfer is compared with what the hardware and the kernel can do with
  the same bytes, measured in the same repetition (memory bandwidth moves with the
  machine's load and clock): a ``memcpy`` of the same byte count, and for a peer in
  another process a raw ``process_vm_readv`` (``process_vm_writev`` for pushes) of
  exactly the same regions, from the peer's pid and addresses. The raw call is the
  cheapest the kernel offers for memory the caller cannot map; it is made here with
  ctypes, outside the library, by the benchmark's own parent process on its own child.
"""
from __future__ import annotations

import ctypes
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._cli import CommandError, memcpy_seconds

#: The kernel's bound on the iovec count of one process_vm call (IOV_MAX).
IOV_MAX = 1024


def pattern(base: int, tensor: int, blocks: int) -> "np.ndarray[Any, np.dtype[np.uint8]]":
    """The value of every block of one tensor: neighbours differ, tensors differ."""
    return ((base + 3 * tensor + np.arange(blocks)) % 251).astype(np.uint8)


class Tensors:
    """``count`` tensors of ``blocks`` x ``block_bytes`` bytes of one memory kind, with
    numpy views; ``close()`` frees library memory (user memory is numpy's)."""

    def __init__(self, kind: str, count: int, blocks: int, block_bytes: int) -> None:
        self.kind = kind
        self._library: List[int] = []
        self.views: List["np.ndarray[Any, np.dtype[np.uint8]]"] = []
        nbytes = blocks * block_bytes
        try:
            for _ in range(count):
                if kind == "user":
                    view = np.zeros((blocks, block_bytes), dtype=np.uint8)
                else:
                    from .. import acl

                    address = acl.malloc(nbytes)
                    self._library.append(address)
                    raw = (ctypes.c_uint8 * nbytes).from_address(address)
                    view = np.ctypeslib.as_array(raw).reshape(blocks, block_bytes)
                self.views.append(view)
        except BaseException:
            self.close()
            raise

    @property
    def addresses(self) -> List[int]:
        return [int(view.ctypes.data) for view in self.views]

    def fill(self, base: int) -> None:
        for t, view in enumerate(self.views):
            view[:] = pattern(base, t, view.shape[0])[:, None]

    def close(self) -> None:
        from .. import acl

        self.views.clear()                 # the views must not outlive the memory
        while self._library:
            acl.free(self._library.pop())


def start_library() -> Callable[[], None]:
    """Make library memory usable in this thread; returns what undoes it."""
    from .. import acl

    initialized = acl.init()
    acl.set_device(0)

    def stop() -> None:
        acl.reset_device(0)
        if initialized:
            acl.finalize()
    return stop


def blocks_hold(views: Sequence["np.ndarray[Any, Any]"], blocks: "np.ndarray[Any, Any]",
                expected: "np.ndarray[Any, Any]") -> bool:
    """Whether block ``blocks[k]`` of tensor ``t`` holds ``expected[t][k]`` in every byte."""
    index = blocks.astype(np.intp)
    return all(bool((view[index] == expected[t][:, None]).all()) for t, view in enumerate(views))


# ---- raw process_vm -----------------------------------------------------------------------------

_libc: Optional[ctypes.CDLL] = None


def _process_vm(write: bool) -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    fn = _libc.process_vm_writev if write else _libc.process_vm_readv
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    fn.restype = ctypes.c_ssize_t
    return fn


class RawProcessVm:
    """The same regions a block transfer moves, moved by ``process_vm_readv`` (pull:
    remote → local) or ``process_vm_writev`` (push: local → remote) and nothing else."""

    def __init__(self, pid: int, local: Sequence[int], remote: Sequence[int], block_bytes: int,
                 src_blocks: "np.ndarray[Any, Any]", dst_blocks: "np.ndarray[Any, Any]", push: bool) -> None:
        local_blocks, remote_blocks = (src_blocks, dst_blocks) if push else (dst_blocks, src_blocks)
        size = np.uint64(block_bytes)
        self._local = np.concatenate([self._iov(base, local_blocks, size) for base in local])
        self._remote = np.concatenate([self._iov(base, remote_blocks, size) for base in remote])
        self._pid, self._push = pid, push
        self._fn = _process_vm(push)
        self.nbytes = int(self._local[:, 1].sum())

    @staticmethod
    def _iov(base: int, blocks: "np.ndarray[Any, Any]", size: "np.uint64") -> "np.ndarray[Any, Any]":
        iov = np.empty((blocks.size, 2), dtype=np.uint64)
        iov[:, 0] = np.uint64(base) + blocks.astype(np.uint64) * size
        iov[:, 1] = size
        return iov

    def __call__(self) -> None:
        local, remote = self._local.ctypes.data, self._remote.ctypes.data
        for first in range(0, self._local.shape[0], IOV_MAX):
            count = min(IOV_MAX, self._local.shape[0] - first)
            moved = self._fn(self._pid, local + 16 * first, count, remote + 16 * first, count, 0)
            expected = int(self._local[first:first + count, 1].sum())
            if moved != expected:
                err = ctypes.get_errno()
                raise CommandError(f"the raw process_vm floor moved {moved} of {expected} bytes "
                                   f"({os.strerror(err) if moved < 0 else 'a short transfer'})", status=1)


def read_remote(pid: int, addresses: Sequence[int], blocks: int, block_bytes: int) -> List["np.ndarray[Any, Any]"]:
    """A copy of a peer's tensors, read with ``process_vm_readv`` (to check what a push wrote)."""
    copies = [np.empty((blocks, block_bytes), dtype=np.uint8) for _ in addresses]
    every = np.arange(blocks, dtype=np.uint64)
    RawProcessVm(pid, [c.ctypes.data for c in copies], addresses, block_bytes, every, every, push=False)()
    return copies


# ---- timing -------------------------------------------------------------------------------------

def best_interleaved(transfer: Callable[[], None], nbytes: int, repeat: int,
                     raw: Optional[Callable[[], None]] = None,
                     regions: Optional[Callable[[], None]] = None) -> Dict[str, Optional[float]]:
    """Best seconds of ``transfer``, of a memcpy of ``nbytes``, and of ``raw`` and
    ``regions`` (when given), each repetition of the transfer followed at once by one of
    each floor, so that all of them see the machine in the same state."""
    transfer()                             # warm-up: first use takes the peer's table copy
    floors = {"raw": raw, "regions": regions}
    for floor in floors.values():
        if floor is not None:
            floor()
    best: Dict[str, float] = {"transfer": float("inf"), "memcpy": float("inf"), "raw": float("inf"),
                              "regions": float("inf")}
    for _ in range(repeat):
        start = time.perf_counter()
        transfer()
        best["transfer"] = min(best["transfer"], time.perf_counter() - start)
        best["memcpy"] = min(best["memcpy"], memcpy_seconds(nbytes))
        for name, floor in floors.items():
            if floor is not None:
                start = time.perf_counter()
                floor()
                best[name] = min(best[name], time.perf_counter() - start)
    return {"transfer": best["transfer"], "memcpy": best["memcpy"],
            **{name: best[name] if floor is not None else None for name, floor in floors.items()}}


class RegionsMemcpy:
    """The ``regions`` floor of library-memory rows: a plain ``memcpy`` of exactly the
    blocks a transfer moves (``order``), each tensor's from one library allocation to
    another of the same size, with nothing else (``lldd_mock_copy_blocks``). Where the
    library's memory cannot use the huge pages numpy's buffers get (shared memory
    without transparent huge pages), and where blocks are scattered, this is what a
    plain copy between such memory costs; the contiguous memcpy floor is not."""

    def __init__(self, count: int, blocks: int, block_bytes: int, order: "np.ndarray[Any, Any]") -> None:
        from .._core import _capi

        self._copy = _capi.mock_function("lldd_mock_copy_blocks")
        self._src = Tensors("library", count, blocks, block_bytes)
        self._dst = Tensors("library", count, blocks, block_bytes)
        self._offsets = np.ascontiguousarray(order.astype(np.uint64) * np.uint64(block_bytes))
        self._pointer = _capi.ffi.from_buffer("uint64_t[]", self._offsets)
        self._block = block_bytes
        self._pairs = list(zip(self._dst.addresses, self._src.addresses))

    def __call__(self) -> None:
        from .._core import _capi

        for dst, src in self._pairs:
            status = self._copy(_capi.ffi.cast("void *", dst), _capi.ffi.cast("void *", src), self._pointer,
                                len(self._offsets), self._block)
            if status != 0:
                raise CommandError(f"lldd_mock_copy_blocks failed with status {status:#x}", status=1)

    def close(self) -> None:
        self._src.close()
        self._dst.close()


def per_call(call: Callable[[], None], calls: int, batches: int = 5) -> float:
    """Seconds per call: the best of ``batches`` batches of ``calls`` calls each (the
    machine's other work only ever adds time)."""
    call()
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def per_call_pair(first: Callable[[], None], second: Callable[[], None], calls: int,
                  batches: int = 7) -> Tuple[float, float]:
    """Seconds per call of ``first`` and of ``second``, their batches alternating so that
    a change of the machine's load hits both (their difference is the figure wanted)."""
    first()
    second()
    best = [float("inf"), float("inf")]
    for _ in range(batches):
        for which, call in enumerate((first, second)):
            start = time.perf_counter()
            for _ in range(calls):
                call()
            best[which] = min(best[which], (time.perf_counter() - start) / calls)
    return best[0], best[1]
