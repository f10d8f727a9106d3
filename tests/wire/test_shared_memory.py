"""Shared library memory (docs/security.md §2.7): memory the mock hands out is memfd-backed,
a linked peer of the same user maps it once, and a transfer between library memory on
both sides copies between the mappings ("shared"); every other transfer keeps its path,
and every refusal of a transfer stays what it was.

This process is the client (it links, pulls and pushes); the peer is a native engine in
a child process (engine_support.PeerProcess) that listens; its caches hold ``fill``'s
bytes, so the expected bytes come from the same generator, not from the code under test.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from typing import Any, Iterator

import numpy as np
import pytest

import engine_support as sup
import wire_support as wire
from paths import helper_env
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import acl, mock_control, native

pytestmark = pytest.mark.mock_only(reason="the mock's arenas, its identity channel and its transfer paths")

BLOCKS, BLOCK = 8, 4096
SHAPE = [BLOCKS, BLOCK]
POOL = '{"memory_size": 262144, "page_shift": 12}'        # 64 pages of 4 KiB
U8 = native.DataType.DT_UINT8


class Pair:
    """An engine in this process linked to a listening engine in a child process."""

    def __init__(self, env: dict[str, str] | None = None, pool: bool = False) -> None:
        acl.set_device(0)
        self.peer = sup.PeerProcess(env)
        self.port = sup.free_port()
        options = {native.OPTION_DEVICE_ID: "0", native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{self.port}"}
        if pool:
            options.update({native.OPTION_MOCK_NATIVE_POOL: "1", native.OPTION_MEM_POOL_CONFIG: POOL})
        self.peer.call("init", cluster_id=2, role=int(native.LlmRole.PROMPT), options=options)
        self.me = native.LlmDataDist(1, native.LlmRole.DECODER)
        self.me.initialize({native.OPTION_DEVICE_ID: "0"})
        self.arrays: list[np.ndarray] = []

    def register(self, arrays: list[np.ndarray]) -> int:
        self.arrays.extend(arrays)                 # registered by address: kept alive here
        return sup.register(self.me, arrays, dtype=U8)

    def shared(self, seed: int) -> tuple[int, list[np.ndarray]]:
        arrays = [acl.shared_array(SHAPE) for _ in range(2)]
        for array, values in zip(arrays, sup.fill(2, SHAPE, seed)):
            array[...] = values.reshape(SHAPE)
        return self.register(arrays), arrays

    def link(self) -> None:
        assert self.me.link_llm_clusters([sup.cluster(2, self.port)])[0] == S.LLM_SUCCESS

    def path(self) -> str:
        return mock_control.last_transfer_path(self.me, 2)

    def close(self) -> None:
        self.me.close()
        self.peer.close()


@pytest.fixture
def linked_to_peer() -> Iterator[Any]:
    made: list[Pair] = []

    def make(env: dict[str, str] | None = None, pool: bool = False) -> Pair:
        p = Pair(env, pool)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def expected(seed: int) -> list[np.ndarray]:
    return [a.reshape(SHAPE) for a in sup.fill(2, SHAPE, seed)]


def peer_tensors(p: Pair, cache_id: int) -> list[np.ndarray]:
    raw = np.frombuffer(p.peer.cache_bytes(cache_id), np.uint8)
    return [t.reshape(SHAPE) for t in np.split(raw, 2)]


# ---- bytes through the shared path ------------------------------------------------------------

@pytest.mark.parametrize("where", ["register_shared", "allocate"])
def test_a_block_pull_between_library_memory_copies_between_mappings(linked_to_peer: Any, where: str) -> None:
    p = linked_to_peer()
    if where == "allocate":                                   # caches in the peer's pool (PR-9)
        p = linked_to_peer(pool=True)
    src = p.peer.call(where, num_tensors=2, shape=SHAPE, seed=1)
    dst, mine = p.shared(seed=-1)
    p.link()
    assert p.path() == "none"
    p.me.pull_kv_blocks(native.CacheIndex(2, src), native.Cache(dst), [0, 3, 7], [1, 2, 6])
    assert p.path() == "shared"
    for got, want in zip(mine, expected(1)):
        assert (got[[1, 2, 6]] == want[[0, 3, 7]]).all()
        assert not got[[0, 3, 4, 5, 7]].any()


def test_a_contiguous_pull_between_library_memory_copies_between_mappings(linked_to_peer: Any) -> None:
    p = linked_to_peer()
    src = p.peer.call("register_shared", num_tensors=2, shape=SHAPE, seed=1)
    dst, mine = p.shared(seed=-1)
    p.link()
    p.me.pull_kv_cache(native.CacheIndex(2, src, 3), native.Cache(dst), 5)     # batch 3 there into 5 here
    assert p.path() == "shared"
    for got, want in zip(mine, expected(1)):
        assert (got[5] == want[3]).all()
        assert not got[[0, 1, 2, 3, 4, 6, 7]].any()


def test_block_and_contiguous_pushes_into_library_memory_copy_between_mappings(linked_to_peer: Any) -> None:
    p = linked_to_peer()
    dst = p.peer.call("register_shared", num_tensors=2, shape=SHAPE, seed=-1)
    src, _ = p.shared(seed=3)
    p.link()
    cache = native.Cache(src, cache_desc=native.CacheDesc(2, U8, [1]))
    p.me.push_kv_blocks(cache, native.CacheIndex(2, dst), [5, 0], [2, 4])
    assert p.path() == "shared"
    for got, want in zip(peer_tensors(p, dst), expected(3)):
        assert (got[[2, 4]] == want[[5, 0]]).all()
        assert not got[[0, 1, 3, 5, 6, 7]].any()
    p.me.push_kv_cache(cache, native.CacheIndex(2, dst, 7), 1)          # batch 1 here into 7 there
    assert p.path() == "shared"
    for got, want in zip(peer_tensors(p, dst), expected(3)):
        assert (got[[2, 4, 7]] == want[[5, 0, 1]]).all()
        assert not got[[0, 1, 3, 5, 6]].any()


def test_registered_user_memory_on_either_side_keeps_the_process_vm_path(linked_to_peer: Any) -> None:
    p = linked_to_peer()
    user_src = p.peer.call("register", num_tensors=2, shape=SHAPE, seed=4)
    shared_src = p.peer.call("register_shared", num_tensors=2, shape=SHAPE, seed=5)
    user = [np.zeros(SHAPE, np.uint8) for _ in range(2)]
    user_dst = p.register(user)
    shared_dst, mine = p.shared(seed=-1)
    p.link()
    p.me.pull_kv_blocks(native.CacheIndex(2, user_src), native.Cache(shared_dst), list(range(BLOCKS)),
                        list(range(BLOCKS)))
    assert p.path() == "process_vm"
    assert all((got == want).all() for got, want in zip(mine, expected(4)))
    p.me.pull_kv_blocks(native.CacheIndex(2, shared_src), native.Cache(user_dst), list(range(BLOCKS)),
                        list(range(BLOCKS)))
    assert p.path() == "process_vm"
    assert all((got == want).all() for got, want in zip(user, expected(5)))


def test_without_process_vm_library_memory_moves_over_the_socket_and_nothing_is_mapped(
        linked_to_peer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLDD_MOCK_NO_PROCESS_VM", "1")
    p = linked_to_peer()
    src = p.peer.call("register_shared", num_tensors=2, shape=SHAPE, seed=6)
    dst, mine = p.shared(seed=-1)
    p.link()
    p.me.pull_kv_blocks(native.CacheIndex(2, src), native.Cache(dst), list(range(BLOCKS)), list(range(BLOCKS)))
    assert p.path() == "socket"
    assert all((got == want).all() for got, want in zip(mine, expected(6)))
    assert sup.foreign_arena_bytes() == 0


# ---- the mappings' life ----------------------------------------------------------------------------

def test_the_peers_memory_is_mapped_at_the_first_shared_transfer_and_unmapped_with_the_link(linked_to_peer: Any) -> None:
    p = linked_to_peer()
    src = p.peer.call("register_shared", num_tensors=2, shape=SHAPE, seed=1)
    dst, _ = p.shared(seed=-1)
    before = sup.foreign_arena_bytes()
    p.link()
    assert sup.foreign_arena_bytes() == before
    p.me.pull_kv_cache(native.CacheIndex(2, src), native.Cache(dst))
    assert sup.foreign_arena_bytes() > before
    assert p.peer.call("foreign_arena_bytes") == 0           # the listener mapped nothing of ours
    assert p.me.unlink_llm_clusters([sup.cluster(2, p.port)])[0] == S.LLM_SUCCESS
    assert sup.foreign_arena_bytes() == before


# ---- refusals stay what they were ------------------------------------------------------------------

def test_a_cache_freed_on_the_peer_side_is_refused_as_before(linked_to_peer: Any) -> None:
    p = linked_to_peer()
    src = p.peer.call("register_shared", num_tensors=2, shape=SHAPE, seed=1)
    dst, mine = p.shared(seed=-1)
    p.link()
    p.me.pull_kv_cache(native.CacheIndex(2, src), native.Cache(dst))
    assert p.path() == "shared"
    mine[0][...] = 9
    p.peer.call("unregister", cache_id=src)
    with pytest.raises(native.LLMException) as caught:
        p.me.pull_kv_cache(native.CacheIndex(2, src), native.Cache(dst))
    assert caught.value.status_code == S.LLM_KV_CACHE_NOT_EXIST
    assert (mine[0] == 9).all()                               # nothing moved


def test_a_transfer_to_a_peer_that_was_killed_after_a_shared_transfer_fails(linked_to_peer: Any) -> None:
    p = linked_to_peer()
    dst = p.peer.call("register_shared", num_tensors=2, shape=SHAPE, seed=-1)
    src, _ = p.shared(seed=2)
    p.link()
    cache = native.Cache(src, cache_desc=native.CacheDesc(2, U8, [1]))
    p.me.push_kv_cache(cache, native.CacheIndex(2, dst))
    assert p.path() == "shared"
    os.kill(p.peer.proc.pid, signal.SIGKILL)
    p.peer.proc.wait()                                        # killed and reaped; our mapping outlives it
    with pytest.raises(native.LLMException) as caught:
        p.me.push_kv_cache(cache, native.CacheIndex(2, dst))
    assert caught.value.status_code == S.LLM_TIMEOUT


# ---- who gets a mapping ----------------------------------------------------------------------------

RAW_PEER = textwrap.dedent("""
    import json, os, sys
    import wire_support as wire
    port, identify, token_xor = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
    proof = bytes(32) if sys.argv[4] == "forge" else None
    peer = wire.RawLink(port, cluster_id=66, expected=1)
    hello = peer.hello()
    if identify:
        assert wire.identify(hello.id_channel, peer.token, peer.c1) == 0
    assert peer.reverse().status == 0
    status, chunks, fds = wire.map_chunks(hello.id_channel, peer.token ^ token_xor, proof=proof)
    sizes = [os.fstat(fd).st_size for fd in fds]
    print(json.dumps({"status": status, "chunks": chunks, "sizes": sizes}), flush=True)
    sys.stdin.readline()
""")


def raw_peer_map(port: int, identify: bool, token_xor: int = 0, forge: bool = False) -> dict[str, Any]:
    child = subprocess.Popen([sys.executable, "-c", RAW_PEER, str(port),
                              "1" if identify else "0", str(token_xor), "forge" if forge else "read"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=helper_env())
    try:
        assert child.stdout is not None
        reply: dict[str, Any] = json.loads(child.stdout.readline())
        return reply
    finally:
        child.kill()
        child.communicate()


@pytest.fixture
def listener() -> Iterator[native.LlmDataDist]:
    acl.set_device(0)
    engine = native.LlmDataDist(1, native.LlmRole.PROMPT)
    engine.listen_port = sup.free_port()  # type: ignore[attr-defined]
    engine.initialize({native.OPTION_DEVICE_ID: "0",
                       native.OPTION_LISTEN_IP_INFO: f"127.0.0.1:{engine.listen_port}"})  # type: ignore[attr-defined]
    keep = acl.shared_array(64)                               # at least one chunk exists
    yield engine
    engine.close()
    del keep


def test_an_identified_peer_of_the_same_user_gets_the_chunks_that_hold_library_memory(listener: Any) -> None:
    keep = acl.shared_array(16)
    reply = raw_peer_map(listener.listen_port, identify=True)
    assert reply["status"] == 0
    assert any(base <= keep.ctypes.data < base + size for base, size in reply["chunks"])
    assert reply["sizes"] == [size for _base, size in reply["chunks"]]      # sealed at the chunk's size


def test_a_peer_nobody_identified_gets_no_mapping(listener: Any) -> None:
    reply = raw_peer_map(listener.listen_port, identify=False)
    assert (reply["status"], reply["chunks"], reply["sizes"]) == (1, [], [])


def test_an_identified_peer_naming_another_token_gets_no_mapping(listener: Any) -> None:
    reply = raw_peer_map(listener.listen_port, identify=True, token_xor=1)
    assert (reply["status"], reply["chunks"], reply["sizes"]) == (1, [], [])


def test_an_identified_peer_that_does_not_read_the_listeners_nonce_gets_no_mapping(listener: Any) -> None:
    reply = raw_peer_map(listener.listen_port, identify=True, forge=True)
    assert (reply["status"], reply["chunks"], reply["sizes"]) == (1, [], [])


def test_this_process_gets_no_mapping_of_its_own_memory(listener: Any) -> None:
    peer = wire.RawLink(listener.listen_port, cluster_id=66, expected=1)
    try:
        hello = peer.hello()
        assert peer.c1 is not None and wire.identify(hello.id_channel, peer.token, peer.c1) == 0
        assert peer.reverse().status == 0
        status, chunks, fds = wire.map_chunks(hello.id_channel, peer.token)
        assert (status, chunks, fds) == (1, [], [])
    finally:
        peer.close()


# ---- arrays in library memory ----------------------------------------------------------------------

def test_a_shared_array_lies_in_a_live_library_allocation_until_its_last_view_goes() -> None:
    acl.set_device(0)
    live = mock_control.live_allocations()
    array = acl.shared_array((3, 5), np.float32)
    assert (array.shape, array.dtype, array.flags.c_contiguous, array.flags.writeable) == ((3, 5), np.float32,
                                                                                         True, True)
    assert not array.any()
    view = array[1]
    del array
    assert mock_control.live_allocations() == live + 1
    view[...] = 2.5
    assert (view == 2.5).all()
    del view
    assert mock_control.live_allocations() == live


def test_a_shared_array_refuses_a_negative_shape_and_an_object_dtype() -> None:
    with pytest.raises(ValueError, match="negative"):
        acl.shared_array((2, -1))
    with pytest.raises(ValueError, match="Python objects"):
        acl.shared_array(4, object)


def test_a_shared_tensor_views_a_shared_array() -> None:
    torch = pytest.importorskip("torch", reason="torch is an optional dependency and is not installed here")
    acl.set_device(0)
    tensor = acl.shared_tensor((2, 3), torch.int16)
    assert tuple(tensor.shape) == (2, 3) and tensor.dtype == torch.int16 and not tensor.any()


FORGOTTEN_FREES = """
import ctypes, json
import numpy as np
from llm_datadist_ffi import acl
acl.set_device(0)
rng = np.random.default_rng(1)
sizes = [int(n) for n in rng.integers(1, 70000, size=5000)]       # more frees than the 4096 remembered
first = [acl.malloc_host(n) for n in sizes]
for address in first:
    acl.free_host(address)
live = sorted((acl.malloc_host(n), n) for n in sizes + sizes)
reused = bool(set(first) & {address for address, _ in live})
apart = all(a + n <= b for (a, n), (b, _) in zip(live, live[1:]))
for i, (address, n) in enumerate(live):
    ctypes.memset(address, i % 251, n)
kept = all(ctypes.string_at(address, n) == bytes([i % 251]) * n for i, (address, n) in enumerate(live))
for address, _ in live:
    acl.free_host(address)
print(json.dumps([reused, apart, kept]))
"""


def test_space_of_forgotten_frees_is_reused_and_live_allocations_never_overlap() -> None:
    """In a fresh process: first fit takes the lowest free space, so what earlier tests
    of this process left free below the forgotten space would take the new allocations
    instead, and whether forgotten space comes back would depend on the test order."""
    out = subprocess.run([sys.executable, "-c", FORGOTTEN_FREES], capture_output=True, text=True, timeout=120,
                         env=helper_env())
    assert out.returncode == 0, out.stderr
    reused, apart, kept = json.loads(out.stdout.splitlines()[-1])
    assert reused                # forgotten space came back
    assert apart                 # live allocations never overlap
    assert kept                  # and each keeps its own bytes


def test_a_child_of_fork_writes_its_own_copy_of_library_memory_not_its_parents() -> None:
    acl.set_device(0)
    array = acl.shared_array(3 * 4096)
    array[...] = 1
    pid = os.fork()
    if pid == 0:                                              # the child: never returns into pytest
        code = 1
        try:
            array[...] = 2
            code = 0 if (array == 2).all() else 1
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert (array == 1).all()
