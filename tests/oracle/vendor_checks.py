"""The Python-side checks of the vendor-compatible managers, in the vendor's order.

Written from docs/reference/python-api.md §7, §11 and §12 (each method's numbered steps), the
project rules of its python-api.md §14 and of docs/reference/semantics.md ([all] rules PR-2, PR-3, PR-5, PR-8, PR-18,
PR-25, PR-41) and docs/semantics.md V-4 (``None``), V-5 (ranges wider than the local
cache), V-10 (numpy block lists) and V-13 (messages name the parameter). Given the
engine's generation, transfer mode, role and pools, a method and its arguments, the
oracle says what the package must do: raise ``TypeError``, ``ValueError``,
``AttributeError`` or ``LLMException`` (with its ``status_code``) at the first check that
fails, or pass the Python checks and hand the call to the core. For a call that passes,
``Checks`` asks the single-engine core model (``vendor_local.Engine``) or, for transfers,
models the engine's answer without a peer: docs/reference/semantics.md §8.0 puts the local cache checks
before the link lookup, so a pull that is locally sound ends in ``NOT_YET_LINK``.
``LLMDataDist``'s calls are modelled the same way for one engine without a peer:
``link_clusters``, ``unlink_clusters`` and ``check_link_status`` (docs/reference/python-api.md §10.5,
§10.7; docs/reference/semantics.md §10.3, §10.5; X-12) and ``switch_role`` (docs/reference/python-api.md §10.6,
docs/reference/semantics.md §10.7, X-13).

Arguments are plain Python values, except the package's own objects, which the tests
describe: ``Key`` (a ``CacheKey``, ``CacheKeyByIdAndIndex`` or ``BlocksCacheKey``) and
``Ref`` (a ``Cache`` or ``KvCache`` the engine made, or one of ``create_cpu_cache``).
The tests build the real objects from these descriptions; the oracle reads only the
descriptions, so it shares nothing with the package.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .codes import LLMStatusCode as S
from .codes import Role
from .outcome import strict
from .vendor_local import DEVICE, HOST, U64_MAX, CacheM, Engine, KeyM, swap, valid_id

U32_MAX, I32_MIN, I32_MAX, I64_MIN, I64_MAX = 2**32 - 1, -2**31, 2**31 - 1, -2**63, 2**63 - 1


# ---- what the tests pass ----------------------------------------------------------------------

@dataclass(frozen=True)
class Key:
    """A key object (docs/reference/python-api.md §7); ``key()`` is what the core sees."""

    kind: str                       # "CacheKey", "CacheKeyByIdAndIndex", "BlocksCacheKey"
    cluster_id: int = 1
    req_id: int = U64_MAX
    prefix_id: int = U64_MAX
    model_id: int = 0
    cache_id: int = 1
    batch_index: int = 0

    def key(self) -> KeyM:
        return KeyM(self.kind, self.cluster_id, self.req_id, self.prefix_id, self.model_id, self.cache_id,
                    self.batch_index)


@dataclass
class Ref:
    """A ``Cache`` (v2) or ``KvCache`` (v1) object as the Python layer sees it: its class,
    id, descriptor fields, blocks flag and address list."""

    name: str
    cls: str                        # "Cache" or "KvCache"
    cache_id: int
    num_tensors: int
    shape: Tuple[int, ...]
    data_type: int
    placement: int
    blocks: bool
    batch_dim: int = 0
    cpu: bool = False               # made by create_cpu_cache (no engine, id -1)
    deallocated: bool = False       # tensor_addrs became [] (semantics.md §3.4)

    @property
    def desc_size(self) -> int:
        """``CacheDesc.size``: one tensor's bytes (docs/reference/python-api.md §6)."""
        from .vendor_local import PY_ELEMENT_BYTES
        size = PY_ELEMENT_BYTES[self.data_type]
        for d in self.shape:
            size *= d
        return size

    @property
    def batch_size(self) -> int:
        return self.shape[self.batch_dim]


@dataclass
class Verdict:
    """``kind`` is ``"T"``, ``"V"``, ``"A"`` (AttributeError), ``"LX"`` (an LLMException the
    Python layer raises, with ``status``), or ``"core"``: the Python checks passed and the
    core answered ``status`` (an LLMException unless SUCCESS). ``name`` is a fragment the
    message must contain (the parameter or keyword), ``rule`` the rule that decided."""

    kind: str
    status: S = S.LLM_PARAM_INVALID
    name: str = ""
    rule: str = ""
    value: Any = None
    lints: Tuple[str, ...] = ()      # the lint rules the call warns about (Python layer and core)

    def describe(self) -> str:
        return f"{self.kind} {self.status.name} [{self.name}] ({self.rule})"


class _Stop(Exception):
    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.describe())
        self.verdict = verdict


def _t(name: str, rule: str) -> None:
    raise _Stop(Verdict("T", name=name, rule=rule))


def _v(name: str, rule: str) -> None:
    raise _Stop(Verdict("V", name=name, rule=rule))


def _lx(rule: str, name: str = "", status: S = S.LLM_PARAM_INVALID) -> None:
    raise _Stop(Verdict("LX", status=status, name=name, rule=rule))


def _attr(name: str, rule: str) -> None:
    raise _Stop(Verdict("A", name=name, rule=rule))


#: the lints of the call ``Checks.run`` is checking
_LINTS: List[str] = []


def _lint(rule: str, name: str = "") -> None:
    """A lint rule: LX in strict mode, else noted and the checks go on."""
    if strict():
        _lx(rule, name)
    _LINTS.append(rule)


# ---- the vendor's check helpers (docs/reference/python-api.md §0) ---------------------------------------------

def is_int(x: Any) -> bool:
    """``isinstance(x, int)``: bools pass, numpy integers do not."""
    return isinstance(x, int)


def is_numpy_int_array(x: Any) -> bool:
    """V-10: a one-dimensional numpy array of an integer dtype."""
    kind = getattr(getattr(x, "dtype", None), "kind", None)
    return kind in ("i", "u") and getattr(x, "ndim", None) == 1


def of(x: Any, cls: str) -> bool:
    if cls == "int":
        return is_int(x)
    if cls in ("CacheKey", "CacheKeyByIdAndIndex", "BlocksCacheKey"):
        return isinstance(x, Key) and x.kind == cls
    if cls in ("Cache", "KvCache", "CacheDesc"):
        return isinstance(x, Ref) and x.cls == cls
    return type(x).__name__ == cls or isinstance(x, {"list": list, "tuple": tuple, "dict": dict,
                                                     "range": range, "bool": bool, "str": str}[cls])


def type_check(x: Any, classes: Sequence[str], name: str, none_ok: bool = True) -> None:
    if x is None and none_ok:
        return
    if not any(of(x, c) for c in classes):
        _t(name, f"{name} type {'|'.join(classes)}")


def int_range(x: Any, lo: int, hi: int, name: str) -> None:
    """The vendor's range check: ``None`` and non-ints → T, then the range → V."""
    if not is_int(x):
        _t(name, f"{name} is not an int")
    if not lo <= x <= hi:
        _v(name, f"{name} outside [{lo}, {hi}]")


def seq_of(x: Any, containers: Sequence[str], elem: str, name: str, none_ok: bool = False,
           numpy_ok: bool = False) -> None:
    """A ``list``/``tuple`` (as listed) whose every element is ``elem`` (T); V-10 arrays."""
    if x is None:
        if none_ok:
            return
        _t(name, f"{name} is None")
    if numpy_ok and is_numpy_int_array(x):
        return                    # V-10: its elements are converted with the lists' (convert_blocks)
    if not any(of(x, c) for c in containers):
        _t(name, f"{name} type {'|'.join(containers)}")
    for i, item in enumerate(x):
        if not of(item, elem):
            _t(name, f"{name}[{i}] is not {elem}")


def blocks_of(x: Any) -> List[int]:
    return [] if x is None else [int(v) for v in list(x)]


def length(x: Any, name: str) -> int:
    """The vendor's ``len()`` of a block list that passed its type check: ``None`` → T."""
    if x is None:
        _t(name, f"len({name}) of None")
    return len(blocks_of(x))


def convert_blocks(x: Any, name: str) -> None:
    """The binding's conversion of a block list (python-api.md §11.2, V-10): negative or > 2**64-1 → T."""
    for v in blocks_of(x):
        if not 0 <= v <= U64_MAX:
            _t(name, f"{name} element {v} is not a uint64")


def validity(key: Key, rule: str = "§7.5") -> None:
    """docs/reference/python-api.md §7.5: exactly one of req_id and prefix_id valid."""
    if key.kind != "CacheKey":
        return
    r, p = valid_id(key.req_id), valid_id(key.prefix_id)
    if r == p:
        _lx(rule, "req id" if not r else "only one")


def pull_ranges(src: Any, dst: Any) -> Tuple[Optional[range], Optional[range]]:
    """The layer-range conversion of pulls (python-api.md §11.2) with PR-2 at the vendor's place."""
    type_check(src, ["range"], "src_layer_range")
    type_check(dst, ["range"], "dst_layer_range")
    if src is not None and src.step != 1:
        _lx("§11.2 step", "src_layer_range")
    if dst is not None and dst.step != 1:
        _lx("§11.2 step", "dst_layer_range")
    out: List[Optional[range]] = []
    for r, name in ((src, "src_layer_range"), (dst, "dst_layer_range")):
        if r is None:
            out.append(None)
            continue
        # PR-2 (lint) sits where the vendor turns an empty range into "all layers": in the
        # loop over src then dst, before that range's own checks
        if len(r) == 0:
            _lint("PR-2", name)
            out.append(None)
            continue
        if r[0] < 0:
            _lx("§11.2 first < 0", name)
        if not 0 <= r[0] <= U32_MAX or not 0 <= r[-1] <= U32_MAX:
            _v(name, "§11.2 uint32")
        out.append(r)
    return out[0], out[1]


def project_pull(src: Optional[range], dst: Optional[range], n: int, n_local: int) -> None:
    """V-5 of every pull, after the vendor's checks: a range selecting more tensors than the
    local cache has is the engine's PARAM_INVALID, raised in Python. (``n`` has no upper
    bound; the v2 engine's divisibility check is in the core model.)"""
    for r, name in ((src, "src_layer_range"), (dst, "dst_layer_range")):
        if r is not None and len(r) * n > n_local:
            _lx("V-5", name)


def tensor_num(n: Any) -> int:
    int_range(n, 0, U32_MAX, "tensor_num_per_layer")
    if n <= 0:
        _lx("tensor_num_per_layer <= 0", "tensor_num_per_layer")
    return int(n)


def keywords(kwargs: Dict[str, Any], allowed: Sequence[str]) -> None:
    """PR-8 (lint): a keyword the call does not read is ignored, first."""
    for name in kwargs:
        if name not in allowed:
            _lint("PR-8", name)


# ---- the engine and its mode ------------------------------------------------------------------

@dataclass
class Mode:
    """The initialised engine as the Python layer sees it."""

    generation: int                      # 2 (CacheManager) or 1 (KvCacheManager)
    cluster_id: int
    role: str = "DECODER"                # "PROMPT", "DECODER", "MIX"
    direct: bool = True                  # v2: llm.EnableRemoteCacheAccessible == "1"
    device_pool: bool = False
    host_pool: bool = False


def _range_rules(src: Optional[range], dst: Optional[range], n: int, nl: int, link_rule: str,
                 v2: bool = True) -> Verdict:
    """docs/reference/semantics.md §4.2, the engine rows of a pull's layer ranges against the local cache of
    ``nl`` tensors (the v2 engine first asks a ranged pull's ``nl`` to be a multiple of
    ``n``; v1 does not); when they hold, the pull reaches the link lookup: NOT_YET_LINK here."""
    if v2 and (src is not None or dst is not None) and nl % n:
        return Verdict("core", S.LLM_PARAM_INVALID, rule="§5: N_local not a multiple of n (v2 engine)")
    if src is not None and dst is not None and len(src) != len(dst):
        return Verdict("core", S.LLM_PARAM_INVALID, rule="§4.2 spans differ")
    if src is not None and dst is None and len(src) * n != nl:
        return Verdict("core", S.LLM_PARAM_INVALID, rule="§4.2 src count != N_local")
    if dst is not None and (dst[-1] + 1) * n > nl:
        return Verdict("core", S.LLM_PARAM_INVALID, rule="§4.2 dst past N_local")
    return Verdict("core", S.LLM_NOT_YET_LINK, rule=link_rule)


@dataclass
class Checks:
    """One engine: its mode, the core model of its caches and the Python objects' view."""

    mode: Mode
    engine: Engine
    refs: Dict[str, Ref] = field(default_factory=dict)

    lints: List[str] = field(default_factory=list)

    def run(self, method: str, *args: Any, **kwargs: Any) -> Verdict:
        """The verdict of ``method(*args, **kwargs)``, with the lints it warns about; a
        call the core accepts is applied to the model (ids, bindings, bytes)."""
        _LINTS.clear()
        self.lints.clear()
        self.engine.lints.clear()
        try:
            verdict = getattr(self, "_" + method)(*args, **kwargs)
        except _Stop as stop:
            verdict = stop.verdict
        lints = tuple(dict.fromkeys([*_LINTS, *self.lints, *self.engine.lints]))
        return replace(verdict, lints=lints) if lints else verdict

    def _lint(self, rule: str, name: str = "") -> None:
        """A lint of the Python layer (the module's ``_lint``)."""
        _lint(rule, name)

    def live(self, ref: Ref) -> Optional[CacheM]:
        return self.engine.caches.get(ref.cache_id)

    # ---- v2 pulls (python-api.md §11.2) -------------------------------------------------------------------

    def _pull_core(self, key: Key, cache: Ref, batch_index: int, size: int, src: Optional[range],
                   dst: Optional[range], n: int, blocks: bool) -> Verdict:
        """docs/reference/semantics.md §8.0 steps 2–5 without a link: the source cluster, the local cache, the
        local checks, then NOT_YET_LINK."""
        if key.cluster_id == self.mode.cluster_id:
            return Verdict("core", S.LLM_PARAM_INVALID, rule="§8.0 step 2: own cluster")
        local = self.live(cache)
        if local is None:
            return Verdict("core", S.LLM_KV_CACHE_NOT_EXIST, rule="§8.0 step 3")
        if not blocks:
            if batch_index >= local.batches:
                return Verdict("core", S.LLM_PARAM_INVALID, rule="§6.2 batch_index")
            if size > local.stride:
                return Verdict("core", S.LLM_PARAM_INVALID, rule="§6.1 size > S_dst")
        return _range_rules(src, dst, n, local.num_tensors, "§8.0 step 5")

    def _pull_cache(self, cache_key: Any, cache: Any, batch_index: Any = 0, size: Any = -1,
                    **kwargs: Any) -> Verdict:
        if self.mode.generation == 1:
            return self._v1_pull_cache(cache_key, cache, batch_index, size, **kwargs)
        keywords(kwargs, ("src_layer_range", "dst_layer_range", "tensor_num_per_layer"))
        key_types = ["CacheKeyByIdAndIndex"] if self.mode.direct else ["CacheKey", "CacheKeyByIdAndIndex"]
        type_check(cache_key, key_types, "cache_key")
        type_check(cache, ["Cache"], "cache")
        int_range(batch_index, 0, U32_MAX, "batch_index")
        int_range(size, I64_MIN, I64_MAX, "size")
        if cache is None:
            _attr("cache", "V-4")
        if cache.blocks:
            _lx("§11.2 step 5", "cache can not be blocks cache")
        if size != -1 and size <= 0:
            _lx("§11.2 step 6", "size")
        n = tensor_num(kwargs.get("tensor_num_per_layer", 2))
        if isinstance(cache_key, Key):
            validity(cache_key)
        if cache_key is None:
            _attr("cache_key", "V-4: the key is packed before the layer ranges")
        src, dst = pull_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"))
        project_pull(src, dst, n, cache.num_tensors)
        return self._pull_core(cache_key, cache, batch_index, size, src, dst, n, blocks=False)

    def _pull_blocks(self, src_cache_key: Any, dst_cache: Any, src_blocks: Any = (), dst_blocks: Any = (),
                     **kwargs: Any) -> Verdict:
        if self.mode.generation == 1:
            return self._v1_pull_blocks(src_cache_key, dst_cache, src_blocks, dst_blocks, **kwargs)
        keywords(kwargs, ("src_layer_range", "dst_layer_range", "tensor_num_per_layer"))
        type_check(src_cache_key, ["CacheKey", "CacheKeyByIdAndIndex", "BlocksCacheKey"], "src_cache_key")
        type_check(dst_cache, ["Cache"], "dst_cache")
        seq_of(src_blocks, ["list", "tuple"], "int", "src_blocks", none_ok=True, numpy_ok=True)
        seq_of(dst_blocks, ["list", "tuple"], "int", "dst_blocks", none_ok=True, numpy_ok=True)
        if dst_cache is None:
            _attr("dst_cache", "V-4")
        if not dst_cache.blocks:
            _lx("§11.2 pull_blocks step 5", "dst_cache")
        if length(dst_blocks, "dst_blocks") == 0:
            _lx("§11.2 pull_blocks step 6", "dst_blocks")
        n = tensor_num(kwargs.get("tensor_num_per_layer", 2))
        if isinstance(src_cache_key, Key) and src_cache_key.kind == "BlocksCacheKey":
            if length(src_blocks, "src_blocks") == 0:
                _lx("§11.2 pull_blocks step 8", "src_blocks")
        else:                                     # the cache→blocks form: anything but a BlocksCacheKey
            if isinstance(src_cache_key, Key):
                validity(src_cache_key)
            if length(src_blocks, "src_blocks") != 0:
                _lx("§11.2 pull_blocks step 8", "src_blocks should be empty")
        if src_cache_key is None:
            _attr("src_cache_key", "V-4: the key is packed before the layer ranges")
        src, dst = pull_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"))
        convert_blocks(src_blocks, "src_blocks")      # the binding's conversion (the vendor's T)
        convert_blocks(dst_blocks, "dst_blocks")
        project_pull(src, dst, n, dst_cache.num_tensors)
        d = blocks_of(dst_blocks)
        if len(set(d)) != len(d):
            _lint("PR-5", "dst_blocks")
        return self._pull_core(src_cache_key, dst_cache, 0, -1, src, dst, n, blocks=True)

    # ---- v2 pushes (python-api.md §11.3) ------------------------------------------------------------------

    def _push_ranges(self, src_cache: Ref, src: Any, dst: Any, n: int) -> int:
        """The range checks of a push; the number of layers it pushes."""
        for r, name in ((src, "src_layer_range"), (dst, "dst_layer_range")):
            type_check(r, ["range"], name)
            if r is not None and r.step != 1:
                _lx("§9.1 step", name)
            if r is not None and not 0 <= r.start < r.stop:
                _lx("§9.1 0 <= start < stop", name)
        default = range(0, src_cache.num_tensors // n)
        if len(default) == 0 and src is None and dst is None:
            _lint("PR-3", "tensor_num_per_layer")      # the loop over no layer: nothing moves
        layers = default if src is None else src
        if len(layers) != len(default if dst is None else dst):
            _lx("§11.3 lengths differ", "layer_range")
        return len(layers)

    def _push_cache(self, dst_cache_key: Any, src_cache: Any, src_batch_index: Any = 0, src_layer_range: Any = None,
                    dst_layer_range: Any = None, size: Any = -1, tensor_num_per_layer: Any = 2) -> Verdict:
        if not self.mode.direct:
            _lx("§11.3 step 1", "push_cache is only supported while enable_remote_cache_accessible is True")
        type_check(dst_cache_key, ["CacheKeyByIdAndIndex"], "dst_cache_key", none_ok=False)
        type_check(src_cache, ["Cache"], "src_cache", none_ok=False)
        int_range(src_batch_index, 0, U32_MAX, "src_batch_index")
        if src_cache.blocks:
            _lx("§11.3 step 5", "src_cache")
        n = tensor_num(tensor_num_per_layer)
        layers = self._push_ranges(src_cache, src_layer_range, dst_layer_range, n)
        int_range(size, I64_MIN, I64_MAX, "size")
        if size != -1:
            _lx("§11.3 step 10", "size")
        if layers == 0:
            return Verdict("core", S.LLM_SUCCESS, rule="PR-3: the vendor loops over no layer")
        return self._push_core(src_cache, dst_cache_key)

    def _push_blocks(self, dst_cache_key: Any, src_cache: Any, src_blocks: Any = (), dst_blocks: Any = (),
                     src_layer_range: Any = None, dst_layer_range: Any = None, tensor_num_per_layer: Any = 2) -> Verdict:
        if not self.mode.direct:
            _lx("§11.3 step 1", "push_blocks is only supported while enable_remote_cache_accessible is True")
        type_check(dst_cache_key, ["BlocksCacheKey"], "dst_cache_key")
        type_check(src_cache, ["Cache"], "src_cache")
        seq_of(src_blocks, ["list", "tuple"], "int", "src_blocks", none_ok=True, numpy_ok=True)
        seq_of(dst_blocks, ["list", "tuple"], "int", "dst_blocks", none_ok=True, numpy_ok=True)
        if src_cache is None:
            _attr("src_cache", "V-4")
        if not src_cache.blocks:
            _lx("§11.3 push_blocks step 5", "src_cache")
        if length(dst_blocks, "dst_blocks") == 0:        # a None src_blocks is sent as []
            _lx("§11.3 push_blocks step 6", "dst_blocks")
        n = tensor_num(tensor_num_per_layer)
        layers = self._push_ranges(src_cache, src_layer_range, dst_layer_range, n)
        if dst_cache_key is None:
            _attr("dst_cache_key", "V-4")
        convert_blocks(src_blocks, "src_blocks")
        convert_blocks(dst_blocks, "dst_blocks")
        d = blocks_of(dst_blocks)
        if len(set(d)) != len(d):
            _lint("PR-5", "dst_blocks")
        if layers == 0:
            return Verdict("core", S.LLM_SUCCESS, rule="PR-3: the vendor loops over no layer")
        # an empty src_blocks or lists of different lengths are read after the link and the
        # destination, as the vendor's layer-wise job reads them
        return self._push_core(src_cache, dst_cache_key)

    def _push_core(self, src_cache: Ref, key: Key) -> Verdict:
        """semantics.md §8.0 push steps 2–3: the local cache, then the link. A push has no own-cluster
        step (X-16): its own id is a link id like any other, and no link exists here."""
        if self.live(src_cache) is None:
            return Verdict("core", S.LLM_KV_CACHE_NOT_EXIST, rule="§8.0 push step 2")
        return Verdict("core", S.LLM_NOT_YET_LINK, rule="§8.0 push step 3")

    # ---- v2 registration (python-api.md §11.1) ------------------------------------------------------------

    def _register_cache(self, desc: Ref, addrs: Any, cache_keys: Any = (), remote_accessible: Any = None,
                        contents: Sequence[bytes] = ()) -> Verdict:
        """``desc`` describes the CacheDesc (a ``Ref`` whose id is ignored)."""
        type_check(desc, ["CacheDesc"], "cache_desc")
        seq_of(addrs, ["list"], "int", "addrs", none_ok=True)
        # decision (V-4): None cache_keys fail at their type check, which iterates the
        # elements; None addrs pass it and fail where step 6 takes len()
        seq_of(cache_keys, ["list", "tuple"], "CacheKey", "cache_keys")
        type_check(remote_accessible, ["bool"], "remote_accessible")
        if addrs is None:
            _t("addrs", "V-4: step 6 takes len()")
        if len(addrs) == 0:
            _lx("§11.1 step 6", "addrs")
        if desc is None:
            _attr("cache_desc", "V-4: step 7 reads num_tensors")
        if len(addrs) != desc.num_tensors:
            _lx("§11.1 step 7", "addrs")
        if any(a == 0 for a in addrs):
            _lx("§11.1 step 8", "addr")
        if desc.batch_dim != 0:
            self._lint("PR-18", "batch_dim_index")
        keys = [k.key() for k in cache_keys]
        status, cache_id = self.engine.register(desc.num_tensors, desc.shape, desc.data_type, desc.placement,
                                                contents, addrs, keys, blocks=False)
        return Verdict("core", status, rule="§3.2", value=cache_id)

    def _register_blocks_cache(self, desc: Ref, addrs: Any, blocks_cache_key: Any = None,
                               remote_accessible: Any = None, contents: Sequence[bytes] = ()) -> Verdict:
        type_check(desc, ["CacheDesc"], "cache_desc")
        seq_of(addrs, ["list"], "int", "addrs", none_ok=True)
        type_check(blocks_cache_key, ["BlocksCacheKey"], "blocks_cache_key")
        type_check(remote_accessible, ["bool"], "remote_accessible")
        if addrs is None:
            _t("addrs", "V-4: step 6 takes len()")
        if len(addrs) == 0:
            _lx("§11.1 blocks step 6", "addrs")
        if desc is None:
            _attr("cache_desc", "V-4: the native call reads it")
        if desc.batch_dim != 0:
            self._lint("PR-18", "batch_dim_index")
        keys = [blocks_cache_key.key()] if blocks_cache_key is not None else []
        status, cache_id = self.engine.register(desc.num_tensors, desc.shape, desc.data_type, desc.placement,
                                                contents, addrs, keys, blocks=True)
        return Verdict("core", status, rule="§3.2", value=cache_id)

    def _unregister_cache(self, cache_id: Any) -> Verdict:
        int_range(cache_id, I64_MIN, I64_MAX, "cache_id")
        return Verdict("core", self.engine.unregister(cache_id), rule="§3.5")

    # ---- allocation (python-api.md §11.5, §12) ------------------------------------------------------------

    def _allocate(self, desc: Ref, keys: Any, blocks: bool) -> Verdict:
        g = self.mode.generation
        type_check(desc, ["CacheDesc"], "cache_desc")
        if blocks:
            type_check(keys, ["BlocksCacheKey"], "blocks_cache_key")
        else:
            seq_of(keys, ["list", "tuple"], "CacheKey", "cache_keys")
        if desc is None:
            _attr("cache_desc", "V-4: step 3 reads num_tensors")
        if desc.num_tensors <= 0:
            _lx("§11.5 step 3", "num_tensors")
        if g == 2:
            has_pool = self.mode.device_pool if desc.placement == DEVICE else self.mode.host_pool
            if not has_pool:
                _lx("§11.5 step 4", "memory pool")
        else:
            if desc.placement != DEVICE:
                _lx("§12 allocate: only device", "device")
            if blocks and keys is not None and self.mode.role == "DECODER":
                _lx("§12 allocate_blocks_cache: DECODER with a key", "")
            if not blocks and len(keys) and self.mode.role != "PROMPT":
                _lx("§12 allocate_cache: keys need PROMPT", "")
        if desc.batch_dim != 0:
            self._lint("PR-18", "batch_dim_index")
        key_list = ([keys.key()] if keys is not None else []) if blocks else [k.key() for k in keys]
        status, cache_id = self.engine.allocate(desc.num_tensors, desc.shape, desc.data_type, desc.placement,
                                                key_list, blocks)
        return Verdict("core", status, rule="§3.3, §9.2", value=cache_id)

    def _allocate_cache(self, desc: Ref, cache_keys: Any = ()) -> Verdict:
        return self._allocate(desc, cache_keys, blocks=False)

    def _allocate_blocks_cache(self, desc: Ref, blocks_cache_key: Any = None) -> Verdict:
        return self._allocate(desc, blocks_cache_key, blocks=True)

    def _deallocate_cache(self, cache: Any) -> Verdict:
        if self.mode.generation == 1:
            type_check(cache, ["KvCache"], "cache")
            if cache is None:
                _attr("cache", "V-4")
            if cache.placement == HOST:
                _lx("§12 deallocate HOST", "")
        else:
            type_check(cache, ["Cache"], "cache")
            if cache is None:
                _attr("cache", "V-4")
            if cache.blocks:
                _lx("§11.5 deallocate_cache of a blocks cache", "")
        return self._dealloc_core(cache)

    def _dealloc_core(self, cache: Ref) -> Verdict:
        status = self.engine.deallocate(cache.cache_id)
        if status == S.LLM_SUCCESS:
            cache.deallocated = True
        return Verdict("core", status, rule="§3.4")

    def _deallocate_blocks_cache(self, cache: Any) -> Verdict:
        type_check(cache, ["Cache"], "cache")
        if cache is None:
            _attr("cache", "V-4")
        if not cache.blocks:
            _lx("§11.5 deallocate_blocks_cache of a non-blocks cache", "")
        return self._dealloc_core(cache)

    def _remove_cache_key(self, cache_key: Any) -> Verdict:
        if self.mode.generation == 1 and self.mode.role != "PROMPT":
            _lx("§12 remove_cache_key: PROMPT only", "")
        type_check(cache_key, ["CacheKey"], "cache_key")
        if cache_key is None:
            _attr("cache_key", "V-4")
        if valid_id(cache_key.req_id) == valid_id(cache_key.prefix_id):
            self._lint("PR-41", "req id" if not valid_id(cache_key.req_id) else "only one")
        return Verdict("core", self.engine.remove_cache_key(cache_key.key()), rule="§9.6")

    # ---- local copies (python-api.md §11.6, §12) ----------------------------------------------------------

    def _copy_cache(self, dst: Any, src: Any, dst_batch_index: Any = 0, src_batch_index: Any = 0, offset: Any = 0,
                    size: Any = -1, req_id: Any = None) -> Verdict:
        if self.mode.generation == 1:
            type_check(dst, ["KvCache"], "dst")
            if dst is None:
                _attr("dst", "V-4: the HOST check reads its placement")
            if dst.placement == HOST:
                _lx("§12 copy_cache dst HOST", "")
            type_check(src, ["KvCache"], "src")
            if src is None:
                _attr("src", "V-4: the HOST check reads its placement")
            if src.placement == HOST:
                _lx("§12 copy_cache src HOST", "")
        else:
            type_check(dst, ["Cache"], "dst")
            type_check(src, ["Cache"], "src")
        int_range(dst_batch_index, 0, U32_MAX, "dst_batch_index")
        int_range(src_batch_index, 0, U32_MAX, "src_batch_index")
        int_range(offset, 0, U64_MAX, "offset")
        int_range(size, I64_MIN, I64_MAX, "size")
        if self.mode.generation == 2:
            if src is None:
                _attr("src", "V-4")
            if src.blocks:
                _lx("§11.6 src blocks", "src")
            if dst is None:
                _attr("dst", "V-4")
            if dst.blocks:
                _lx("§11.6 dst blocks", "dst")
        if size != -1 and size <= 0:
            _lx("§11.6 size", "size")
        if req_id is not None:
            if self.mode.generation == 2:
                int_range(req_id, 0, U64_MAX, "req_id")
            else:
                type_check(req_id, ["int"], "req_id")
        if src is None:
            _attr("src", "V-4")
        if dst is None:
            _attr("dst", "V-4")
        status = self.engine.copy_cache(dst.cache_id, src.cache_id, dst_batch_index, src_batch_index, offset, size)
        return Verdict("core", status, rule="§6.6")

    def _copy_blocks(self, cache: Any, copy_block_info: Any) -> Verdict:
        g = self.mode.generation
        type_check(cache, ["KvCache" if g == 1 else "Cache"], "cache")
        if not isinstance(copy_block_info, dict):
            _t("copy_block_info", "§11.6 dict")
        for k, v in copy_block_info.items():
            if not is_int(k):
                _t("copy_block_info", "§11.6 int keys")
            if not isinstance(v, list) or not all(is_int(x) for x in v):
                _t("copy_block_info", "§11.6 list values of int")
        if cache is None:
            _attr("cache", "V-4")
        if g == 2 and not cache.blocks:
            _lx("§11.6 copy_blocks of a non-blocks cache", "")
        if g == 1:
            if cache.placement == HOST:
                _lx("§12 copy_blocks HOST", "")
            for k, v in copy_block_info.items():
                for x in [k, *v]:
                    if not 0 <= x <= U64_MAX:
                        _v("copy_block_info", "§12 copy_blocks uint64")
        pairs = [(s, d) for s, ds in copy_block_info.items() for d in ds]
        if not pairs:
            self._lint("PR-25", "copy")              # the core copies block 0 onto itself
        dsts = [d for _, d in pairs]
        if len(set(dsts)) != len(dsts):
            self._lint("PR-5", "")                   # the last pair in order wins
        if g == 2:
            for s, d in pairs:
                if not 0 <= s <= U64_MAX or not 0 <= d <= U64_MAX:
                    _t("copy_block_info", "§7.3 native conversion (decision)")
        return Verdict("core", self.engine.copy_blocks(cache.cache_id, pairs), rule="§8.9")

    def _swap_blocks(self, src_cache: Any, dst_cache: Any, src_to_dst: Any,
                     memory: Optional[Dict[str, List[bytearray]]] = None) -> Verdict:
        g = self.mode.generation
        cls = "KvCache" if g == 1 else "Cache"
        type_check(src_cache, [cls], "src")
        type_check(dst_cache, [cls], "dst")
        if g == 2:
            if src_cache is None:
                _attr("src", "V-4")
            if not src_cache.blocks:
                _lx("§11.6 swap src not blocks", "")
            if dst_cache is None:
                _attr("dst", "V-4")
            if not dst_cache.blocks:
                _lx("§11.6 swap dst not blocks", "")
        if src_cache is None:
            _attr("src", "V-4")
        if dst_cache is None:
            _attr("dst", "V-4")
        if not isinstance(src_to_dst, dict) or not all(is_int(k) for k in src_to_dst):
            _t("src_to_dst", "§11.6 dict of int keys")
        if src_cache.desc_size // src_cache.batch_size != dst_cache.desc_size // dst_cache.batch_size:
            _lx("§11.6 block sizes", "")
        if src_cache.num_tensors != dst_cache.num_tensors:
            _lx("§11.6 num_tensors", "")
        for k, v in src_to_dst.items():
            if not 0 <= k < src_cache.batch_size or not 0 <= v < dst_cache.batch_size:
                _lx("§11.6 indexes", "")
        if (src_cache.placement, dst_cache.placement) not in ((HOST, DEVICE), (DEVICE, HOST)):
            _lx("§11.6 placements", "")
        if src_cache.batch_dim != 0 or dst_cache.batch_dim != 0:
            self._lint("PR-18", "batch_dim_index")   # the block size uses shape[batch_dim_index]
        if not src_to_dst:
            self._lint("PR-25", "swap")              # success, nothing moves
        if len(set(src_to_dst.values())) != len(src_to_dst):
            self._lint("PR-5", "")                   # the last pair in order wins
        if g == 1 and (src_cache.deallocated or dst_cache.deallocated):
            _lx("V-11: a deallocated KvCache", "")
        block = src_cache.desc_size // src_cache.batch_size
        if memory is not None:
            swap(memory[src_cache.name], memory[dst_cache.name], block, list(src_to_dst.items()))
        return Verdict("core", S.LLM_SUCCESS, rule="§8.10")

    def _check_cache_key(self, cache_key: Any) -> Verdict:
        """python-api.md §7.5 as a static method: the validity rule of a ``CacheKey``."""
        if isinstance(cache_key, Key):
            validity(cache_key)
        return Verdict("core", S.LLM_SUCCESS, rule="§7.5")

    # ---- v1 (python-api.md §12) ---------------------------------------------------------------------------

    def _v1_pull_core(self, key: Any, cache: Ref, batch_index: int, size: int, src: Optional[range],
                      dst: Optional[range], n: int, dst_offset: int, blocks: bool) -> Verdict:
        """The v1 core without a link: docs/reference/semantics.md §8.0's pull order (local cache, local
        checks, link) with the v1 length rule of semantics.md §6.1 (decision: semantics.md §8.0 is written for
        v2; v1 pulls are answered by the same engine steps before the link). v1 has no
        own-cluster step (E-7)."""
        local = self.live(cache)
        if local is None:
            return Verdict("core", S.LLM_KV_CACHE_NOT_EXIST, rule="v1 local cache")
        if blocks and local.blocks == 0:
            # semantics.md §7.6: a block pull into a local cache without blocks (a v1 KvCache carries no
            # blocks flag, so only the engine can tell)
            return Verdict("core", S.LLM_PARAM_INVALID, rule="§7.6 local cache kind")
        if not blocks:
            if batch_index >= local.batches:
                return Verdict("core", S.LLM_PARAM_INVALID, rule="§6.2 batch_index")
            off = max(dst_offset, 0)
            length = size if size > 0 else local.stride - off
            if length <= 0 or off + length > local.stride:
                return Verdict("core", S.LLM_PARAM_INVALID, rule="§6.1 v1 dst_cache_offset + L > S_dst")
        return _range_rules(src, dst, n, local.num_tensors, "no link", v2=False)

    def _v1_pull_cache(self, cache_key: Any, kv_cache: Any, batch_index: Any = 0, size: Any = -1,
                       **kwargs: Any) -> Verdict:
        keywords(kwargs, ("src_layer_range", "dst_layer_range", "src_cache_offset", "dst_cache_offset",
                          "tensor_num_per_layer"))
        if self.mode.role != "DECODER":
            _lx("§12 pull_cache step 1: DECODER only", "is not supported by")
        type_check(cache_key, ["CacheKey", "CacheKeyByIdAndIndex"], "cache_key")
        type_check(kv_cache, ["KvCache"], "kv_cache")
        if kv_cache is None:
            _attr("kv_cache", "V-4")
        if kv_cache.placement == HOST:
            _lx("§12 pull_cache step 4", "Only support device cache")
        int_range(size, I64_MIN, I64_MAX, "size")
        int_range(batch_index, 0, U32_MAX, "batch_index")
        if size != -1 and size <= 0:
            _lx("§12 pull_cache step 7", "size")
        offsets = []
        for name in ("src_cache_offset", "dst_cache_offset"):
            if kwargs.get(name) is not None:             # the vendor's kwargs.get: None is not given
                int_range(kwargs[name], I64_MIN, I64_MAX, name)
                if kwargs[name] < 0:
                    _v(name, "§6.3 offset < 0")
                offsets.append(kwargs[name])
            else:
                offsets.append(-1)
        if isinstance(cache_key, Key):
            validity(cache_key)
        if cache_key is None:
            _attr("cache_key", "V-4: v1 packs the key before tensor_num_per_layer")
        n = tensor_num(kwargs.get("tensor_num_per_layer", 2))
        src, dst = pull_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"))
        project_pull(src, dst, n, kv_cache.num_tensors)
        return self._v1_pull_core(cache_key, kv_cache, batch_index, size, src, dst, n, offsets[1], blocks=False)

    def _v1_pull_blocks(self, prompt_cache_key: Any, decoder_kv_cache: Any, prompt_blocks: Any,
                        decoder_blocks: Any, **kwargs: Any) -> Verdict:
        keywords(kwargs, ("src_layer_range", "dst_layer_range", "tensor_num_per_layer"))
        if self.mode.role != "DECODER":
            _lx("§12 pull_blocks step 1: DECODER only", "is not supported by")
        type_check(prompt_cache_key, ["BlocksCacheKey"], "prompt_cache_key")
        type_check(decoder_kv_cache, ["KvCache"], "decoder_kv_cache")
        # None passes the type check (docs/reference/python-api.md §0); the emptiness checks take its len()
        seq_of(prompt_blocks, ["list"], "int", "prompt_blocks", none_ok=True, numpy_ok=True)
        seq_of(decoder_blocks, ["list"], "int", "decoder_blocks", none_ok=True, numpy_ok=True)
        if decoder_kv_cache is None:
            _attr("decoder_kv_cache", "V-4")
        if decoder_kv_cache.placement == HOST:
            _lx("§12 pull_blocks step 6", "")
        if length(prompt_blocks, "prompt_blocks") == 0:
            _lx("§12 pull_blocks step 7", "prompt_blocks")
        if length(decoder_blocks, "decoder_blocks") == 0:
            _lx("§12 pull_blocks step 8", "decoder_blocks")
        if len(blocks_of(prompt_blocks)) != len(blocks_of(decoder_blocks)):
            _lx("§12 pull_blocks step 9", "")
        n = tensor_num(kwargs.get("tensor_num_per_layer", 2))
        src, dst = pull_ranges(kwargs.get("src_layer_range"), kwargs.get("dst_layer_range"))
        if prompt_cache_key is None:
            _attr("prompt_cache_key", "V-4")
        convert_blocks(prompt_blocks, "prompt_blocks")
        convert_blocks(decoder_blocks, "decoder_blocks")
        project_pull(src, dst, n, decoder_kv_cache.num_tensors)
        d = blocks_of(decoder_blocks)
        if len(set(d)) != len(d):
            _lint("PR-5", "decoder_blocks")
        return self._v1_pull_core(prompt_cache_key, decoder_kv_cache, 0, -1, src, dst, n, -1, blocks=True)

    def _get_cache_tensors(self, cache: Any, tensor_index: Any = 0) -> Verdict:
        type_check(cache, ["KvCache"], "cache")
        int_range(tensor_index, I32_MIN, I32_MAX, "tensor_index")
        if cache is None:
            _attr("cache", "V-4")
        if not 0 <= tensor_index < cache.num_tensors:
            _lx("§12 get_cache_tensors index", "tensor_index")
        if cache.deallocated:
            return Verdict("core", S.LLM_KV_CACHE_NOT_EXIST, rule="V-11")
        return Verdict("core", S.LLM_SUCCESS, rule="§12 get_cache_tensors", value=tensor_index)


# ---- LLMDataDist.init: the generation and the transfer mode (docs/reference/semantics.md §1.1, §1.3) -------------

def init_selection(options: Dict[str, str], role: str) -> Tuple[str, str]:
    """What ``init(options)`` selects (docs/reference/python-api.md §10.2 steps 5–11): ``("LX", why)`` or
    ``("v2", "direct"|"server")`` or ``("v1", "")``."""
    opts = dict(options)
    if "llm.LocalCommRes" in opts:                                    # step 6
        opts.setdefault("llm.EnableCacheManager", "1")
        opts.setdefault("llm.EnableRemoteCacheAccessible", "1")
    v2 = opts.get("llm.EnableCacheManager") == "1"                    # step 7
    if "llm.LocalCommRes" in opts and not v2:
        return "LX", "step 8: llm.LocalCommRes without CacheManager mode"
    if "llm.TransferBackend" in opts:                                 # step 9
        if not v2:
            return "LX", "step 9: llm.TransferBackend without CacheManager mode"
        if opts.setdefault("llm.EnableRemoteCacheAccessible", "1") != "1":
            return "LX", "step 9: llm.TransferBackend needs llm.EnableRemoteCacheAccessible 1"
        if "llm.listenIpInfo" not in opts:
            return "LX", "step 9: llm.TransferBackend needs llm.listenIpInfo"
    if v2:
        return "v2", "direct" if opts.get("llm.EnableRemoteCacheAccessible") == "1" else "server"
    if role == "PROMPT" and "llm.listenIpInfo" not in opts:           # step 11 (V-6)
        return "LX", "step 11: a v1 PROMPT needs llm.listenIpInfo"
    return "v1", ""


# ---- links and roles of one engine without a peer (docs/reference/python-api.md §10.5–§10.7) ------------------

@dataclass(frozen=True)
class Cluster:
    """An ``LLMClusterInfo`` as the test built it: ``remote_cluster_id`` (``None``: unset)
    and how many local and remote ip entries it holds (the remote ones point at a port
    where nothing listens)."""

    remote_cluster_id: Optional[int]
    local_ips: int = 1
    remote_ips: int = 1


def _link_args(clusters: Any, timeout: Any) -> None:
    int_range(timeout, I32_MIN, I32_MAX, "timeout")
    if timeout <= 0:
        _lx("§10.5 timeout <= 0", "timeout")
    if clusters is None:
        _t("clusters", "V-4: iterated")
    if not isinstance(clusters, (list, tuple)) or not all(isinstance(c, Cluster) for c in clusters):
        _t("clusters", "§10.5 list|tuple of LLMClusterInfo")


def link_clusters(mode: Mode, clusters: Any, timeout: Any = 3000, local_comm_res: bool = False) -> Verdict:
    """``link_clusters``: the Python checks, then the core's answer ``(status, [status…])``
    with nothing listening at any remote address (``value``)."""
    try:
        _link_args(clusters, timeout)
        if mode.generation == 2:
            for i, c in enumerate(clusters):
                if c.local_ips == 0 and not local_comm_res:
                    _lx("§10.5 v2: local_ip_info_list empty", "local_ip_info_list")
                if c.remote_cluster_id is None:
                    _t("remote_cluster_id", "§10.5 v2: remote_cluster_id unset")
        else:
            for c in clusters:
                if c.remote_cluster_id is None:
                    _t("remote_cluster_id", "V-8: v1 converts it in the binding")
    except _Stop as stop:
        return stop.verdict
    if not clusters:
        return Verdict("core", value=(S.LLM_PARAM_INVALID, []), rule="§10.5 empty list")
    if mode.generation == 1:
        if mode.role != "DECODER":
            return Verdict("core", value=(S.LLM_PARAM_INVALID, []), rule="§10.5 v1: only a DECODER links")
        if len(clusters) > 16:
            return Verdict("core", value=(S.LLM_CLUSTER_NUM_EXCEED_LIMIT, []), rule="§10.5 v1: > 16 clusters")
        if any(c.local_ips != 1 or c.remote_ips != 1 for c in clusters):
            # docs/reference/semantics.md §10.5 (v1): empty lists or a size other than the device count (one,
            # PR-36) fail the whole call, which then reports no per-cluster results
            return Verdict("core", value=(S.LLM_PARAM_INVALID, []), rule="§10.5 v1: ip entries")
        results = []
        for i, c in enumerate(clusters):
            if any(d.remote_cluster_id == c.remote_cluster_id for d in clusters[:i]):
                results.append(S.LLM_REPEAT_REQUEST)      # python-api.md §10.5, X-12: a later occurrence
            else:
                results.append(S.LLM_LINK_FAILED)         # refused (the own cluster id too, E-7)
        if S.LLM_LINK_FAILED in results:
            return Verdict("core", value=(S.LLM_LINK_FAILED, results), rule="§10.5 v1: rolled back")
        failures = [r for r in results if r != S.LLM_SUCCESS]
        return Verdict("core", value=(failures[-1] if failures else S.LLM_SUCCESS, results), rule="§10.5 v1")
    results = []
    for c in clusters:
        if c.remote_ips != 1 or (c.local_ips != 1 and not local_comm_res):
            results.append(S.LLM_PARAM_INVALID)          # python-api.md §10.5 per cluster: exactly one entry each
        else:
            results.append(S.LLM_LINK_FAILED)            # python-api.md §10.5: refused (the own cluster id too, E-7)
    failures = [r for r in results if r != S.LLM_SUCCESS]
    return Verdict("core", value=(failures[-1] if failures else S.LLM_SUCCESS, results), rule="§10.5")


def check_link_status(mode: Mode, remote_cluster_id: Any) -> Verdict:
    """python-api.md §10.7 (v1): CacheManager mode → LX; uint64; core: DECODER only, not linked."""
    try:
        if mode.generation == 2:
            _lx("§10.7: not in CacheManager mode", "")
        int_range(remote_cluster_id, 0, U64_MAX, "remote_cluster_id")
    except _Stop as stop:
        return stop.verdict
    if mode.role != "DECODER":
        return Verdict("core", S.LLM_PARAM_INVALID, rule="§10.7 DECODER only")
    return Verdict("core", S.LLM_NOT_YET_LINK, rule="§10.7 not linked")


def unlink_clusters(mode: Mode, clusters: Any, timeout: Any = 3000, force: Any = False) -> Verdict:
    """``unlink_clusters`` of clusters this engine never linked (docs/reference/python-api.md §10.5,
    docs/reference/semantics.md §10.3, §10.5 v1, X-12): the Python checks, then the core's answer
    ``(status, [status…])`` (``value``) with nothing listening at any remote address."""
    try:
        _link_args(clusters, timeout)                     # python-api.md §10.5: initialised, timeout, clusters
        if not isinstance(force, bool):
            _t("force", "§10.5 force is a bool")           # after the clusters' container check
        for c in clusters:                                # python-api.md §10.5 both generations: uint64 (T/V)
            int_range(c.remote_cluster_id, 0, U64_MAX, "remote_cluster_id")
    except _Stop as stop:
        return stop.verdict
    if not clusters:
        return Verdict("core", value=(S.LLM_PARAM_INVALID, []), rule="§10.5 empty list (as for linking)")
    if mode.generation == 1:
        if len(clusters) > 16:
            return Verdict("core", value=(S.LLM_CLUSTER_NUM_EXCEED_LIMIT, []), rule="§10.5 v1: > 16 clusters")
        if any(c.local_ips != 1 or c.remote_ips != 1 for c in clusters):
            # docs/reference/semantics.md §10.5 (v1): both lists are sent and checked as for linking; a
            # call-level failure reports no per-cluster results
            return Verdict("core", value=(S.LLM_PARAM_INVALID, []), rule="§10.5 v1: ip entries")
        results = []
        for i, c in enumerate(clusters):
            if any(d.remote_cluster_id == c.remote_cluster_id for d in clusters[:i]):
                results.append(S.LLM_REPEAT_REQUEST)      # python-api.md §10.5 v1, X-12: a later occurrence
            else:
                results.append(S.LLM_NOT_YET_LINK)        # never linked (own id included)
        # python-api.md §10.5 v1: any per-cluster status but SUCCESS and NOT_YET_LINK fails the call
        bad = any(r not in (S.LLM_SUCCESS, S.LLM_NOT_YET_LINK) for r in results)
        return Verdict("core", value=(S.LLM_UNLINK_FAILED if bad else S.LLM_SUCCESS, results), rule="X-12")
    results = []
    for c in clusters:
        if force:
            results.append(S.LLM_SUCCESS)                 # semantics.md §10.3: forced, never linked → SUCCESS, no traffic
        elif c.remote_ips != 1:
            results.append(S.LLM_PARAM_INVALID)           # semantics.md §10.3: non-forced needs exactly one remote entry
        else:
            # semantics.md §10.3: the non-forced form needs a reachable listener even for a cluster never
            # linked; nothing listens → the connection is refused (decision: the own cluster
            # id and repeats (PR-29) are no exception, the connection is tried all the same)
            results.append(S.LLM_UNLINK_FAILED)
    failures = [r for r in results if r != S.LLM_SUCCESS]
    return Verdict("core", value=(failures[-1] if failures else S.LLM_SUCCESS, results), rule="§10.3")


def is_llm_role(value: Any) -> bool:
    """Whether ``value`` is a member of the vendor's ``LLMRole``: the oracle, which imports
    nothing from the package, knows that enum by its name and its members' names."""
    return isinstance(value, Enum) and type(value).__name__ == "LLMRole" and value.name in Role.__members__


def switch_role(mode: Mode, role: Any, switch_options: Any = None, enable_switch_role: bool = False) -> Verdict:
    """``switch_role`` of an engine without links (docs/reference/python-api.md §10.6, docs/reference/semantics.md §10.7,
    X-13): the Python checks in the vendor's order, then the core's answer. ``role`` is
    an ``LLMRole``, ``None`` or anything else; a successful verdict's ``value`` is the new
    role's name (the caller applies it to ``mode``). ``enable_switch_role``: whether
    ``llm.EnableSwitchRole="1"`` was given at init (v1)."""
    try:
        if role is not None and not is_llm_role(role):
            _t("role", "§10.6 role type LLMRole")
        if role is None:
            raise _Stop(Verdict("K", name="role", rule="V-4: switch_role(None) fails at the role lookup"))
        if mode.generation == 1 and role.name == mode.role:
            _lx("§10.6 v1: role not changed", "role")
        if switch_options is not None and not isinstance(switch_options, dict):
            _t("switch_options", "§10.6 switch_options dict or None")
        if mode.generation == 1 and role.name == "PROMPT":
            # no options at all are the vendor's empty dict
            if "llm.listenIpInfo" not in (switch_options or {}):
                _lx("§10.6 v1: switching to PROMPT needs llm.listenIpInfo", "llm.listenIpInfo")
        listen = (switch_options or {}).get("llm.listenIpInfo")
        if mode.generation == 1 and role.name != "PROMPT":
            listen = None                                 # v1 reads it only for PROMPT
        if listen is not None:
            # python-api.md §10.6: parsed as at init (python-api.md §10.2 step 10, V-7) in v2; v1 adds the IPv4 rule
            parts = listen.split(":")
            if len(parts) != 2:
                _lx("§10.6: llm.listenIpInfo is not ip:port", "llm.listenIpInfo")
            if mode.generation == 1 and not _inet_aton(parts[0]):
                raise _Stop(Verdict("RT", rule="§10.6 v1: the IPv4 rule"))
            try:
                port = int(parts[1])
            except ValueError:
                _v("llm.listenIpInfo", "§10.6: int() of the port")
            if not (0 if mode.generation == 2 else 1) <= port <= 65535:   # PR-27: port 0 is v2's ephemeral listen
                _lx("PR-27", "llm.listenIpInfo")
    except _Stop as stop:
        return stop.verdict
    if mode.generation == 1 and not enable_switch_role:
        return Verdict("core", S.LLM_FEATURE_NOT_ENABLED, rule="§10.7 v1: llm.EnableSwitchRole not \"1\"")
    if mode.generation == 2 and listen is not None and not _inet_aton(listen.split(":")[0], strict=True):
        return Verdict("core", S.LLM_PARAM_INVALID, rule="§10.7: malformed listen address (C++)")
    return Verdict("core", S.LLM_SUCCESS, value=role.name, rule="§10.7: no link, the role changes")


def _inet_aton(ip: str, strict: bool = False) -> bool:
    """docs/reference/python-api.md §5: the C library's IPv4 parse (shorthand forms accepted); ``strict``:
    four dotted decimal parts, as a C++ listen address must be (decision)."""
    import socket
    if strict:
        parts = ip.split(".")
        return len(parts) == 4 and all(p.isdigit() and p.isascii() and int(p) <= 255 for p in parts)
    try:
        socket.inet_aton(ip)
    except (OSError, ValueError):
        return False
    return True


# ---- remap_registered_memory (docs/reference/python-api.md §11.7, X-15) -----------------------------------------

@dataclass(frozen=True)
class Mem:
    """A ``MemInfo(mem_type, addr, size)``; ``inside`` says whether ``[addr, addr + size)``
    lies in a tensor this engine registered."""

    device: bool
    addr: Any
    size: Any
    inside: bool = False


def remap_registered_memory(mode: Mode, mem_infos: Any) -> Verdict:
    try:
        if not isinstance(mem_infos, (list, Mem)):
            _lx("§11.7 not a list or MemInfo", "mem_infos")
        items = mem_infos if isinstance(mem_infos, list) else [mem_infos]
        for m in items:
            if not isinstance(m, Mem):
                _lx("§11.7 element not a MemInfo", "MemInfo")
            if not m.device:
                _lx("§11.7 mem_type", "mem_type")
            if m.addr == 0:
                _lx("§11.7 addr == 0", "addr")
            if is_int(m.size) and m.size <= 0:
                _lx("§11.7 size <= 0", "size")
        for name in ("addr", "size"):                 # V-12: converted for the native call
            if not all(is_int(getattr(m, name)) for m in items):
                _t(name, "V-12")
    except _Stop as stop:
        return stop.verdict
    if not items:
        return Verdict("core", S.LLM_PARAM_INVALID, rule="§11.7 empty list")
    # python-api.md §11.7: without a link the core answers NOT_YET_LINK before it looks at the ranges
    # (X-15's range rule needs a linked engine: not reachable in one process)
    return Verdict("core", S.LLM_NOT_YET_LINK, rule="§11.7 no link")


# ---- transfer_cache_async (docs/reference/python-api.md §11.4, V-9), one engine without a peer --------------------

@dataclass(frozen=True)
class Cfg:
    """A ``TransferConfig`` (``key is None``: ``dst_cluster_id``, ``addrs`` destination
    addresses) or a ``TransferWithCacheKeyConfig`` (``key``, both ranges)."""

    key: Optional[Key] = None
    dst_cluster_id: int = 1
    addrs: int = 2
    src_layer_range: Optional[range] = None
    dst_layer_range: Optional[range] = None
    src_batch_index: int = 0


def transfer_cache_async(mode: Mode, src: Any, synchronizer: Any, configs: Any, src_blocks: Any = None,
                         dst_blocks: Any = None, block_size: Any = None) -> Verdict:
    """The checks of python-api.md §11.4 steps 1–10 with V-9, then what ``synchronize()`` of the task
    returns when no link exists: the first covered layer's first config fails (its push,
    or its transfer to raw addresses, reaches the core's link lookup: NOT_YET_LINK, the
    own cluster id included) and the thread stops (semantics.md §8.7)."""
    try:
        if not (isinstance(src, Ref) and src.cls == "Cache"):
            _t("src_cache", "§11.4 step 1")
        if src.placement == HOST:
            _lx("§11.4 step 2", "DEVICE")
        for value, name in ((dst_blocks, "dst_block_indices"), (src_blocks, "src_block_indices")):
            if value is None:
                continue
            if not isinstance(value, (list, tuple)):
                _t(name, "§11.4 step 3")
            for v in value:
                int_range(v, 0, U64_MAX, name)
        if block_size is not None:
            int_range(block_size, 0, U64_MAX, "dst_block_memory_size")
        if src_blocks:
            if not dst_blocks:
                _lx("§11.4 step 5: blocks to cache", "transfer from blocks to cache is not supported")
            if len(src_blocks) != len(dst_blocks):
                _lx("§11.4 step 5: lengths", "dst_block_indices")
        elif dst_blocks and block_size is None:
            _lx("§11.4 step 5: dst_block_memory_size", "dst_block_memory_size")
        if synchronizer != "SYNC":
            _t("layer_synchronizer", "§11.4 step 6")
        keyed = mode.direct
        if not isinstance(configs, (list, tuple)) or not all(isinstance(c, Cfg) and (c.key is not None) == keyed
                                                             for c in configs):
            _t("transfer_configs", "§11.4 step 7")
        if block_size not in (None, 0) and not dst_blocks:
            _lx("§11.4 step 8", "dst_block_memory_size")
        if src.num_tensors % 2:
            _lx("§11.4 step 9", "tensors")
        layers = src.num_tensors // 2
        spans = []
        for c in configs:
            r = c.src_layer_range if c.src_layer_range is not None else range(0, layers)
            if src_blocks and c.src_batch_index != 0:
                _lx("§11.4 step 10: src_batch_index with source blocks", "src_batch_index")
            if not c.src_batch_index < src.shape[0]:
                _lx("V-9: src_batch_index below the batch count", "src_batch_index")
            if not 0 <= r.start < r.stop <= layers:
                _lx("§11.4 step 10: layer range", "src_layer_range")
            if keyed and c.dst_layer_range is not None and len(c.dst_layer_range) != len(r):
                _lx("V-9: range lengths", "dst_layer_range")
            if not keyed and c.addrs != 2 * len(r):
                _lx("§11.4 step 10: dst_addrs", "dst_addrs")
            spans.append(r)
        if dst_blocks and len(set(dst_blocks)) != len(dst_blocks):
            _lint("PR-5", "dst_block_indices")
    except _Stop as stop:
        return stop.verdict
    first = min(range(len(configs)), key=lambda i: (spans[i].start, i), default=None)
    if first is None:
        return Verdict("core", S.LLM_SUCCESS, rule="§8.7 nothing to transfer", value=(S.LLM_SUCCESS, []))
    cluster = configs[first].key.cluster_id if keyed else configs[first].dst_cluster_id
    # neither a keyed push nor a transfer to raw addresses has an own-cluster step (no
    # link under that id here), and a transfer's source checks (PR-15 among them, X-10) come
    # after the link, in the vendor's layer-wise job
    code = S.LLM_NOT_YET_LINK
    # (a blocks push without source blocks reads its lists after the link, X-17; a
    # BlocksCacheKey with neither list is the vendor's "batch" 0 of it, block 0: X-25)
    if keyed and configs[first].key.kind != "BlocksCacheKey" and (src_blocks or dst_blocks):
        code = S.LLM_PARAM_INVALID       # decision: a contiguous push (push_cache's form) takes no block lists
    results = [code if (c.key.cluster_id if keyed else c.dst_cluster_id) == cluster else None for c in configs]
    return Verdict("core", S.LLM_SUCCESS, rule="§8.7 the first layer fails", value=(code, results))
