"""A reference model of the ``LLMDataDist`` life cycle and links, both generations.

A process holds any number of ``LLMDataDist`` objects, but at most one initialised
(docs/reference/semantics.md §12.2, docs/reference/python-api.md §10.8): ``init`` of another while one lives raises
``LLMException(LLM_FAILED)``; ``init`` of the live one is a no-op; ``finalize`` of one
that is not initialised is a no-op. Every successful ``init`` starts a fresh engine
(a new *generation*): ids of caches and rank-table communicators restart at 1, and
links, caches and keys of the old engine are gone; the generation (v1
``KvCacheManager`` or v2 ``CacheManager``, semantics.md §1.1) may change. Managers and cache
objects kept from an earlier generation fail (docs/semantics.md V-2).

Links: ``finalize`` drops the engine's links locally and leaves the peer's side in
place (semantics.md §10.4). v1 links are made by a DECODER (semantics.md §10.5, §11) to a listening PROMPT;
``check_link_status`` (semantics.md §10.8) reports them on a DECODER. v2 ``link_clusters`` links
any role to a listening peer (semantics.md §10.2), ``ALREADY_LINK`` while the client holds a link
(PR-42). A rank-table communicator (semantics.md §10.6, PR-39) that both members joined reaches
``OK``; an unknown comm id is ``NOT_YET_LINK``. A second communicator between two
engines that already share a link (a communicator's or ``link_clusters``') cannot make
a link of its own: it is ``PREPARING`` until ``llm.LinkTotalTime`` and then ``FAILED``
on both members (semantics.md §10.6, §13; decision X-23), and it leaves the shared link alone; its
``unlink`` succeeds. Any live link or communicator, a failed one until its ``unlink``
included, makes ``switch_role`` ``EXIST_LINK`` (semantics.md §10.7; decision).

``ProcessModel`` is one process's view; the v1 caches and keys of its engine are a
``vendor_v1.V1Engine``. Written from the specification alone.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Dict, Optional

from .codes import LLMStatusCode as S
from .codes import Role
from .outcome import Outcome, fail, success
from .vendor_v1 import V1Engine, python_error_lx

PI = S.LLM_PARAM_INVALID
_TOKENS = itertools.count(1)


def stale(holder: "ProcessModel", other: "ProcessModel") -> bool:
    """``holder`` keeps a link to ``other`` whose other side is gone (finalized,
    force-unlinked, re-linked): transfers over it are ``TIMEOUT`` (PR-31, PR-35)."""
    token = holder.links.get(other.cluster_id)
    return token is not None and other.links.get(holder.cluster_id) != token


@dataclass
class ProcessModel:
    """The engine of one process, whichever ``LLMDataDist`` object holds it."""

    live: Optional[str] = None              # the name of the initialised object
    cluster_id: int = 0
    generation: int = 0                     # how many successful inits so far
    version: Optional[str] = None           # "v1" or "v2"
    role: Optional[Role] = None
    listening: bool = False
    links: Dict[int, int] = field(default_factory=dict)    # remote cluster -> the link's token
    comms: Dict[int, int] = field(default_factory=dict)    # comm id -> the peer's comm id (both joined: OK)
    orphans: Dict[int, int] = field(default_factory=dict)  # comms whose other member finalized
    failed: Dict[int, Optional[int]] = field(default_factory=dict)  # FAILED comms (X-23) -> the peer's id
                                                                      # (None: the peer finalized)
    next_comm: int = 1
    v1: Optional[V1Engine] = None

    @property
    def initialised(self) -> bool:
        return self.live is not None

    def init(self, name: str, cluster_id: int, version: str, role: Role, listen: bool,
             bad_wait_time: bool = False, two_devices: bool = False) -> Outcome:
        """``LLMDataDist(role, cluster_id).init(options)`` of the object ``name``
        (docs/reference/python-api.md §10.2 steps 1-2; PR-26 at init in both generations, V-6)."""
        if self.live == name:
            return success(rule="§12.2: already initialised, a no-op")
        if self.live is not None:
            return fail(S.LLM_FAILED, "§12.2, §10.2 step 2: Cannot init multiple LLMDataDists")
        if bad_wait_time:
            return python_error_lx("PR-26: llm.SyncKvCacheWaitTime above 2^31-1")
        if version == "v1" and role == Role.PROMPT and not listen:
            return python_error_lx("docs/reference/python-api.md §10.2 step 11: a v1 PROMPT needs llm.listenIpInfo")
        if two_devices:
            if version == "v2":
                return fail(PI, "docs/reference/python-api.md §10.2: the v2 core takes one device id")
            if role == Role.PROMPT:
                return python_error_lx("V-6: one llm.listenIpInfo entry per device id")
            return fail(S.LLM_FEATURE_NOT_ENABLED, "PR-36: one device per v1 engine")
        self.live, self.cluster_id, self.version, self.role = name, cluster_id, version, role
        self.generation += 1
        self.listening = listen
        self.links, self.comms, self.orphans, self.failed, self.next_comm = {}, {}, {}, {}, 1
        self.v1 = V1Engine(cluster_id, role) if version == "v1" else None
        return success()

    def finalize(self, name: str) -> Outcome:
        """``finalize`` (semantics.md §12.2): a no-op unless ``name`` is the live object; drops
        the links locally (semantics.md §10.4)."""
        if self.live != name:
            return success(rule="§12.2: not initialised, a no-op")
        self.live, self.version, self.role, self.v1 = None, None, None, None
        self.listening = False
        self.links, self.comms, self.orphans, self.failed = {}, {}, {}, {}
        return success()

    def check_link_status(self, remote: int) -> Outcome:
        """semantics.md §10.8, docs/reference/python-api.md §10.7."""
        if self.version != "v1":
            return python_error_lx("§10.8: not available in CacheManager mode")
        if self.role != Role.DECODER:
            return fail(PI, "§10.8: caller not DECODER")
        if remote not in self.links:
            return fail(S.LLM_NOT_YET_LINK, "§10.8: no link")
        return success()

    def switch_role(self, role: Role) -> Outcome:
        """semantics.md §10.7 (the tests always give a listen address with PROMPT and set
        ``llm.EnableSwitchRole`` at init)."""
        if self.version == "v1" and role is self.role:
            return python_error_lx("§10.7: v1 role not changed")
        if self.links or self.comms or self.orphans or self.failed:
            # decision: a communicator counts until its unlink, a FAILED one too (semantics.md §10.6, §10.7)
            return fail(S.LLM_EXIST_LINK, "§10.7: a link or communicator is alive")
        self.role = role
        if self.v1 is not None:
            self.v1.role = role
            self.listening = role == Role.PROMPT
        return success()


def link(client: ProcessModel, server: ProcessModel) -> Outcome:
    """``link_clusters`` of one cluster by ``client`` to ``server`` (semantics.md §10.2, python-api.md §10.5).
    The value is the per-cluster list."""
    if client.version == "v1" and client.role != Role.DECODER:
        return Outcome(status=PI, rule="§10.5: caller not DECODER", value=[])
    if not server.initialised or not server.listening:
        code = S.LLM_LINK_FAILED
        return Outcome(status=code, rule="§10.2: connection refused", value=[code])
    if server.cluster_id in client.links or client.comms:
        # decision: a communicator's link is the one link per peer (semantics.md §10.1, §10.6)
        return Outcome(status=S.LLM_ALREADY_LINK, rule="§10.2, PR-42", value=[S.LLM_ALREADY_LINK])
    token = next(_TOKENS)
    client.links[server.cluster_id] = token
    server.links[client.cluster_id] = token     # the server replaces an old side of its own (semantics.md §10.4)
    if client.v1 is not None and server.v1 is not None:
        client.v1.links.add(server.cluster_id)
        server.v1.links.add(client.cluster_id)
    return Outcome(value=[S.LLM_SUCCESS])


def unlink_forced(client: ProcessModel, remote: int) -> Outcome:
    """A forced ``unlink_clusters`` of one cluster: only the local side goes
    (semantics.md §10.3; v1 never linked: per-cluster ``NOT_YET_LINK``, X-12)."""
    if remote not in client.links:
        code = S.LLM_NOT_YET_LINK if client.version == "v1" else S.LLM_SUCCESS
        return Outcome(value=[code], rule="X-12 / §10.3: never linked")
    client.links.pop(remote)
    if client.v1 is not None:
        client.v1.links.discard(remote)
    return Outcome(value=[S.LLM_SUCCESS])


def rank_table_link(a: ProcessModel, b: ProcessModel) -> tuple:
    """Both members call ``link`` with the same arguments (semantics.md §10.6): each gets the next
    comm id of its engine (from 1), and the communicator reaches ``OK``."""
    mine, theirs = a.next_comm, b.next_comm
    a.next_comm += 1
    b.next_comm += 1
    a.comms[mine] = theirs
    b.comms[theirs] = mine
    return mine, theirs


def shares_a_link(a: ProcessModel, b: ProcessModel) -> bool:
    """``a`` and ``b`` hold one live link with both sides in place: a communicator
    both joined, or a ``link_clusters`` link neither side dropped (semantics.md §10.1, §10.6)."""
    joined = any(partner in b.comms for partner in a.comms.values())
    token = a.links.get(b.cluster_id)
    return joined or (token is not None and b.links.get(a.cluster_id) == token)


def second_rank_table_link(a: ProcessModel, b: ProcessModel) -> tuple:
    """Both members of a pair that already shares a link join another communicator
    (semantics.md §10.6): each gets the next comm id of its engine; the exchange cannot make a
    second link between them, so the communicator is ``PREPARING`` until
    ``llm.LinkTotalTime`` and then ``FAILED`` on both (decision X-23). The shared link
    and the other communicators are untouched."""
    mine, theirs = a.next_comm, b.next_comm
    a.next_comm += 1
    b.next_comm += 1
    a.failed[mine] = theirs
    b.failed[theirs] = mine
    return mine, theirs


def orphan_comms(gone: ProcessModel, other: ProcessModel) -> None:
    """``gone`` finalizes: the other member's communicators lose their partner; the
    model no longer states the status of those that were ``OK`` (the specification
    does not); a ``FAILED`` one stays ``FAILED``."""
    for comm, partner in list(other.comms.items()):
        if partner in gone.comms:
            other.orphans[comm] = other.comms.pop(comm)
    for comm, partner in other.failed.items():
        if partner is not None and gone.failed.get(partner) == comm:
            other.failed[comm] = None       # still FAILED: that state is final (semantics.md §10.6)
