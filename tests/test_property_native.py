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
before a failing layer, semantics §8.12).

Two engines live for the whole module: A (cluster 1, DECODER) with a device and a host
memory pool, B (cluster 2, PROMPT) without a pool. Each example starts them afresh
(finalize + initialize: no caches, no links, ids from 1), registers its caches, links,
makes the call and cleans up; semantics PR-32 and §9.7 make a link that predates the
caches part of each example rather than of the module.

docs/testing.md maps every rule to the tests here.
"""
from __future__ import annotations

import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import native
from llm_datadist_ffi.native import CachePlacement, GeDataType as G, LlmRole

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle import Ext, tensor_layout  # noqa: E402
from oracle.driver import Harness  # noqa: E402

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
def pair() -> Iterator[Harness]:
    """Engines A (pools) and B (no pool), each listening on 127.0.0.1."""
    h = Harness(seed=20240601)
    pa, pb = _free_port(), _free_port()
    h.add(A, LlmRole.DECODER, {"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{pa}",
                               "llm.MemPoolConfig": POOL, "llm.HostMemPoolConfig": HOST_POOL}, pa)
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
    """One of the strategies, chosen with the given weights (shrinks to the first)."""
    table = [strategy for weight, strategy in options for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def either(clean: bool, valid: st.SearchStrategy[Any], flawed: st.SearchStrategy[Any],
           weight: int = 8) -> st.SearchStrategy[Any]:
    """``valid`` in a clean example; in a flawed one mostly ``valid``, sometimes ``flawed``.

    Each example is drawn clean (every argument valid, so that most such calls succeed
    and move bytes) or flawed (each argument may break a rule); shrinking goes towards
    clean, valid values."""
    return valid if clean else weighted((weight, valid), (2, flawed))


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
def inner_dims(draw: st.DrawFn, data_type: int, clean: bool) -> tuple[int, ...]:
    """Dims after shape[0]; for a sub-byte type in a clean example the last one is a
    multiple of 8, so that batches tile the tensor (PR-17)."""
    inner = draw(st.lists(st.integers(1, 6), min_size=1 if data_type in SUB_BYTE_TYPES else 0, max_size=2))
    if clean and data_type in SUB_BYTE_TYPES:
        inner[-1] *= 8
    return tuple(inner)


@st.composite
def when_created(draw: st.DrawFn, clean: bool, allocated: bool) -> str:
    """Registering after the link breaks PR-32, after its first use §9.7; allocated
    caches are exempt from PR-32, so "after_link" is clean for them."""
    late = st.sampled_from(["after_link", "after_use"])
    if clean:
        return draw(weighted((4, st.just("before")), (1, st.just("after_link")))) if allocated else "before"
    return draw(weighted((8, st.just("before")), (2, late)))


@st.composite
def specs(draw: st.DrawFn, clean: bool, can_allocate: bool, max_tensors: int = 8, max_count: int = 8) -> Spec:
    num_tensors = draw(either(clean, st.integers(1, max_tensors), st.sampled_from([0, max_tensors + 3]), 12))
    data_type = int(draw(either(clean, weighted((8, st.sampled_from(BYTE_TYPES)), (2, st.sampled_from(SUB_BYTE_TYPES))),
                                st.sampled_from(UNSIZED_TYPES), 12)))
    count = draw(st.integers(1, max_count))
    shape = (count, *draw(inner_dims(data_type, clean)))
    shape = draw(either(clean, st.just(shape), st.sampled_from([(), (count, 0), (-count,), (2**62, 4)]), 12))
    placement = draw(weighted((5, st.just(DEVICE)), (1, st.just(HOST))))
    allocated = draw(weighted((4, st.just(False)), (1, st.just(True)))) if can_allocate or not clean else False
    return Spec(num_tensors, data_type, shape, placement, allocated, draw(when_created(clean, allocated)))


@st.composite
def related(draw: st.DrawFn, base: Spec, clean: bool, can_allocate: bool, max_count: int = 8) -> Spec:
    """The other cache of a call: mostly the same tensor count and stride as ``base``
    (shape[0] may differ), sometimes other strides, tensor counts, or anything."""
    kind = draw(weighted((5, st.just("same")), (3, st.just("count")), (1, st.just("tensors")),
                         (1, st.just("inner")), (1, st.just("any"))))
    if kind == "any" or not base.shape:
        return draw(specs(clean, can_allocate, max_count=max_count))
    placement = draw(weighted((5, st.just(DEVICE)), (1, st.just(HOST))))
    allocated = draw(weighted((4, st.just(False)), (1, st.just(True)))) if can_allocate or not clean else False
    spec = base.but(placement=placement, allocated=allocated, when=draw(when_created(clean, allocated)))
    if kind == "count":
        spec = spec.but(shape=(draw(st.integers(1, max_count)), *base.shape[1:]))
    elif kind == "tensors":
        spec = spec.but(num_tensors=draw(st.integers(1, 8)))
    elif kind == "inner":
        spec = spec.but(shape=(base.shape[0], *draw(inner_dims(base.data_type, clean))))
    return spec


def index_near(clean: bool, limit: int, bits_max: int) -> st.SearchStrategy[int]:
    """An index below ``limit``; flawed: at or past it, at the C type's maximum, or
    one past that maximum or negative (a ValueError)."""
    return either(clean, st.integers(0, max(limit - 1, 0)),
                  weighted((4, st.integers(limit, limit + 2)), (1, st.just(bits_max)),
                           (1, st.sampled_from([bits_max + 1, -1]))), 12)


@st.composite
def ext_params(draw: st.DrawFn, clean: bool, n_src: int, n_dst: int, n_local: int) -> Optional[Ext]:
    """Layer pairs and ``tensor_num_per_layer``: defaults, valid ranges and every malformed
    form (§4.4, §5, PR-1, PR-3, PR-11)."""
    divisors = [d for d in range(1, max(n_local, 1) + 1) if n_local % d == 0]
    others = [d for d in range(1, n_local + 4) if d not in divisors]
    n = draw(either(clean, st.sampled_from(divisors),
                    weighted((4, st.sampled_from(others or [n_local + 1])),
                             (2, st.sampled_from([0, 255, 256, 300, U32_MAX])),
                             (1, st.sampled_from([U32_MAX + 1, -1]))), 6))
    forms = [(1, st.just("none")), (3, st.just("default")), (5, st.just("valid"))]
    form = draw(weighted(*forms) if clean else weighted(*forms, (4, st.just("wild"))))
    if form == "none":
        return None
    if form == "default" and (not clean or n_src == n_dst):
        return Ext(n=n)
    if form in ("valid", "default") and n > 0:
        ls, ld = n_src // n, n_dst // n
        if ls > 0 and ld > 0:
            span = draw(st.integers(1, min(ls, ld)))
            sf, df = draw(st.integers(0, ls - span)), draw(st.integers(0, ld - span))
            return Ext((sf, sf + span - 1), (df, df + span - 1), n)
        return Ext(n=n)
    layers = max(n_src, n_dst) // max(n, 1)
    member = weighted((6, st.integers(-3, layers + 2)), (1, st.sampled_from([I32_MAX, -(2**31)])),
                      (1, st.sampled_from([I32_MAX + 1, -(2**31) - 1])))
    shape = draw(st.sampled_from(["pairs", "half_default", "one_default", "reversed", "past_end", "spans"]))
    if shape == "half_default":      # {-1, s}: PR-11
        return Ext((-1, draw(st.integers(0, layers + 1))), draw(st.sampled_from([(-1, -1), (0, 0)])), n)
    if shape == "one_default":       # PR-1
        pair = (draw(st.integers(0, layers)), draw(st.integers(0, layers)))
        return Ext(pair, (-1, -1), n) if draw(st.booleans()) else Ext((-1, -1), pair, n)
    if shape == "reversed":
        first = draw(st.integers(1, layers + 2))
        return Ext((first, first - 1), (0, 0), n) if draw(st.booleans()) else Ext((0, 0), (first, first - 1), n)
    if shape == "past_end":          # a range that ends one layer past either cache
        last = max(layers, 1)
        return Ext((0, last), (0, last), n) if draw(st.booleans()) else Ext((1, last), (0, last - 1), n)
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
def block_lists(draw: st.DrawFn, clean: bool, nb_src: int, nb_dst: int) -> tuple[Any, Any]:
    """Source and destination block lists: runs and scattered pairs, duplicate sources,
    and every malformed form (§7.2, §7.3, PR-4, PR-5)."""
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
    flaw = draw(either(clean, valid, st.sampled_from(["dup_dst", "src_oob", "dst_oob", "empty_src", "empty_dst",
                                                      "lengths", "negative", "past_u64"]), 4))
    at = draw(st.integers(0, len(dst) - 1)) if dst else 0
    if flaw == "dup_dst" and len(dst) > 1:
        dst[at if at else 1] = dst[0]
    elif flaw == "dup_src" and len(src) > 1:
        src[at if at else 1] = src[0]
    elif flaw == "src_oob":
        src[at] = draw(st.sampled_from([nb_src, nb_src + 1, nb_src + 7, U64_MAX]))
    elif flaw == "dst_oob":
        dst[at] = draw(st.sampled_from([nb_dst, nb_dst + 3, U64_MAX]))
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


def choose_id(draw: st.DrawFn, made: int) -> int:
    return draw(weighted((12, st.just(made)), (1, st.sampled_from([UNKNOWN_ID, 0, -1, -(2**63)]))))


def directions() -> st.SearchStrategy[tuple[int, int]]:
    return st.sampled_from([(A, B), (B, A)])


def c_abi() -> st.SearchStrategy[bool]:
    """Whether a call goes to the C ABI directly: a third of the examples, so that the
    backend's own checks of the rules the Python layer checks first are tested too."""
    return weighted((2, st.just(False)), (1, st.just(True)))



# ---- registration, allocation ------------------------------------------------------------------

@st.composite
def registrations(draw: st.DrawFn) -> tuple[int, int, tuple[int, ...], int, str]:
    """Descriptions for register/allocate: every size rule of §2.3, §2.4, PR-17."""
    num_tensors = draw(weighted((8, st.integers(1, 4)), (1, st.sampled_from([0, U32_MAX + 1]))))
    data_type = draw(weighted((6, st.sampled_from(BYTE_TYPES + SUB_BYTE_TYPES)),
                              (1, st.sampled_from(UNSIZED_TYPES + [2**31])), (1, st.integers(0, 43))))
    big = st.sampled_from([2**31 - 1, 2**31, 2**32, 2**40, 2**61, 2**62, I64_MAX, 2**63])
    dims = weighted((8, st.integers(1, 9)), (1, st.sampled_from([0, -1, -(2**63)])), (1, big))
    rank = draw(weighted((10, st.integers(1, 4)), (1, st.sampled_from([0, 30, 31, 32, 33]))))
    shape = tuple(draw(dims) for _ in range(rank)) if rank <= 4 else tuple([1] * rank)
    placement = draw(weighted((4, st.just(DEVICE)), (1, st.just(HOST))))
    addresses = draw(weighted((8, st.just("own")), (1, st.just("zero")), (1, st.just("count"))))
    return num_tensors, int(data_type), shape, placement, addresses


@given(steps=st.lists(registrations(), min_size=1, max_size=4))
@example(steps=[(1, int(G.DT_INT4), (3, 1), DEVICE, "own")])                       # PR-17: TS % D
@example(steps=[(1, int(G.DT_INT4), (2**29,), DEVICE, "own")])                     # PR-17: bits
@example(steps=[(1, int(G.DT_FLOAT), (2**61, 1), DEVICE, "own")])                  # byte overflow
@example(steps=[(2, int(G.DT_UINT8), (4, 8), DEVICE, "zero"),
                (2, int(G.DT_UINT8), (4, 8), DEVICE, "own")])                       # ids not taken
def test_register_kv_cache_agrees_with_oracle(pair: Harness, steps: list[Any]) -> None:
    """Registration: codes, ids consumed (§3.1), sizes, ranks and data types (§2.3, §2.4)."""
    pair.reset()
    keep: list[np.ndarray] = []
    for num_tensors, data_type, shape, placement, addresses in steps:
        if addresses == "own":
            pair.register(A, num_tensors, data_type, shape, placement)
            continue
        buffer = np.ones(64, dtype=np.uint8)            # a stand-in: these descriptions never move bytes
        keep.append(buffer)
        addrs = [int(buffer.ctypes.data)] * max(0, min(num_tensors, 8))
        if addresses == "zero" and addrs:
            addrs[-1] = 0
        elif addresses == "count":
            addrs.append(int(buffer.ctypes.data))
        pair.register(A, num_tensors, data_type, shape, placement, addrs=addrs)
    tear_down(pair, A, B, linked=False)


@given(steps=st.lists(st.tuples(st.sampled_from(["allocate", "allocate", "deallocate"]), registrations(),
                                 st.integers(0, 5)), min_size=1, max_size=8),
       cluster=weighted((5, st.just(A)), (1, st.just(B))))
def test_allocate_and_deallocate_agree_with_oracle(pair: Harness, steps: list[Any], cluster: int) -> None:
    """PR-9, §3.6, PR-34: pools, placements, first-fit pages and exhaustion."""
    pair.reset()
    for action, (num_tensors, data_type, shape, placement, _), pick in steps:
        if action == "allocate":
            if len(shape) == 2 and 0 < shape[0] < 10:       # large tensors, to reach exhaustion
                shape = (shape[0], 4096 * (1 + pick))
            pair.allocate(cluster, num_tensors, data_type, shape, placement)
        else:
            ids = sorted(pair.world.engines[cluster].caches) + [UNKNOWN_ID]
            pair.deallocate(cluster, ids[pick % len(ids)])
    tear_down(pair, A, B, linked=False)


# ---- transfers ----------------------------------------------------------------------------------

def stride_of(spec: Spec) -> int:
    layout = tensor_layout(spec.shape, spec.data_type) if 1 <= len(spec.shape) <= 31 else "rank"
    return 8 if isinstance(layout, str) else layout.stride


def sizes(s_dst: int, s_src: int) -> st.SearchStrategy[int]:
    """``size`` of a contiguous pull: −1, within the strides, and every invalid value."""
    return weighted((5, st.just(-1)), (3, st.integers(1, max(s_dst, 1))),
                    (2, st.sampled_from([0, -2, s_dst + 1, s_src, s_src + 1, I64_MAX])),
                    (1, st.sampled_from([-(2**63), I64_MAX + 1])))


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
def cases(draw: st.DrawFn, call: str) -> Case:
    blocks = call.endswith("blocks")
    push = call.startswith("push")
    clean = draw(st.booleans())
    local, remote = draw(directions())
    max_count = 16 if blocks else 8
    # the local cache is the destination of a pull and the source of a push; only A has pools
    first = draw(specs(clean, local == A, max_count=max_count))
    second = draw(related(first, clean, remote == A, max_count=max_count))
    if push:
        src, dst = first.but(placement=DEVICE) if clean else first, second
    else:
        src, dst = second, first
    n_local = (src if push else dst).num_tensors
    s_dst, s_src = stride_of(dst), stride_of(src)
    some_id = either(clean, st.none(), st.sampled_from([UNKNOWN_ID, 0, -1]), 12)
    batch_for_blocks = either(clean, st.just(0), st.sampled_from([1, U32_MAX]), 12)
    if call == "pull_kv_cache":
        size = draw(either(clean, weighted((2, st.just(-1)), (1, st.integers(1, max(min(s_dst, s_src), 1)))),
                           weighted((3, st.sampled_from([0, -2, s_dst + 1, s_src, s_src + 1, I64_MAX])),
                                    (1, st.sampled_from([-(2**63), I64_MAX + 1]))), 6))
    else:
        size = draw(either(clean, st.just(-1), st.sampled_from([0, 1, s_src, -2]), 12))
    case = Case(
        local, remote, dst, src,
        linked=draw(either(clean, st.just(True), st.just(False), 12)),
        initiator_local=draw(st.booleans()),
        peer=draw(either(clean, st.just("peer"), st.sampled_from(["own", "unknown"]), 12)),
        src_id=draw(some_id), dst_id=draw(some_id),
        src_batch=draw(batch_for_blocks if blocks else index_near(clean, src.count, U32_MAX)),
        dst_batch=draw(batch_for_blocks if blocks else index_near(clean, dst.count, U32_MAX)),
        size=size,
        ext=draw(ext_params(clean, src.num_tensors, dst.num_tensors, n_local)),
        raw=draw(c_abi()),
    )
    if blocks:
        sblk, dblk = draw(block_lists(clean, src.count, dst.count))
        case = Case(**{**case.__dict__, "src_blocks": sblk, "dst_blocks": dblk})
    if push:
        ranged = case.ext is not None and case.ext.src[0] >= 0
        caller = draw(either(clean, weighted((3, st.just((DEVICE, src.num_tensors))),
                                             (1, st.just((DEVICE, 0)) if ranged else st.none())),
                             st.one_of(st.none(), st.just((HOST, src.num_tensors)),
                                       st.tuples(st.just(DEVICE), st.integers(0, src.num_tensors + 2))), 6))
        case = Case(**{**case.__dict__, "caller": caller})
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


U8 = int(G.DT_UINT8)


@given(case=cases("pull_kv_cache"))
def test_pull_kv_cache_agrees_with_oracle(pair: Harness, case: Case) -> None:
    """§4, §5, §6.1, §6.2, §8.0 (pull), §8.2, §9.7, PR-1, PR-3, PR-6, PR-7, PR-11, PR-12, PR-20, PR-32."""
    run_case(pair, "pull_kv_cache", case)


@given(case=cases("pull_kv_blocks"))
def test_pull_kv_blocks_agrees_with_oracle(pair: Harness, case: Case) -> None:
    """§7, §8.3 and the pull rules: PR-4, PR-5, PR-13 on top of those of pull_kv_cache."""
    run_case(pair, "pull_kv_blocks", case)


@given(case=cases("push_kv_cache"))
def test_push_kv_cache_agrees_with_oracle(pair: Harness, case: Case) -> None:
    """§4.4, §6.5, §8.0 (push), §8.5, §8.12, PR-14, PR-15, PR-33 and the link/table rules."""
    run_case(pair, "push_kv_cache", case)


@given(case=cases("push_kv_blocks"))
def test_push_kv_blocks_agrees_with_oracle(pair: Harness, case: Case) -> None:
    """§7, §8.6 for pushes: PR-4, PR-5, PR-13 on top of those of push_kv_cache."""
    run_case(pair, "push_kv_blocks", case)


# ---- local copies -------------------------------------------------------------------------------

@st.composite
def copy_setups(draw: st.DrawFn, max_count: int) -> tuple[bool, int, Spec, Spec, bool]:
    clean = draw(st.booleans())
    cluster = draw(either(clean, st.just(A), st.just(B), 6))
    src = draw(specs(clean, True, max_count=max_count))
    dst = draw(related(src, clean, True, max_count=max_count))
    same = draw(weighted((4, st.just(False)), (1, st.just(True))))
    return clean, cluster, src, dst, same


def make_copy_caches(h: Harness, cluster: int, src: Spec, dst: Spec, same: bool) -> tuple[int, int]:
    h.reset()
    src_id = create(h, cluster, src)
    dst_id = src_id if same else create(h, cluster, dst)
    return src_id, dst_id


@given(setup=copy_setups(max_count=8), data=st.data())
def test_copy_kv_cache_agrees_with_oracle(pair: Harness, setup: tuple[bool, int, Spec, Spec, bool],
                                          data: Any) -> None:
    """PR-9, §3.6, §6.6, §8.8, PR-24: local copies between (or within) caches."""
    clean, cluster, src, dst, same = setup
    src_id, dst_id = make_copy_caches(pair, cluster, src, dst, same)
    if same:
        dst = src
    s_src, s_dst = stride_of(src), stride_of(dst)
    src_id = data.draw(either(clean, st.just(src_id), st.just(UNKNOWN_ID), 12), "src_id")
    src_batch = data.draw(index_near(clean, src.count, U32_MAX), "src_batch")
    dst_batch = data.draw(index_near(clean, dst.count, U32_MAX), "dst_batch")
    offset = data.draw(either(clean, weighted((1, st.just(0)), (1, st.integers(0, max(min(s_src, s_dst) - 1, 0)))),
                              st.sampled_from([s_src, s_dst, max(s_src, s_dst) + 1, U64_MAX, U64_MAX + 1]), 6),
                       "offset")
    size = data.draw(either(clean, weighted((1, st.just(-1)), (1, st.integers(1, max(min(s_src, s_dst) - offset, 1)))),
                            st.sampled_from([0, -2, s_src, s_dst + 1, I64_MAX + 1]), 6), "size")
    with pair.layer(data.draw(c_abi(), "C ABI")):
        event(pair.copy_kv_cache(cluster, src_id, dst_id, src_batch, dst_batch, offset, size).describe())
    tear_down(pair, A, B, linked=False)


@given(setup=copy_setups(max_count=16), data=st.data())
def test_copy_kv_blocks_agrees_with_oracle(pair: Harness, setup: tuple[bool, int, Spec, Spec, bool],
                                           data: Any) -> None:
    """PR-9, §3.6, §8.9, PR-5 (within and across lists), PR-24."""
    clean, cluster, src, dst, same = setup
    src_id, dst_id = make_copy_caches(pair, cluster, src, dst, same)
    if same:
        dst = src
    lists = data.draw(st.integers(1, 3), "lists")
    sblk, first = data.draw(block_lists(clean, src.count, dst.count), "blocks")
    dst_lists = [first]
    for i in range(1, lists):
        dst_lists.append(data.draw(block_lists(clean, src.count, dst.count), f"list {i}")[1])
    if data.draw(either(clean, st.just(False), st.just(True), 12), "no lists"):
        dst_lists = []
    with pair.layer(data.draw(c_abi(), "C ABI")):
        event(pair.copy_kv_blocks(cluster, src_id, dst_id, sblk, dst_lists).describe())
    tear_down(pair, A, B, linked=False)


# ---- long block lists ---------------------------------------------------------------------------

@st.composite
def long_block_lists(draw: st.DrawFn) -> tuple[int, int, Any, Any]:
    """1 to 10,000 block pairs over caches of up to 12,000 blocks: one run, many runs,
    scattered or descending, with at most one flaw (§7.3, PR-4, PR-5)."""
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


@given(lists=long_block_lists(), push=st.booleans(), tensors=st.sampled_from([1, 2, 4]), raw=c_abi())
def test_long_block_lists_agree_with_oracle(pair: Harness, lists: tuple[int, int, Any, Any], push: bool,
                                            tensors: int, raw: bool) -> None:
    """pull_kv_blocks / push_kv_blocks with up to 10,000 pairs (A is the local engine)."""
    nb_src, nb_dst, sblk, dblk = lists
    src = Spec(tensors, U8, (nb_src, 2))
    dst = Spec(tensors, U8, (nb_dst, 2))
    if push:
        made = set_up(pair, A, B, {"src": (A, src), "dst": (B, dst)}, linked=True)
        with pair.layer(raw):
            outcome = pair.push_kv_blocks(A, made.ids["src"], (B, made.ids["dst"], 0), sblk, dblk, Ext(n=1),
                                          (DEVICE, tensors))
    else:
        made = set_up(pair, A, B, {"src": (B, src), "dst": (A, dst)}, linked=True)
        with pair.layer(raw):
            outcome = pair.pull_kv_blocks(A, (B, made.ids["src"], 0), made.ids["dst"], sblk, dblk, Ext(n=1))
    event(outcome.describe())
    tear_down(pair, A, B, linked=True)


# ---- known mock bugs: minimal reproductions ------------------------------------------------------

@pytest.mark.xfail(strict=True, reason="mock bug: an engine that still holds its side of a link to a peer that no "
                   "longer listens gets LLM_ALREADY_LINK from link_llm_clusters without connecting; cpp-api.md §6.7 "
                   "step 5 and semantics §10.2 connect first (refused: LLM_LINK_FAILED) and report ALREADY_LINK "
                   "from the handshake (PR-42)")
def test_link_from_a_stale_side_to_a_silent_peer_fails_to_connect(pair: Harness) -> None:
    pair.reset()
    assert pair.link(A, B).ok
    pair.finalize(B)                       # B drops its side and stops listening; A keeps its side
    try:
        pair.link(A, B)                    # the oracle expects per-cluster LLM_LINK_FAILED
    finally:
        pair.reset()


@pytest.mark.xfail(strict=True, reason="package bug: LlmDataDist.deallocate_cache drops a registered cache from the "
                   "package's own record although the engine keeps it (semantics §3.6: a no-op), so the Python layer "
                   "stops applying PR-3/PR-33 to it (docs/semantics.md N-2) and the engine answers LLM_NOT_YET_LINK "
                   "before its own PR-3 check")
def test_deallocate_of_a_registered_cache_keeps_the_package_record(pair: Harness) -> None:
    pair.reset()
    cache_id = pair.register(A, 1, U8, [1, 4]).value
    assert pair.deallocate(A, cache_id).ok                      # registered: nothing happens
    try:
        # tensor_num_per_layer 2 > 1 tensor: PR-3 in Python, before the engine's link check
        pair.push_kv_cache(A, cache_id, (B, cache_id, 0), 0, -1, None, (DEVICE, 1))
    finally:
        pair.reset()
