"""Stateful tests: native engines driven in random orders against the oracle's model.

A ``RuleBasedStateMachine`` drives two engines of this process, A (cluster 1) and B
(cluster 2), both listening on 127.0.0.1, A with a device and a host memory pool and B
with a device pool only, through every native call: initialize, finalize, set_role,
link and unlink (forced or not, with the right or a wrong cluster id), register,
allocate, pull, push, copy, deallocate and unregister. The model is the oracle's
``World`` (tests/oracle): every call must give the outcome the model predicts, and
after every step every byte of every cache (and of every buffer whose cache is gone)
must equal the model's bytes.

Caches live in the ``caches`` Bundle as ``(cluster, cache id, allocated)``; releasing
one consumes it. Entries stay valid inputs after a finalize (the id is then unknown,
or names a newer cache with the same id: ids restart at 1), which is part of what is
tested.

The machine's random walks cover the life-cycle rules that a single call cannot: a
registration after a link or after its first use (PR-32, semantics.md §9.7), transfers over a link
whose peer side was dropped (PR-31) and the poisoned link after it (PR-35), re-links
from either side (semantics.md §10.4, PR-42), set_role while a link lives (semantics.md §10.7), calls before
initialize and after finalize (semantics.md §12.1), ids that restart after a re-initialise (semantics.md §3.1),
first-fit pool pages after deallocations (PR-34).
"""
from __future__ import annotations

import socket
from typing import Any, Iterator, Optional

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, multiple, rule, \
    run_state_machine_as_test

from llm_datadist_ffi.native import CachePlacement, GeDataType as G, LlmRole
from llm_datadist_ffi.testing import strategies as lst

from oracle import CacheModel, Ext
from native_driver import Harness

pytestmark = pytest.mark.mock_only(reason="stateful tests of the mock's rules against the oracle")

A, B = 1, 2
DEVICE, HOST = int(CachePlacement.DEVICE), int(CachePlacement.HOST)
POOL = '{"memory_size": 262144, "page_shift": 12}'          # 64 pages of 4 KiB
HOST_POOL = '{"memory_size": 65536, "page_shift": 10}'      # 64 pages of 1 KiB
U32_MAX = 2**32 - 1


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    h = Harness(seed=7)
    pa, pb = _free_port(), _free_port()
    h.add(A, LlmRole.DECODER, {"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{pa}",
                               "llm_datadist_ffi.mock.NativePool": "1", "llm.MemPoolConfig": POOL, "llm.HostMemPoolConfig": HOST_POOL,
                               "llm.SyncKvCacheWaitTime": "500"}, pa)
    h.add(B, LlmRole.PROMPT, {"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{pb}",
                              "llm_datadist_ffi.mock.NativePool": "1", "llm.MemPoolConfig": POOL, "llm.SyncKvCacheWaitTime": "500"}, pb)
    yield h
    h.close()


clusters = st.sampled_from([A, B])
# a small family of caches, so that many pairs have equal tensor counts and strides
tensor_counts = st.sampled_from([1, 2, 2, 4, 4, 6])
shapes = st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([4, 8, 16]))
data_types = st.sampled_from([G.DT_UINT8, G.DT_UINT8, G.DT_FLOAT16, G.DT_INT4])
placements = st.sampled_from([DEVICE, DEVICE, DEVICE, HOST])
c_abi = st.sampled_from([False, False, True])        # a third of the transfers bypass the Python layer


def other(cluster: int) -> int:
    return B if cluster == A else A


class NativeEngines(RuleBasedStateMachine):
    caches = Bundle("caches")

    def __init__(self, h: Harness) -> None:
        super().__init__()
        self.h = h
        h.reset()

    @initialize(target=caches, shape=shapes, data_type=data_types)
    def caches_then_a_link(self, shape: tuple[int, int], data_type: int) -> Any:
        """Two caches on each engine, registered before A links to B."""
        made = []
        for cluster in (A, B):
            for num_tensors in (2, 4):
                outcome = self.h.register(cluster, num_tensors, int(data_type), list(shape))
                made.append((cluster, outcome.value, False))
        self.h.link(A, B)
        return multiple(*made)

    # -- helpers --
    def model(self, cluster: int, cache_id: int) -> Optional[CacheModel]:
        return self.h.world.engines[cluster].caches.get(cache_id)

    def peer_cache(self, data: Any, cluster: int, fallback: tuple[int, int, bool]) -> tuple[int, int, bool]:
        """Mostly a live cache of ``cluster`` (the model knows them), else ``fallback``."""
        live = sorted(self.h.world.engines[cluster].caches)
        if live and data.draw(st.integers(0, 4), "pick a live peer cache"):
            return (cluster, data.draw(st.sampled_from(live), "peer cache"), False)
        return fallback

    def ext(self, data: Any, n_src: int, n_dst: int, n_local: int) -> Optional[Ext]:
        """Mostly valid layer pairs for these tensor counts, sometimes anything."""
        divisors = [d for d in range(1, n_local + 1) if n_local % d == 0]
        n = data.draw(st.sampled_from(divisors * 5 + [0, 2, 3, 256]), "n")
        form = data.draw(st.sampled_from(["none", "default", "default", "range", "range", "range", "odd"]), "form")
        if form == "none":
            return None
        if form == "default" or n == 0:
            return Ext(n=n)
        ls, ld = n_src // n, n_dst // n
        if form == "range" and ls and ld:
            span = data.draw(st.integers(1, min(ls, ld)), "span")
            sf = data.draw(st.integers(0, ls - span), "sf")
            df = data.draw(st.integers(0, ld - span), "df")
            return Ext((sf, sf + span - 1), (df, df + span - 1), n)
        pair = st.tuples(st.integers(-2, 4), st.integers(-2, 4))
        return Ext(data.draw(pair, "src pair"), data.draw(pair, "dst pair"), n)

    @staticmethod
    def blocks(data: Any, nb_src: int, nb_dst: int) -> tuple[list[int], list[int]]:
        """Mostly valid pairs (distinct destinations); sometimes a malformed table (empty,
        lengths that differ, an index past a cache)."""
        flawed = data.draw(st.integers(0, 9), "flawed") == 0 or not (nb_src and nb_dst)
        table = lst.block_pairs(nb_src, nb_dst, validity="invalid" if flawed else "valid", containers=["list"])
        src, dst = data.draw(table, "blocks")
        return src, dst

    # -- life cycle --
    @rule(cluster=clusters, bad=st.sampled_from([None, None, None, None, "wait time", "port"]))
    def initialize(self, cluster: int, bad: Optional[str]) -> None:
        """Initialize (a no-op when initialised, semantics.md §12.1), sometimes with a bad option."""
        options = dict(self.h.nodes[cluster].options)
        if bad == "wait time":
            options["llm.SyncKvCacheWaitTime"] = "2147483648"    # PR-26: past int32, refused
        elif bad == "port":
            options["llm.ListenIpInfo"] = "127.0.0.1:65536"      # PR-27: past 65535, refused
        self.h.initialize(cluster, options)

    @rule(cluster=clusters, again=st.sampled_from([True, True, True, False]))
    def finalize(self, cluster: int, again: bool) -> None:
        """Finalize, mostly initialising again at once (a fresh engine, semantics.md §12.1)."""
        self.h.finalize(cluster)
        if again:
            self.h.initialize(cluster)

    @rule(cluster=clusters, role=st.sampled_from([1, 2, 3, 0, 4]), listen=st.sampled_from([True, True, False]))
    def set_role(self, cluster: int, role: int, listen: bool) -> None:
        node = self.h.nodes[cluster]
        self.h.set_role(cluster, role, {"llm.ListenIpInfo": f"127.0.0.1:{node.port}"} if listen else {})

    # -- links --
    @rule(client=clusters, wrong_id=st.sampled_from([False, False, False, False, True]))
    def link(self, client: int, wrong_id: bool) -> None:
        server = other(client)
        port = self.h.nodes[server].port
        self.h.link(client, 99 if wrong_id else server, port=port)              # 99: PR-28

    @rule(client=clusters, unlink=st.booleans(), force=st.booleans(),
          form=st.sampled_from(["twice", "wrong id", "own id", "no clusters", "timeout 0"]))
    def link_several(self, client: int, unlink: bool, force: bool, form: str) -> None:
        """A call with several clusters or odd arguments: PR-29 (a repeated cluster: the
        input order decides, ALREADY_LINK), PR-28 and E-8 (another cluster answers: a lint,
        or the refusal in strict mode), E-7 (the own cluster id, which another cluster
        answers to here); the call status is the last failure's; an empty list or a
        timeout <= 0 is PARAM_INVALID without per-cluster results. (A wrong id and the
        right one in one call would race: both name the same peer, PR-29 orders only
        equal ids.)"""
        server = other(client)
        remotes: list[tuple[int, Optional[int]]] = {
            "twice": [(server, None), (server, None)],
            "wrong id": [(99, self.h.nodes[server].port)],
            "own id": [(client, self.h.nodes[server].port)],       # E-7; PR-28 (link), E-8 (unlink)
            "no clusters": [],
            "timeout 0": [(server, None)],
        }[form]
        self.h.link_clusters(client, remotes, 0 if form == "timeout 0" else 1000, unlink=unlink, force=force)

    @rule(client=clusters, force=st.booleans())
    def unlink(self, client: int, force: bool) -> None:
        self.h.unlink(client, other(client), force=force)

    @rule(client=clusters)
    def relink(self, client: int) -> None:
        """Unlink (not forced), then link again: later registrations become reachable."""
        self.h.unlink(client, other(client))
        self.link(client, False)

    # -- caches --
    @rule(target=caches, cluster=clusters, num_tensors=tensor_counts, shape=shapes, data_type=data_types,
          placement=placements)
    def register(self, cluster: int, num_tensors: int, shape: tuple[int, int], data_type: int,
                 placement: int) -> Any:
        outcome = self.h.register(cluster, num_tensors, int(data_type), list(shape), placement)
        return (cluster, outcome.value, False) if outcome.ok else multiple()

    @rule(target=caches, cluster=clusters, num_tensors=tensor_counts, shape=shapes, data_type=data_types,
          placement=placements, wide=st.sampled_from([1, 1, 64, 512]))
    def allocate(self, cluster: int, num_tensors: int, shape: tuple[int, int], data_type: int, placement: int,
                 wide: int) -> Any:
        outcome = self.h.allocate(cluster, num_tensors, int(data_type), [shape[0], shape[1] * wide], placement)
        return (cluster, outcome.value, True) if outcome.ok else multiple()

    @rule(cache=consumes(caches))
    def release(self, cache: tuple[int, int, bool]) -> None:
        cluster, cache_id, allocated = cache
        if allocated:
            self.h.deallocate(cluster, cache_id)
        else:
            self.h.unregister(cluster, cache_id)

    @rule(cache=caches)
    def release_the_wrong_way(self, cache: tuple[int, int, bool]) -> None:
        """unregister of an allocated cache (PR-23); deallocate of a registered one (a
        no-op, semantics.md §3.6, after which the package still knows the cache: N-2)."""
        cluster, cache_id, allocated = cache
        if allocated:
            self.h.unregister(cluster, cache_id)
        else:
            self.h.deallocate(cluster, cache_id)

    # -- transfers --
    @rule(data=st.data(), dst=caches, src=caches, raw=c_abi)
    def pull_kv_cache(self, data: Any, dst: tuple[int, int, bool], src: tuple[int, int, bool], raw: bool) -> None:
        src = self.peer_cache(data, other(dst[0]), src)
        local, remote = dst[0], src[0]
        d, s = self.model(local, dst[1]), self.model(remote, src[1])
        nd, ns = (d.num_tensors if d else 2), (s.num_tensors if s else 2)
        batch = data.draw(st.integers(0, d.batches if d else 1), "batch")
        src_batch = data.draw(st.integers(0, s.batches if s else 1), "src_batch")
        stride = min(d.stride if d else 8, s.stride if s else 8)
        size = data.draw(st.sampled_from([-1, -1, stride, max(stride // 2, 1), stride + 1]), "size")
        with self.h.layer(raw):
            self.h.pull_kv_cache(local, (remote, src[1], src_batch), dst[1], batch, size, self.ext(data, ns, nd, nd))

    @rule(data=st.data(), dst=caches, src=caches, raw=c_abi)
    def pull_kv_blocks(self, data: Any, dst: tuple[int, int, bool], src: tuple[int, int, bool], raw: bool) -> None:
        src = self.peer_cache(data, other(dst[0]), src)
        local, remote = dst[0], src[0]
        d, s = self.model(local, dst[1]), self.model(remote, src[1])
        nd, ns = (d.num_tensors if d else 2), (s.num_tensors if s else 2)
        sblk, dblk = self.blocks(data, s.blocks if s else 2, d.blocks if d else 2)
        with self.h.layer(raw):
            self.h.pull_kv_blocks(local, (remote, src[1], 0), dst[1], sblk, dblk, self.ext(data, ns, nd, nd))

    @rule(data=st.data(), src=caches, dst=caches, raw=c_abi)
    def push_kv_cache(self, data: Any, src: tuple[int, int, bool], dst: tuple[int, int, bool], raw: bool) -> None:
        dst = self.peer_cache(data, other(src[0]), dst)
        local, remote = src[0], dst[0]
        s, d = self.model(local, src[1]), self.model(remote, dst[1])
        ns, nd = (s.num_tensors if s else 2), (d.num_tensors if d else 2)
        src_batch = data.draw(st.integers(0, s.batches if s else 1), "src_batch")
        dst_batch = data.draw(st.integers(0, d.batches if d else 1), "dst_batch")
        caller = data.draw(st.sampled_from([(DEVICE, ns), (DEVICE, ns), None, (DEVICE, ns + 1)]), "caller")
        with self.h.layer(raw):
            self.h.push_kv_cache(local, src[1], (remote, dst[1], dst_batch), src_batch, -1,
                                 self.ext(data, ns, nd, ns), caller)

    @rule(data=st.data(), src=caches, dst=caches, raw=c_abi)
    def push_kv_blocks(self, data: Any, src: tuple[int, int, bool], dst: tuple[int, int, bool], raw: bool) -> None:
        dst = self.peer_cache(data, other(src[0]), dst)
        local, remote = src[0], dst[0]
        s, d = self.model(local, src[1]), self.model(remote, dst[1])
        ns, nd = (s.num_tensors if s else 2), (d.num_tensors if d else 2)
        sblk, dblk = self.blocks(data, s.blocks if s else 2, d.blocks if d else 2)
        caller = data.draw(st.sampled_from([(DEVICE, ns), (DEVICE, ns), None]), "caller")
        with self.h.layer(raw):
            self.h.push_kv_blocks(local, src[1], (remote, dst[1], 0), sblk, dblk, self.ext(data, ns, nd, ns),
                                  caller)

    @rule(data=st.data(), src=caches, dst=caches, raw=c_abi)
    def copy_kv_cache(self, data: Any, src: tuple[int, int, bool], dst: tuple[int, int, bool], raw: bool) -> None:
        cluster = src[0]
        dst = self.peer_cache(data, cluster, dst)
        s, d = self.model(cluster, src[1]), self.model(cluster, dst[1])
        stride = min(s.stride if s else 8, d.stride if d else 8)
        offset = data.draw(st.sampled_from([0, 0, 1, stride - 1, stride]), "offset")
        size = data.draw(st.sampled_from([-1, -1, 1, max(stride - offset, 1), stride + 1]), "size")
        with self.h.layer(raw):
            self.h.copy_kv_cache(cluster, src[1], dst[1], data.draw(st.integers(0, s.batches if s else 1), "sb"),
                                 data.draw(st.integers(0, d.batches if d else 1), "db"), offset, size)

    @rule(data=st.data(), src=caches, dst=caches, raw=c_abi)
    def copy_kv_blocks(self, data: Any, src: tuple[int, int, bool], dst: tuple[int, int, bool], raw: bool) -> None:
        cluster = src[0]
        dst = self.peer_cache(data, cluster, dst)
        s, d = self.model(cluster, src[1]), self.model(cluster, dst[1])
        sblk, first = self.blocks(data, s.blocks if s else 2, d.blocks if d else 2)
        lists = [first]
        if data.draw(st.booleans(), "second list"):
            lists.append(self.blocks(data, s.blocks if s else 2, d.blocks if d else 2)[1][:len(sblk)])
        with self.h.layer(raw):
            self.h.copy_kv_blocks(cluster, src[1], dst[1], sblk, lists)

    # -- invariants --
    @invariant()
    def memory_matches_the_model(self) -> None:
        self.h.check_memory()


@pytest.mark.rules("§1.2", "§1.5", "§2.1", "§3.1", "§3.2", "§3.4", "§3.5", "§3.6", "§8.12", "§9.7", "§10.2", "§10.3",
                   "§10.4", "§10.7", "§11", "§12.1", "§13", "§15", "cpp-api §6.6", "cpp-api §6.7", "cpp-api §6.8",
                   "cpp-api §6.13", "PR-7", "PR-9", "PR-10", "PR-23", "PR-26", "PR-27", "PR-28", "PR-29", "PR-31",
                   "PR-32", "PR-34", "PR-35", "PR-42", "E-21")
@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_native_engines_follow_the_model(harness: Harness, strict: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call of every random walk agrees with the model; memory matches after every step.
    In strict mode (LLM_DATADIST_FFI_STRICT=1, which the model reads too) every lint is
    its rule's refusal."""
    if strict:
        monkeypatch.setenv("LLM_DATADIST_FFI_STRICT", "1")
    else:
        monkeypatch.delenv("LLM_DATADIST_FFI_STRICT", raising=False)
    run_state_machine_as_test(lambda: NativeEngines(harness),
                              settings=settings(settings.default, max_examples=3 * settings.default.max_examples,
                                                stateful_step_count=40))
