"""Property tests: the native layer over the mock agrees with the oracle (tests/oracle).

Hypothesis draws caches (tensor counts, shapes with byte and sub-byte data types,
dims that overflow, placements, registered or pool-allocated, registered before or
after the link and before or after the link's first use), layer pairs, block lists,
sizes, batch indexes and offsets, for every data-movement call of
``llm_datadist_ffi.native``. For each example the package and the oracle agree on the
outcome (``TypeError``/``ValueError``, or ``LLMException`` and its ``status_code``, or
success); every byte of every cache then equals the oracle's expectation: the copies
the oracle lists were made, and nothing else changed (guard bytes around every
tensor included), in particular nothing on failure (except the layers a push wrote
before a failing layer, docs/reference/semantics.md §8.12).

Two engines live for the whole module: A (cluster 1, DECODER) with a device and a host
memory pool, B (cluster 2, PROMPT) without a pool. Each example starts them afresh
(finalize + initialize: no caches, no links, ids from 1), registers its caches, links,
makes the call and cleans up; semantics PR-32 and semantics.md §9.7 make a link that predates the
caches part of each example rather than of the module.

docs/testing.md maps every rule to the tests here.
"""
from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import acl, mock_control, native
from llm_datadist_ffi.native import CachePlacement, GeDataType as G, LlmRole

from oracle import Ext, tensor_layout
from native_driver import Harness, observe

pytestmark = pytest.mark.mock_only(reason="property tests of the mock's rules against the oracle")

A, B = 1, 2
DEVICE, HOST = int(CachePlacement.DEVICE), int(CachePlacement.HOST)
POOL = '{"memory_size": 1048576, "page_shift": 12}'          # 256 pages of 4 KiB
HOST_POOL = '{"memory_size": 524288, "page_shift": 10}'      # 512 pages of 1 KiB
U32_MAX, U64_MAX, I32_MAX, I64_MAX = 2**32 - 1, 2**64 - 1, 2**31 - 1, 2**63 - 1


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    """Engines A (pools) and B (no pool), each listening on 127.0.0.1."""
    h = Harness(seed=20240601)
    pa, pb = _free_port(), _free_port()
    h.add(A, LlmRole.DECODER, {"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{pa}",
                               "llm_datadist_ffi.mock.NativePool": "1", "llm.MemPoolConfig": POOL, "llm.HostMemPoolConfig": HOST_POOL}, pa)
    h.add(B, LlmRole.PROMPT, {"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{pb}"}, pb)
    h.reset()
    yield h
    h.close()


# ---- strategies -------------------------------------------------------------------------------

BYTE_TYPES = [G.DT_UINT8, G.DT_INT8, G.DT_FLOAT16, G.DT_BF16, G.DT_FLOAT, G.DT_INT64, G.DT_DUAL, G.DT_STRING,
              G.DT_COMPLEX128, G.DT_BOOL]
SUB_BYTE_TYPES = [G.DT_INT4, G.DT_UINT1, G.DT_INT2, G.DT_UINT2, G.DT_FLOAT6_E3M2, G.DT_FLOAT4_E2M1, G.DT_HIFLOAT4]
UNSIZED_TYPES = [5, int(G.DT_UNDEFINED), int(G.DT_HIFLOAT4_SCALE), 44, 1000, -1]


def weighted(*options: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, chosen with the given weights (shrinks to the first).

    ``sampled_from`` picks about uniformly; a bounded ``integers`` would pick its lower
    bound far more often than the weights say."""
    table = [strategy for weight, strategy in options for _ in range(weight)]
    return st.sampled_from(table).flatmap(lambda strategy: strategy)


@dataclass(frozen=True)
class Flaws:
    """Which arguments of an example may break a rule.

    An example is clean (every argument valid, so that the call succeeds and moves
    bytes unless the caches themselves differ), has exactly one flawed knob (so that
    the rule behind that knob decides the outcome, whatever its place in the check
    order), or is chaotic (any knob may be flawed: the check order decides between
    them). Each test runs every focus group (FOCUS) with the profile's example count;
    within a group, shrinking goes towards valid values."""

    chosen: Optional[str] = None
    chaos: bool = False

    def allows(self, knob: str) -> bool:
        return self.chaos or self.chosen == knob

    def __call__(self, knob: str, valid: st.SearchStrategy[Any], flawed: st.SearchStrategy[Any],
                 weight: int = 8) -> st.SearchStrategy[Any]:
        if self.chaos:
            return weighted((weight, valid), (2, flawed))
        return flawed if self.chosen == knob else valid


def focused(focus: str) -> st.SearchStrategy[Flaws]:
    """The flaws of an example of one FOCUS group: "clean", "chaos", or one knob of the group."""
    if focus == "clean":
        return st.just(Flaws())
    if focus == "chaos":
        return st.just(Flaws(chaos=True))
    return st.sampled_from({**FOCUS, **COPY_FOCUS}[focus]).map(Flaws)


# The knobs of block lists (one per focus group of BLOCK_GROUPS).
BLOCK_KNOBS = ("blocks.oob", "blocks.dup", "blocks.shape", "blocks.values")

#: Copies: "local" is the source cache, "remote" the destination (both on one engine).
COPY_FOCUS: dict[str, tuple[str, ...]] = {
    "clean": (), "chaos": (),
    "source cache": ("local.tensors", "local.dtype", "local.shape"),
    "destination cache": ("remote.tensors", "remote.dtype", "remote.shape"),
    "cache pair": ("pair",),
    "engine without a pool": ("cluster",),
    "cache ids": ("src_id",),
    "batch indexes": ("src_batch", "dst_batch"),
    "offset": ("offset",),
    "size": ("size",),
    "block bounds": ("blocks.oob",),
    "repeated blocks": ("blocks.dup",),
    "block list shapes": ("blocks.shape",),
    "block values": ("blocks.values",),
    "destination lists": ("lists",),
}

#: Each transfer test runs every group below with the profile's example count, so that
#: every rule behind a knob is reached in every run, whatever the knobs' odds.
BLOCK_GROUPS = ("block bounds", "repeated blocks", "block list shapes", "block values")
FOCUS: dict[str, tuple[str, ...]] = {
    "clean": (), "chaos": (),
    "local cache": ("local.tensors", "local.dtype", "local.shape", "local.placement"),
    "remote cache": ("remote.tensors", "remote.dtype", "remote.shape", "remote.placement"),
    "local registered late": ("local.when",),
    "remote registered late": ("remote.when",),
    "cache pair": ("pair",),
    "tensor_num_per_layer": ("n",),
    "layer ranges": ("layers",),
    "no link": ("link",),
    "peer cluster": ("peer",),
    "cache ids": ("src_id", "dst_id"),
    "source batch": ("src_batch",),
    "destination batch": ("dst_batch",),
    "size": ("size",),
    "caller's cache": ("caller",),
    "block bounds": ("blocks.oob",),
    "repeated blocks": ("blocks.dup",),
    "block list shapes": ("blocks.shape",),
    "block values": ("blocks.values",),
}
FOCUS_OF = {
    "pull_kv_cache": [g for g in FOCUS if g not in ("caller's cache", *BLOCK_GROUPS)],
    "pull_kv_blocks": [g for g in FOCUS if g not in ("caller's cache", "size")],
    "push_kv_cache": [g for g in FOCUS if g not in BLOCK_GROUPS],
    "push_kv_blocks": [g for g in FOCUS if g != "size"],
}


@dataclass(frozen=True)
class Spec:
    """A cache to create in an example: where, how, and when relative to the link."""

    num_tensors: int
    data_type: int
    shape: tuple[int, ...]
    placement: int = DEVICE
    allocated: bool = False
    when: str = "before"          # "before" the link, "after_link", or "after_use" (the table copy)

    @property
    def count(self) -> int:
        """shape[0] (batches and blocks), 1 for an empty shape."""
        return self.shape[0] if self.shape and self.shape[0] > 0 else 1

    def but(self, **changes: Any) -> "Spec":
        return Spec(**{**self.__dict__, **changes})


@st.composite
def inner_dims(draw: st.DrawFn, data_type: int, tile: bool) -> tuple[int, ...]:
    """Dims after shape[0]; with ``tile`` and a sub-byte type the last one is a multiple
    of 8, so that batches tile the tensor (PR-17)."""
    inner = draw(st.lists(st.integers(1, 6), min_size=1 if data_type in SUB_BYTE_TYPES else 0, max_size=2))
    if tile and data_type in SUB_BYTE_TYPES:
        inner[-1] *= 8
    return tuple(inner)


@st.composite
def when_created(draw: st.DrawFn, f: Flaws, side: str, allocated: bool) -> str:
    """Registering after the link breaks PR-32, after its first use semantics.md §9.7; allocated
    caches are exempt from PR-32, so "after_link" is valid for them."""
    valid = weighted((4, st.just("before")), (1, st.just("after_link"))) if allocated else st.just("before")
    return str(draw(f(f"{side}.when", valid, st.sampled_from(["after_link", "after_use"]), 8)))


@st.composite
def specs(draw: st.DrawFn, f: Flaws, side: str, can_allocate: bool, max_tensors: int = 8,
          max_count: int = 8) -> Spec:
    num_tensors = draw(f(f"{side}.tensors", st.integers(1, max_tensors), st.sampled_from([0, max_tensors + 3]), 12))
    data_type = int(draw(f(f"{side}.dtype", weighted((8, st.sampled_from(BYTE_TYPES)),
                                                      (2, st.sampled_from(SUB_BYTE_TYPES))),
                           st.sampled_from(UNSIZED_TYPES), 12)))
    count = draw(st.integers(1, max_count))
    tile = not f.allows(f"{side}.shape")
    shape = (count, *draw(inner_dims(data_type, tile)))
    shape = draw(f(f"{side}.shape", st.just(shape), st.sampled_from([(), (count, 0), (-count,), (2**62, 4), shape]),
                   12))
    placement = draw(f(f"{side}.placement", weighted((5, st.just(DEVICE)), (1, st.just(HOST))), st.just(HOST), 6))
    allocated = draw(weighted((4, st.just(False)), (1, st.just(True)))) if can_allocate or f.chaos else False
    return Spec(num_tensors, data_type, shape, placement, allocated, draw(when_created(f, side, allocated)))


@st.composite
def related(draw: st.DrawFn, base: Spec, f: Flaws, side: str, can_allocate: bool, max_count: int = 8) -> Spec:
    """The other cache of a call: the same tensor count and stride as ``base`` (shape[0]
    may differ); with the "pair" knob another stride, tensor count, or anything."""
    kind = draw(f("pair", weighted((2, st.just("same")), (3, st.just("count"))),
                  st.sampled_from(["tensors", "inner", "any"]), 5))
    if kind == "any" or not base.shape:
        return draw(specs(f, side, can_allocate, max_count=max_count))
    placement = draw(f(f"{side}.placement", weighted((5, st.just(DEVICE)), (1, st.just(HOST))), st.just(HOST), 6))
    allocated = draw(weighted((4, st.just(False)), (1, st.just(True)))) if can_allocate or f.chaos else False
    spec = base.but(placement=placement, allocated=allocated, when=draw(when_created(f, side, allocated)))
    if kind == "count":
        spec = spec.but(shape=(draw(st.integers(1, max_count)), *base.shape[1:]))
    elif kind == "tensors":
        spec = spec.but(num_tensors=draw(st.integers(1, 8)))
    elif kind == "inner":
        spec = spec.but(shape=(base.shape[0], *draw(inner_dims(base.data_type, True))))
    return spec


def index_near(f: Flaws, knob: str, limit: int, bits_max: int) -> st.SearchStrategy[int]:
    """An index below ``limit``; flawed: at or past it, at the C type's maximum, or
    one past that maximum or negative (a ValueError)."""
    return f(knob, st.integers(0, max(limit - 1, 0)),
             weighted((5, st.just(limit)), (2, st.integers(limit + 1, limit + 2)), (1, st.just(bits_max)),
                      (1, st.sampled_from([bits_max + 1, -1]))), 12)


@st.composite
def ext_params(draw: st.DrawFn, f: Flaws, n_src: int, n_dst: int, n_local: int) -> Optional[Ext]:
    """Layer pairs and ``tensor_num_per_layer``: defaults, valid ranges and every malformed
    form (semantics.md §4.2-§4.5, §5, PR-1, PR-3, PR-11, PR-12)."""
    divisors = [d for d in range(1, max(n_local, 1) + 1) if n_local % d == 0]
    below = [d for d in range(2, n_local) if n_local % d]            # PR-3: must divide N_local
    n = draw(f("n", st.sampled_from(divisors),
               weighted((4, st.sampled_from(below or [n_local + 1])), (2, st.integers(n_local + 1, n_local + 3)),
                        (2, st.sampled_from([0, 255, 256, 300, U32_MAX])), (1, st.sampled_from([U32_MAX + 1, -1]))),
               6))
    form = draw(f("layers", weighted((1, st.just("none")), (3, st.just("default")), (5, st.just("valid"))),
                  st.just("wild"), 4))
    if form == "none":
        return None
    if form == "default" and (n_src == n_dst or f.allows("pair")):
        return Ext(n=n)
    if form in ("valid", "default") and n > 0:
        ls, ld = n_src // n, n_dst // n
        if ls > 0 and ld > 0:
            span = draw(st.integers(1, min(ls, ld)))
            sf, df = draw(st.integers(0, ls - span)), draw(st.integers(0, ld - span))
            return Ext((sf, sf + span - 1), (df, df + span - 1), n)
        return Ext(n=n)
    ls, ld = n_src // max(n, 1), n_dst // max(n, 1)
    layers = max(ls, ld)
    member = weighted((6, st.integers(-3, layers + 2)), (1, st.sampled_from([I32_MAX, -(2**31)])),
                      (1, st.sampled_from([I32_MAX + 1, -(2**31) - 1])))
    shape = draw(st.sampled_from(["pairs", "half_default", "half_default", "one_default", "one_default", "reversed",
                                  "reversed", "src_past", "src_past", "dst_past", "dst_past", "spans"]))
    if shape == "half_default":      # {-1, s}: PR-11
        return Ext((-1, draw(st.integers(0, layers + 1))), draw(st.sampled_from([(-1, -1), (0, 0)])), n)
    if shape == "one_default":       # PR-1
        pair = (draw(st.integers(0, layers)), draw(st.integers(0, layers)))
        return Ext(pair, (-1, -1), n) if draw(st.booleans()) else Ext((-1, -1), pair, n)
    if shape == "reversed":          # first > second on one side, or on both (spans then equal)
        first = draw(st.integers(1, layers + 2))
        other = draw(st.sampled_from([(0, 0), (first, first - 1), (1, 0)]))
        return Ext((first, first - 1), other, n) if draw(st.booleans()) else Ext(other, (first, first - 1), n)
    if shape in ("src_past", "dst_past"):
        # one range reaches one layer past its cache (src: PR-12 for pulls, semantics.md §4.3 for
        # pushes; dst: semantics.md §4.2, §4.3), the other is valid and of the same span
        past, other = (ls, ld) if shape == "src_past" else (ld, ls)
        span = draw(st.integers(1, max(1, min(past + 1, other))))
        first_past, first_other = past + 1 - span, draw(st.integers(0, max(other - span, 0)))
        pair_past, pair_other = (first_past, past), (first_other, first_other + span - 1)
        return Ext(pair_past, pair_other, n) if shape == "src_past" else Ext(pair_other, pair_past, n)
    if shape == "spans":             # ranges of different lengths
        return Ext((0, draw(st.integers(0, 2))), (0, draw(st.integers(0, 2))), n)
    return Ext((draw(member), draw(member)), (draw(member), draw(member)), n)


CONTAINERS = ["list", "tuple", "uint64", "int64"]


def as_container(values: Sequence[int], container: str) -> Any:
    """The block list as the given container (numpy only where the values fit)."""
    if container == "tuple":
        return tuple(values)
    if container == "uint64" and all(0 <= v <= U64_MAX for v in values):
        return np.array(values, dtype=np.uint64)
    if container == "int64" and all(-(2**63) <= v <= I64_MAX for v in values):
        return np.array(values, dtype=np.int64)
    return list(values)


@st.composite
def block_lists(draw: st.DrawFn, f: Flaws, nb_src: int, nb_dst: int) -> tuple[Any, Any]:
    """Source and destination block lists: runs and scattered pairs, duplicate sources,
    and every malformed form (semantics.md §7.2, §7.3, PR-4, PR-5)."""
    nb_src, nb_dst = min(nb_src, 64), min(nb_dst, 64)          # sizes of the caches that can hold bytes
    k = draw(st.integers(1, max(1, min(nb_dst, 12))))
    if draw(st.booleans()):                                   # runs
        dst: list[int] = []
        src: list[int] = []
        while len(dst) < k:
            run = draw(st.integers(1, k - len(dst)))
            d0, s0 = draw(st.integers(0, max(nb_dst - run, 0))), draw(st.integers(0, max(nb_src - run, 0)))
            if any(d in dst for d in range(d0, d0 + run)):
                run, d0 = 1, next((d for d in range(nb_dst) if d not in dst), nb_dst)
            dst += list(range(d0, d0 + run))
            src += list(range(s0, s0 + run))
    else:                                                     # scattered, sources may repeat
        dst = draw(st.permutations(list(range(nb_dst))))[:k]
        src = draw(st.lists(st.integers(0, max(nb_src - 1, 0)), min_size=len(dst), max_size=len(dst)))
    valid = weighted((4, st.just("none")), (1, st.just("dup_src")))
    options = [flaw for knob, flaws_of_knob in (("blocks.oob", ["src_oob", "dst_oob"]), ("blocks.dup", ["dup_dst"]),
                                                ("blocks.shape", ["empty_src", "empty_dst", "lengths"]),
                                                ("blocks.values", ["negative", "past_u64"]))
               if f.allows(knob) for flaw in flaws_of_knob]
    flaw = draw(valid if not options else weighted((4, valid), (2, st.sampled_from(options))) if f.chaos
                else st.sampled_from(options))
    at = draw(st.integers(0, len(dst) - 1)) if dst else 0
    if flaw == "dup_dst" and len(dst) > 1:
        dst[at if at else 1] = dst[0]
    elif flaw == "dup_src" and len(src) > 1:
        src[at if at else 1] = src[0]
    elif flaw == "src_oob":                                  # mostly the first index past the end
        src[at] = draw(st.sampled_from([nb_src, nb_src, nb_src, nb_src + 1, nb_src + 7, U64_MAX]))
    elif flaw == "dst_oob":
        dst[at] = draw(st.sampled_from([nb_dst, nb_dst, nb_dst, nb_dst + 3, U64_MAX]))
    elif flaw == "empty_src":
        src = []
    elif flaw == "empty_dst":
        dst = []
    elif flaw == "lengths":
        src = src + [0] if draw(st.booleans()) else src[:-1]
    elif flaw == "negative":
        (src if draw(st.booleans()) else dst)[at] = -1
    elif flaw == "past_u64":
        (src if draw(st.booleans()) else dst)[at] = U64_MAX + 1
    return (as_container(src, draw(st.sampled_from(CONTAINERS))), as_container(dst, draw(st.sampled_from(CONTAINERS))))


# ---- example set-up ---------------------------------------------------------------------------

UNKNOWN_ID = 9_999
U8 = int(G.DT_UINT8)


def scaled(factor: int) -> settings:
    """The active profile's example count times ``factor``: these tests are cheap (a few
    milliseconds an example), and several rules sit behind one knob of one example."""
    return settings(max_examples=factor * settings.default.max_examples)


@dataclass
class Made:
    """The ids an example's caches got (UNKNOWN_ID when creation failed)."""

    ids: dict[str, int]


def create(h: Harness, cluster: int, spec: Spec) -> int:
    if spec.allocated:
        outcome = h.allocate(cluster, spec.num_tensors, spec.data_type, list(spec.shape), spec.placement)
    else:
        outcome = h.register(cluster, spec.num_tensors, spec.data_type, list(spec.shape), spec.placement)
    return int(outcome.value) if outcome.ok else UNKNOWN_ID


def set_up(h: Harness, local: int, remote: int, caches: dict[str, tuple[int, Spec]], linked: bool,
           initiator_local: bool = True) -> Made:
    """Creates ``caches`` (name → (cluster, spec)) in the order their ``when`` asks,
    links ``local`` and ``remote`` (when ``linked``), and uses the link once before the
    "after_use" caches (a pull of a warm-up cache by ``local``)."""
    h.reset()
    ids: dict[str, int] = {}
    warm = linked and any(spec.when == "after_use" for _, spec in caches.values())
    if warm:
        ids["warm_src"] = h.register(remote, 1, int(G.DT_UINT8), [2, 8]).value
        ids["warm_dst"] = h.register(local, 1, int(G.DT_UINT8), [2, 8]).value
    for name, (cluster, spec) in caches.items():
        if spec.when == "before" or not linked:
            ids[name] = create(h, cluster, spec)
    if linked:
        h.link(local, remote) if initiator_local else h.link(remote, local)
        for name, (cluster, spec) in caches.items():
            if spec.when == "after_link":
                ids[name] = create(h, cluster, spec)
        if warm:
            outcome = h.pull_kv_cache(local, (remote, ids["warm_src"], 1), ids["warm_dst"], 0, -1,
                                      Ext((0, 0), (0, 0), 1))
            assert outcome.ok, f"the warm-up pull must succeed: {outcome.describe()}"
            for name, (cluster, spec) in caches.items():
                if spec.when == "after_use":
                    ids[name] = create(h, cluster, spec)
    return Made(ids)


def tear_down(h: Harness, local: int, remote: int, linked: bool) -> None:
    """Unlinks (non-forced, from ``local``) and releases every cache, all checked."""
    if linked:
        h.unlink(local, remote)
    for cid in (A, B):
        for cache_id in sorted(h.world.engines[cid].caches):
            if h.world.engines[cid].caches[cache_id].owned:
                h.deallocate(cid, cache_id)
            else:
                h.unregister(cid, cache_id)
    h.check_memory()


def directions() -> st.SearchStrategy[tuple[int, int]]:
    return st.sampled_from([(A, B), (B, A)])


def c_abi(half: bool = False) -> st.SearchStrategy[bool]:
    """Whether a call goes to the C ABI directly: a third (or half) of the examples, so
    that the backend's own checks of the rules the Python layer checks first (PR-1, PR-3,
    PR-5, PR-11, PR-33) are tested too."""
    return st.booleans() if half else weighted((2, st.just(False)), (1, st.just(True)))



# ---- registration, allocation ------------------------------------------------------------------

@st.composite
def registrations(draw: st.DrawFn) -> tuple[int, int, tuple[int, ...], int, str]:
    """Descriptions for register/allocate: every size rule of semantics.md §2.3, §2.4, PR-17."""
    num_tensors = draw(weighted((8, st.integers(1, 4)), (1, st.sampled_from([0, U32_MAX + 1])),
                                (1, st.sampled_from([131_060, 131_061, 131_062]))))     # the 1 MiB table (semantics.md §15)
    data_type = draw(weighted((6, st.sampled_from(BYTE_TYPES + SUB_BYTE_TYPES)),
                              (1, st.sampled_from(UNSIZED_TYPES + [2**31])), (1, st.integers(0, 43))))
    big = st.sampled_from([2**31 - 1, 2**31, 2**32, 2**40, 2**61, 2**62, I64_MAX, 2**63])
    dims = weighted((8, st.integers(1, 9)), (1, st.sampled_from([0, -1, -(2**63)])), (1, big))
    rank = draw(weighted((10, st.integers(1, 4)), (1, st.sampled_from([0, 30, 31, 32, 33]))))
    shape = tuple(draw(dims) for _ in range(rank)) if rank <= 4 else tuple([1] * rank)
    placement = draw(weighted((4, st.just(DEVICE)), (1, st.just(HOST))))
    addresses = draw(weighted((8, st.just("own")), (1, st.just("zero")), (1, st.just("count")),
                              (2, st.sampled_from(["acl-3", "acl-1", "acl+0", "acl+5"]))))
    return num_tensors, int(data_type), shape, placement, addresses


def in_acl_memory(h: Harness, num_tensors: int, data_type: int, shape: tuple[int, ...], placement: int,
                  slack: int) -> None:
    """Registers tensors laid end to end in one mock-ACL allocation ``slack`` bytes longer
    (or shorter) than they need: PR-30 refuses a tensor that runs past it."""
    layout = tensor_layout(shape, data_type) if 1 <= len(shape) <= 31 else "rank"
    size = 64 if isinstance(layout, str) or layout.tensor_size > 1 << 20 else layout.tensor_size
    count = max(0, min(num_tensors, 8))
    acl.aclrtSetDevice(0)
    base = acl.aclrtMalloc(max(1, count * size + slack), 0)
    try:
        h.world.acl_allocations = [(base, max(1, count * size + slack))]
        h.register(A, num_tensors, data_type, shape, placement, addrs=[base + i * size for i in range(count)])
        h.unregister(A, h.world.engines[A].next_id - 1)     # before the memory goes (a no-op if it failed)
    finally:
        h.world.acl_allocations = []
        acl.aclrtFree(base)
        acl.aclrtResetDevice(0)


@pytest.mark.rules("§2.2", "§2.3", "§2.4", "§3.1", "§3.2", "§15", "cpp-api §6.13", "PR-17", "PR-30", "N-1", "N-2")
@scaled(2)
@given(steps=st.lists(registrations(), min_size=1, max_size=4))
@example(steps=[(1, int(G.DT_INT4), (3, 1), DEVICE, "own")])                       # PR-17: TS % D
@example(steps=[(1, int(G.DT_INT4), (2**29,), DEVICE, "own")])                     # PR-17: bits
@example(steps=[(1, int(G.DT_FLOAT), (2**61, 1), DEVICE, "own")])                  # byte overflow
@example(steps=[(2, int(G.DT_UINT8), (4, 8), DEVICE, "zero"),
                (2, int(G.DT_UINT8), (4, 8), DEVICE, "own")])                       # ids not taken
@example(steps=[(2, int(G.DT_UINT8), (4, 8), DEVICE, "acl-1")])                     # PR-30
@example(steps=[(131_061, int(G.DT_UINT8), (1,), DEVICE, "own"),
                (1, int(G.DT_UINT8), (1,), DEVICE, "own")])                         # semantics.md §15: 1 MiB table
def test_register_kv_cache_agrees_with_oracle(harness: Harness, steps: list[Any]) -> None:
    """Registration: codes, ids consumed (semantics.md §3.1), sizes, ranks and data types (semantics.md §2.3, §2.4),
    mock-ACL bounds (PR-30), the published table's 1 MiB (semantics.md §15)."""
    harness.reset()
    keep: list[np.ndarray] = []
    for num_tensors, data_type, shape, placement, addresses in steps:
        if addresses == "own":
            harness.register(A, num_tensors, data_type, shape, placement)
            continue
        if addresses.startswith("acl"):
            in_acl_memory(harness, num_tensors, data_type, shape, placement, int(addresses[3:]))
            continue
        buffer = np.ones(64, dtype=np.uint8)            # a stand-in: these descriptions never move bytes
        keep.append(buffer)
        addrs = [int(buffer.ctypes.data)] * max(0, min(num_tensors, 8))
        if addresses == "zero" and addrs:
            addrs[-1] = 0
        elif addresses == "count":
            addrs.append(int(buffer.ctypes.data))
        harness.register(A, num_tensors, data_type, shape, placement, addrs=addrs)
    tear_down(harness, A, B, linked=False)


@pytest.mark.rules("§1.2", "§1.5", "§2.3", "§2.4", "§2.6", "§3.1", "§3.4", "§3.6", "§15", "PR-9", "PR-17", "PR-34",
                   "N-1", "N-2")
@scaled(2)
@example(steps=[("allocate", (131_062, U8, (1,), DEVICE, "own"), 0)], cluster=A)    # semantics.md §15 before the pool
@given(steps=st.lists(st.tuples(st.sampled_from(["allocate", "allocate", "deallocate"]), registrations(),
                                 st.integers(0, 5)), min_size=1, max_size=8),
       cluster=weighted((5, st.just(A)), (1, st.just(B))))
def test_allocate_and_deallocate_agree_with_oracle(harness: Harness, steps: list[Any], cluster: int) -> None:
    """PR-9, semantics.md §3.6, PR-34: pools, placements, first-fit pages and exhaustion."""
    harness.reset()
    for action, (num_tensors, data_type, shape, placement, _), pick in steps:
        if action == "allocate":
            if len(shape) == 2 and 0 < shape[0] < 10:       # large tensors, to reach exhaustion
                shape = (shape[0], 4096 * (1 + pick))
            harness.allocate(cluster, num_tensors, data_type, shape, placement)
        else:
            ids = sorted(harness.world.engines[cluster].caches) + [UNKNOWN_ID]
            harness.deallocate(cluster, ids[pick % len(ids)])
    tear_down(harness, A, B, linked=False)


# ---- transfers ----------------------------------------------------------------------------------


def stride_of(spec: Spec) -> int:
    layout = tensor_layout(spec.shape, spec.data_type) if 1 <= len(spec.shape) <= 31 else "rank"
    return 8 if isinstance(layout, str) else layout.stride


@dataclass(frozen=True)
class Case:
    """One transfer example: where the caches live, when they are created, the call."""

    local: int
    remote: int
    dst: Spec
    src: Spec
    linked: bool = True
    initiator_local: bool = True
    peer: str = "peer"                 # the remote cluster id used: "peer", "own" or "unknown"
    src_id: Optional[int] = None       # None: the id the source got
    dst_id: Optional[int] = None
    src_batch: int = 0
    dst_batch: int = 0
    size: int = -1
    ext: Optional[Ext] = None
    src_blocks: Any = ()
    dst_blocks: Any = ()
    caller: Optional[tuple[int, int]] = None     # pushes: (placement, num_tensors) of src_cache.cache_desc
    raw: bool = False                  # the call goes to the C ABI directly (no Python-side checks)


@st.composite
def cases(draw: st.DrawFn, call: str, focus: str) -> Case:
    blocks = call.endswith("blocks")
    push = call.startswith("push")
    f = draw(focused(focus))
    local, remote = draw(directions())
    max_count = 16 if blocks else 8
    # the local cache is the destination of a pull and the source of a push; only A has pools
    first = draw(specs(f, "local", local == A, max_count=max_count))
    if push and not f.allows("local.placement"):
        first = first.but(placement=DEVICE)                 # PR-33: pushes need a DEVICE source
    second = draw(related(first, f, "remote", remote == A, max_count=max_count))
    if call == "pull_kv_cache" and f.allows("size") and second.shape and draw(st.booleans()):
        second = second.but(shape=(*second.shape, 2))     # S_src = 2·S_dst: sizes between them (semantics.md §6.1)
    src, dst = (first, second) if push else (second, first)
    n_local = first.num_tensors
    s_dst, s_src = stride_of(dst), stride_of(src)
    batch_for_blocks = st.sampled_from([1, U32_MAX])
    if call == "pull_kv_cache":
        size = draw(f("size", weighted((2, st.just(-1)), (1, st.integers(1, max(min(s_dst, s_src), 1)))),
                      weighted((3, st.sampled_from([0, -2, s_dst + 1, s_src, s_src + 1, I64_MAX])),
                               (2, st.integers(s_dst + 1, max(s_src, s_dst + 1))),
                               (1, st.sampled_from([-(2**63), I64_MAX + 1]))), 6))
    else:
        size = draw(f("size", st.just(-1), st.sampled_from([0, 1, s_src, -2]), 12))
    case = Case(
        local, remote, dst, src,
        linked=draw(f("link", st.just(True), st.just(False), 12)),
        initiator_local=draw(st.booleans()),
        peer=draw(f("peer", st.just("peer"), st.sampled_from(["own", "unknown"]), 12)),
        src_id=draw(f("src_id", st.none(), st.sampled_from([UNKNOWN_ID, 0, -1]), 12)),
        dst_id=draw(f("dst_id", st.none(), st.sampled_from([UNKNOWN_ID, 0, -1]), 12)),
        src_batch=draw(f("src_batch", st.just(0), batch_for_blocks, 12) if blocks
                       else index_near(f, "src_batch", src.count, U32_MAX)),
        dst_batch=draw(f("dst_batch", st.just(0), batch_for_blocks, 12) if blocks
                       else index_near(f, "dst_batch", dst.count, U32_MAX)),
        size=size,
        ext=draw(ext_params(f, src.num_tensors, dst.num_tensors, n_local)),
        raw=draw(c_abi(half=f.chosen is not None)),
    )
    if blocks:
        sblk, dblk = draw(block_lists(f, src.count, dst.count))
        case = Case(**{**case.__dict__, "src_blocks": sblk, "dst_blocks": dblk})
    if push:
        ranged = case.ext is not None and case.ext.src[0] >= 0
        valid = weighted((3, st.just((DEVICE, src.num_tensors))), (1, st.just((DEVICE, 0)) if ranged else st.none()))
        flawed = st.one_of(st.none(), st.just((HOST, src.num_tensors)),
                           st.tuples(st.just(DEVICE), st.integers(0, src.num_tensors + 2)))
        case = Case(**{**case.__dict__, "caller": draw(f("caller", valid, flawed, 6))})
    return case


def run_case(h: Harness, call: str, case: Case) -> None:
    made = set_up(h, case.local, case.remote, {"dst": (case.local if not call.startswith("push") else case.remote,
                                                       case.dst),
                                               "src": (case.remote if not call.startswith("push") else case.local,
                                                       case.src)},
                  case.linked, case.initiator_local)
    peer = {"peer": case.remote, "own": case.local, "unknown": 77}[case.peer]
    src_id = made.ids["src"] if case.src_id is None else case.src_id
    dst_id = made.ids["dst"] if case.dst_id is None else case.dst_id
    with h.layer(case.raw):
        outcome = make_call(h, call, case, peer, src_id, dst_id)
    event(f"{call}{' [C ABI]' if case.raw else ''}: {outcome.describe()}")
    tear_down(h, case.local, case.remote, case.linked)


def make_call(h: Harness, call: str, case: Case, peer: int, src_id: int, dst_id: int) -> Any:
    if call == "pull_kv_cache":
        return h.pull_kv_cache(case.local, (peer, src_id, case.src_batch), dst_id, case.dst_batch, case.size,
                               case.ext)
    if call == "pull_kv_blocks":
        return h.pull_kv_blocks(case.local, (peer, src_id, case.src_batch), dst_id, case.src_blocks,
                                case.dst_blocks, case.ext)
    if call == "push_kv_cache":
        return h.push_kv_cache(case.local, src_id, (peer, dst_id, case.dst_batch), case.src_batch, case.size,
                               case.ext, case.caller)
    return h.push_kv_blocks(case.local, src_id, (peer, dst_id, case.dst_batch), case.src_blocks, case.dst_blocks,
                            case.ext, case.caller)


# Each test runs once per focus group (FOCUS) with the profile's example count. The data
# is drawn inside the test, so that one @given serves every group.

@pytest.mark.rules("§1.3", "§2.1", "§2.2", "§2.3", "§2.6", "§3.2", "§4.1", "§4.2", "§4.4", "§4.5", "§5", "§6.1", "§6.2",
                   "§8.0", "§8.1", "§8.2", "§8.3", "§8.5", "§8.6", "§8.12", "§9.4", "§9.7", "§10.1", "§15", "PR-1",
                   "PR-3", "PR-6", "PR-11", "PR-12", "PR-17", "PR-20", "PR-32", "N-1", "N-2", "N-3")
@pytest.mark.parametrize("focus", FOCUS_OF["pull_kv_cache"])
@given(data=st.data())
def test_pull_kv_cache_agrees_with_oracle(harness: Harness, focus: str, data: Any) -> None:
    """semantics.md §4, §5, §6.1, §6.2, §8.0 (pull), semantics.md §8.2, §9.7, PR-1, PR-3, PR-6, PR-7, PR-11, PR-12, PR-20, PR-32."""
    run_case(harness, "pull_kv_cache", data.draw(cases("pull_kv_cache", focus), "case"))


@pytest.mark.rules("§2.1", "§2.2", "§2.3", "§2.6", "§3.2", "§4.1", "§4.2", "§4.4", "§4.5", "§5", "§6.2", "§7.1", "§7.2",
                   "§7.3", "§7.4", "§7.5", "§8.0", "§8.1", "§8.2", "§8.3", "§8.5", "§8.6", "§8.12", "§9.4", "§9.7",
                   "§10.1", "§15", "PR-1", "PR-3", "PR-4", "PR-5", "PR-11", "PR-12", "PR-13", "PR-17", "PR-20", "PR-32",
                   "N-1", "N-2", "N-3")
@pytest.mark.parametrize("focus", FOCUS_OF["pull_kv_blocks"])
@given(data=st.data())
def test_pull_kv_blocks_agrees_with_oracle(harness: Harness, focus: str, data: Any) -> None:
    """semantics.md §7, §8.3 and the pull rules: PR-4, PR-5, PR-13 on top of those of pull_kv_cache."""
    run_case(harness, "pull_kv_blocks", data.draw(cases("pull_kv_blocks", focus), "case"))


@pytest.mark.rules("§2.1", "§2.2", "§2.3", "§2.5", "§2.6", "§3.2", "§4.1", "§4.3", "§4.4", "§4.5", "§5", "§6.2", "§6.5",
                   "§8.0", "§8.1", "§8.2", "§8.3", "§8.5", "§8.6", "§8.12", "§9.4", "§9.7", "§10.1", "§15", "PR-1",
                   "PR-3", "PR-11", "PR-14", "PR-17", "PR-20", "PR-32", "PR-33", "N-1", "N-2", "N-3")
@pytest.mark.parametrize("focus", FOCUS_OF["push_kv_cache"])
@given(data=st.data())
def test_push_kv_cache_agrees_with_oracle(harness: Harness, focus: str, data: Any) -> None:
    """semantics.md §4.4, §6.5, §8.0 (push), semantics.md §8.5, §8.12, PR-14, PR-15, PR-33 and the link/table rules."""
    run_case(harness, "push_kv_cache", data.draw(cases("push_kv_cache", focus), "case"))


@pytest.mark.rules("§2.1", "§2.2", "§2.3", "§2.5", "§2.6", "§3.2", "§4.1", "§4.3", "§4.4", "§4.5", "§5", "§6.2", "§7.2",
                   "§7.3", "§7.4", "§7.5", "§8.0", "§8.1", "§8.2", "§8.3", "§8.5", "§8.6", "§8.12", "§9.4", "§9.7",
                   "§10.1", "§15", "PR-1", "PR-3", "PR-4", "PR-5", "PR-11", "PR-13", "PR-17", "PR-20", "PR-32", "PR-33",
                   "N-1", "N-2", "N-3")
@pytest.mark.parametrize("focus", FOCUS_OF["push_kv_blocks"])
@given(data=st.data())
def test_push_kv_blocks_agrees_with_oracle(harness: Harness, focus: str, data: Any) -> None:
    """semantics.md §7, §8.6 for pushes: PR-4, PR-5, PR-13 on top of those of push_kv_cache."""
    run_case(harness, "push_kv_blocks", data.draw(cases("push_kv_blocks", focus), "case"))


# ---- local copies -------------------------------------------------------------------------------

@st.composite
def copy_setups(draw: st.DrawFn, max_count: int, focus: str) -> tuple[Flaws, int, Spec, Spec, bool]:
    f = draw(focused(focus))
    cluster = draw(f("cluster", st.just(A), st.just(B), 6))
    src = draw(specs(f, "local", True, max_count=max_count))
    dst = draw(related(src, f, "remote", True, max_count=max_count))
    same = draw(weighted((4, st.just(False)), (1, st.just(True))))
    return f, cluster, src, dst, same


def make_copy_caches(h: Harness, cluster: int, src: Spec, dst: Spec, same: bool) -> tuple[int, int]:
    h.reset()
    src_id = create(h, cluster, src)
    dst_id = src_id if same else create(h, cluster, dst)
    return src_id, dst_id


@pytest.mark.rules("§1.2", "§3.6", "§6.6", "§7.4", "§8.8", "§8.12", "§15", "PR-9", "PR-24", "N-1", "N-2")
@pytest.mark.parametrize("focus", [g for g in COPY_FOCUS if g not in (*BLOCK_GROUPS, "destination lists")])
@given(data=st.data())
def test_copy_kv_cache_agrees_with_oracle(harness: Harness, focus: str, data: Any) -> None:
    """PR-9, semantics.md §3.6, §6.6, §8.8, PR-24: local copies between (or within) caches."""
    f, cluster, src, dst, same = data.draw(copy_setups(8, focus), "caches")
    src_id, dst_id = make_copy_caches(harness, cluster, src, dst, same)
    if same:
        dst = src
    s_src, s_dst = stride_of(src), stride_of(dst)
    src_id = data.draw(f("src_id", st.just(src_id), st.just(UNKNOWN_ID), 12), "src_id")
    src_batch = data.draw(index_near(f, "src_batch", src.count, U32_MAX), "src_batch")
    dst_batch = data.draw(index_near(f, "dst_batch", dst.count, U32_MAX), "dst_batch")
    offset = data.draw(f("offset", weighted((1, st.just(0)), (1, st.integers(0, max(min(s_src, s_dst) - 1, 0)))),
                         st.sampled_from([s_src, s_dst, max(s_src, s_dst) + 1, U64_MAX, U64_MAX + 1]), 6), "offset")
    size = data.draw(f("size", weighted((1, st.just(-1)), (1, st.integers(1, max(min(s_src, s_dst) - offset, 1)))),
                       st.sampled_from([0, -2, s_src, s_dst + 1, I64_MAX + 1]), 6), "size")
    with harness.layer(data.draw(c_abi(half=f.chosen is not None), "C ABI")):
        event(harness.copy_kv_cache(cluster, src_id, dst_id, src_batch, dst_batch, offset, size).describe())
    tear_down(harness, A, B, linked=False)


@pytest.mark.rules("§1.2", "§3.6", "§7.2", "§7.3", "§7.4", "§7.5", "§8.9", "§8.12", "PR-4", "PR-5", "PR-9", "PR-13",
                   "PR-24", "N-1", "N-2")
@pytest.mark.parametrize("focus", [g for g in COPY_FOCUS if g not in ("batch indexes", "offset", "size")])
@given(data=st.data())
def test_copy_kv_blocks_agrees_with_oracle(harness: Harness, focus: str, data: Any) -> None:
    """PR-9, semantics.md §3.6, §8.9, PR-5 (within and across lists), PR-24."""
    f, cluster, src, dst, same = data.draw(copy_setups(16, focus), "caches")
    src_id, dst_id = make_copy_caches(harness, cluster, src, dst, same)
    if same:
        dst = src
    # valid: 1 to 3 destination lists of one length, all destinations distinct (PR-5 spans
    # the lists); flawed: a list of another length, lists that share a block, no list
    count = data.draw(st.integers(1, 3), "lists")
    sblk, first = data.draw(block_lists(f, src.count, max(1, min(dst.count, 64) // count)), "blocks")
    width = len(first)
    spread = data.draw(st.permutations(list(range(min(dst.count, 64)))), "destinations")
    dst_lists: list[Any] = [first]
    if any(f.allows(knob) for knob in BLOCK_KNOBS) or count * width > len(spread):
        count = 1                                        # a flawed first list goes alone
    else:
        dst_lists = [spread[i * width:(i + 1) * width] for i in range(count)]
    flaw = data.draw(f("lists", st.just("none"), st.sampled_from(["length", "shared", "empty"]), 12), "lists flaw")
    if flaw == "length":
        dst_lists.append(list(dst_lists[0])[:-1] + [0, 1])
    elif flaw == "shared":
        dst_lists.append(list(dst_lists[0]))
    elif flaw == "empty":
        dst_lists = []
    with harness.layer(data.draw(c_abi(half=f.chosen is not None), "C ABI")):
        event(harness.copy_kv_blocks(cluster, src_id, dst_id, sblk, dst_lists).describe())
    tear_down(harness, A, B, linked=False)


# ---- long block lists ---------------------------------------------------------------------------

@st.composite
def long_block_lists(draw: st.DrawFn) -> tuple[int, int, Any, Any]:
    """1 to 10,000 block pairs over caches of up to 12,000 blocks: one run, many runs,
    scattered or descending, with at most one flaw (semantics.md §7.3, PR-4, PR-5)."""
    k = draw(weighted((3, st.integers(1, 64)), (2, st.integers(65, 2_000)), (1, st.integers(2_001, 10_000))))
    nb_dst = k + draw(st.integers(0, 2_000))
    nb_src = draw(st.integers(max(1, k // 4), 12_000))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mode = draw(st.sampled_from(["one_run", "runs", "scattered", "descending"]))
    if mode == "one_run":
        d0 = int(rng.integers(0, nb_dst - k + 1))
        dst = np.arange(d0, d0 + k)
        src = np.arange(k) % nb_src + (int(rng.integers(0, nb_src - k + 1)) if nb_src >= k else 0)
    elif mode == "runs":
        dst = rng.permutation(nb_dst)[:k]
        dst.sort()
        src = np.sort(rng.integers(0, nb_src, size=k))
    elif mode == "scattered":
        dst = rng.permutation(nb_dst)[:k]
        src = rng.integers(0, nb_src, size=k)                # sources may repeat
    else:
        dst = np.arange(k)[::-1] + (nb_dst - k)
        src = np.arange(k)[::-1] % nb_src
    src_list, dst_list = [int(v) for v in src], [int(v) for v in dst]
    flaw = draw(weighted((6, st.just("none")), (1, st.just("dup_dst")), (1, st.just("src_oob")),
                         (1, st.just("dst_oob")), (1, st.just("lengths"))))
    at = draw(st.integers(0, k - 1))
    if flaw == "dup_dst" and k > 1:
        dst_list[at] = dst_list[(at + 1) % k]
    elif flaw == "src_oob":
        src_list[at] = nb_src + draw(st.integers(0, 3))
    elif flaw == "dst_oob":
        dst_list[at] = nb_dst + draw(st.integers(0, 3))
    elif flaw == "lengths":
        src_list.append(0)
    containers = st.sampled_from(CONTAINERS)
    return nb_src, nb_dst, as_container(src_list, draw(containers)), as_container(dst_list, draw(containers))


@pytest.mark.rules("§2.2", "§7.3", "§7.4", "§8.1", "§8.2", "§8.3", "§8.5", "§8.6", "PR-4", "PR-5")
@scaled(2)
@given(lists=long_block_lists(), push=st.booleans(), tensors=st.sampled_from([1, 2, 4]), raw=c_abi())
def test_long_block_lists_agree_with_oracle(harness: Harness, lists: tuple[int, int, Any, Any], push: bool,
                                            tensors: int, raw: bool) -> None:
    """pull_kv_blocks / push_kv_blocks with up to 10,000 pairs (A is the local engine)."""
    nb_src, nb_dst, sblk, dblk = lists
    src = Spec(tensors, U8, (nb_src, 2))
    dst = Spec(tensors, U8, (nb_dst, 2))
    if push:
        made = set_up(harness, A, B, {"src": (A, src), "dst": (B, dst)}, linked=True)
        with harness.layer(raw):
            outcome = harness.push_kv_blocks(A, made.ids["src"], (B, made.ids["dst"], 0), sblk, dblk, Ext(n=1),
                                          (DEVICE, tensors))
    else:
        made = set_up(harness, A, B, {"src": (B, src), "dst": (A, dst)}, linked=True)
        with harness.layer(raw):
            outcome = harness.pull_kv_blocks(A, (B, made.ids["src"], 0), made.ids["dst"], sblk, dblk, Ext(n=1))
    event(outcome.describe())
    tear_down(harness, A, B, linked=True)


# ---- regressions found by the property and stateful tests -----------------------------------------

@pytest.mark.rules("§10.2", "PR-42", "E-21")
def test_link_from_a_stale_side_to_a_silent_peer_fails_to_connect(harness: Harness) -> None:
    """Found by the stateful test; a mock bug until the mock connected before reporting
    ALREADY_LINK (docs/reference/cpp-api.md §6.7 step 5, semantics.md §10.2, PR-42; docs/semantics.md E-21)."""
    harness.reset()
    assert harness.link(A, B).ok
    harness.finalize(B)                       # B drops its side and stops listening; A keeps its side
    try:
        harness.link(A, B)                    # the oracle expects per-cluster LLM_LINK_FAILED
    finally:
        harness.reset()


@pytest.mark.rules("§1.5", "§3.4", "§3.6")
def test_deallocate_of_a_registered_cache_keeps_the_package_record(harness: Harness) -> None:
    """Found by the stateful test; a package bug until native.deallocate_cache kept a
    registered cache in the package's record (docs/reference/semantics.md §3.6: a no-op; N-2)."""
    harness.reset()
    cache_id = harness.register(A, 1, U8, [1, 4]).value
    assert harness.deallocate(A, cache_id).ok                      # registered: nothing happens
    try:
        # tensor_num_per_layer 2 > 1 tensor: PR-3 in Python, before the engine's link check
        harness.push_kv_cache(A, cache_id, (B, cache_id, 0), 0, -1, None, (DEVICE, 1))
    finally:
        harness.reset()



@pytest.mark.parametrize("raw", [False, True])
def test_layer_ranges_up_to_int32_max_agree_with_oracle(harness: Harness, raw: bool) -> None:
    """Found by the property tests: pairs such as {0, 2^31 - 1} once made the oracle build
    lists of 2^31 tensor indexes (the process ran out of memory); every such pull and push
    is PARAM_INVALID (semantics.md §4.2, §4.3) and moves nothing."""
    made = set_up(harness, A, B, {"src": (B, Spec(2, U8, (2, 8))), "dst": (A, Spec(2, U8, (2, 8)))}, linked=True)
    with harness.layer(raw):
        for pairs in [((0, I32_MAX), (0, I32_MAX)), ((I32_MAX, I32_MAX), (0, 0)), ((0, 0), (I32_MAX, I32_MAX))]:
            for n in (1, 2, 255):
                ext = Ext(pairs[0], pairs[1], n)
                assert not harness.pull_kv_cache(A, (B, made.ids["src"], 0), made.ids["dst"], 0, -1, ext).ok
                assert not harness.pull_kv_blocks(A, (B, made.ids["src"], 0), made.ids["dst"], [0], [1], ext).ok
                assert not harness.push_kv_cache(B, made.ids["src"], (A, made.ids["dst"], 0), 0, -1, ext, (DEVICE, 2)).ok
                assert not harness.push_kv_blocks(B, made.ids["src"], (A, made.ids["dst"], 0), [0], [1], ext,
                                               (DEVICE, 2)).ok
    tear_down(harness, A, B, linked=True)

@pytest.mark.rules("§15")
@pytest.mark.parametrize("tensors", [1, 4])
@pytest.mark.parametrize("runs_over_limit", [-1, 0, 1])
def test_pull_requests_are_limited_by_their_entries(harness: Harness, tensors: int, runs_over_limit: int) -> None:
    """semantics.md §15, direct mode: a pull request has E = T + 2·R entries (T destination tensors, R
    runs of block pairs), at most 131,064; pushes send no request (E-13). Scattered
    pairs make one run each; the oracle decides each side of the boundary."""
    runs = (131_064 - tensors) // 2 + runs_over_limit
    nb = runs + 1
    rng = np.random.default_rng(runs)
    dst = rng.permutation(nb)[:runs].astype(np.uint64)
    src = dst[::-1].copy()                     # descending against a random order: runs of one pair
    made = set_up(harness, A, B, {"src": (B, Spec(tensors, U8, (nb, 1))), "dst": (A, Spec(tensors, U8, (nb, 1)))},
                  linked=True)
    expected = harness.pull_kv_blocks(A, (B, made.ids["src"], 0), made.ids["dst"], src, dst, Ext(n=1))
    assert (expected.status == S.LLM_PARAM_INVALID) == (tensors + 2 * len(runs_of(src, dst)) > 131_064)
    pushed = harness.push_kv_blocks(B, made.ids["src"], (A, made.ids["dst"], 0), src, dst, Ext(n=1), (DEVICE, tensors))
    assert pushed.ok
    tear_down(harness, A, B, linked=True)


def runs_of(src: Any, dst: Any) -> list[tuple[int, int, int]]:
    from oracle.model import runs
    return runs(list(zip((int(s) for s in src), (int(d) for d in dst))))


# ---- concurrency ---------------------------------------------------------------------------------

@pytest.mark.rules("§8.1", "§8.2", "§8.3", "§8.5", "§8.6", "§10.1", "§14")
@scaled(1)
@given(data=st.data(), threads=st.integers(2, 6))
def test_concurrent_transfers_agree_with_oracle(harness: Harness, data: Any, threads: int) -> None:
    """semantics.md §14: calls from several threads at once. Each thread pulls into (or pushes from) its
    own caches over the one link between A and B, in either direction; each call must give
    what the oracle says of it alone (the calls touch disjoint destinations), and memory
    must then hold every call's bytes."""
    calls = data.draw(st.lists(st.tuples(st.sampled_from(["pull_kv_cache", "pull_kv_blocks", "push_kv_cache",
                                                          "push_kv_blocks"]), directions(),
                                         st.integers(1, 4), st.integers(1, 6)),
                               min_size=threads, max_size=threads), "calls")
    caches = {}
    for i, (call, (local, remote), tensors, count) in enumerate(calls):
        push = call.startswith("push")
        caches[f"src{i}"] = (local if push else remote, Spec(tensors, U8, (count, 16)))
        caches[f"dst{i}"] = (remote if push else local, Spec(tensors, U8, (count, 16)))
    made = set_up(harness, A, B, caches, linked=True)
    prepared = []
    for i, (call, (local, remote), tensors, count) in enumerate(calls):
        src, dst = made.ids[f"src{i}"], made.ids[f"dst{i}"]
        blocks = data.draw(st.permutations(list(range(count))), f"blocks {i}")
        engine, world = harness.engine(local), harness.world
        if call == "pull_kv_cache":
            b = data.draw(st.integers(0, count - 1), f"batch {i}")
            prepared.append((world.pull_kv_cache(local, (remote, src, b), dst, count - 1 - b),
                             lambda e=engine, r=remote, s=src, d=dst, b=b, c=count:
                             e.pull_kv_cache(native.CacheIndex(r, s, b), native.Cache(d), c - 1 - b)))
        elif call == "pull_kv_blocks":
            prepared.append((world.pull_kv_blocks(local, (remote, src, 0), dst, blocks, blocks[::-1]),
                             lambda e=engine, r=remote, s=src, d=dst, k=blocks:
                             e.pull_kv_blocks(native.CacheIndex(r, s), native.Cache(d), k, k[::-1])))
        elif call == "push_kv_cache":
            b = data.draw(st.integers(0, count - 1), f"batch {i}")
            prepared.append((world.push_kv_cache(local, src, (remote, dst, b), count - 1 - b, -1, Ext(n=1),
                                                 (DEVICE, tensors)),
                             lambda e=engine, r=remote, s=src, d=dst, b=b, c=count, t=tensors:
                             e.push_kv_cache(native.Cache(s, [], native.CacheDesc(t, G.DT_UINT8, [c, 16])),
                                             native.CacheIndex(r, d, b), c - 1 - b, -1,
                                             native.KvCacheExtParam(tensor_num_per_layer=1))))
        else:
            prepared.append((world.push_kv_blocks(local, src, (remote, dst, 0), blocks, blocks[::-1], Ext(n=1),
                                                  (DEVICE, tensors)),
                             lambda e=engine, r=remote, s=src, d=dst, k=blocks, c=count, t=tensors:
                             e.push_kv_blocks(native.Cache(s, [], native.CacheDesc(t, G.DT_UINT8, [c, 16])),
                                              native.CacheIndex(r, d), k, k[::-1],
                                              native.KvCacheExtParam(tensor_num_per_layer=1))))
    results: list[Any] = [None] * len(prepared)
    start = threading.Barrier(len(prepared))

    def run(i: int) -> None:
        start.wait()
        results[i] = observe(prepared[i][1])

    workers = [threading.Thread(target=run, args=(i,)) for i in range(len(prepared))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for (expected, _), (kind, status, _, message), call in zip(prepared, results, calls):
        want = ("ok", S.LLM_SUCCESS) if expected.ok else ("LLMException", expected.status)
        assert (kind, status) == want, f"{call}: the oracle expects {expected.describe()}, got {kind} {status}: " \
                                       f"{message}"
        harness._apply(expected)
    harness.check_memory()
    tear_down(harness, A, B, linked=True)


# ---- slow peers ------------------------------------------------------------------------------------

SLOW_STEPS = st.sampled_from([("pull", A), ("pull", B), ("push", A), ("push", B), ("delay", A, 0), ("delay", A, 20),
                              ("delay", A, 100), ("delay", B, 0), ("delay", B, 20), ("delay", B, 100), ("relink",)])


@pytest.mark.rules("§10.4", "§13", "PR-35")
@settings(max_examples=max(10, settings.default.max_examples // 2))
@given(steps=st.lists(SLOW_STEPS, min_size=1, max_size=8))
@example(steps=[("delay", B, 100), ("pull", A), ("delay", B, 0), ("pull", A), ("relink",), ("pull", A)])
def test_slow_peers_time_out_as_the_oracle_says(harness: Harness, steps: list[Any]) -> None:
    """semantics.md §13, PR-35, E-15: with llm.SyncKvCacheWaitTime = 60 ms on both engines, a peer
    whose answers are delayed by 100 ms makes a transfer time out and poisons the link on
    that side until it is linked again; 20 ms is in time.

    The other side learns of the timeout when its serving thread sees the connection
    close (E-9), at a moment no test can observe; so after a timeout only the side that
    timed out transfers until the next re-link (E-9 itself: example tests)."""
    harness.reset()
    for cluster in (A, B):
        harness.finalize(cluster)
        harness.initialize(cluster, {**harness.nodes[cluster].options, "llm.SyncKvCacheWaitTime": "60"})
    ids = {(cluster, role): harness.register(cluster, 2, U8, [2, 16]).value
           for cluster in (A, B) for role in ("src", "dst")}
    harness.link(A, B)
    timed_out: Optional[int] = None            # the side that timed out since the last link
    try:
        for step in steps:
            if step[0] == "delay":
                mock_control.set_serve_delay(harness.engine(step[1]), step[2])
                harness.world.serve_delay[step[1]] = step[2]
            elif step[0] == "relink":
                for cluster in (A, B):
                    mock_control.set_serve_delay(harness.engine(cluster), 0)
                    harness.world.serve_delay[cluster] = 0
                harness.unlink(A, B)
                harness.link(A, B)
                timed_out = None
            elif timed_out is not None and step[1] != timed_out:
                continue
            else:
                local, remote = step[1], B if step[1] == A else A
                if step[0] == "pull":
                    outcome = harness.pull_kv_cache(local, (remote, ids[remote, "src"], 1), ids[local, "dst"], 0)
                else:
                    outcome = harness.push_kv_cache(local, ids[local, "src"], (remote, ids[remote, "dst"], 1), 0, -1,
                                                 None, (DEVICE, 2))
                if outcome.status == S.LLM_TIMEOUT:
                    timed_out = local
                event(outcome.describe())
    finally:
        for cluster in (A, B):
            mock_control.set_serve_delay(harness.engine(cluster), 0)
            harness.world.serve_delay[cluster] = 0
    harness.reset()
