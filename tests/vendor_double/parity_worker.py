"""One side of the shim's differential test: runs call scenarios on one backend.

``tests/abi/test_shim_parity.py`` starts two of these: one over the mock library
directly (``--mock LIB``), one over the ascend shim and the fake toolkit's ACL
runtime (``--shim LIB``, in the toolkit's environment). Each reads one JSON
scenario per line on stdin and answers one JSON line with the result of every
call, so the test can require both backends to agree on every status and on
every byte of every cache after every call.

Raw cffi over the C ABI, no package code: the point is to compare the shim +
vendor double with the mock at the C boundary, values the Python layer would
refuse (tensor_num_per_layer above 255, unknown data types, NULL ext) included.

A scenario::

    {"prompt": {"num_tensors": 4, "shape": [6, 16], "data_type": 4},
     "decoder": {...}, "seed": 7,
     "ops": [["pull_blocks", {...}], ["push_cache", {...}], ...]}

The Prompt (cluster 1) listens on 127.0.0.1; the Decoder (cluster 2) links to it.
Both caches are ACL memory filled from ``seed`` and registered before the link.
A result is ``[status, extra, digest, message]``: ``extra`` is the new cache id of a
registration or the per-cluster results of a link call, the digest covers both
caches' bytes, the message is the last error after a failure.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import socket
import sys
from pathlib import Path
from typing import Any

import cffi

INCLUDE = Path(__file__).resolve().parents[2] / "include"
FRAGMENTS = (*re.findall(r'^#include "(lldd/\w+\.h)"', (INCLUDE / "llm_datadist_ffi.h").read_text(), flags=re.M),
             *re.findall(r'^#include "(acl/\w+\.h)"', (INCLUDE / "acl_subset.h").read_text(), flags=re.M))

ffi = cffi.FFI()
ffi.cdef("\n".join((INCLUDE / f).read_text() for f in FRAGMENTS))

PROMPT, DECODER = 1, 2
ELEMENT_SIZE = {1: 2, 3: 4, 4: 1, 9: 8}   # the data types scenarios use for real caches


class Side:
    """The two engines of one scenario, their caches and their memory."""

    def __init__(self, lib: Any, acl: Any, scenario: dict[str, Any]) -> None:
        self.lib, self.acl = lib, acl
        self.keep: list[Any] = []
        self.buffers: list[tuple[int, int]] = []        # (address, size) of every ACL allocation
        self.engines: dict[int, Any] = {}
        self.cache_ids: dict[int, int] = {}
        self.specs = {PROMPT: scenario["prompt"], DECODER: scenario["decoder"]}
        self.addrs: dict[int, list[int]] = {}
        seed = int(scenario["seed"])
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        for cid in (PROMPT, DECODER):
            out = ffi.new("lldd_engine **")
            self.check(lib.lldd_create(cid, cid, out), "create")
            self.engines[cid] = out[0]
        self.initialize(PROMPT)
        self.initialize(DECODER)
        for cid in (PROMPT, DECODER):
            spec = self.specs[cid]
            size = int(spec["shape"][0]) * int(spec["shape"][1]) * ELEMENT_SIZE[int(spec["data_type"])]
            addrs = []
            for t in range(int(spec["num_tensors"])):
                p = ffi.new("void **")
                self.check_acl(acl.aclrtMalloc(p, size, 0), "aclrtMalloc")
                data = bytes(((seed * 131 + cid * 17 + t * 29 + i * 7) >> 1) & 0xFF for i in range(size))
                self.check_acl(acl.aclrtMemcpy(p[0], size, data, size, 1), "aclrtMemcpy")
                addr = int(ffi.cast("uintptr_t", p[0]))
                addrs.append(addr)
                self.buffers.append((addr, size))
            self.addrs[cid] = addrs
            status, cache_id = self.register(cid, spec, addrs)
            self.check(status, "register")
            self.cache_ids[cid] = cache_id
        rets, num = ffi.new("lldd_status[1]"), ffi.new("size_t *")
        self.check(lib.lldd_link_clusters(self.engines[DECODER], self.cluster(PROMPT), 1, 5000, rets, num), "link")

    # ---- helpers ------------------------------------------------------------------------

    def check(self, status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"scenario set-up: {what} gave 0x{status:08X}: {self.message()}")

    def check_acl(self, err: int, what: str) -> None:
        if err != 0:
            raise RuntimeError(f"scenario set-up: {what} gave ACL error {err}")

    def message(self) -> str:
        return ffi.string(self.lib.lldd_last_error()).decode("utf-8", "replace")

    def new(self, ctype: str, init: Any = None) -> Any:
        obj = ffi.new(ctype, init)
        self.keep.append(obj)
        return obj

    def options(self, items: dict[str, str]) -> tuple[Any, int]:
        arr = self.new("lldd_option[]", max(len(items), 1))
        for i, (k, v) in enumerate(items.items()):
            arr[i].key, arr[i].value = self.new("char[]", k.encode()), self.new("char[]", v.encode())
        return arr, len(items)

    def initialize(self, cid: int) -> int:
        opts = {"llm.DeviceId": str(cid - 1)}
        if cid == PROMPT:
            opts["llm.ListenIpInfo"] = f"127.0.0.1:{self.port}"
        return int(self.lib.lldd_initialize(self.engines[cid], *self.options(opts)))

    def desc(self, spec: dict[str, Any]) -> Any:
        d = self.new("lldd_cache_desc *")
        shape = self.new("int64_t[]", [int(x) for x in spec["shape"]])
        d.placement = int(spec.get("placement", 1))
        d.num_tensors, d.data_type = int(spec["num_tensors"]), int(spec["data_type"])
        d.shape, d.shape_len = shape, len(spec["shape"])
        return d

    def register(self, cid: int, spec: dict[str, Any], addrs: list[int]) -> tuple[int, int]:
        cache_id = self.new("int64_t *", -7)
        arr = self.new("uint64_t[]", addrs or [0])
        status = int(self.lib.lldd_register_kv_cache(self.engines[cid], self.desc(spec), arr, len(addrs), cache_id))
        return status, int(cache_id[0])

    def cluster(self, remote: int, port: int | None = None) -> Any:
        return self.clusters([[remote, port]])

    def clusters(self, peers: list[list[Any]]) -> Any:
        """ClusterInfo entries for (remote cluster id, port or None for the Prompt's)."""
        ip = self.new("char[]", b"127.0.0.1")
        c = self.new("lldd_cluster_info[]", len(peers))
        for i, (remote, port) in enumerate(peers):
            local, remote_ip = self.new("lldd_ip_info[1]"), self.new("lldd_ip_info[1]")
            local[0].ip, remote_ip[0].ip = ip, ip
            remote_ip[0].port = self.port if port is None else port
            c[i].remote_cluster_id = remote
            c[i].local_ip_infos, c[i].num_local_ip_infos = local, 1
            c[i].remote_ip_infos, c[i].num_remote_ip_infos = remote_ip, 1
        return c

    def ext(self, e: Any) -> Any:
        if e is None:
            return ffi.NULL
        return self.new("lldd_ext_param *", {"src_layer_first": e[0], "src_layer_second": e[1],
                                             "dst_layer_first": e[2], "dst_layer_second": e[3],
                                             "tensor_num_per_layer": e[4]})

    def cache_id(self, ref: Any) -> int:
        """A cache reference: "P"/"D" for the registered caches, or a literal id."""
        return self.cache_ids[PROMPT if ref == "P" else DECODER] if ref in ("P", "D") else int(ref)

    def index(self, a: dict[str, Any]) -> Any:
        return self.new("lldd_cache_index *", {"cluster_id": a["cluster"], "cache_id": self.cache_id(a["cache"]),
                                               "batch_index": a["batch"]})

    def cache(self, a: dict[str, Any]) -> Any:
        c = self.new("lldd_cache *", {"cache_id": self.cache_id(a["cache"])})
        c.cache_desc.placement = a.get("placement", 1)
        c.cache_desc.num_tensors = a.get("num_tensors", 0)
        return c

    def blocks(self, items: list[int]) -> tuple[Any, int]:
        return (self.new("uint64_t[]", items) if items else ffi.NULL), len(items)

    def digest(self) -> str:
        # Initialize and Finalize set and reset the engine's device in the calling
        # thread; make device 0 current again before reading memory back.
        self.check_acl(self.acl.aclrtSetDevice(0), "aclrtSetDevice")
        h = hashlib.sha256()
        for addr, size in self.buffers:
            buf = ffi.new("uint8_t[]", size)
            err = self.acl.aclrtMemcpy(buf, size, ffi.cast("void *", addr), size, 2)
            h.update(bytes(ffi.buffer(buf)) if err == 0 else f"<ACL {err}>".encode())
        return h.hexdigest()

    # ---- the operations -------------------------------------------------------------------

    def run(self, op: str, a: dict[str, Any]) -> tuple[int, Any]:
        """The call's status, and what else it returned."""
        status = self.call(op, a)
        return (status, None) if isinstance(status, int) else status

    def call(self, op: str, a: dict[str, Any]) -> Any:
        lib, e = self.lib, self.engines[a.get("engine", DECODER)]
        if op == "pull_cache":
            return lib.lldd_pull_kv_cache(e, self.index(a["src"]), self.cache(a["dst"]), a["batch"], a["size"],
                                          self.ext(a["ext"]))
        if op == "pull_blocks":
            return lib.lldd_pull_kv_blocks(e, self.index(a["src"]), self.cache(a["dst"]), *self.blocks(a["src_blocks"]),
                                           *self.blocks(a["dst_blocks"]), self.ext(a["ext"]))
        if op == "push_cache":
            return lib.lldd_push_kv_cache(e, self.cache(a["src"]), self.index(a["dst"]), a["batch"], a["size"],
                                          self.ext(a["ext"]))
        if op == "push_blocks":
            return lib.lldd_push_kv_blocks(e, self.cache(a["src"]), self.index(a["dst"]), *self.blocks(a["src_blocks"]),
                                           *self.blocks(a["dst_blocks"]), self.ext(a["ext"]))
        if op == "register":
            cid = a.get("engine", DECODER)
            status, cache_id = self.register(cid, a["spec"], self.addrs[cid][: int(a["spec"]["num_tensors"])])
            if status == 0:
                self.cache_ids[cid] = cache_id
            return status, (cache_id if status == 0 else None)
        if op == "unregister":
            return lib.lldd_unregister_kv_cache(e, self.cache_id(a["cache"]))
        if op in ("link", "unlink"):
            n = len(a["clusters"])
            rets, num = ffi.new("lldd_status[]", n + 1), ffi.new("size_t *", 99)
            rets[n] = 0xDEADBEEF                     # must stay: rets has room for n entries only
            clusters = self.clusters(a["clusters"])
            status = (lib.lldd_link_clusters(e, clusters, n, a["timeout"], rets, num) if op == "link" else
                      lib.lldd_unlink_clusters(e, clusters, n, a["timeout"], a["force"], rets, num))
            return int(status), [int(num[0]), [int(rets[i]) for i in range(min(num[0], n + 1))]]
        if op == "finalize":
            lib.lldd_finalize(e)
            return 0
        if op == "initialize":
            return self.initialize(a.get("engine", DECODER))
        if op == "set_role":
            return lib.lldd_set_role(e, a["role"], *self.options({}))
        if op == "allocate":
            cache_id, addrs = self.new("int64_t *"), self.new("uint64_t[8]")
            return lib.lldd_allocate_cache(e, self.desc(a["spec"]), cache_id, addrs, 8)
        if op == "copy_cache":
            return lib.lldd_copy_kv_cache(e, self.cache(a["src"]), self.cache(a["dst"]), 0, 0, 0, -1)
        raise ValueError(f"unknown operation {op!r}")

    def close(self) -> None:
        for engine in self.engines.values():
            self.lib.lldd_destroy(engine)
        for addr, _ in self.buffers:
            self.acl.aclrtFree(ffi.cast("void *", addr))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--mock", help="the mock library (both the C ABI and the ACL subset)")
    group.add_argument("--shim", help="the ascend shim; the ACL runtime is libacl_rt.so")
    args = ap.parse_args(argv)
    if args.mock:
        lib = acl = ffi.dlopen(args.mock)
    else:
        acl = ffi.dlopen("libacl_rt.so")
        lib = ffi.dlopen(args.shim)
    if acl.aclrtSetDevice(0) != 0:
        raise RuntimeError("aclrtSetDevice(0) failed")
    print(json.dumps({"backend": ffi.string(lib.lldd_backend_name()).decode()}), flush=True)
    for line in sys.stdin:
        scenario = json.loads(line)
        side = Side(lib, acl, scenario)
        results = []
        try:
            for op, a in scenario["ops"]:
                status, extra = side.run(op, a)
                # The message first: the digest's ACL calls would overwrite the mock's
                # thread-local text (lldd_last_error and aclGetRecentErrMsg share it).
                message = side.message() if status != 0 else ""
                results.append([int(status), extra, side.digest(), message])
        finally:
            side.close()
        print(json.dumps({"results": results}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
