"""Cross-process property tests: the peer engine lives in another process.

Engine A (cluster 1) lives in the test process; engine B (cluster 2) in a helper process
started from this very file (``python test_crossprocess_property.py --serve``), which
reads one JSON command per line and answers one JSON line. The helper registers its
caches in numpy buffers laid out and filled exactly as ``native_driver.CacheMemory``
does from a seed, so the test knows their bytes, and sends a whole buffer back on
request. The oracle models both engines in one ``World``; A pulls from and pushes to
B (over the mock's cross-process data path), links are made from either side, and
after every call both engines' memory must match the oracle, byte for byte.

A second test kills the helper process and checks that transfers over the dead link
give what the oracle says (PR-31: ``LLM_TIMEOUT``, then PR-35) and that a new peer
process can be linked again (semantics.md §10.4).
"""
from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from llm_datadist_ffi import LLMException
from llm_datadist_ffi import LLMStatusCode as S
from llm_datadist_ffi import native
from llm_datadist_ffi.native import CachePlacement, GeDataType as G, LlmRole
from llm_datadist_ffi.testing import strategies as lst

from oracle import Ext, Outcome, tensor_layout
from native_driver import CacheMemory, Harness, Mismatch
from oracle.model import ClusterArg
from paths import helper_env

pytestmark = pytest.mark.mock_only(reason="cross-process property tests of the mock's rules against the oracle")

A, B = 1, 2
DEVICE = int(CachePlacement.DEVICE)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- the helper process -------------------------------------------------------------------------

def serve() -> None:
    """The peer: one engine, caches in seeded numpy buffers, commands on stdin."""
    engine: Optional[native.LlmDataDist] = None
    buffers: dict[int, CacheMemory] = {}

    def run(cmd: dict[str, Any]) -> Any:
        nonlocal engine
        op = cmd["op"]
        if op == "init":
            if engine is None:
                engine = native.LlmDataDist(cmd["cluster_id"], cmd["role"])
            engine.initialize(cmd["options"])
        elif op == "finalize":
            if engine is not None:          # before the first init there is nothing to finalize
                engine.finalize()
        elif op == "register":
            assert engine is not None
            memory = CacheMemory.registered(cmd["num_tensors"], cmd["tensor_size"],
                                            np.random.default_rng(cmd["seed"]))
            buffers[cmd["handle"]] = memory
            desc = native.CacheDesc(cmd["num_tensors"], cmd["data_type"], cmd["shape"],
                                    native.CachePlacement(cmd["placement"]))
            return engine.register_kv_cache(desc, memory.addresses())
        elif op == "unregister":
            assert engine is not None
            engine.unregister_kv_cache(cmd["cache_id"])
        elif op == "buffer":
            buffer = buffers[cmd["handle"]].buffer
            assert buffer is not None
            return base64.b64encode(buffer.tobytes()).decode()
        elif op in ("link", "unlink"):
            assert engine is not None
            info = native.ClusterInfo(cmd["cluster_id"], 0, [native.IpInfo("127.0.0.1", 0)],
                                      [native.IpInfo("127.0.0.1", cmd["port"])])
            if op == "link":
                status, rets = engine.link_llm_clusters([info])
            else:
                status, rets = engine.unlink_llm_clusters([info], 1000, cmd["force"])
            return [int(status), [int(r) for r in rets]]
        else:
            raise KeyError(op)
        return None

    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            reply: dict[str, Any] = {"ok": True, "result": run(cmd)}
        except LLMException as exc:
            reply = {"ok": False, "kind": "LLMException", "status": int(exc.status_code), "message": str(exc)}
        except (TypeError, ValueError) as exc:
            reply = {"ok": False, "kind": type(exc).__name__, "message": str(exc)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    if engine is not None:
        engine.close()


class Peer:
    """The test side of the helper process."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=helper_env())

    def request(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the peer process ended during {op!r} (exit code {self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def check_reply(call: str, expected: Outcome, reply: dict[str, Any]) -> Any:
    """The peer's reply against the oracle, as ``agree`` does for local calls."""
    got: tuple[str, Optional[int]] = ("ok", 0) if reply["ok"] else (reply["kind"], reply.get("status"))
    if expected.python_error is not None:
        want: tuple[str, Optional[int]] = (expected.python_error.__name__, None)
    else:
        want = ("ok", 0) if expected.ok else ("LLMException", int(expected.status))
    if got != want:
        raise Mismatch(f"{call} in the peer process: the oracle expects {expected.describe()}, got {reply}")
    return reply.get("result")


class PeerMemory:
    """A cache buffer in the peer process: the expected bytes here, the actual ones there."""

    def __init__(self, peer: Peer, handle: int, num_tensors: int, tensor_size: int, seed: int) -> None:
        twin = CacheMemory.registered(num_tensors, tensor_size, np.random.default_rng(seed))
        self.peer, self.handle = peer, handle
        self.expected = twin.expected                       # views into buffer_expected
        self.buffer_expected = twin.buffer_expected
        self.buffer = twin.buffer_expected                  # marks a registered buffer (kept after release)

    def mismatch(self) -> Optional[str]:
        reply = self.peer.request("buffer", handle=self.handle)
        actual = np.frombuffer(base64.b64decode(reply["result"]), dtype=np.uint8)
        assert self.buffer_expected is not None
        bad = np.flatnonzero(actual != self.buffer_expected)
        return None if bad.size == 0 else f"{bad.size} bytes differ in the peer, first at offset {int(bad[0])}"


class CrossHarness(Harness):
    """Engine A here, engine B in the helper process; one oracle World for both."""

    def __init__(self, peer: Peer, port_a: int, port_b: int) -> None:
        super().__init__(seed=99)
        self.peer = peer
        self.handles = 0
        self.add(A, LlmRole.DECODER, {"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{port_a}"}, port_a)
        self.add_remote(B, LlmRole.PROMPT, {"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{port_b}"}, port_b)

    def initialize(self, cluster_id: int, options: Optional[dict[str, str]] = None) -> Outcome:
        if cluster_id != B:
            return super().initialize(cluster_id, options)
        node = self.nodes[B]
        opts = node.options if options is None else options
        expected = self.world.initialize(B, opts)
        self.log.append("initialize(peer)")
        check_reply("initialize", expected, self.peer.request("init", cluster_id=B, role=int(LlmRole.PROMPT),
                                                              options=opts))
        return expected

    def finalize(self, cluster_id: int) -> None:
        if cluster_id != B:
            return super().finalize(cluster_id)
        self.log.append("finalize(peer)")
        self.world.finalize(B)
        check_reply("finalize", Outcome(), self.peer.request("finalize"))
        self._retire_all(self.nodes[B])

    def register(self, cluster_id: int, num_tensors: int, data_type: int, shape: Any,
                 placement: int = DEVICE, addrs: Optional[Any] = None) -> Outcome:
        if cluster_id != B:
            return super().register(cluster_id, num_tensors, data_type, shape, placement, addrs)
        layout = tensor_layout(shape, data_type)
        assert not isinstance(layout, str), "the peer registers valid descriptions only"
        self.handles += 1
        seed = int(self.rng.integers(0, 2**31))
        expected = self.world.register(B, num_tensors, data_type, shape, [1] * num_tensors, placement)
        call = f"register(peer, {num_tensors}, {int(data_type)}, {list(shape)}, {placement})"
        self.log.append(call)
        cache_id = check_reply(call, expected, self.peer.request(
            "register", handle=self.handles, num_tensors=num_tensors, tensor_size=layout.tensor_size, seed=seed,
            data_type=int(data_type), shape=list(shape), placement=placement))
        memory = PeerMemory(self.peer, self.handles, num_tensors, layout.tensor_size, seed)
        if expected.ok:
            if cache_id != expected.value:
                raise Mismatch(f"{call}: cache id {cache_id}, the oracle expects {expected.value}")
            self.nodes[B].memory[cache_id] = memory
        else:
            self.nodes[B].retired.append(memory)
        return expected

    def unregister(self, cluster_id: int, cache_id: int) -> Outcome:
        if cluster_id != B:
            return super().unregister(cluster_id, cache_id)
        expected = self.world.unregister(B, cache_id)
        self.log.append(f"unregister(peer, {cache_id})")
        check_reply("unregister", expected, self.peer.request("unregister", cache_id=cache_id))
        if expected.ok and cache_id in self.nodes[B].memory:
            self._retire(self.nodes[B], cache_id)
        self.check_memory()
        return expected

    def link_from_peer(self, force_unlink: Optional[bool] = None) -> Outcome:
        """B links to A (or, with ``force_unlink`` given, unlinks from A)."""
        port = self.nodes[A].port
        assert port is not None
        arg = ClusterArg(A, (port,))
        if force_unlink is None:
            expected = self.world.link(B, [arg])
            reply = self.peer.request("link", cluster_id=A, port=port)
        else:
            expected = self.world.unlink(B, [arg], 1000, force_unlink)
            reply = self.peer.request("unlink", cluster_id=A, port=port, force=force_unlink)
        self.log.append(f"{'link' if force_unlink is None else 'unlink'}(peer -> {A})")
        if reply["result"] != [int(expected.status), [int(r) for r in expected.value]]:
            raise Mismatch(f"peer link/unlink: got {reply}, the oracle expects {expected.status, expected.value}")
        return expected


@pytest.fixture(scope="module")
def cross() -> Iterator[CrossHarness]:
    peer = Peer()
    h = CrossHarness(peer, _free_port(), _free_port())
    try:
        h.reset()
        yield h
    finally:
        h.close()
        h.peer.close()


# ---- strategies -----------------------------------------------------------------------------------

# small caches of a few types, sub-byte included (the public strategy bounds their bytes)
cache_descs = lst.cache_descs("native", num_tensors=st.sampled_from([1, 2, 4]), max_rank=2, max_bytes=1024,
                              data_types=[G.DT_UINT8, G.DT_FLOAT16, G.DT_INT4])
Spec = tuple[int, int, tuple[int, ...]]


def spec_of(desc: native.CacheDesc) -> Spec:
    return desc.num_tensors, int(desc.data_type), tuple(desc.shape)


@st.composite
def cache_pairs(draw: st.DrawFn) -> tuple[Spec, Spec]:
    """(num_tensors, data type, shape) of A's and of B's cache: mostly the same tensor
    count and stride (shape[0] may differ), sometimes unrelated."""
    local = spec_of(draw(cache_descs))
    if draw(st.integers(0, 3)):
        return local, (local[0], local[1], (draw(st.integers(1, 8)), *local[2][1:]))
    return local, spec_of(draw(cache_descs))


def index(count: int) -> st.SearchStrategy[int]:
    """A batch index: mostly below ``count``, sometimes ``count`` itself."""
    return st.integers(0, 9).flatmap(lambda k: st.just(count) if k == 0 else st.integers(0, count - 1))


@st.composite
def ext_params(draw: st.DrawFn, n_src: int, n_dst: int, n_local: int) -> Optional[Ext]:
    n = draw(st.sampled_from([d for d in range(1, n_local + 1) if n_local % d == 0] * 4 + [0, 3]))
    form = draw(st.sampled_from(["none", "default", "range", "range", "odd"]))
    if form == "none":
        return None
    if form == "default" or n == 0 or not (n_src // n and n_dst // n):
        return Ext(n=n)
    if form == "range":
        span = draw(st.integers(1, min(n_src // n, n_dst // n)))
        sf, df = draw(st.integers(0, n_src // n - span)), draw(st.integers(0, n_dst // n - span))
        return Ext((sf, sf + span - 1), (df, df + span - 1), n)
    return Ext((draw(st.integers(-2, 3)), draw(st.integers(-2, 3))), (draw(st.integers(-2, 3)),
                                                                      draw(st.integers(-2, 3))), n)


def block_lists(nb_src: int, nb_dst: int) -> st.SearchStrategy[tuple[list[int], list[int]]]:
    """Valid block tables and the malformed ones (semantics.md §7.2, §7.3)."""
    return lst.block_pairs(nb_src, nb_dst, validity="any", containers=["list"])


@pytest.mark.rules("§2.2", "§3.2", "§8.1", "§8.2", "§8.3", "§8.5", "§8.6", "§8.12", "§9.7", "§10.1", "§10.3",
                   "cpp-api §6.8", "PR-32")
@settings(max_examples=max(20, settings.default.max_examples))
@given(data=st.data(), call=st.sampled_from(["pull_kv_cache", "pull_kv_blocks", "push_kv_cache", "push_kv_blocks"]),
       pair=cache_pairs(), late=st.sampled_from(["none", "none", "none", "local", "remote"]),
       peer_links=st.booleans())
def test_transfers_with_a_peer_process_agree_with_oracle(cross: CrossHarness, data: Any, call: str,
                                                         pair: Any, late: str, peer_links: bool) -> None:
    """Pulls and pushes by A from and to B in another process: codes and bytes as the oracle
    says, on both sides (PR-32 and the table copy across processes included)."""
    h = cross
    local, remote = pair
    h.reset()
    ids = {}
    if late != "local":
        ids["local"] = h.register(A, local[0], local[1], list(local[2])).value
    if late != "remote":
        ids["remote"] = h.register(B, remote[0], remote[1], list(remote[2])).value
    h.link_from_peer() if peer_links else h.link(A, B)
    if late == "local":
        ids["local"] = h.register(A, local[0], local[1], list(local[2])).value
    if late == "remote":
        ids["remote"] = h.register(B, remote[0], remote[1], list(remote[2])).value
    nl, nr = local[0], remote[0]
    (dl, _), (dr, _) = local[2], remote[2]
    if call == "pull_kv_cache":
        outcome = h.pull_kv_cache(A, (B, ids["remote"], data.draw(index(dr), "src batch")), ids["local"],
                                  data.draw(index(dl), "batch"), data.draw(st.sampled_from([-1, -1, -1, 1, 64]), "size"),
                                  data.draw(ext_params(nr, nl, nl), "ext"))
    elif call == "pull_kv_blocks":
        sblk, dblk = data.draw(block_lists(dr, dl), "blocks")
        outcome = h.pull_kv_blocks(A, (B, ids["remote"], 0), ids["local"], sblk, dblk,
                                   data.draw(ext_params(nr, nl, nl), "ext"))
    elif call == "push_kv_cache":
        outcome = h.push_kv_cache(A, ids["local"], (B, ids["remote"], data.draw(index(dr), "dst batch")),
                                  data.draw(index(dl), "src batch"), -1,
                                  data.draw(ext_params(nl, nr, nl), "ext"), (DEVICE, nl))
    else:
        sblk, dblk = data.draw(block_lists(dl, dr), "blocks")
        outcome = h.push_kv_blocks(A, ids["local"], (B, ids["remote"], 0), sblk, dblk,
                                   data.draw(ext_params(nl, nr, nl), "ext"), (DEVICE, nl))
    event(f"{call}: {outcome.describe()}")
    h.unlink(A, B)
    h.unregister(A, ids["local"])
    h.unregister(B, ids["remote"])


@pytest.mark.rules("§10.4", "§13", "PR-31", "PR-35")
def test_a_peer_process_that_dies_leaves_a_link_that_times_out(cross: CrossHarness) -> None:
    """PR-31, PR-35, semantics.md §10.4: the peer process dies; A's transfers give what the oracle says;
    after A unlinks, a new peer process with the same cluster id links again."""
    h = cross
    h.reset()
    dst = h.register(A, 2, int(G.DT_UINT8), [4, 8]).value
    src = h.register(B, 2, int(G.DT_UINT8), [4, 8]).value
    assert h.link(A, B).ok
    assert h.pull_kv_cache(A, (B, src, 1), dst, 2).ok
    h.peer.kill()
    h.world.finalize(B)                    # a dead process holds nothing: its side of every link is gone
    h.nodes[B].memory.clear()
    h.nodes[B].retired.clear()
    first = h.pull_kv_cache(A, (B, src, 1), dst, 3)
    assert first.status == S.LLM_TIMEOUT, first.describe()          # the oracle's own verdict (PR-31) ...
    assert h.push_kv_cache(A, dst, (B, src, 0), 0, -1, None, (DEVICE, 2)).status == S.LLM_TIMEOUT   # ... PR-35
    h.unlink(A, B, force=True)
    h.peer = Peer()
    try:
        h.initialize(B)
        src = h.register(B, 2, int(G.DT_UINT8), [4, 8]).value
        assert h.link(A, B).ok
        assert h.pull_kv_cache(A, (B, src, 0), dst, 0).ok
        h.unlink(A, B)
    finally:
        h.peer.close()
        h.peer = Peer()                    # the module fixture closes this one
        h.world.finalize(B)
        h.nodes[B].memory.clear()
        h.nodes[B].retired.clear()
        h.reset()


if __name__ == "__main__" and sys.argv[1:] == ["--serve"]:
    serve()
