"""The harness of the vendor-API property and stateful tests: not part of the oracle.

Like ``native_driver.py`` for the native oracle, this module makes each call on the package
(one ``LLMDataDist`` in this process) and on the oracle (``vendor_checks``), and
compares their outcomes and every byte of cache memory: registered numpy buffers with
their guard bytes, and pool tensors read through their addresses with ctypes.
"""
from __future__ import annotations

import ctypes
import re
import socket
import warnings
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from hypothesis import event

from llm_datadist_ffi import LLMException, LLMStatusCode as S
from llm_datadist_ffi.vendor import (
    BlocksCacheKey, Cache, CacheDesc, CacheKey, CacheKeyByIdAndIndex, DataType, KvCache, LLMDataDist, LLMRole,
    Placement,
)

from oracle.vendor_checks import Checks, Key, Mode, Ref, Verdict
from oracle.vendor_local import DEVICE, HOST, Engine

U32, I64, U64 = 2**32 - 1, 2**63 - 1, 2**64 - 1
#: keys bound at set-up: a request key of "c", then (pool modes) a request key, a
#: placeholder and a prefix key of "ac"; the blocks key of "b"
BOUND = (Key("CacheKey", 1, req_id=10), Key("CacheKey", 1, req_id=11), Key("CacheKey", 1, model_id=2),
         Key("CacheKey", 1, prefix_id=12))
BOUND_BLOCKS = Key("BlocksCacheKey", 1, model_id=0)
GUARD = 32
CLUSTER = 7
POOL = '{"memory_size": 1048576, "page_shift": 12}'
HOST_POOL = '{"memory_size": 524288, "page_shift": 10}'
V1_POOL = 1048576


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- the engine of one example ----------------------------------------------------------------

MODES = {
    "v2-direct-pools": Mode(2, CLUSTER, "DECODER", direct=True, device_pool=True, host_pool=True),
    "v2-server-pool": Mode(2, CLUSTER, "PROMPT", direct=False, device_pool=True),
    "v2-direct-nopool": Mode(2, CLUSTER, "MIX", direct=True),
    "v1-decoder": Mode(1, CLUSTER, "DECODER", device_pool=True),
    "v1-prompt": Mode(1, CLUSTER, "PROMPT", device_pool=True),
    "v1-mix": Mode(1, CLUSTER, "MIX", device_pool=True),
}


def options(mode: Mode) -> Dict[str, str]:
    if mode.generation == 2:
        opts = {"llm.EnableCacheManager": "1", "llm.EnableRemoteCacheAccessible": "1" if mode.direct else "0",
                "ge.exec.deviceId": "0"}
        if mode.device_pool:
            opts["llm.MemPoolConfig"] = POOL
        if mode.host_pool:
            opts["llm.HostMemPoolConfig"] = HOST_POOL
        return opts
    opts = {"ge.exec.deviceId": "0", "ge.flowGraphMemMaxSize": str(V1_POOL)}
    if mode.role == "PROMPT":
        opts["llm.listenIpInfo"] = f"127.0.0.1:{_free_port()}"
    return opts


class Env:
    """The engine of one example, its caches, their memory and the oracle's view."""

    def __init__(self) -> None:
        self.dd: Optional[LLMDataDist] = None

    def stop(self) -> None:
        if self.dd is not None:
            self.dd.finalize()
            self.dd = None

    def start(self, mode_name: str, rng: np.random.Generator, bare: bool = False) -> None:
        """A fresh engine in ``mode_name``; unless ``bare``, with the standard caches."""
        self.stop()
        mode = MODES[mode_name]
        self.mode = Mode(**mode.__dict__)
        self.rng = rng
        self.dd = LLMDataDist(LLMRole[mode.role], CLUSTER)
        self.dd.init(options(mode))
        self.manager: Any = self.dd.cache_manager if mode.generation == 2 else self.dd.kv_cache_manager
        self.checks = Checks(self.mode, Engine(mode.generation, (1048576, 12) if mode.device_pool else None,
                                               (524288, 10) if mode.host_pool else None,
                                               V1_POOL if mode.generation == 1 else None, mode.direct))
        self.objects: Dict[str, Any] = {}          # name -> Cache/KvCache
        self.buffers: Dict[str, List[np.ndarray]] = {}   # name -> guarded numpy buffers
        self.expected_buffers: Dict[str, List[bytearray]] = {}
        self.cpu_memory: Dict[str, List[bytearray]] = {}
        self.addrs: Dict[str, List[int]] = {}            # name -> addresses when it was made
        if bare:
            self.cpu_cache("cpu", 4, (8, 16))
            return
        if mode.generation == 2:
            self.register("c", 4, (4, 32), blocks=False, keys=(BOUND[0],))
            self.register("b", 4, (8, 16), blocks=True, keys=(BOUND_BLOCKS,))
            self.register("c2", 2, (2, 64), blocks=False)
            self.register("c4", 4, (2, 64), blocks=False)      # c's tensor count, twice its stride
            self.register("hb", 4, (8, 16), blocks=True, placement=HOST)
            if mode.device_pool:
                self.allocate("ac", 4, (4, 32), blocks=False, keys=BOUND[1:])
                self.allocate("ab", 4, (8, 16), blocks=True, keys=(Key("BlocksCacheKey", 1, model_id=3),))
            if mode.host_pool:
                self.allocate("hab", 4, (8, 16), blocks=True, placement=HOST)
        else:
            prompt = mode.role == "PROMPT"
            self.allocate("c", 4, (4, 32), blocks=False, keys=BOUND[1:] if prompt else ())
            self.allocate("b", 4, (8, 16), blocks=True, keys=(BOUND_BLOCKS,) if mode.role != "DECODER" else ())
            self.allocate("c2", 2, (2, 64), blocks=False)
            self.allocate("c4", 4, (2, 64), blocks=False)
            self.cpu_cache("hb", 4, (8, 16))

    # -- caches --

    def guarded(self, name: str, num: int, size: int) -> List[int]:
        arrays = [self.rng.integers(0, 256, size + 2 * GUARD, dtype=np.uint8) for _ in range(num)]
        self.buffers[name] = arrays
        self.expected_buffers[name] = [bytearray(a.tobytes()) for a in arrays]
        return [a.ctypes.data + GUARD for a in arrays]

    def ref(self, name: str, cls: str, cache_id: int, num: int, shape: Tuple[int, ...], placement: int,
            blocks: bool, cpu: bool = False) -> Ref:
        ref = Ref(name, cls, cache_id, num, shape, 4, placement, blocks, cpu=cpu)
        self.checks.refs[name] = ref
        return ref

    def register(self, name: str, num: int, shape: Tuple[int, ...], blocks: bool, placement: int = DEVICE,
                 keys: Sequence[Key] = ()) -> None:
        size = shape[0] * shape[1]
        addrs = self.guarded(name, num, size)
        desc = CacheDesc(num, list(shape), DataType.DT_UINT8, Placement(placement))
        if blocks:
            cache = self.manager.register_blocks_cache(desc, addrs, self.build(keys[0]) if keys else None)
        else:
            cache = self.manager.register_cache(desc, addrs, self.build(list(keys)))
        self.objects[name] = cache
        contents = [bytes(b[GUARD:GUARD + size]) for b in self.expected_buffers[name]]
        desc_ref = replace(self.ref(name, "Cache", cache.cache_id, num, shape, placement, blocks), cls="CacheDesc")
        if blocks:
            verdict = self.checks.run("register_blocks_cache", desc_ref, addrs, keys[0] if keys else None,
                                      contents=contents)
        else:
            verdict = self.checks.run("register_cache", desc_ref, addrs, list(keys), contents=contents)
        assert (verdict.kind, verdict.status, verdict.value) == ("core", S.LLM_SUCCESS, cache.cache_id)
        # the engine model's tensors are views of the expected buffers' payloads
        self.link_payload(name, cache.cache_id, size)

    def link_payload(self, name: str, cache_id: int, size: int) -> None:
        """Make the model's tensors and the expected numpy buffers one memory."""
        model = self.checks.engine.caches[cache_id]
        model.tensors = [memoryview(b)[GUARD:GUARD + size] for b in self.expected_buffers[name]]  # type: ignore
        self.cpu_memory[name] = model.tensors          # swaps address it even after unregistration
        self.addrs[name] = self.addrs_of(self.objects[name])

    def allocate(self, name: str, num: int, shape: Tuple[int, ...], blocks: bool, placement: int = DEVICE,
                 keys: Sequence[Key] = ()) -> None:
        desc = CacheDesc(num, list(shape), DataType.DT_UINT8, Placement(placement))
        if blocks:
            cache = self.manager.allocate_blocks_cache(desc, self.build(keys[0]) if keys else None)
        else:
            cache = self.manager.allocate_cache(desc, self.build(list(keys)))
        self.objects[name] = cache
        cls = "Cache" if self.mode.generation == 2 else "KvCache"
        desc_ref = replace(self.ref(name, cls, cache.cache_id, num, shape, placement, blocks), cls="CacheDesc")
        if blocks:
            verdict = self.checks.run("allocate_blocks_cache", desc_ref, keys[0] if keys else None)
        else:
            verdict = self.checks.run("allocate_cache", desc_ref, list(keys))
        assert (verdict.kind, verdict.status, verdict.value) == ("core", S.LLM_SUCCESS, cache.cache_id)
        self.fill_allocated(cache)

    def fill_allocated(self, cache: Any) -> None:
        """Random bytes into a new pool cache, through its addresses, and into the model."""
        model = self.checks.engine.caches[cache.cache_id]
        self.addrs[next(n for n, o in self.objects.items() if o is cache)] = self.addrs_of(cache)
        for t, addr in enumerate(self.addrs_of(cache)):
            data = self.rng.integers(0, 256, model.tensor_size, dtype=np.uint8).tobytes()
            ctypes.memmove(addr, data, len(data))
            model.tensors[t][:] = data

    def cpu_cache(self, name: str, num: int, shape: Tuple[int, ...]) -> None:
        size = shape[0] * shape[1]
        addrs = self.guarded(name, num, size)
        desc = CacheDesc(num, list(shape), DataType.DT_UINT8, Placement.HOST)
        cls = KvCache if self.mode.generation == 1 else Cache
        self.objects[name] = cls.create_cpu_cache(desc, addrs)
        self.ref(name, cls.__name__, -1, num, shape, HOST, True, cpu=True)
        self.cpu_memory[name] = [memoryview(b)[GUARD:GUARD + size] for b in self.expected_buffers[name]]  # type: ignore

    def addrs_of(self, cache: Any) -> List[int]:
        if isinstance(cache, KvCache):
            return list(cache.per_device_tensor_addrs[0]) if cache.per_device_tensor_addrs else []
        return list(cache.tensor_addrs)

    def memory(self) -> Dict[str, List[Any]]:
        """name -> the model's tensors, for swaps (engine caches and cpu caches)."""
        out: Dict[str, List[Any]] = dict(self.cpu_memory)
        for name, ref in self.checks.refs.items():
            model = self.checks.engine.caches.get(ref.cache_id)
            if model is not None and not ref.cpu:
                out[name] = model.tensors
        return out

    def check_memory(self) -> None:
        """Every guarded buffer equals its expected bytes; every live pool tensor its model."""
        for name, arrays in self.buffers.items():
            for t, (a, e) in enumerate(zip(arrays, self.expected_buffers[name])):
                assert a.tobytes() == bytes(e), f"buffer {name}[{t}] differs from the model"
        for name, ref in self.checks.refs.items():
            model = self.checks.engine.caches.get(ref.cache_id)
            if model is None or not model.owned:
                continue
            for t, addr in enumerate(self.addrs[name]):
                assert ctypes.string_at(addr, model.tensor_size) == bytes(model.tensors[t]), \
                    f"pool tensor {name}[{t}] differs from the model"

    # -- turning descriptions into objects --

    def build(self, x: Any) -> Any:
        if isinstance(x, Key):
            if x.kind == "CacheKey":
                return CacheKey(x.cluster_id, x.req_id, x.model_id, x.prefix_id)
            if x.kind == "CacheKeyByIdAndIndex":
                return CacheKeyByIdAndIndex(x.cluster_id, x.cache_id, x.batch_index)
            return BlocksCacheKey(x.cluster_id, x.model_id)
        if isinstance(x, Ref) and x.cls == "CacheDesc":
            return CacheDesc(x.num_tensors, list(x.shape), DataType.DT_UINT8, Placement(x.placement),
                             batch_dim_index=x.batch_dim)
        if isinstance(x, Ref):
            return self.objects[x.name]
        if isinstance(x, list):
            return [self.build(v) for v in x]
        if isinstance(x, tuple):
            return tuple(self.build(v) for v in x)
        return x



# ---- making the call and comparing --------------------------------------------------------------

#: the rule ids of the lint warnings of the last ``outcome_of`` call in this process
LAST_LINTS: List[str] = []
_LINT_ID = re.compile(r"\((PR-\d+|OPT-\d+)[;)]")


def outcome_of(call: Any) -> Tuple[str, Any, str]:
    """What a call did: ("ok", value, "") or the exception kind, status and message. The
    rule ids of the lint warnings it emitted are left in ``LAST_LINTS``."""
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        try:
            value = call()
        except LLMException as exc:
            return "LX", exc.status_code, str(exc)
        except TypeError as exc:
            return "T", None, str(exc)
        except ValueError as exc:
            return "V", None, str(exc)
        except AttributeError as exc:
            return "A", None, str(exc)
        finally:
            LAST_LINTS[:] = sorted({m.group(1) for r in records
                                    for m in [_LINT_ID.search(str(r.message))] if m is not None})
    return "ok", value, ""


#: what the package's message of a native failure names: the extension function that
#: answered (``... error code is ..., lldd_ext_pull: ...``). A Python-side rejection must
#: not carry it: an [all] rule is checked before any native call, so that it also holds
#: on a backend whose core does not repeat it (docs/reference/semantics.md §0.3).
NATIVE_MARK = "lldd_ext_"


def assert_agrees(verdict: Verdict, got: Tuple[str, Any, str], what: str) -> None:
    kind, status, message = got
    assert LAST_LINTS == sorted(set(verdict.lints)), \
        f"{what}: the oracle expects the lints {sorted(set(verdict.lints))}, the package warned {LAST_LINTS}"
    if verdict.kind == "core":
        if verdict.status == S.LLM_SUCCESS:
            assert kind == "ok", f"{what}: expected success ({verdict.rule}), got {kind} {status} {message}"
        else:
            assert (kind, status) == ("LX", verdict.status), \
                f"{what}: expected core {verdict.status.name} ({verdict.rule}), got {kind} {status} {message}"
            assert NATIVE_MARK in message, f"{what}: the core's answer was expected, got {message!r}"
        return
    expected_status = verdict.status if verdict.kind == "LX" else None
    assert (kind, status) == (verdict.kind, expected_status), \
        f"{what}: expected {verdict.describe()}, got {kind} {status}: {message}"
    assert NATIVE_MARK not in message, f"{what}: expected the Python check {verdict.rule}, the core answered"
    if verdict.name and verdict.kind != "A":
        assert verdict.name.lower() in message.lower(), f"{what}: {verdict.name!r} not in {message!r}"


def one_call(env: Env, method: str, args: List[Any], kwargs: Dict[str, Any], record: bool = True,
             name: str = "new") -> Verdict:
    """Make ``method(*args, **kwargs)`` on the package and on the oracle; both must agree,
    and every byte of memory must equal the model's. A cache the call makes is kept as
    ``name`` (a registration uses the buffers ``env.guarded(name, ...)`` made)."""
    real_args = [env.build(a) for a in args]
    real_kwargs = {k: env.build(v) for k, v in kwargs.items()}
    extra: Dict[str, Any] = {"memory": env.memory()} if method == "swap_blocks" else {}
    if method.startswith("register") and name in env.buffers and args and isinstance(args[0], Ref):
        size = args[0].desc_size if args[0].num_tensors > 0 else 0
        extra["contents"] = [bytes(b[GUARD:GUARD + size]) for b in env.expected_buffers[name]]
    verdict = env.checks.run(method, *args, **kwargs, **extra)
    if record:
        event(f"{method}: {verdict.kind} {verdict.status.name if verdict.kind in ('LX', 'core') else ''}")
    call = getattr(env.manager, method)
    got = outcome_of(lambda: call(*real_args, **real_kwargs))
    assert_agrees(verdict, got, f"{method}{tuple(args)} {kwargs}")       # the lints too
    if got[0] == "ok" and (method.startswith("register") or method.startswith("allocate")):
        adopt(env, method, args[0], got[1], verdict, name)
    env.check_memory()
    return verdict


def adopt(env: Env, method: str, desc: Ref, cache: Any, verdict: Verdict, name: str) -> None:
    """A cache the call made: the object the package returned must be what the model made;
    its memory joins the comparison."""
    blocks = "blocks" in method
    assert cache.cache_id == verdict.value, f"cache id {cache.cache_id}, the model says {verdict.value}"
    if env.mode.generation == 2:
        assert (cache.is_blocks_cache, len(cache.tensor_addrs)) == (blocks, desc.num_tensors)
    env.objects[name] = cache
    cls = "Cache" if env.mode.generation == 2 else "KvCache"
    env.ref(name, cls, cache.cache_id, desc.num_tensors, desc.shape, desc.placement, blocks)
    if method.startswith("register"):
        env.link_payload(name, cache.cache_id, desc.desc_size)
    else:
        env.fill_allocated(cache)
