"""Support for the engine tests (tests/native/test_engine_*.py).

- ``PeerProcess``: a native engine in another process. This file is also that
  process's program: it reads one JSON command per line on stdin and answers one
  JSON line, ``{"ok": true, "result": ...}`` or ``{"ok": false, "status": <code>,
  "error": "<message>"}``. Caches live there as numpy arrays filled from a seed, so
  the test computes the expected bytes with the same generator (``fill``).
- ``raw``: direct calls of the C ABI, for the rules the Python layer checks before
  the backend ([all] rules): the tests must reach the mock's own checks.
- small helpers for engines, caches and links in this process.
"""
from __future__ import annotations

import base64
import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

import ports

from llm_datadist_ffi import LLMException, acl, mock_control, native


def fill(num_tensors: int, shape: list[int], seed: int) -> list[np.ndarray]:
    """The arrays of a cache: random bytes from ``seed`` (zeros for seed -1)."""
    size = int(np.prod(shape))
    if seed < 0:
        return [np.zeros(size, dtype=np.uint8) for _ in range(num_tensors)]
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=size, dtype=np.uint8) for _ in range(num_tensors)]


def free_port() -> int:
    """A port to listen on (ports.free_port: below the ephemeral range)."""
    return ports.free_port()


def cluster(remote_cluster_id: int, port: int, local: bool = True) -> native.ClusterInfo:
    """ClusterInfo for a peer listening on 127.0.0.1:port."""
    return native.ClusterInfo(remote_cluster_id, 0, [native.IpInfo("127.0.0.1", 0)] if local else [],
                              [native.IpInfo("127.0.0.1", port)])


def desc(num_tensors: int, shape: list[int], dtype: int = 4, placement: int = 1) -> native.CacheDesc:
    return native.CacheDesc(num_tensors, dtype, shape, native.CachePlacement(placement))


def register(engine: native.LlmDataDist, arrays: list[np.ndarray], dtype: int = 4, placement: int = 1) -> int:
    """Registers C-contiguous arrays of one shape as the tensors of one cache."""
    return engine.register_kv_cache(desc(len(arrays), list(arrays[0].shape), dtype, placement),
                                    [a.ctypes.data for a in arrays])


ARENA_NAME = "/memfd:lldd-mock-arena"


def foreign_arena_bytes() -> int:
    """Bytes of this process's address space mapped from another process's arena chunks:
    mappings of a mock arena memfd (by name in /proc/self/maps) that is none of the
    memfds this process holds open for its own chunks (compared by inode)."""
    own = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(ARENA_NAME):
                own.add(os.stat(f"/proc/self/fd/{fd}").st_ino)
        except OSError:
            continue                       # the fd of the listing itself, gone meanwhile
    total = 0
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith(ARENA_NAME) and int(fields[4]) not in own:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            total += end - start
    return total


def random_arrays(num_tensors: int, shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=shape, dtype=np.uint8) for _ in range(num_tensors)]


def status_of(fn: Any, *args: Any, **kwargs: Any) -> int:
    """Runs a native method; its status (0 when it returns normally)."""
    try:
        fn(*args, **kwargs)
    except LLMException as exc:
        return int(exc.status_code)
    return 0


class Raw:
    """Direct C ABI calls returning raw statuses (no Python-side checks)."""

    def __init__(self) -> None:
        from llm_datadist_ffi._core._loader import ffi, lldd_lib
        self.ffi = ffi
        self.lib = lldd_lib

    def last_error(self) -> str:
        return str(self.ffi.string(self.lib.lldd_last_error()).decode("utf-8", "replace"))

    def take_lints(self) -> list[tuple[int, str]]:
        """The engine's lint record of this thread since the last take, as (rule
        number, message) pairs; clears it (raw calls bypass the package's reader)."""
        count = min(int(self.lib.lldd_mock_lint_count()), 8)
        records = [(int(self.lib.lldd_mock_lint_rule(i)),
                    self.ffi.string(self.lib.lldd_mock_lint_text(i)).decode("utf-8", "replace")) for i in range(count)]
        self.lib.lldd_mock_lint_clear()
        return records

    def ext(self, src: tuple[int, int] = (-1, -1), dst: tuple[int, int] = (-1, -1), n: int = 2) -> Any:
        p = self.ffi.new("lldd_ext_param *")
        p.src_layer_first, p.src_layer_second = src
        p.dst_layer_first, p.dst_layer_second = dst
        p.tensor_num_per_layer = n
        return p

    def index(self, cluster_id: int, cache_id: int, batch: int = 0) -> Any:
        p = self.ffi.new("lldd_cache_index *")
        p.cluster_id, p.cache_id, p.batch_index = cluster_id, cache_id, batch
        return p

    def cache(self, cache_id: int, num_tensors: int = 0, placement: int = 1) -> Any:
        p = self.ffi.new("lldd_cache *")
        p.cache_id = cache_id
        p.cache_desc.num_tensors = num_tensors
        p.cache_desc.placement = placement
        return p

    def blocks(self, values: list[int]) -> Any:
        return self.ffi.new("uint64_t[]", values) if values else self.ffi.NULL

    def pull_cache(self, engine: native.LlmDataDist, cluster_id: int, src: int, dst: int, src_batch: int = 0,
                   batch: int = 0, size: int = -1, ext: Any = None) -> int:
        return int(self.lib.lldd_pull_kv_cache(engine._engine(), self.index(cluster_id, src, src_batch),
                                               self.cache(dst), batch, size, ext if ext is not None else self.ffi.NULL))

    def pull_blocks(self, engine: native.LlmDataDist, cluster_id: int, src: int, dst: int, sblk: list[int],
                    dblk: list[int], ext: Any = None, src_batch: int = 0) -> int:
        return int(self.lib.lldd_pull_kv_blocks(engine._engine(), self.index(cluster_id, src, src_batch),
                                                self.cache(dst), self.blocks(sblk), len(sblk), self.blocks(dblk),
                                                len(dblk), ext if ext is not None else self.ffi.NULL))

    def push_cache(self, engine: native.LlmDataDist, cluster_id: int, src: int, dst: int, num_tensors: int,
                   src_batch: int = 0, dst_batch: int = 0, size: int = -1, ext: Any = None,
                   placement: int = 1) -> int:
        return int(self.lib.lldd_push_kv_cache(engine._engine(), self.cache(src, num_tensors, placement),
                                               self.index(cluster_id, dst, dst_batch), src_batch, size,
                                               ext if ext is not None else self.ffi.NULL))

    def push_blocks(self, engine: native.LlmDataDist, cluster_id: int, src: int, dst: int, num_tensors: int,
                    sblk: list[int], dblk: list[int], ext: Any = None, dst_batch: int = 0,
                    placement: int = 1) -> int:
        return int(self.lib.lldd_push_kv_blocks(engine._engine(), self.cache(src, num_tensors, placement),
                                                self.index(cluster_id, dst, dst_batch), self.blocks(sblk), len(sblk),
                                                self.blocks(dblk), len(dblk),
                                                ext if ext is not None else self.ffi.NULL))

    def options(self, pairs: list[tuple[str, str]]) -> tuple[Any, int, list[Any]]:
        keep: list[Any] = []
        array = self.ffi.new("lldd_option[]", max(len(pairs), 1))
        for i, (k, v) in enumerate(pairs):
            kk, vv = self.ffi.new("char[]", k.encode()), self.ffi.new("char[]", v.encode())
            keep += [kk, vv]
            array[i].key, array[i].value = kk, vv
        return array, len(pairs), keep

    def initialize(self, engine: native.LlmDataDist, pairs: list[tuple[str, str]]) -> int:
        array, count, keep = self.options(pairs)
        status = int(self.lib.lldd_initialize(engine._engine(), array, count))
        del keep
        return status

    def set_role(self, engine: native.LlmDataDist, role: int, pairs: list[tuple[str, str]]) -> int:
        array, count, keep = self.options(pairs)
        status = int(self.lib.lldd_set_role(engine._engine(), role, array, count))
        del keep
        return status


class Peer:
    def __init__(self) -> None:
        self.engine: native.LlmDataDist | None = None
        self.arrays: dict[int, list[np.ndarray]] = {}

    def eng(self) -> native.LlmDataDist:
        assert self.engine is not None
        return self.engine

    def op_init(self, cluster_id: int, role: int, options: dict[str, str]) -> None:
        if self.engine is None:
            self.engine = native.LlmDataDist(cluster_id, role)
        self.engine.initialize(options)

    def op_register(self, num_tensors: int, shape: list[int], seed: int) -> int:
        arrays = fill(num_tensors, shape, seed)
        cache_id = self.eng().register_kv_cache(native.CacheDesc(num_tensors, native.DataType.DT_UINT8, shape),
                                                [a.ctypes.data for a in arrays])
        self.arrays[cache_id] = arrays
        return cache_id

    def op_register_shared(self, num_tensors: int, shape: list[int], seed: int) -> int:
        """A cache over library memory (acl.shared_array) holding ``fill``'s bytes."""
        acl.set_device(0)
        arrays = []
        for values in fill(num_tensors, shape, seed):
            array = acl.shared_array(values.shape)
            array[...] = values
            arrays.append(array)
        cache_id = self.eng().register_kv_cache(native.CacheDesc(num_tensors, native.DataType.DT_UINT8, shape),
                                                [a.ctypes.data for a in arrays])
        self.arrays[cache_id] = arrays
        return cache_id

    def op_allocate(self, num_tensors: int, shape: list[int], seed: int) -> int:
        """A cache from allocate_cache (a pool or the device) holding ``fill``'s bytes."""
        cache = self.eng().allocate_cache(native.CacheDesc(num_tensors, native.DataType.DT_UINT8, shape))
        views = []
        for address, values in zip(cache.tensor_addrs, fill(num_tensors, shape, seed)):
            view = np.ctypeslib.as_array((ctypes.c_uint8 * values.size).from_address(address))
            view[...] = values
            views.append(view)
        self.arrays[cache.cache_id] = views
        return int(cache.cache_id)

    def op_deallocate(self, cache_id: int) -> None:
        self.eng().deallocate_cache(cache_id)
        del self.arrays[cache_id]

    def op_last_path(self, cluster: int) -> str:
        return mock_control.last_transfer_path(self.eng(), cluster)

    def op_foreign_arena_bytes(self) -> int:
        return foreign_arena_bytes()

    def op_unregister(self, cache_id: int) -> None:
        self.eng().unregister_kv_cache(cache_id)

    def op_unregister_and_fill(self, cache_id: int, value: int) -> None:
        """Unregisters a cache and, once that returned, overwrites its memory."""
        self.eng().unregister_kv_cache(cache_id)
        for array in self.arrays.pop(cache_id):
            array.fill(value)

    def op_churn(self, count: int) -> None:
        """Registers and unregisters ``count`` one-tensor caches: ``count`` ids go by."""
        scratch = np.zeros(64, dtype=np.uint8)
        for _ in range(count):
            cache_id = self.eng().register_kv_cache(native.CacheDesc(1, native.DataType.DT_UINT8, [1, 64]),
                                                    [scratch.ctypes.data])
            self.eng().unregister_kv_cache(cache_id)

    def op_bytes(self, cache_id: int) -> str:
        return base64.b64encode(b"".join(a.tobytes() for a in self.arrays[cache_id])).decode()

    def op_link(self, clusters: list[list[int]], timeout: int = 1000) -> list[int]:
        infos = [native.ClusterInfo(c, 0, [native.IpInfo("127.0.0.1", 0)], [native.IpInfo("127.0.0.1", p)])
                 for c, p in clusters]
        status, rets = self.eng().link_llm_clusters(infos, timeout)
        return [int(status), *map(int, rets)]

    def op_unlink(self, clusters: list[list[int]], force: bool = False, timeout: int = 1000) -> list[int]:
        infos = [native.ClusterInfo(c, 0, [], [native.IpInfo("127.0.0.1", p)]) for c, p in clusters]
        status, rets = self.eng().unlink_llm_clusters(infos, timeout, force)
        return [int(status), *map(int, rets)]

    def op_pull_cache(self, cluster: int, src: int, dst: int, src_batch: int = 0, batch: int = 0,
                      size: int = -1) -> None:
        self.eng().pull_kv_cache(native.CacheIndex(cluster, src, src_batch), native.Cache(dst), batch, size)

    def op_pull_blocks(self, cluster: int, src: int, dst: int, src_blocks: list[int], dst_blocks: list[int]) -> None:
        self.eng().pull_kv_blocks(native.CacheIndex(cluster, src), native.Cache(dst), src_blocks, dst_blocks)

    def op_push_cache(self, cluster: int, src: int, dst: int, src_batch: int = 0, dst_batch: int = 0) -> None:
        n = len(self.arrays[src])
        self.eng().push_kv_cache(native.Cache(src, cache_desc=native.CacheDesc(n, native.DataType.DT_UINT8, [1])),
                                 native.CacheIndex(cluster, dst, dst_batch), src_batch)

    def op_push_blocks(self, cluster: int, src: int, dst: int, src_blocks: list[int], dst_blocks: list[int]) -> None:
        n = len(self.arrays[src])
        self.eng().push_kv_blocks(native.Cache(src, cache_desc=native.CacheDesc(n, native.DataType.DT_UINT8, [1])),
                                  native.CacheIndex(cluster, dst), src_blocks, dst_blocks)

    def op_serve_delay(self, ms: int) -> None:
        mock_control.set_serve_delay(self.eng(), ms)

    def op_drop(self) -> None:
        mock_control.drop_connections(self.eng())

    def op_finalize(self) -> None:
        self.eng().finalize()
        self.arrays.clear()

    def op_die(self) -> None:
        sys.stdout.flush()
        os._exit(0)

    def op_link_path(self, cluster: int) -> str:
        return mock_control.link_path(self.eng(), cluster)

    def op_pid(self) -> int:
        return os.getpid()

    def op_live(self) -> list[int]:
        return [mock_control.live_engines(), mock_control.live_allocations()]

    def op_package(self) -> str:
        import llm_datadist_ffi
        return str(Path(llm_datadist_ffi.__file__).resolve())


class PeerProcess:
    """The test side: ``peer.call("register", num_tensors=2, shape=[4, 8], seed=1)``
    returns the result or raises ``PeerError`` carrying the status code."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        # the peer imports the very package under test (not another installed copy)
        import llm_datadist_ffi
        package_root = str(Path(llm_datadist_ffi.__file__).resolve().parent.parent)
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": path, **(env or {})})

    def request(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"peer process ended during {op!r} (exit code {self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def call(self, op: str, **args: Any) -> Any:
        reply = self.request(op, **args)
        if not reply["ok"]:
            raise PeerError(reply["status"], reply["error"])
        return reply["result"]

    def status(self, op: str, **args: Any) -> int:
        """The status of a call that may fail (0 on success)."""
        reply = self.request(op, **args)
        return 0 if reply["ok"] else int(reply["status"])

    def cache_bytes(self, cache_id: int) -> bytes:
        return base64.b64decode(self.call("bytes", cache_id=cache_id))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.close()            # the peer's loop ends and it closes its engine
        except BrokenPipeError:
            pass                               # it was killed
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class PeerError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"0x{status:08X}: {message}")
        self.status = status


def main() -> None:
    peer = Peer()
    for line in sys.stdin:
        cmd: dict[str, Any] = json.loads(line)
        op = cmd.pop("op")
        try:
            result = getattr(peer, f"op_{op}")(**cmd)
            reply: dict[str, Any] = {"ok": True, "result": result}
        except LLMException as exc:
            reply = {"ok": False, "status": int(exc.status_code), "error": str(exc)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    if peer.engine is not None:
        peer.engine.close()


if __name__ == "__main__":
    main()
