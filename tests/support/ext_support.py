"""Support for the extension-ABI tests (tests/vendor/test_ext_*.py): raw cffi calls of
include/lldd/ext.h, so that the tests reach the mock's own checks (the Python layer
over these functions belongs to the vendor-compatible API and has its own tests).

- ``Ext``: engines made with ``lldd_create`` and initialised with
  ``lldd_ext_initialize``, keys, descriptors and every extension call, returning raw
  statuses; it destroys its engines in ``close``.
- ``Peer``: an extension engine in another process. This file is also that process's
  program: one JSON command per line on stdin, one JSON answer per line. Its caches
  are numpy arrays (registered) or pool memory (allocated) filled from a seed, so the
  test computes the bytes the peer holds with ``fill``.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

import ports

U64 = 2**64 - 1
KEY_CACHE, KEY_BY_ID, KEY_BLOCKS = 1, 2, 3
KIND_CACHE, KIND_BLOCKS = 1, 2
PROMPT, DECODER, MIX = 1, 2, 3
HOST, DEVICE = 0, 1
UINT8 = 4


def free_port() -> int:
    """A port to listen on (ports.free_port: below the ephemeral range)."""
    return ports.free_port()


def fill(num_tensors: int, size: int, seed: int) -> list[np.ndarray]:
    """The bytes of a cache's tensors: random from ``seed`` (zeros for seed -1)."""
    if seed < 0:
        return [np.zeros(size, dtype=np.uint8) for _ in range(num_tensors)]
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=size, dtype=np.uint8) for _ in range(num_tensors)]


def v2_options(direct: bool = True, port: int | None = None, pool: bool = False, host_pool: bool = False,
               role: str = "Decoder", **extra: str) -> dict[str, str]:
    options = {"llm.Role": role, "llm.EnableCacheManager": "1",
               "llm.EnableRemoteCacheAccessible": "1" if direct else "0", "ge.exec.deviceId": "0"}
    if port is not None:
        options["llm.ListenIp"] = "127.0.0.1"
        options["llm.ListenPort"] = str(port)
    if pool:
        options["llm.MemPoolConfig"] = '{"memory_size": 16777216, "page_shift": 12}'
    if host_pool:
        options["llm.HostMemPoolConfig"] = '{"memory_size": 16777216, "page_shift": 12}'
    options.update(extra)
    return options


def v1_options(role: str = "Decoder", port: int | None = None, **extra: str) -> dict[str, str]:
    options = {"llm.Role": role, "ge.exec.deviceId": "0"}
    if port is not None:
        options["llm.listenIpInfo"] = f"127.0.0.1:{port}"
    options.update(extra)
    return options


class Ext:
    """Raw calls of the extension ABI. Statuses are returned, never raised."""

    def __init__(self) -> None:
        from llm_datadist_ffi._core._loader import ffi, lldd_lib
        self.ffi = ffi
        self.lib = lldd_lib
        self.engines: list[Any] = []
        self.kept: list[Any] = []          # registered memory stays alive as long as the engines

    # ---- engines --------------------------------------------------------------------------

    def last_error(self) -> str:
        return str(self.ffi.string(self.lib.lldd_last_error()).decode("utf-8", "replace"))

    def take_lints(self) -> list[int]:
        """The rule numbers of the engine's lint record of this thread since the last
        take (PR-n is n), in order; clears the record."""
        count = min(int(self.lib.lldd_mock_lint_count()), 8)
        rules = [int(self.lib.lldd_mock_lint_rule(i)) for i in range(count)]
        self.lib.lldd_mock_lint_clear()
        return rules

    def create(self, cluster_id: int, role: int = DECODER) -> Any:
        out = self.ffi.new("lldd_engine **")
        assert self.lib.lldd_create(cluster_id, role, out) == 0
        self.engines.append(out[0])
        return out[0]

    def options(self, pairs: dict[str, str]) -> tuple[Any, int, list[Any]]:
        keep: list[Any] = []
        array = self.ffi.new("lldd_option[]", max(len(pairs), 1))
        for i, (k, v) in enumerate(pairs.items()):
            kk, vv = self.ffi.new("char[]", k.encode()), self.ffi.new("char[]", v.encode())
            keep += [kk, vv]
            array[i].key, array[i].value = kk, vv
        return array, len(pairs), keep

    def init(self, engine: Any, options: dict[str, str]) -> int:
        array, count, keep = self.options(options)
        status = int(self.lib.lldd_ext_initialize(engine, array, count))
        del keep
        return status

    def engine(self, cluster_id: int, options: dict[str, str]) -> Any:
        """A created and initialised engine (initialisation must succeed)."""
        engine = self.create(cluster_id)
        status = self.init(engine, options)
        assert status == 0, f"0x{status:08X}: {self.last_error()}"
        return engine

    def listening(self, cluster_id: int, options: dict[str, str], v1: bool = False) -> tuple[Any, int]:
        """An engine listening on a free port of 127.0.0.1, and the port."""
        for _ in range(20):
            port = free_port()
            opts = dict(options)
            if v1:
                opts["llm.listenIpInfo"] = f"127.0.0.1:{port}"
            else:
                opts["llm.ListenIp"], opts["llm.ListenPort"] = "127.0.0.1", str(port)
            engine = self.create(cluster_id)
            status = self.init(engine, opts)
            if status == 0:
                return engine, port
            self.destroy(engine)
        raise RuntimeError("no free port for a listener")

    def destroy(self, engine: Any) -> None:
        self.engines.remove(engine)
        self.lib.lldd_destroy(engine)

    def close(self) -> None:
        for engine in reversed(self.engines):
            self.lib.lldd_destroy(engine)
        self.engines.clear()
        self.kept.clear()

    # ---- keys and descriptors -------------------------------------------------------------

    def key(self, kind: int = KEY_CACHE, cluster: int = 0, req: int = U64, prefix: int = U64, model: int = 0,
            cache_id: int = -1, batch: int = 0) -> Any:
        k = self.ffi.new("lldd_key *")
        k.kind, k.cluster_id, k.req_id, k.prefix_id, k.model_id = kind, cluster, req, prefix, model
        k.cache_id, k.batch_index = cache_id, batch
        return k

    def req(self, req: int, model: int = 0, cluster: int = 0) -> Any:
        return self.key(KEY_CACHE, cluster, req=req, model=model)

    def prefix(self, prefix: int, model: int = 0, cluster: int = 0) -> Any:
        return self.key(KEY_CACHE, cluster, prefix=prefix, model=model)

    def placeholder(self, model: int = 0) -> Any:
        return self.key(KEY_CACHE, 0, model=model)

    def by_id(self, cluster: int, cache_id: int, batch: int = 0) -> Any:
        return self.key(KEY_BY_ID, cluster, cache_id=cache_id, batch=batch)

    def blocks_key(self, cluster: int = 0, model: int = 0) -> Any:
        return self.key(KEY_BLOCKS, cluster, model=model)

    def key_array(self, keys: Sequence[Any]) -> Any:
        if not keys:
            return self.ffi.NULL
        array = self.ffi.new("lldd_key[]", len(keys))
        for i, k in enumerate(keys):
            array[i] = k[0]
        return array

    def desc(self, num_tensors: int, shape: Sequence[int], dtype: int = UINT8,
             placement: int = DEVICE) -> tuple[Any, Any]:
        d = self.ffi.new("lldd_cache_desc *")
        shape_array = self.ffi.new("int64_t[]", list(shape)) if shape else self.ffi.NULL
        d.placement, d.num_tensors, d.data_type = placement, num_tensors, dtype
        d.shape, d.shape_len = shape_array, len(shape)
        return d, shape_array

    def u64(self, values: Iterable[int]) -> Any:
        values = list(values)
        return self.ffi.new("uint64_t[]", values) if values else self.ffi.NULL

    # ---- cache life cycle -----------------------------------------------------------------

    def register(self, engine: Any, arrays: Sequence[np.ndarray], kind: int = KIND_CACHE, remote: int = 1,
                 keys: Sequence[Any] = (), placement: int = DEVICE, shape: Sequence[int] | None = None,
                 num_tensors: int | None = None) -> tuple[int, int]:
        """Registers arrays of one shape as the tensors of one cache: (status, id). The
        arrays are kept alive until ``close``."""
        self.kept.append(list(arrays))
        shape = list(arrays[0].shape) if shape is None else list(shape)
        d, keep = self.desc(len(arrays) if num_tensors is None else num_tensors, shape, UINT8, placement)
        addrs = self.u64(a.ctypes.data for a in arrays)
        out = self.ffi.new("int64_t *", -1)
        status = int(self.lib.lldd_ext_register_cache(engine, d, addrs, len(arrays), kind, remote,
                                                      self.key_array(keys), len(keys), out))
        del keep
        return status, int(out[0])

    def allocate(self, engine: Any, num_tensors: int, shape: Sequence[int], kind: int = KIND_CACHE,
                 keys: Sequence[Any] = (), placement: int = DEVICE) -> tuple[int, int, list[int]]:
        d, keep = self.desc(num_tensors, shape, UINT8, placement)
        out = self.ffi.new("int64_t *", -1)
        addrs = self.ffi.new("uint64_t[]", max(num_tensors, 1))
        status = int(self.lib.lldd_ext_allocate_cache(engine, d, kind, self.key_array(keys), len(keys), out, addrs,
                                                      max(num_tensors, 1)))
        del keep
        return status, int(out[0]), [int(addrs[i]) for i in range(num_tensors)] if status == 0 else []

    def deallocate(self, engine: Any, cache_id: int) -> int:
        return int(self.lib.lldd_ext_deallocate_cache(engine, cache_id))

    def unregister(self, engine: Any, cache_id: int) -> int:
        return int(self.lib.lldd_ext_unregister_cache(engine, cache_id))

    def remove_key(self, engine: Any, key: Any) -> int:
        return int(self.lib.lldd_ext_remove_cache_key(engine, key))

    # ---- memory ---------------------------------------------------------------------------

    def view(self, addr: int, size: int) -> np.ndarray:
        """A numpy view of memory the engine owns (pool memory of an allocated cache)."""
        return np.frombuffer(self.ffi.buffer(self.ffi.cast("uint8_t *", addr), size), dtype=np.uint8)

    # ---- transfers ------------------------------------------------------------------------

    def pull(self, engine: Any, src: Any, dst_cache_id: int, batch_index: int = 0, size: int = -1,
             src_blocks: Sequence[int] = (), dst_blocks: Sequence[int] = (), src_tensors: Sequence[int] = (),
             dst_tensors: Sequence[int] = (), src_offset: int = -1, dst_offset: int = -1, n: int = 2) -> int:
        return int(self.lib.lldd_ext_pull(engine, src, dst_cache_id, batch_index, size, self.u64(src_blocks),
                                          len(src_blocks), self.u64(dst_blocks), len(dst_blocks),
                                          self.u64(src_tensors), len(src_tensors), self.u64(dst_tensors),
                                          len(dst_tensors), src_offset, dst_offset, n))

    def push_layer(self, engine: Any, src_cache_id: int, dst: Any, src_layer: int = 0, dst_layer: int = 0,
                   src_batch: int = 0, n: int = 2, src_blocks: Sequence[int] = (),
                   dst_blocks: Sequence[int] = ()) -> int:
        return int(self.lib.lldd_ext_push_layer(engine, src_cache_id, src_batch, src_layer, dst, dst_layer, n,
                                                self.u64(src_blocks), len(src_blocks), self.u64(dst_blocks),
                                                len(dst_blocks)))

    def transfer_layer(self, engine: Any, src_cache_id: int, layer: int, dst_cluster: int, dst_addrs: Sequence[int],
                       src_batch: int = 0, src_blocks: Sequence[int] = (), dst_blocks: Sequence[int] = (),
                       block_size: int = 0) -> int:
        return int(self.lib.lldd_ext_transfer_layer(engine, src_cache_id, src_batch, layer, dst_cluster,
                                                    self.u64(dst_addrs), self.u64(src_blocks), len(src_blocks),
                                                    self.u64(dst_blocks), len(dst_blocks), block_size))

    # ---- links ----------------------------------------------------------------------------

    def clusters(self, entries: Sequence[tuple[int, int]], local: int = 1) -> tuple[Any, list[Any]]:
        keep: list[Any] = []
        infos = self.ffi.new("lldd_cluster_info[]", len(entries))
        ip = self.ffi.new("char[]", b"127.0.0.1")
        keep.append(ip)
        for i, (cluster, port) in enumerate(entries):
            remote = self.ffi.new("lldd_ip_info[]", 1)
            remote[0].ip, remote[0].port = ip, port
            locals_ = self.ffi.new("lldd_ip_info[]", max(local, 1))
            for j in range(local):
                locals_[j].ip, locals_[j].port = ip, 0
            keep += [remote, locals_]
            infos[i].remote_cluster_id = cluster
            infos[i].remote_ip_infos, infos[i].num_remote_ip_infos = remote, 1
            infos[i].local_ip_infos, infos[i].num_local_ip_infos = locals_, local
        return infos, keep

    def link(self, engine: Any, entries: Sequence[tuple[int, int]], timeout: int = 5000,
             local: int = 1) -> tuple[int, list[int]]:
        infos, keep = self.clusters(entries, local)
        rets = self.ffi.new("lldd_status[]", max(len(entries), 1))
        count = self.ffi.new("size_t *")
        status = int(self.lib.lldd_link_clusters(engine, infos, len(entries), timeout, rets, count))
        del keep
        return status, [int(rets[i]) for i in range(count[0])]

    def unlink(self, engine: Any, entries: Sequence[tuple[int, int]], force: bool = False, timeout: int = 5000,
               local: int = 1) -> tuple[int, list[int]]:
        infos, keep = self.clusters(entries, local)
        rets = self.ffi.new("lldd_status[]", max(len(entries), 1))
        count = self.ffi.new("size_t *")
        status = int(self.lib.lldd_unlink_clusters(engine, infos, len(entries), timeout, int(force), rets, count))
        del keep
        return status, [int(rets[i]) for i in range(count[0])]


# ---- a peer in another process ---------------------------------------------------------------


class PeerServer:
    """The peer process's side: one engine and the memory of its caches."""

    def __init__(self) -> None:
        self.x = Ext()
        self.engine: Any = None
        self.arrays: dict[int, list[np.ndarray]] = {}
        self.sizes: dict[int, tuple[list[int], int]] = {}

    def op_init(self, cluster_id: int, options: dict[str, str]) -> int:
        self.engine = self.x.create(cluster_id)
        return self.x.init(self.engine, options)

    def op_register(self, num_tensors: int, shape: list[int], seed: int, kind: int = KIND_CACHE,
                    keys: list[dict[str, int]] = (), remote: int = 1) -> list[int]:
        arrays = [a.reshape(shape) for a in fill(num_tensors, int(np.prod(shape)), seed)]
        status, cache_id = self.x.register(self.engine, arrays, kind, remote, [self.x.key(**k) for k in keys])
        if status == 0:
            self.arrays[cache_id] = arrays
        return [status, cache_id]

    def op_allocate(self, num_tensors: int, shape: list[int], seed: int, kind: int = KIND_CACHE,
                    keys: list[dict[str, int]] = ()) -> list[int]:
        status, cache_id, addrs = self.x.allocate(self.engine, num_tensors, shape, kind,
                                                  [self.x.key(**k) for k in keys])
        if status == 0:
            size = int(np.prod(shape))
            self.sizes[cache_id] = (addrs, size)
            for view, data in zip((self.x.view(a, size) for a in addrs), fill(num_tensors, size, seed)):
                view[:] = data
        return [status, cache_id]

    def op_bytes(self, cache_id: int) -> str:
        if cache_id in self.arrays:
            data = b"".join(a.tobytes() for a in self.arrays[cache_id])
        else:
            addrs, size = self.sizes[cache_id]
            data = b"".join(self.x.view(a, size).tobytes() for a in addrs)
        return base64.b64encode(data).decode()

    def op_addresses(self, cache_id: int) -> list[int]:
        if cache_id in self.arrays:
            return [int(a.ctypes.data) for a in self.arrays[cache_id]]
        return list(self.sizes[cache_id][0])

    def op_deallocate(self, cache_id: int) -> int:
        return self.x.deallocate(self.engine, cache_id)

    def op_remove_key(self, key: dict[str, int]) -> int:
        return self.x.remove_key(self.engine, self.x.key(**key))

    def op_unregister(self, cache_id: int) -> int:
        return self.x.unregister(self.engine, cache_id)

    def op_link(self, entries: list[list[int]], timeout: int = 5000) -> list[int]:
        status, rets = self.x.link(self.engine, [tuple(e) for e in entries], timeout)  # type: ignore[misc]
        return [status, *rets]

    def op_pull(self, key: dict[str, int], dst: int, **kwargs: Any) -> int:
        return self.x.pull(self.engine, self.x.key(**key), dst, **kwargs)

    def op_ext(self, name: str, args: list[Any]) -> int:
        """Any extension call with integer arguments and uint64 arrays (lists)."""
        converted = [self.x.u64(a) if isinstance(a, list) else a for a in args]
        return int(getattr(self.x.lib, name)(self.engine, *converted))

    def op_ext_link(self, name: str, ids: list[int], ranks: list[int]) -> list[int]:
        out = self.x.ffi.new("uint64_t *")
        status = int(self.x.lib.lldd_ext_link(self.engine, name.encode(), self.x.u64(ids),
                                              self.x.ffi.new("uint32_t[]", ranks), len(ids), b"{}", out))
        return [status, int(out[0])]

    def op_ext_query(self, comm_id: int) -> list[int]:
        out = self.x.ffi.new("uint32_t *", 99)
        status = int(self.x.lib.lldd_ext_query_register_mem_status(self.engine, comm_id, out))
        return [status, int(out[0])]

    def op_serve_delay(self, ms: int) -> int:
        return int(self.x.lib.lldd_mock_set_serve_delay(self.engine, ms))

    def op_finalize(self) -> None:
        self.x.lib.lldd_finalize(self.engine)

    def op_live(self) -> int:
        return int(self.x.lib.lldd_mock_live_allocations())


class Peer:
    """The test's side: ``peer.call("register", num_tensors=2, shape=[4, 8], seed=1)``."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        import llm_datadist_ffi
        package_root = str(Path(llm_datadist_ffi.__file__).resolve().parent.parent)
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": path, **(env or {})})

    def call(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"peer process ended during {op!r} (exit code {self.proc.wait()})")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"peer: {reply['error']}")
        return reply["result"]

    def cache_bytes(self, cache_id: int) -> bytes:
        return base64.b64decode(self.call("bytes", cache_id=cache_id))

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()

    def __enter__(self) -> "Peer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    server = PeerServer()
    for line in sys.stdin:
        cmd: dict[str, Any] = json.loads(line)
        op = cmd.pop("op")
        try:
            reply: dict[str, Any] = {"result": getattr(server, f"op_{op}")(**cmd)}
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    server.x.close()


if __name__ == "__main__":
    main()
