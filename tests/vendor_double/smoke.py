"""Smoke test of the ascend shim through raw cffi: no package code involved.

Run in a process whose environment is the toolkit's (``set_env.sh`` of a fake
toolkit made by ``build_toolkit.py``, or of a real one)::

    python tests/vendor_double/smoke.py SHIM_LIB [--mock-lib PATH]

It loads the ACL runtime (``libacl_rt.so``) and the shim exactly as the package's
ascend backend does, then drives the C ABI: create, initialize a Prompt and a
Decoder engine on 127.0.0.1, register ACL memory, link, pull a block list (all
layers, then one layer), check every destination byte, unlink, finalize, destroy.
Along the way it checks the shim's own contract: the backend name and
capabilities, NULL and out-of-range arguments, the v2 FEATURE_NOT_ENABLED calls
and their message, the ACL runtime's text in the last error, and a std::bad_alloc
caught at the boundary.

``--mock-lib`` (the fake toolkit only) also opens the mock's control interface on
the same instance, to check that every status value is named in the last error.
Exits 0 and prints ``shim smoke: OK`` when everything held.
"""
from __future__ import annotations

import argparse
import re
import socket
import sys
from pathlib import Path

import cffi

INCLUDE = Path(__file__).resolve().parents[2] / "include"
# The C ABI fragments in the umbrella header's order, then the ACL subset's.
FRAGMENTS = (*re.findall(r'^#include "(lldd/\w+\.h)"', (INCLUDE / "llm_datadist_ffi.h").read_text(), flags=re.M),
             *re.findall(r'^#include "(acl/\w+\.h)"', (INCLUDE / "acl_subset.h").read_text(), flags=re.M))

ffi = cffi.FFI()
ffi.cdef("\n".join((INCLUDE / f).read_text() for f in FRAGMENTS))

LLM_SUCCESS = 0
LLM_FAILED = 0xFFFFFFFF
LLM_PARAM_INVALID = 0x5010B005
LLM_KV_CACHE_NOT_EXIST = 0x5010B002
LLM_FEATURE_NOT_ENABLED = 0x5010B019
DT_FLOAT16 = 1

NUM_TENSORS = 4          # 2 layers x (K, V)
BLOCKS = 8
BLOCK_BYTES = 64
SHAPE = (BLOCKS, BLOCK_BYTES // 2)   # float16


def status_names() -> dict[int, str]:
    text = (INCLUDE / "lldd" / "status.h").read_text()
    return {int(v, 16): n for n, v in re.findall(r"(LLM_\w+)\s*=\s*(0x[0-9A-Fa-f]+)", text)}


class Smoke:
    def __init__(self, shim_path: str) -> None:
        self.acl = ffi.dlopen("libacl_rt.so")
        self.lib = ffi.dlopen(shim_path)
        self.keep: list[object] = []

    # ---- helpers ----------------------------------------------------------------------

    def last_error(self) -> str:
        return ffi.string(self.lib.lldd_last_error()).decode()

    def expect(self, status: int, wanted: int, *fragments: str) -> str:
        message = self.last_error()
        assert status == wanted, f"status 0x{status:08X}, wanted 0x{wanted:08X}: {message}"
        for fragment in fragments:
            assert fragment in message, f"{fragment!r} not in last error {message!r}"
        return message

    def ok(self, status: int) -> None:
        assert status == LLM_SUCCESS, f"status 0x{status:08X}: {self.last_error()}"

    def acl_ok(self, err: int, what: str) -> None:
        assert err == 0, f"{what}: ACL error {err}"

    def options(self, items: dict[str, str]):
        arr = ffi.new("lldd_option[]", len(items))
        for i, (k, v) in enumerate(items.items()):
            kb, vb = ffi.new("char[]", k.encode()), ffi.new("char[]", v.encode())
            self.keep += [kb, vb]
            arr[i].key, arr[i].value = kb, vb
        return arr, len(items)

    def create(self, cluster_id: int, role: int):
        out = ffi.new("lldd_engine **")
        self.ok(self.lib.lldd_create(cluster_id, role, out))
        assert out[0] != ffi.NULL
        return out[0]

    def device_tensors(self, fill: int | None) -> list[int]:
        addrs = []
        for t in range(NUM_TENSORS):
            p = ffi.new("void **")
            self.acl_ok(self.acl.aclrtMalloc(p, BLOCKS * BLOCK_BYTES, 0), "aclrtMalloc")
            data = (bytes(((fill + t * 31 + i) & 0xFF) for i in range(BLOCKS * BLOCK_BYTES))
                    if fill is not None else bytes(BLOCKS * BLOCK_BYTES))
            self.acl_ok(self.acl.aclrtMemcpy(p[0], BLOCKS * BLOCK_BYTES, data, len(data), 1), "H2D")
            addrs.append(int(ffi.cast("uintptr_t", p[0])))
        return addrs

    def read(self, addr: int) -> bytes:
        buf = ffi.new("uint8_t[]", BLOCKS * BLOCK_BYTES)
        self.acl_ok(self.acl.aclrtMemcpy(buf, len(buf), ffi.cast("void *", addr), len(buf), 2), "D2H")
        return bytes(ffi.buffer(buf))

    def desc(self, data_type: int = DT_FLOAT16):
        shape = ffi.new("int64_t[]", SHAPE)
        self.keep.append(shape)
        d = ffi.new("lldd_cache_desc *")
        d.placement, d.num_tensors, d.data_type = 1, NUM_TENSORS, data_type
        d.shape, d.shape_len = shape, len(SHAPE)
        return d

    def register(self, engine, addrs: list[int]) -> int:
        cache_id = ffi.new("int64_t *")
        arr = ffi.new("uint64_t[]", addrs)
        self.ok(self.lib.lldd_register_kv_cache(engine, self.desc(), arr, len(addrs), cache_id))
        return int(cache_id[0])

    def cluster(self, remote_id: int, port: int):
        local = ffi.new("lldd_ip_info[1]")
        remote = ffi.new("lldd_ip_info[1]")
        ip = ffi.new("char[]", b"127.0.0.1")
        local[0].ip, remote[0].ip, remote[0].port = ip, ip, port
        c = ffi.new("lldd_cluster_info[1]")
        c[0].remote_cluster_id = remote_id
        c[0].local_ip_infos, c[0].num_local_ip_infos = local, 1
        c[0].remote_ip_infos, c[0].num_remote_ip_infos = remote, 1
        self.keep += [local, remote, ip]
        return c

    def pull_blocks(self, engine, src_cluster: int, src_cache: int, dst_cache: int, src: list[int],
                    dst: list[int], ext=ffi.NULL) -> int:
        index = ffi.new("lldd_cache_index *", {"cluster_id": src_cluster, "cache_id": src_cache})
        cache = ffi.new("lldd_cache *", {"cache_id": dst_cache})
        s, d = ffi.new("uint64_t[]", src), ffi.new("uint64_t[]", dst)
        return self.lib.lldd_pull_kv_blocks(engine, index, cache, s, len(src), d, len(dst), ext)

    # ---- the scenario -------------------------------------------------------------------

    def run(self, mock_lib: str | None, bad_alloc: bool = True) -> None:
        lib = self.lib
        assert lib.lldd_abi_version() == 1
        assert ffi.string(lib.lldd_backend_name()) == b"ascend"
        assert lib.lldd_capabilities() == 0x01 | 0x08, hex(lib.lldd_capabilities())
        assert self.last_error() == ""

        # NULL handles and out-pointers are the shim's to reject.
        self.expect(lib.lldd_create(1, 1, ffi.NULL), LLM_PARAM_INVALID, "lldd_create: out is NULL")
        self.expect(lib.lldd_initialize(ffi.NULL, ffi.NULL, 0), LLM_PARAM_INVALID, "engine is NULL")
        lib.lldd_destroy(ffi.NULL)

        self.acl_ok(self.acl.aclrtSetDevice(0), "aclrtSetDevice")
        prompt = self.create(1, 1)
        decoder = self.create(2, 2)

        # Before Initialize: the vendor says FAILED; the v2-only refusals hold in every state.
        self.expect(lib.lldd_unregister_kv_cache(prompt, 1), LLM_FAILED, "UnregisterKvCache returned LLM_FAILED")
        cache_id = ffi.new("int64_t *")
        addrs = ffi.new("uint64_t[4]")
        self.expect(lib.lldd_allocate_cache(prompt, self.desc(), cache_id, addrs, 4), LLM_FEATURE_NOT_ENABLED,
                    "AllocateCache returned LLM_FEATURE_NOT_ENABLED (0x5010B019)", "lldd_register_kv_cache")
        self.expect(lib.lldd_deallocate_cache(prompt, 1), LLM_FEATURE_NOT_ENABLED, "DeallocateCache")

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.ok(lib.lldd_initialize(prompt, *self.options({"llm.DeviceId": "0",
                                                           "llm.ListenIpInfo": f"127.0.0.1:{port}"})))
        self.ok(lib.lldd_initialize(decoder, *self.options({"llm.DeviceId": "1"})))
        # A repeated key keeps its last value; a NULL key is rejected.
        bad = ffi.new("lldd_option[1]")
        self.expect(lib.lldd_set_role(decoder, 2, bad, 1), LLM_PARAM_INVALID, "options[0].key is NULL")

        src_addrs = self.device_tensors(fill=7)
        dst_addrs = self.device_tensors(fill=None)
        src_id = self.register(prompt, src_addrs)
        dst_id = self.register(decoder, dst_addrs)

        # A data type ge::DataType cannot hold is passed as DT_UNDEFINED and refused.
        arr = ffi.new("uint64_t[]", dst_addrs)
        self.expect(lib.lldd_register_kv_cache(decoder, self.desc(data_type=99), arr, NUM_TENSORS, cache_id),
                    LLM_PARAM_INVALID, "RegisterKvCache returned LLM_PARAM_INVALID", "DT_UNDEFINED")

        # Links: per-cluster results; nothing at all for an argument error.
        rets = ffi.new("lldd_status[1]")
        num = ffi.new("size_t *", 99)
        self.expect(lib.lldd_link_clusters(decoder, ffi.NULL, 0, 1000, rets, num), LLM_PARAM_INVALID,
                    "LinkLlmClusters returned LLM_PARAM_INVALID")
        assert num[0] == 0
        clusters = self.cluster(1, port)
        self.ok(lib.lldd_link_clusters(decoder, clusters, 1, 5000, rets, num))
        assert num[0] == 1 and rets[0] == LLM_SUCCESS

        # All layers: blocks 1, 2, 5 of the Prompt land in blocks 0, 3, 4 of the Decoder.
        src_blocks, dst_blocks = [1, 2, 5], [0, 3, 4]
        self.ok(self.pull_blocks(decoder, 1, src_id, dst_id, src_blocks, dst_blocks))
        for t in range(NUM_TENSORS):
            want = bytearray(BLOCKS * BLOCK_BYTES)
            src = self.read(src_addrs[t])
            for sb, db in zip(src_blocks, dst_blocks):
                want[db * BLOCK_BYTES:(db + 1) * BLOCK_BYTES] = src[sb * BLOCK_BYTES:(sb + 1) * BLOCK_BYTES]
            assert self.read(dst_addrs[t]) == bytes(want), f"tensor {t} differs after the pull"

        # One layer (inclusive pair {1, 1}): only tensors 2 and 3 change.
        before = [self.read(a) for a in dst_addrs]
        ext = ffi.new("lldd_ext_param *", {"src_layer_first": 1, "src_layer_second": 1, "dst_layer_first": 1,
                                           "dst_layer_second": 1, "tensor_num_per_layer": 2})
        self.ok(self.pull_blocks(decoder, 1, src_id, dst_id, [7], [7], ext))
        after = [self.read(a) for a in dst_addrs]
        assert after[0] == before[0] and after[1] == before[1]
        for t in (2, 3):
            assert after[t][7 * BLOCK_BYTES:] == self.read(src_addrs[t])[7 * BLOCK_BYTES:]

        # tensor_num_per_layer the vendor's uint8_t cannot hold: rejected, never truncated
        # (256 would become 0, 258 would become a valid 2).
        ext.tensor_num_per_layer = 258
        self.expect(self.pull_blocks(decoder, 1, src_id, dst_id, [0], [0], ext), LLM_PARAM_INVALID,
                    "tensor_num_per_layer is 258", "PullKvBlocks was not called")

        # A vendor failure carries the runtime's (here: the mock's) message for the thread.
        status = self.pull_blocks(decoder, 1, 12345, dst_id, [0], [0])
        runtime = self.acl.aclGetRecentErrMsg()
        assert runtime != ffi.NULL
        self.expect(status, LLM_KV_CACHE_NOT_EXIST, "PullKvBlocks returned LLM_KV_CACHE_NOT_EXIST (0x5010B002): ",
                    ffi.string(runtime).decode().strip())

        index = ffi.new("lldd_cache_index *", {"cluster_id": 1, "cache_id": src_id})
        cache = ffi.new("lldd_cache *", {"cache_id": dst_id})
        if bad_alloc:
            # A C++ exception inside the boundary: a block list too large to copy
            # (2^62 bytes; the allocation fails before anything is read).
            one = ffi.new("uint64_t[1]")
            self.expect(lib.lldd_pull_kv_blocks(decoder, index, cache, one, 1 << 59, one, 1, ffi.NULL),
                        LLM_FAILED, "std::bad_alloc")

        self.expect(lib.lldd_copy_kv_cache(decoder, cache, cache, 0, 0, 0, -1), LLM_FEATURE_NOT_ENABLED,
                    "CopyKvCache returned LLM_FEATURE_NOT_ENABLED", "aclrtMemcpy")

        # Extensions (vendor-Python-only features) are refused with what to use instead.
        key = ffi.new("lldd_key *", {"kind": 3, "cluster_id": 1})
        self.expect(lib.lldd_ext_remove_cache_key(decoder, key), LLM_FEATURE_NOT_ENABLED,
                    "lldd_ext_remove_cache_key: not available on the ascend backend", "lldd_register_kv_cache")
        self.expect(lib.lldd_ext_unlink(ffi.NULL, 1), LLM_PARAM_INVALID, "engine is NULL")

        if mock_lib:
            self.check_status_names(decoder, mock_lib)

        self.ok(lib.lldd_unlink_clusters(decoder, clusters, 1, 5000, 0, rets, num))
        assert num[0] == 1 and rets[0] == LLM_SUCCESS
        self.ok(lib.lldd_unregister_kv_cache(decoder, dst_id))
        lib.lldd_finalize(decoder)
        self.expect(lib.lldd_unregister_kv_cache(decoder, dst_id), LLM_FAILED)
        lib.lldd_destroy(decoder)
        lib.lldd_destroy(prompt)     # initialised: the destructor finalizes it
        for a in src_addrs + dst_addrs:
            self.acl_ok(self.acl.aclrtFree(ffi.cast("void *", a)), "aclrtFree")

    def check_status_names(self, engine, mock_lib: str) -> None:
        """Every status of the C ABI, injected into the mock, is named by the shim."""
        mock_ffi = cffi.FFI()
        fragments = [f for f in FRAGMENTS if f.startswith("lldd/")] + ["lldd/mock.h"]
        mock_ffi.cdef("\n".join((INCLUDE / f).read_text() for f in fragments))
        mock = mock_ffi.dlopen(mock_lib)
        index = ffi.new("lldd_cache_index *", {"cluster_id": 1, "cache_id": 1})
        cache = ffi.new("lldd_cache *", {"cache_id": 1})
        for code, name in sorted(status_names().items()):
            if code == LLM_SUCCESS:
                continue
            assert mock.lldd_mock_inject_fault(b"lldd_pull_kv_cache", code, 1, 0) == 0
            self.expect(self.lib.lldd_pull_kv_cache(engine, index, cache, 0, -1, ffi.NULL), code,
                        f"PullKvCache returned {name} (0x{code:08X})")
        assert mock.lldd_mock_inject_fault(b"lldd_pull_kv_cache", 507053, 1, 0) == 0
        self.expect(self.lib.lldd_pull_kv_cache(engine, index, cache, 0, -1, ffi.NULL), 507053,
                    "PullKvCache returned ACL_ERROR_RT_DEVICE_MEM_ERROR (0x0007BCAD)")
        mock.lldd_mock_clear_faults()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shim")
    ap.add_argument("--mock-lib", help="the mock library behind the fake toolkit (status-name check)")
    ap.add_argument("--no-bad-alloc", dest="bad_alloc", action="store_false",
                    help="skip the std::bad_alloc check (ASan's operator new aborts instead of throwing)")
    args = ap.parse_args(argv)
    Smoke(args.shim).run(args.mock_lib, bad_alloc=args.bad_alloc)
    print("shim smoke: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
