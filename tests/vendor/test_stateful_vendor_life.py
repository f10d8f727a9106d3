"""A stateful test of the ``LLMDataDist`` life cycle and links, both generations,
between this process and a peer process, against ``tests/oracle/vendor_life.py``.

A ``RuleBasedStateMachine`` drives this process's ``LLMDataDist`` objects (several
may exist, one may be initialised, V-1) and the peer's engine
(``vendor_v1_peer_support`` in a ``vendor_support.Peer``). Rules: ``init`` in v1 or
v2 with any role, also of a second object while one lives (``LLM_FAILED``) and with
a bad ``llm.SyncKvCacheWaitTime`` (PR-26) or two device ids (PR-36); ``finalize`` of the live or another
object; the peer's init and finalize; ``link_clusters`` (v1 by the Decoder side,
python-api.md §10.5; v2 by this side, semantics.md §10.2) and forced ``unlink_clusters``;
``check_link_status`` (semantics.md §10.8); ``switch_role`` (semantics.md §10.7); rank-table ``link`` /
``unlink`` / ``query_register_mem_status`` (semantics.md §10.6, PR-39) with both members, also a
second communicator over a pair that already shares a link, which turns ``FAILED`` at
``llm.LinkTotalTime`` (2 s here, X-23) and leaves that link alone; v1 allocation with keys
on a Prompt (into the ``caches`` Bundle) and deallocation (``consumes``);
``remove_cache_key``; the peer Decoder's pulls through keys (semantics.md §9.4, §9.5); and a
manager and caches kept from a finalized generation (V-2).

Each rule's outcome must be the model's. The invariant compares the model's view
with what the package reports: which object is initialised
(``LLMDataDist.llm_engine_instance``), the link status a v1 Decoder sees, the state
of every live communicator, and every byte of every live cache here.
"""
from __future__ import annotations

import ctypes
import os
import time
from typing import Any, Callable, Dict, Optional, Tuple

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle, RuleBasedStateMachine, consumes, initialize, invariant, precondition, rule,
)

from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi.vendor import CacheDesc, CacheKey, DataType, LLMDataDist, LLMRole, RegisterMemStatus

from oracle.outcome import Outcome
from oracle.vendor_life import (
    ProcessModel, link, orphan_comms, rank_table_link, second_rank_table_link, shares_a_link, stale,
    unlink_forced,
)
from oracle.vendor_v1 import U64_MAX, Key

import vendor_support as vs

pytestmark = pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions")


HERE, THERE = 1, 2
ROLES = [LLMRole.PROMPT, LLMRole.DECODER, LLMRole.MIX]
KEYS = [Key(HERE, 10), Key(HERE, 11), Key(HERE, 12), Key(HERE, U64_MAX, 0, 30), Key(HERE, U64_MAX)]
PEER_DST = (2, 4, 32)           # the peer Decoder's destination cache: 2 tensors of 4 batches of 32 bytes

_peer: Optional[Any] = None


def observed(call: Callable[[], Any]) -> Tuple[str, Any]:
    return vs.observed(call, (TypeError, ValueError, RuntimeError))


expect = vs.expect


# llm.LinkTotalTime in seconds (semantics.md §13): a communicator that cannot complete is FAILED after it.
# 2 s, not the minimum 1 s: a communicator that does complete must still do so in time when
# the machine is loaded (CI runs this module under ASan).
LINK_TOTAL_S = 2
FAST_FAIL = {"llm.LinkTotalTime": str(LINK_TOTAL_S)}


def options(version: str, port: Optional[int], bad: bool) -> Dict[str, str]:
    made = vs.v2_options(port, **FAST_FAIL) if version == "v2" else vs.v1_options(port, **{"llm.EnableSwitchRole": "1"})
    if bad:
        made["llm.SyncKvCacheWaitTime"] = "2147483648"          # past int32: still refused (PR-26)
    return made


class LifeMachine(RuleBasedStateMachine):
    caches = Bundle("caches")

    def __init__(self) -> None:
        super().__init__()
        assert _peer is not None
        self.peer = _peer
        self.peer.run("ps.stop()")
        self.me = ProcessModel(cluster_id=HERE)
        self.them = ProcessModel(cluster_id=THERE)
        self.objects: Dict[str, LLMDataDist] = {}
        self.old_manager: Optional[Any] = None
        self.port = vs.free_port()
        self.peer_port = vs.free_port()
        self.comm_names = 0
        self.second_comm_tried = False      # the X-23 rule waits llm.LinkTotalTime: once per run
        self.memory: Dict[Tuple[int, int], bytes] = {}
        self.cache_objects: Dict[Tuple[int, int], Any] = {}

    def teardown(self) -> None:
        live = LLMDataDist.llm_engine_instance
        if live is not None:
            live.finalize()
        self.peer.run("ps.stop()")

    # ---- life cycle -----------------------------------------------------------------------------

    @initialize(version=st.sampled_from(["v1", "v2"]), here_role=st.sampled_from(ROLES),
                peer_role=st.sampled_from([LLMRole.PROMPT, LLMRole.DECODER]), bad=st.integers(0, 7))
    def both_engines_start(self, version: str, here_role: LLMRole, peer_role: LLMRole, bad: int = 7) -> None:
        """Most runs begin with both engines initialised in one generation, so that the
        rules that need them are reachable (a quarter try bad options first: PR-26,
        PR-36); the rules below change everything."""
        self.init_peer(version, peer_role)
        self.init_here("A", version, here_role, bad, 7)

    @rule(name=st.sampled_from(["A", "B"]), version=st.sampled_from(["v1", "v2"]), role=st.sampled_from(ROLES),
          bad=st.integers(0, 7), unlistening=st.integers(0, 7))
    def init_here(self, name: str, version: str, role: LLMRole, bad: int, unlistening: int) -> None:
        """``init`` of the live object (a no-op), of another object while one lives
        (``LLM_FAILED``), with a bad option (LX), or of a fresh object."""
        listen = version == "v2" or (role is LLMRole.PROMPT and unlistening != 0)
        if self.me.live == name:
            target = self.objects[name]
        else:
            target = self.objects[name] = LLMDataDist(role, HERE)
        outcome = self.me.init(name, HERE, version, role, listen, bad_wait_time=bad == 0, two_devices=bad == 1)
        opts = options(version, self.port if listen else None, bad == 0)
        if bad == 1:
            opts["ge.exec.deviceId"] = "0;1"
        got = observed(lambda: target.init(opts))
        expect(outcome, got, f"init of {name} ({version}, {role})")

    @rule(name=st.sampled_from(["A", "B"]))
    def finalize_here(self, name: str) -> None:
        obj = self.objects.get(name)
        if obj is None:
            return
        if self.me.live == name and self.me.version == "v1":
            self.old_manager = obj.kv_cache_manager
        if self.me.live == name:
            orphan_comms(self.me, self.them)
        expect(self.me.finalize(name), observed(obj.finalize), f"finalize of {name}")
        # a finalized object's manager property is a plain RuntimeError (semantics.md §12.2)
        if self.me.live != name:
            got = observed(lambda: obj.kv_cache_manager)
            assert got == ("error", "RuntimeError"), got

    @rule(version=st.sampled_from(["v1", "v2"]), role=st.sampled_from([LLMRole.PROMPT, LLMRole.DECODER]))
    def init_peer(self, version: str, role: LLMRole) -> None:
        listen = version == "v2" or role is LLMRole.PROMPT
        orphan_comms(self.them, self.me)
        self.them.finalize("peer")
        assert self.them.init("peer", THERE, version, role, listen).ok
        opts = {"llm.EnableSwitchRole": "1"} if version == "v1" else FAST_FAIL
        self.peer.run(f"ps.start({role.name!r}, {THERE}, {self.peer_port if listen else None}, {opts}, "
                      f"v2={version == 'v2'})")
        if version == "v1" and role is LLMRole.DECODER:
            num, batches, width = PEER_DST
            assert self.them.v1 is not None
            assert self.them.v1.allocate(num, batches, batches * width).value == 1
            self.peer.run(f"ps.allocate('dst', {num}, {[batches, width]}, [], False, None, 5000)")
            self.memory[(THERE, 1)] = b"".join(vs.fill(5000 + t, batches * width).tobytes() for t in range(num))

    @precondition(lambda self: self.them.initialised and not self.them.comms and not self.them.orphans)
    @rule()
    def peer_unlinks_forced(self) -> None:
        outcome = unlink_forced(self.them, HERE)
        answer = self.peer.run(value=f"ps.unlink({HERE}, {self.port}, True)")
        assert (S(answer[0]), [S(r) for r in answer[1]]) == (outcome.status, outcome.value)

    @rule()
    def finalize_peer(self) -> None:
        orphan_comms(self.them, self.me)
        self.them.finalize("peer")
        self.peer.run("ps.stop()")

    # ---- links ----------------------------------------------------------------------------------

    @precondition(lambda self: self.me.initialised and (not self.them.initialised or
                                                        self.them.version == self.me.version)
                  and not self.me.orphans and not self.them.orphans)
    @rule()
    def link_clusters(self) -> None:
        peer_links_me = (self.me.version == "v1" and self.them.role is LLMRole.DECODER
                         and self.me.role is not LLMRole.DECODER and self.them.initialised)
        if peer_links_me:
            outcome = link(self.them, self.me)
            answer = self.peer.run(value=f"ps.link({HERE}, {self.port})")
            got = (S(answer[0]), [S(r) for r in answer[1]])
        else:
            outcome = link(self.me, self.them)
            got = self.objects[self.me.live].link_clusters([vs.cluster_info(THERE, self.peer_port)], 2000)
        assert got == (outcome.status, outcome.value), f"link: {got}, the model says {outcome.status} {outcome.value}"

    @precondition(lambda self: self.me.initialised and not self.me.comms and not self.me.orphans)
    @rule()
    def unlink_forced(self) -> None:
        outcome = unlink_forced(self.me, THERE)
        got = self.objects[self.me.live].unlink_clusters([vs.cluster_info(THERE, self.peer_port)], 2000, True)
        assert got == (outcome.status, outcome.value), f"unlink: {got}, the model says {outcome.value}"

    @precondition(lambda self: self.me.initialised and not self.me.orphans)
    @rule(role=st.sampled_from(ROLES))
    def switch_role(self, role: LLMRole) -> None:
        outcome = self.me.switch_role(role)
        obj = self.objects[self.me.live]
        opts = {"llm.listenIpInfo": f"127.0.0.1:{self.port}"} if role is LLMRole.PROMPT or self.me.version == "v2" \
            else {}
        expect(outcome, observed(lambda: obj.switch_role(role, opts)), f"switch_role to {role}")

    # A new communicator that becomes OK needs a pair without a link; a second one over a
    # pair that shares a link is the next rule's.
    @precondition(lambda self: self.me.version == "v2" and self.them.version == "v2" and not self.me.links
                  and not self.them.links and not self.me.comms and not self.them.comms
                  and not self.me.orphans and not self.them.orphans)
    @rule()
    def rank_table_link(self) -> None:
        """Both members join a new communicator (semantics.md §10.6, PR-39); it becomes ``OK``."""
        name = f"life-{os.getpid()}-{time.monotonic_ns()}"      # a name no earlier communicator used
        members = {HERE: 0, THERE: 1}
        mine, theirs = rank_table_link(self.me, self.them)
        obj = self.objects[self.me.live]
        assert obj.link(name, members, vs.RANK_TABLE) == mine, "comm ids count from 1 per engine (§10.6)"
        assert self.peer.run(value=f"ps.engine.link({name!r}, {members}, support.RANK_TABLE)") == theirs
        deadline = time.monotonic() + 10        # PREPARING until both members exchanged memory
        while obj.query_register_mem_status(mine) is RegisterMemStatus.PREPARING and time.monotonic() < deadline:
            time.sleep(0.002)
        assert obj.query_register_mem_status(mine) is RegisterMemStatus.OK
        peer_status = f"ps.engine.query_register_mem_status({theirs}).name"
        while self.peer.run(value=peer_status) == "PREPARING" and time.monotonic() < deadline:
            time.sleep(0.002)
        assert self.peer.run(value=peer_status) == "OK"

    @precondition(lambda self: self.me.version == "v2" and self.them.version == "v2" and not self.me.failed
                  and not self.them.failed and not self.second_comm_tried and not self.me.orphans and not self.them.orphans and shares_a_link(self.me, self.them))
    @rule(skip=st.integers(0, 3))
    def second_rank_table_link(self, skip: int = 0) -> None:
        """Both members of a pair that already shares a link join another communicator:
        ``PREPARING`` at first, ``FAILED`` on both once ``llm.LinkTotalTime`` passed
        (semantics.md §10.6, §13; decision X-23); the shared link is still there afterwards. It costs
        llm.LinkTotalTime, so it runs at most once per run and in a quarter of the tries
        (the explicit tests below run it every time)."""
        self.second_comm_tried = True
        if skip != 0:
            return
        name = f"life2-{os.getpid()}-{time.monotonic_ns()}"
        members = {HERE: 0, THERE: 1}
        mine, theirs = second_rank_table_link(self.me, self.them)
        obj = self.objects[self.me.live]
        started = time.monotonic()
        assert obj.link(name, members, vs.RANK_TABLE) == mine, "comm ids count from 1 per engine (§10.6)"
        assert self.peer.run(value=f"ps.engine.link({name!r}, {members}, support.RANK_TABLE)") == theirs
        early = obj.query_register_mem_status(mine)
        if time.monotonic() - started < LINK_TOTAL_S:          # asked before llm.LinkTotalTime ran out
            assert early is RegisterMemStatus.PREPARING, f"{early} before llm.LinkTotalTime"
        deadline = time.monotonic() + 10
        while obj.query_register_mem_status(mine) is RegisterMemStatus.PREPARING and time.monotonic() < deadline:
            time.sleep(0.02)
        assert obj.query_register_mem_status(mine) is RegisterMemStatus.FAILED
        peer_status = f"ps.engine.query_register_mem_status({theirs}).name"
        while self.peer.run(value=peer_status) == "PREPARING" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.peer.run(value=peer_status) == "FAILED"
        outcome = link(self.me, self.them)          # the shared link is still there: ALREADY_LINK
        got = obj.link_clusters([vs.cluster_info(THERE, self.peer_port)], 2000)
        assert got == (outcome.status, outcome.value), f"link: {got}, the model says {outcome.status} {outcome.value}"

    @precondition(lambda self: self.me.initialised)
    @rule(data=st.data())
    def rank_table_unlink(self, data: Any) -> None:
        """``unlink`` of a live communicator (its partner unlinks too), of a ``FAILED``
        one (its partner unlinks too, if it is still there: X-23), of one whose partner
        finalized (decision: success, the teardown is local), or of an unknown comm id
        (``NOT_YET_LINK``; v1: LX). Afterwards the id is unknown."""
        obj = self.objects[self.me.live]
        choices = sorted(self.me.comms) + sorted(self.me.failed) + sorted(self.me.orphans) + [77]
        comm = data.draw(st.sampled_from(choices), label="comm")
        code = S.LLM_NOT_YET_LINK if self.me.version == "v2" else S.LLM_PARAM_INVALID
        if comm in self.me.comms:
            obj.unlink(comm)
            partner = self.me.comms.pop(comm)
            self.peer.run(f"ps.engine.unlink({partner})")
            del self.them.comms[partner]
        elif comm in self.me.failed:
            obj.unlink(comm)
            failed_partner = self.me.failed.pop(comm)
            if failed_partner is not None:
                self.peer.run(f"ps.engine.unlink({failed_partner})")
                del self.them.failed[failed_partner]
        elif comm in self.me.orphans:
            obj.unlink(comm)
            del self.me.orphans[comm]
        expect(Outcome(status=code), observed(lambda: obj.unlink(comm)), "unlink of an unknown comm")
        expect(Outcome(status=code), observed(lambda: obj.query_register_mem_status(comm)),
               "query_register_mem_status of an unknown comm")

    # ---- v1 caches and keys ---------------------------------------------------------------------

    @precondition(lambda self: self.me.version == "v1")
    @rule(target=caches, keys=st.lists(st.sampled_from(KEYS), max_size=4), batches=st.integers(1, 4),
          width=st.sampled_from([16, 32]))
    def allocate(self, keys: list, batches: int, width: int) -> Any:
        assert self.me.v1 is not None
        manager = self.objects[self.me.live].kv_cache_manager
        outcome = self.me.v1.allocate(2, batches, batches * width, keys)
        got = observed(lambda: manager.allocate_cache(CacheDesc(2, [batches, width], DataType.DT_UINT8),
                                                      [CacheKey(k.cluster_id, k.req_id, k.model_id, k.prefix_id)
                                                       for k in keys]))
        expect(outcome, got, f"allocate with {keys}")
        if got[0] != "ok":
            return None
        cache = got[1]
        seed = 7000 + 10 * cache.cache_id + 1000 * self.me.generation
        size = batches * width
        for t in range(2):
            ctypes.memmove(cache.per_device_tensor_addrs[0][t], vs.fill(seed + t, size).tobytes(), size)
        self.memory[(HERE, cache.cache_id)] = b"".join(vs.fill(seed + t, size).tobytes() for t in range(2))
        self.cache_objects[(self.me.generation, cache.cache_id)] = cache
        return (self.me.generation, cache)

    @rule(entry=consumes(caches))
    def deallocate(self, entry: Any) -> None:
        if entry is None or not self.me.initialised or self.me.version != "v1":
            return
        generation, cache = entry
        manager = self.objects[self.me.live].kv_cache_manager
        if generation != self.me.generation:
            outcome = Outcome(status=S.LLM_PARAM_INVALID, rule="V-2: a KvCache of a finalized engine")
        else:
            assert self.me.v1 is not None
            outcome = self.me.v1.deallocate(cache.cache_id)
        expect(outcome, observed(lambda: manager.deallocate_cache(cache)), "deallocate")

    @precondition(lambda self: self.me.version == "v1")
    @rule(key=st.sampled_from(KEYS + [Key(HERE, 10, 0, 30)]))
    def remove_cache_key(self, key: Key) -> None:
        assert self.me.v1 is not None
        manager = self.objects[self.me.live].kv_cache_manager
        outcome = self.me.v1.remove_cache_key(key)
        expect(outcome, observed(lambda: manager.remove_cache_key(
            CacheKey(key.cluster_id, key.req_id, key.model_id, key.prefix_id))), f"remove_cache_key {key}")

    @precondition(lambda self: self.them.version == "v1" and self.them.role is LLMRole.DECODER)
    @rule(key=st.sampled_from(KEYS[:4]), batch=st.integers(0, 3), offset=st.sampled_from([None, 0, 4]))
    def peer_pulls_through_a_key(self, key: Key, batch: int, offset: Optional[int]) -> None:
        assert self.them.v1 is not None
        source = self.me.v1 if self.me.initialised and self.me.version == "v1" else None
        if stale(self.them, self.me):
            # PR-31, PR-35 in v1: v1 reports a transfer that cannot complete with its own
            # timeout code, WAIT_PROC_TIMEOUT (semantics.md §13's v1 row; decision, found by this machine)
            outcome = Outcome(status=S.LLM_WAIT_PROCESS_TIMEOUT, rule="PR-31, §13 (v1): the peer side is gone")
        else:
            outcome = self.them.v1.pull_cache(source, key, 1, batch, 8, src_offset=offset)
        spec = ["key", key.cluster_id, key.req_id, key.model_id, key.prefix_id]
        kwargs = {} if offset is None else {"src_cache_offset": offset}
        try:
            self.peer.run(f"ps.pull_cache({spec}, 'dst', {batch}, 8, {kwargs})")
            got: Tuple[str, Any] = ("ok", None)
        except vs.PeerError as exc:
            got = ("status", S(exc.status)) if exc.status is not None else ("error", exc.type)
        expect(outcome, got, f"the peer's pull through {key}")
        if outcome.ok:
            dst = bytearray(self.memory[(THERE, 1)])
            src = self.memory[outcome.src]  # type: ignore[index]
            src_size = len(src) // 2
            dst_size = len(dst) // 2
            for c in outcome.copies:
                chunk = src[c.src_tensor * src_size + c.src_offset:c.src_tensor * src_size + c.src_offset + c.length]
                start = c.dst_tensor * dst_size + c.dst_offset
                dst[start:start + c.length] = chunk
            self.memory[(THERE, 1)] = bytes(dst)
        got_bytes = bytes.fromhex(self.peer.run(value="ps.dump(ps.caches['dst'].per_device_tensor_addrs[0], 128)"))
        assert got_bytes == self.memory[(THERE, 1)], "the peer's destination cache differs from the model"

    @precondition(lambda self: self.old_manager is not None and not self.me.initialised)
    @rule()
    def a_manager_of_a_finalized_engine(self) -> None:
        # V-2: with no engine live, allocate through a kept manager is LLM_FAILED
        manager = self.old_manager
        got = observed(lambda: manager.allocate_cache(CacheDesc(2, [1, 16], DataType.DT_UINT8)))
        assert got == ("status", S.LLM_FAILED), got

    # ---- invariants -----------------------------------------------------------------------------

    @invariant()
    def the_live_object_is_the_models(self) -> None:
        live = LLMDataDist.llm_engine_instance
        if self.me.live is None:
            assert live is None
        else:
            assert live is self.objects[self.me.live]

    @invariant()
    def the_link_status_is_the_models(self) -> None:
        if not self.me.initialised:
            return
        obj = self.objects[self.me.live]
        expect(self.me.check_link_status(THERE), observed(lambda: obj.check_link_status(THERE)),
               "check_link_status")

    @invariant()
    def communicators_are_in_the_models_state(self) -> None:
        if self.me.initialised and self.me.version == "v2":
            obj = self.objects[self.me.live]
            for comm in self.me.comms:
                assert obj.query_register_mem_status(comm) is RegisterMemStatus.OK, f"comm {comm}"
            for comm in self.me.failed:
                assert obj.query_register_mem_status(comm) is RegisterMemStatus.FAILED, f"comm {comm} (X-23)"

    @invariant()
    def live_caches_hold_their_bytes(self) -> None:
        if not self.me.initialised or self.me.v1 is None:
            return
        for cache_id, cache in self.me.v1.caches.items():
            if cache.freed:
                continue
            # the Prompt's caches are only read: their seed bytes never change
            wanted = self.memory[(HERE, cache_id)]
            addrs = self.addrs_of(cache_id)
            if addrs is None:
                continue
            got = b"".join(ctypes.string_at(a, cache.tensor_size) for a in addrs)
            assert got == wanted, f"cache {cache_id} differs from the model"

    def addrs_of(self, cache_id: int) -> Optional[list]:
        cache = self.cache_objects.get((self.me.generation, cache_id))
        if cache is None or not cache.per_device_tensor_addrs:
            return None
        return list(cache.per_device_tensor_addrs[0])


@pytest.fixture(scope="module")
def peer() -> Any:
    global _peer
    with vs.Peer() as made:
        made.run("import vendor_v1_peer_support as ps")
        _peer = made
        yield made
        _peer = None


@pytest.mark.rules("§1.1", "§3.1", "§3.3", "§3.4", "§6.3", "§8.11", "§9.2", "§9.5", "§9.6", "§10.2", "§10.3", "§10.4",
                   "§10.5", "§10.6", "§10.7", "§10.8", "§11", "§12.2", "§13", "PR-22", "PR-26", "PR-31", "PR-35",
                   "PR-36", "PR-38", "PR-39", "PR-41", "V-2", "X-12", "X-13", "X-22", "X-23", "X-24")
def test_the_life_cycle_and_links_of_both_generations_follow_the_model(peer: Any) -> None:
    from hypothesis.stateful import run_state_machine_as_test
    run_state_machine_as_test(LifeMachine, settings=settings(max_examples=3 * settings.default.max_examples,
                                                             stateful_step_count=25))


# ---- regressions --------------------------------------------------------------------------------

@pytest.mark.rules("PR-31", "PR-35", "X-22")
def test_a_v1_pull_over_a_link_whose_prompt_side_is_gone_is_wait_process_timeout(peer: Any) -> None:
    """Found by the machine: the Prompt (here) force-unlinks, the Decoder (the peer)
    still holds its side and pulls. The oracle first said ``LLM_TIMEOUT`` (PR-31);
    v1 reports it with its own timeout code, ``LLM_WAIT_PROCESS_TIMEOUT`` (semantics.md §13), and
    the oracle now says so."""
    machine = LifeMachine()
    try:
        machine.both_engines_start("v1", LLMRole.PROMPT, LLMRole.DECODER)
        machine.allocate([Key(HERE, 10)], 2, 16)
        machine.link_clusters()
        machine.unlink_forced()
        machine.peer_pulls_through_a_key(Key(HERE, 10), 0, None)
    finally:
        machine.teardown()


@pytest.mark.rules("§10.6", "§13", "X-23")
@pytest.mark.parametrize("first", ["communicator", "link_clusters"])
def test_a_second_communicator_over_a_linked_pair_is_failed_and_counts_until_its_unlink(peer: Any,
                                                                                      first: str) -> None:
    """The machine's X-23 path on every run, whatever Hypothesis draws: over a pair
    linked by a communicator or by ``link_clusters``, a second communicator turns
    ``FAILED`` on both members, the shared link stays (``ALREADY_LINK``), and
    ``switch_role`` is ``EXIST_LINK`` while the failed communicator is not unlinked,
    even once the ``link_clusters`` link is gone (decision: a communicator counts until
    its ``unlink``, semantics.md §10.7)."""
    machine = LifeMachine()
    try:
        machine.both_engines_start("v2", LLMRole.DECODER, LLMRole.PROMPT)
        if first == "communicator":
            machine.rank_table_link()
        else:
            machine.link_clusters()
        machine.second_rank_table_link()
        machine.communicators_are_in_the_models_state()
        if first == "link_clusters":
            machine.unlink_forced()         # this side's link goes; only the failed communicator is left
            assert not machine.me.links and not machine.me.comms
        machine.switch_role(LLMRole.PROMPT)
        assert machine.me.failed and machine.them.failed, "the model holds the failed communicator"
    finally:
        machine.teardown()
