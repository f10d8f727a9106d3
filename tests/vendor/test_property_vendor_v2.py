"""Property tests: v2 transfers between two processes agree with the oracle
(tests/oracle/vendor_v2.py).

One peer process (``vendor_peer.py``, cluster 1, PROMPT) lives for the whole module;
this process is the Decoder (cluster 2). Every example starts both engines afresh in
direct or server-assisted mode, creates the caches it draws on both sides (registered
over guarded numpy buffers or allocated from a pool; CACHE or BLOCKS; placements;
remote-accessible flags; keys bound at allocation or registration, with placeholders),
before the link, after it, or after the link's first use (a warm-up pull that takes
the direct-mode table copy), makes one pull or push with clean arguments or with one
flawed knob, and then makes the same call **again**: the second call shows what the
first did to the key tables (a server-assisted pull through a request key releases it,
semantics.md §9.5, so the repeat gives ``KV_CACHE_NOT_EXIST``). After every call the outcome
(exception type and status code) must be the oracle's, and every byte of every cache of
both processes (guards and unregistered buffers included) must equal the oracle's memory.

Flaws (``FLAWS``) name the rules they break; ``event()`` records which rule decided,
so ``--hypothesis-show-statistics`` shows what the examples covered.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

import vendor_v2_peer_support as v2s
from oracle import vendor_v2 as oracle

pytestmark = pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions")

U64 = 2**64 - 1
P, D = v2s.P_ID, v2s.D_ID

PULL_FLAWS = ["unbound key", "released key", "prefix key", "by id past the batch", "id <= 0", "kinds",
              "block bounds", "repeated blocks", "layer range past the source", "layer range past the destination",
              "n non-divisor", "size", "remote_accessible False", "placement pair", "mode mismatch",
              "withdrawn after the table copy", "deallocated source", "wrong cluster", "registered late"]
PUSH_FLAWS = ["server mode", "unknown destination", "id <= 0", "kinds", "block bounds", "repeated blocks",
              "layer range past the destination", "layer range past the source", "n non-divisor",
              "destination batch", "source batch", "stride", "remote_accessible False",
              "withdrawn after the table copy", "registered late", "mode mismatch"]


def request_key(req_id: int, model_id: int = 0) -> Tuple[Any, ...]:
    return ("key", P, req_id, model_id, U64)


def prefix_key(prefix_id: int, model_id: int = 0) -> Tuple[Any, ...]:
    return ("key", P, U64, model_id, prefix_id)


PLACEHOLDER = ("key", P, U64, 0, U64)


def warm_caches(pair: v2s.Pair) -> Tuple[int, int]:
    """A peer cache and a local cache registered before the link, for ``warm_up``."""
    source = pair.make("peer", False, False, 2, 1, 16, ra=True)
    target = pair.make("local", False, False, 2, 1, 16, ra=True)
    assert source is not None and target is not None
    return source, target


def warm_up(pair: v2s.Pair, warm: Tuple[int, int]) -> None:
    """A clean pull by id: the link's first use, which takes the direct-mode table copy (semantics.md §9.7)."""
    assert pair.pull("cache", ("id", P, warm[0], 0), warm[1]).ok


def when(choice: Any, flaw: Optional[str]) -> str:
    """When a cache is made: before the link, after it, or after its first use."""
    if flaw == "registered late":
        return str(choice(["after link", "after use"]))
    return str(choice(["before link", "before link", "after use"]))


# ---------------------------------------------------------------------------
# pulls: pull_cache (C2C), pull_blocks (B2B, C2B)
# ---------------------------------------------------------------------------


@pytest.mark.rules("§1.3", "§1.4", "§2.6", "§4.1", "§4.2", "§5", "§6.1", "§6.2", "§7.1", "§7.2", "§7.3", "§7.5", "§7.6",
                   "§8.2", "§8.3", "§8.4", "§8.5", "§8.6", "§8.12", "§9.1", "§9.4", "§9.5", "§9.6", "§9.7", "§9.8",
                   "PR-2", "PR-3", "PR-4", "PR-5", "PR-6", "PR-7", "PR-13", "PR-14", "PR-15", "PR-16", "PR-19", "PR-20",
                   "PR-24", "PR-25", "PR-32", "PR-41", "V-5")
@settings(max_examples=settings.default.max_examples * 15)
@given(form=st.sampled_from(["c2c", "b2b", "c2b"]),
       flaw=st.one_of(st.none(), st.sampled_from(PULL_FLAWS)), seed=st.integers(0, 2**32 - 1))
def test_pulls_agree_with_oracle(pair: v2s.Pair, form: str, flaw: Optional[str], seed: int) -> None:
    data = _Draw(seed)
    direct = data.choice([True, False]) if flaw not in ("prefix key", "remote_accessible False",
                                                        "withdrawn after the table copy") else True
    if flaw == "placement pair":
        direct = False
    peer_direct = (not direct) if flaw == "mode mismatch" else direct
    peer_pools = (True, data.choice([True, False]))
    local_pools = (data.choice([True, True, False]) if not direct else True, True)
    pair.start(direct, peer_direct, local_pools, peer_pools)

    n = data.choice([1, 2, 2])
    layers_src, layers_dst = data.choice([1, 2, 2, 3]), None
    layers_dst = layers_src if data.choice([True, True, False]) else data.choice([1, 2, 3])
    n_src, n_dst = layers_src * n, layers_dst * n
    dst_rows = data.choice([16, 32, 48])
    src_rows = dst_rows if form == "b2b" else dst_rows * data.choice([1, 1, 2, 3])
    src_dim0, dst_dim0 = data.choice([1, 2, 3, 4]), data.choice([1, 2, 3, 4])
    if form != "c2c":
        dst_dim0 = data.choice([3, 4, 6])
    src_blocks_kind = form == "b2b"
    if flaw == "kinds":
        src_blocks_kind = not src_blocks_kind
    owned = data.choice([True, False]) if peer_pools[0] else False
    if flaw == "remote_accessible False":
        owned = False                  # pool allocations are always remote-accessible (decision)
    src_place = dst_place = "DEVICE"
    if not direct:
        src_place = data.choice(["DEVICE", "DEVICE", "HOST"]) if not owned or peer_pools[1] else "DEVICE"
        dst_place = data.choice(["DEVICE", "DEVICE", "HOST"])
        if flaw == "placement pair":
            src_place = dst_place = "HOST"
            if owned and not peer_pools[1]:
                owned = False
    src_ra = dst_ra = None
    if flaw == "remote_accessible False":
        src_ra, dst_ra = data.choice([(False, None), (None, False)])

    # the source's keys: request and prefix keys bound at allocation or registration, with placeholders
    key_kind = data.choice(["id", "request", "prefix"] if not src_blocks_kind else ["blocks", "id"])
    if form == "b2b" and not src_blocks_kind:
        key_kind = "id"            # a B2B pull names a blocks key; "kinds" reaches the source by id below
    if flaw in ("by id past the batch", "id <= 0") or (flaw == "kinds" and form != "b2b"):
        key_kind = "id"            # the keys of a blocks cache are blocks keys: a contiguous source kind by id
    keys: list = []
    slot = 0
    if not src_blocks_kind:
        slots = min(src_dim0, 3)
        slot = data.choice(list(range(slots)))
        for s in range(slots):
            if s == slot:
                keys.append(request_key(10) if key_kind != "prefix" else prefix_key(20))
            else:
                keys.append(data.choice([PLACEHOLDER if s == 0 or keys[-1] != PLACEHOLDER else request_key(30 + s),
                                         request_key(30 + s), prefix_key(40 + s)]))
        while keys and keys[-1] == PLACEHOLDER:
            keys.pop()
    blocks_key = ("blocks", P, 0) if src_blocks_kind and data.choice([True, True, False]) else None

    src_time = when(data.choice, flaw)
    dst_time = "before link" if flaw != "registered late" else data.choice(["before link", "after link"])
    if direct and dst_time != "before link":
        src_time = data.choice(["before link", src_time])

    def make_source() -> Optional[int]:
        return pair.make("peer", src_blocks_kind, owned, n_src, src_dim0, src_rows, src_place, keys, blocks_key,
                         src_ra)

    def make_destination() -> Optional[int]:
        owned_dst = data.choice([False, False, True]) and local_pools[0] and dst_ra is None
        return pair.make("local", form != "c2c", owned_dst, n_dst, dst_dim0, dst_rows, dst_place, (), None, dst_ra)

    warm = warm_caches(pair)
    src = make_source() if src_time == "before link" else None
    dst = make_destination() if dst_time == "before link" else None
    pair.link(from_peer=data.choice([True, False]))
    if not pair.world.link:
        src = make_source() if src is None else src
        dst = make_destination() if dst is None else dst
    if src_time == "after link" or dst_time == "after link":
        src = make_source() if src is None else src
        dst = make_destination() if dst is None else dst
    if src is None and pair.world.link:
        warm_up(pair, warm)
        src = make_source()
    if dst is None:
        dst = make_destination()
    assert dst is not None
    if src is None:
        src = 1   # the source's registration failed (keys, PR-21): the id it consumed

    # the key naming the source
    if key_kind == "id":
        batch = slot if form != "b2b" else 0
        if flaw == "by id past the batch":
            batch = (1 if src_blocks_kind else src_dim0) + data.choice([0, 0, 1, 7])
        cache_id = data.choice([0, -1]) if flaw == "id <= 0" else src
        key: Tuple[Any, ...] = ("id", P, cache_id, batch)
    elif key_kind == "blocks":
        key = ("blocks", P, 0)
    else:
        key = request_key(10) if key_kind == "request" else prefix_key(20)
    if flaw == "unbound key":
        key = ("blocks", P, 5) if key[0] == "blocks" else request_key(99)
    if flaw == "wrong cluster":
        key = (key[0], data.choice([D, 7])) + key[2:]
    if flaw == "released key" and key[0] == "key":
        pair.remove_key(key)
    if flaw == "withdrawn after the table copy" or flaw == "deallocated source":
        if flaw == "withdrawn after the table copy" and pair.world.link and pair.world.link.table is None:
            warm_up(pair, warm)
        what = data.choice(["deallocate", "unregister", "remove key"])
        if owned and what == "deallocate" or flaw == "deallocated source":
            if owned:
                pair.deallocate(src)
            else:
                pair.unregister(src)
        elif what == "remove key" and key[0] == "key":
            pair.remove_key(key)
        elif not owned:
            pair.unregister(src)
        else:
            pair.deallocate(src)

    # the call's arguments
    kw: dict = {"n": n}
    if flaw == "n non-divisor":
        kw["n"] = data.choice([3, n_dst + 1])
    if data.choice([True, False, False]) or flaw in ("layer range past the source", "layer range past the destination",
                                                     "n non-divisor"):
        span = min(layers_src, layers_dst)
        a = data.choice(list(range(layers_src - span + 1)))
        b = data.choice(list(range(layers_dst - span + 1)))
        src_range, dst_range = range(a, a + span), range(b, b + span)
        if flaw == "layer range past the source":
            src_range = range(layers_src - span + 1, layers_src + 1)
        if flaw == "layer range past the destination":
            dst_range = range(layers_dst - span + 1, layers_dst + 1)
        which = data.choice(["both", "both", "src", "dst"])
        kw["src_range"] = src_range if which != "dst" else None
        kw["dst_range"] = dst_range if which != "src" else None
    if form == "c2c":
        kw["batch_index"] = data.choice(list(range(dst_dim0)))
        kw["size"] = data.choice([-1, -1, 1, dst_rows // 2, dst_rows])
        if flaw == "size":
            kw["size"] = data.choice([dst_rows + 1, src_rows + 1, 0])
    elif form == "b2b":
        count = data.choice([1, 2, 3])
        kw["src_blocks"] = [data.choice(list(range(src_dim0))) for _ in range(count)]
        kw["dst_blocks"] = data.sample(list(range(dst_dim0)), count)
        if flaw == "block bounds":
            side = data.choice(["src_blocks", "dst_blocks"])
            kw[side][-1] = (src_dim0 if side == "src_blocks" else dst_dim0) + data.choice([0, 0, 3])
    else:
        chunks = -(-src_rows // dst_rows)
        kw["dst_blocks"] = data.sample(list(range(dst_dim0)), data.choice(list(range(1, min(chunks, dst_dim0) + 1))))
        if flaw == "block bounds":     # one chunk past the source batch (PR-16), or a block past the destination
            kw["dst_blocks"] = data.sample(list(range(dst_dim0)), chunks + 1) \
                if data.choice([True, True, False]) and chunks < dst_dim0 else kw["dst_blocks"][:-1] + [dst_dim0]
    if flaw == "repeated blocks" and form != "c2c":
        kw["dst_blocks"] = list(kw["dst_blocks"]) + [kw["dst_blocks"][0]]
        if form == "b2b":
            kw["src_blocks"] = list(kw["src_blocks"]) + [0]

    first = pair.pull("cache" if form == "c2c" else "blocks", key, dst, **kw)
    event(f"pull {form}: {first.describe()}")
    pair.check_memory()
    second = pair.pull("cache" if form == "c2c" else "blocks", key, dst, **kw)
    event(f"pull {form} again: {second.describe()}")
    pair.check_memory()


# ---------------------------------------------------------------------------
# semantics.md §9.5: the remaining-tensor set shared by the keys of one cache
# ---------------------------------------------------------------------------

PULL_STEP = st.tuples(st.just("pull"), st.integers(0, 2), st.sampled_from(["c2c", "c2b", "by id"]),
                      st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(1, 3))))
STEP = st.one_of(
    PULL_STEP, PULL_STEP, PULL_STEP,
    st.tuples(st.just("remove"), st.integers(0, 2)),
    st.tuples(st.just("deallocate")),
)


@pytest.mark.rules("§8.4", "§9.5", "§9.8", "PR-16")
@settings(max_examples=settings.default.max_examples * 8)
# a layer at a time through one key: the key stays until the second layer is pulled (semantics.md §9.5)
@example(slots=["request", "request"], owned=True, layers=2,
         steps=[("pull", 0, "c2c", (0, 1)), ("pull", 1, "c2b", (0, 1)), ("pull", 0, "c2c", (1, 1)),
                ("pull", 0, "c2c", None)])
@given(slots=st.lists(st.sampled_from(["request", "prefix", "placeholder"]), min_size=1, max_size=3),
       owned=st.booleans(), layers=st.integers(1, 3), steps=st.lists(STEP, min_size=1, max_size=6))
def test_server_mode_keys_are_released_as_the_remaining_tensor_set_says(
        pair: v2s.Pair, slots: list, owned: bool, layers: int, steps: list) -> None:
    """Pulls through the keys of one cache (C2C, C2B and by id on a bound slot) with and
    without source layer ranges, ``remove_cache_key`` and ``deallocate_cache`` with keys
    outstanding, in any order: every outcome and every byte as the oracle says (semantics.md §9.5,
    semantics.md §9.6, §9.8)."""
    pair.start(direct=False)
    keys = [request_key(10 + s) if kind == "request" else prefix_key(20 + s) if kind == "prefix" else PLACEHOLDER
            for s, kind in enumerate(slots)]
    if keys.count(PLACEHOLDER) > 1:
        keys = [k for k in keys if k != PLACEHOLDER] or [request_key(10)]
    n_src = 2 * layers
    src = pair.make("peer", False, owned, n_src, 3, 32, "DEVICE", keys)
    dst = pair.make("local", False, False, 2, 3, 32)
    blocks = pair.make("local", True, False, 2, 4, 16)
    assert src is not None and dst is not None and blocks is not None
    pair.link()
    for step in steps:
        if step[0] == "remove":
            pair.remove_key(keys[step[1] % len(keys)])
        elif step[0] == "deallocate":
            if owned:
                pair.deallocate(src)
            else:
                pair.unregister(src)
        else:
            _, which, form, rng = step
            slot = which % len(keys)
            key = keys[slot] if form != "by id" else ("id", P, src, slot)
            src_range = None if rng is None else range(rng[0] % layers, min(rng[0] % layers + 1, layers))
            kw: dict = {"src_range": src_range, "dst_range": range(0, 1) if src_range is not None else None}
            if src_range is None and n_src != 2:
                kw["dst_range"] = None
                kw["src_range"] = range(0, 1) if rng is not None else None
            if form == "c2b":
                outcome = pair.pull("blocks", key, blocks, dst_blocks=[3, 1], **kw)
            else:
                outcome = pair.pull("cache", key if form == "by id" or key[0] == "key" else key, dst,
                                    batch_index=slot % 3, **kw)
            event(f"{form}: {outcome.describe()}")
        pair.check_memory()


# ---------------------------------------------------------------------------
# pushes: push_cache (C2C), push_blocks (B2B), from this process into the peer
# ---------------------------------------------------------------------------


@pytest.mark.rules("§1.3", "§1.4", "§4.3", "§5", "§6.1", "§6.2", "§7.3", "§7.5", "§7.6", "§8.2", "§8.3", "§8.4", "§8.5",
                   "§8.6", "§8.12", "§9.7", "python-api §14", "PR-3", "PR-4", "PR-6", "PR-7", "PR-13", "PR-14", "PR-15",
                   "PR-19", "PR-24", "PR-32")
@settings(max_examples=settings.default.max_examples * 8)
@given(form=st.sampled_from(["c2c", "b2b"]), flaw=st.one_of(st.none(), st.sampled_from(PUSH_FLAWS)),
       seed=st.integers(0, 2**32 - 1))
def test_pushes_agree_with_oracle(pair: v2s.Pair, form: str, flaw: Optional[str], seed: int) -> None:
    data = _Draw(seed)
    direct = flaw != "server mode"
    pair.start(direct, (not direct) if flaw == "mode mismatch" else direct)
    n = data.choice([1, 2, 2])
    layers_src = data.choice([1, 2, 3])
    layers_dst = layers_src if data.choice([True, True, False]) else data.choice([1, 2, 3, 4])
    rows = data.choice([16, 32])
    dst_rows = rows if form == "b2b" or flaw != "stride" else rows // 2
    if form == "c2c" and flaw != "stride" and data.choice([True, False]):
        dst_rows = rows * 2
    src_dim0, dst_dim0 = data.choice([1, 2, 3, 4]), data.choice([1, 2, 3, 4])
    dst_blocks_kind = (form == "b2b") != (flaw == "kinds")
    owned = data.choice([True, False])
    src_ra = False if flaw == "remote_accessible False" and data.choice([True, False]) else None
    dst_ra = False if flaw == "remote_accessible False" and src_ra is None else None
    blocks_key = ("blocks", P, 0) if dst_blocks_kind else None
    late = flaw == "registered late"

    def destination() -> Optional[int]:
        return pair.make("peer", dst_blocks_kind, owned and not late and dst_ra is None, layers_dst * n, dst_dim0,
                         dst_rows, "DEVICE", (), blocks_key, dst_ra)

    warm = warm_caches(pair)
    src = pair.make("local", form == "b2b", data.choice([True, False]) and not late and src_ra is None, layers_src * n,
                    src_dim0, rows, "DEVICE", (), None, src_ra)
    dst = None if late else destination()
    pair.link(from_peer=data.choice([True, False]))
    if late or dst is None:
        if data.choice([True, False]) and pair.world.link:
            warm_up(pair, warm)
        dst = destination()
    assert src is not None and dst is not None
    if flaw == "withdrawn after the table copy":
        warm_up(pair, warm)
        pair.deallocate(dst) if owned else pair.unregister(dst)
        if dst_blocks_kind and data.choice([True, False]):
            dst = destination()      # the blocks key re-bound to a cache the table copy does not list (PR-19)

    kw: dict = {"n": n}
    if data.choice([True, False]) or flaw in ("layer range past the destination", "layer range past the source",
                                              "n non-divisor"):
        span = min(layers_src, layers_dst)
        a = data.choice(list(range(layers_src - span + 1)))
        b = data.choice(list(range(layers_dst - span + 1)))
        kw["src_range"], kw["dst_range"] = range(a, a + span), range(b, b + span)
        if flaw == "layer range past the destination":
            kw["dst_range"] = range(layers_dst - span + 1, layers_dst + 1)
        if flaw == "layer range past the source":
            kw["src_range"] = range(layers_src - span + 1, layers_src + 1)
        if data.choice([True, False, False]):
            kw[data.choice(["src_range", "dst_range"])] = None
    if flaw == "n non-divisor":
        kw["n"] = data.choice([3, 4])
    if form == "c2c":
        cache_id = data.choice([0, -1]) if flaw == "id <= 0" else dst + (5 if flaw == "unknown destination" else 0)
        batch = data.choice(list(range(1 if dst_blocks_kind else dst_dim0)))
        if flaw == "destination batch":
            batch = dst_dim0 + data.choice([0, 2])
        key: Tuple[Any, ...] = ("id", P, cache_id, batch)
        kw["src_batch_index"] = data.choice(list(range(src_dim0)))
        if flaw == "source batch":
            kw["src_batch_index"] = src_dim0
    else:
        key = ("blocks", P, 5 if flaw == "unknown destination" else 0)
        count = data.choice([1, 2, 3])
        kw["src_blocks"] = [data.choice(list(range(src_dim0))) for _ in range(count)]
        kw["dst_blocks"] = data.sample(list(range(dst_dim0)), min(count, dst_dim0))
        kw["src_blocks"] = kw["src_blocks"][:len(kw["dst_blocks"])]
        if flaw == "block bounds":
            side = data.choice(["src_blocks", "dst_blocks"])
            kw[side][-1] = (src_dim0 if side == "src_blocks" else dst_dim0) + data.choice([0, 4])
        if flaw == "repeated blocks":
            kw["dst_blocks"] = list(kw["dst_blocks"]) + [kw["dst_blocks"][0]]
            kw["src_blocks"] = list(kw["src_blocks"]) + [0]
    first = pair.push("cache" if form == "c2c" else "blocks", key, src, **kw)
    event(f"push {form}: {first.describe()}")
    pair.check_memory()
    second = pair.push("cache" if form == "c2c" else "blocks", key, src, **kw)
    event(f"push {form} again: {second.describe()}")
    pair.check_memory()


class _Draw:
    """Reproducible choices from one drawn seed (Hypothesis shrinks the seed and the flaw;
    the choices that follow from them are fixed by the seed)."""

    def __init__(self, seed: int) -> None:
        import random

        self.random = random.Random(seed)

    def choice(self, options: Any) -> Any:
        return self.random.choice(list(options))

    def sample(self, options: Any, count: int) -> Any:
        return self.random.sample(list(options), count)


# ---------------------------------------------------------------------------
# transfer_cache_async (semantics.md §8.7, PR-40, V-9)
# ---------------------------------------------------------------------------


@st.composite
def async_transfers(draw: Any) -> dict:
    """A source, one or two peer destinations, and one or two configs that cover some layers."""
    direct = draw(st.booleans())
    blocks = direct and draw(st.booleans())
    src_layers = draw(st.integers(1, 3))
    odd = draw(st.sampled_from([False] * 9 + [True]))
    rows = draw(st.sampled_from([16, 32]))
    dst_rows = rows if draw(st.integers(0, 4)) else draw(st.sampled_from([8, 16, 32, 64]))
    dims = (draw(st.integers(1, 3)), draw(st.integers(1, 4)))
    dst_layers = draw(st.integers(src_layers, 3)) if draw(st.integers(0, 3)) else draw(st.integers(1, 3))
    configs = []
    for _ in range(draw(st.integers(1, 2))):
        start = draw(st.integers(0, src_layers - 1))
        stop = draw(st.integers(start + 1, src_layers + (1 if draw(st.integers(0, 9)) == 0 else 0)))
        dst_start = draw(st.integers(0, max(dst_layers - (stop - start), 0) + (1 if draw(st.integers(0, 5)) == 0
                                                                                else 0)))
        configs.append((start, stop, dst_start, draw(st.integers(0, dims[0] if draw(st.integers(0, 9)) == 0
                                                                 else dims[0] - 1)),
                        draw(st.integers(0, dims[1] - 1))))
    pairs = []
    if blocks:
        pairs = draw(st.lists(st.tuples(st.integers(0, dims[0]), st.integers(0, dims[1])), min_size=1, max_size=3,
                              unique_by=(lambda p: p[1]) if draw(st.integers(0, 9)) else (lambda p: p)))
    return dict(direct=direct, blocks=blocks, src_layers=src_layers, odd=odd, rows=rows, dst_rows=dst_rows,
                dims=dims, dst_layers=dst_layers, configs=configs, pairs=pairs,
                not_ready=draw(st.one_of(st.none(), st.none(), st.none(), st.integers(0, src_layers - 1))),
                outside=draw(st.sampled_from([None] * 6 + ["address 16", "HOST destination", "past the tensor"])),
                by_key=draw(st.booleans()))


@pytest.mark.rules("§1.3", "§2.6", "§4.3", "§7.5", "§8.5", "§8.7", "python-api §14", "PR-13", "PR-14", "PR-40", "V-9")
@settings(max_examples=settings.default.max_examples * 8)
@given(t=async_transfers())
def test_transfer_cache_async_agrees_with_oracle(pair: v2s.Pair, t: dict) -> None:
    """Layer-wise transfers from this process into the peer: ``TransferWithCacheKeyConfig``
    (by id or blocks key) in direct mode, ``TransferConfig`` to raw peer addresses in
    server-assisted mode; a synchronizer that refuses one layer; results per destination
    cluster after ``synchronize`` (semantics.md §8.7, PR-40, V-9)."""
    direct, blocks = t["direct"], t["blocks"]
    pair.start(direct)
    num = 2 * t["src_layers"] + (1 if t["odd"] else 0)
    src = pair.make("local", blocks, False, num, t["dims"][0], t["rows"])
    placement = "HOST" if t["outside"] == "HOST destination" else "DEVICE"
    dst = pair.make("peer", blocks, False, 2 * t["dst_layers"], t["dims"][1], t["dst_rows"], placement, (),
                    ("blocks", P, 0) if blocks else None)
    assert src is not None and dst is not None
    pair.link()
    configs: list = []
    addrs: list = []
    peer_addrs = pair.peer_addrs(dst)
    for start, stop, dst_start, src_batch, dst_batch in t["configs"]:
        span = stop - start
        if direct:
            key = oracle.BlocksKey(P, 0) if blocks else oracle.ById(P, dst, dst_batch)
            configs.append(oracle.KeyConfig(key, range(start, stop), range(dst_start, dst_start + span),
                                            0 if blocks else src_batch))
        else:
            where, raw = [], []
            for i in range(span):
                for j in range(2):
                    tensor = 2 * (dst_start + i) + j
                    offset = dst_batch * t["dst_rows"]
                    if t["outside"] == "past the tensor":
                        offset = t["dims"][1] * t["dst_rows"] - t["rows"] // 2
                    if tensor >= 2 * t["dst_layers"] or t["outside"] == "address 16":
                        where.append((None, 0, 0))
                        raw.append(16)
                    else:
                        where.append((dst, tensor, offset))
                        raw.append(peer_addrs[tensor] + offset)
            configs.append(oracle.AddrConfig(P, tuple(where), range(start, stop), src_batch))
            addrs.append(raw)
    pairs = t["pairs"]
    model = pair.transfer_async(src, configs, [p[0] for p in pairs], [p[1] for p in pairs], t["not_ready"], addrs)
    event(f"transfer_cache_async: {model.call.describe()} {model.synchronize.name} {model.rule.split(': ')[-1]}")
    pair.check_memory()
