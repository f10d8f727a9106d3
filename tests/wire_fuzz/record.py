"""Recording the seeds: legitimate client engines talk to the target through the
recording proxy, one session per client process.

The target (cluster 1) holds TARGET_CACHES; each client (cluster 2) registers two
caches of the same shape, links, moves bytes both ways, asks for a cache that does
not exist and unlinks, on the process_vm_readv path (PIN and UNPIN only) and on the
socket path (READ and WRITE too); one client links twice (the second handshake only
checks the identity) and one leaves without unlinking; a client of the
vendor-compatible API names the target's caches by id (RESOLVE).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .case import Case
from .engines import EngineError, EngineProcess, VendorProcess
from .proxy import RecordingProxy
from .wire import Header

TARGET_ID, CLIENT_ID = 1, 2
SHAPE = [8, 32]
TENSORS = 4
# (seed of the bytes, -1 for zeros) of the target's caches 1, 2, 3
TARGET_CACHES = (1, -1, 3)
NOT_A_CACHE = 9


@dataclass(frozen=True)
class Session:
    name: str
    env: dict[str, str]
    run: Callable[[EngineProcess, int], None]    # the client's steps after its set-up, given the port
    vendor: bool = False                         # a client of the vendor-compatible API


def _link(client: EngineProcess, port: int) -> None:
    status = client.call("link", clusters=[[TARGET_ID, port]], timeout=3000)
    if status != [0, 0]:
        raise RuntimeError(f"the recorded client could not link: {status}")


def _unlink(client: EngineProcess, port: int) -> None:
    status = client.call("unlink", clusters=[[TARGET_ID, port]], timeout=3000)
    if status != [0, 0]:
        raise RuntimeError(f"the recorded client could not unlink: {status}")


def _transfers(client: EngineProcess, port: int) -> None:
    _link(client, port)
    client.call("pull_cache", cluster=TARGET_ID, src=1, dst=1, src_batch=3, batch=0)
    client.call("pull_blocks", cluster=TARGET_ID, src=3, dst=1, src_blocks=[0, 5], dst_blocks=[1, 2])
    client.call("push_cache", cluster=TARGET_ID, src=2, dst=2, src_batch=1, dst_batch=4)
    client.call("push_blocks", cluster=TARGET_ID, src=2, dst=2, src_blocks=[6, 7], dst_blocks=[0, 1])
    try:
        client.call("pull_cache", cluster=TARGET_ID, src=NOT_A_CACHE, dst=1)
    except EngineError:
        pass                                    # refused, as it should be: the refusal is what is recorded
    else:
        raise RuntimeError(f"a pull of cache {NOT_A_CACHE}, which the target does not have, succeeded")
    _unlink(client, port)


def _check_only(client: EngineProcess, port: int) -> None:
    _link(client, port)
    again = client.call("link", clusters=[[TARGET_ID, port]], timeout=3000)
    if again[0] == 0:
        raise RuntimeError("a second link to the same cluster succeeded")
    _unlink(client, port)


def _abandon(client: EngineProcess, port: int) -> None:
    _link(client, port)
    client.call("pull_blocks", cluster=TARGET_ID, src=1, dst=1, src_blocks=[2], dst_blocks=[2])
    client.call("finalize")


def _vendor_transfers(client: EngineProcess, port: int) -> None:
    """The cache manager of the vendor-compatible API in direct mode (the target's
    mode): sources and destinations named by cache id, resolved by the target."""
    assert isinstance(client, VendorProcess)
    client.run(f"""
config = LLMConfig()
config.device_id = 0
config.enable_cache_manager = True
config.enable_remote_cache_accessible = True
config.sync_kv_timeout = 3000
engine = LLMDataDist(LLMRole.DECODER, {CLIENT_ID})
engine.init(config.generate_options())
tensors = [np.zeros({SHAPE}, np.uint8) for _ in range({TENSORS})]
cache = engine.cache_manager.register_cache(CacheDesc({TENSORS}, {SHAPE}, DataType.DT_UINT8),
                                            [t.ctypes.data for t in tensors])
target = LLMClusterInfo()
target.remote_cluster_id = {TARGET_ID}
target.append_local_ip_info("127.0.0.1", 0)
target.append_remote_ip_info("127.0.0.1", {port})
""")
    linked = client.run("status, _ = engine.link_clusters([target], timeout=3000)", "int(status)")
    if linked != 0:
        raise RuntimeError(f"the recorded vendor client could not link: {linked}")
    client.run(f"engine.cache_manager.pull_cache(CacheKeyByIdAndIndex({TARGET_ID}, 1, 3), cache, 0)")
    client.run(f"engine.cache_manager.push_cache(CacheKeyByIdAndIndex({TARGET_ID}, 2, 4), cache, 1)")
    client.run("engine.unlink_clusters([target], timeout=3000)")
    client.run("engine.finalize()")


SESSIONS = (
    Session("transfers-process-vm", {}, _transfers),
    Session("transfers-socket", {"LLDD_MOCK_NO_PROCESS_VM": "1"}, _transfers),
    Session("link-twice", {}, _check_only),
    Session("link-and-leave", {"LLDD_MOCK_NO_PROCESS_VM": "1"}, _abandon),
    Session("vendor-transfers-socket", {"LLDD_MOCK_NO_PROCESS_VM": "1"}, _vendor_transfers, vendor=True),
)


def start_target(port: int) -> EngineProcess:
    """The fuzz target: cluster 1, listening on 127.0.0.1:port, with TARGET_CACHES."""
    target = EngineProcess("the target")
    try:
        target.call("init", cluster_id=TARGET_ID, role=1,
                    options={"llm.DeviceId": "0", "llm.ListenIpInfo": f"127.0.0.1:{port}"})
        for number, seed in enumerate(TARGET_CACHES, 1):
            got = target.call("register", num_tensors=TENSORS, shape=SHAPE, seed=seed)
            if got != number:
                raise RuntimeError(f"the target registered cache {got}, not {number}")
    except BaseException:
        target.close()
        target.discard()
        raise
    return target


def record(target_port: int, answers: list[dict[int, list[Header]]] | None = None,
           sessions: Sequence[Session] = SESSIONS) -> list[Case]:
    """The sessions (all of SESSIONS by default), recorded against the target at
    target_port; the headers the target answered on each connection go to `answers`
    when given."""
    proxy = RecordingProxy(target_port)
    cases = []
    try:
        for session in sessions:
            kind = VendorProcess if session.vendor else EngineProcess
            client = kind(f"the client of {session.name}", session.env)
            try:
                if not session.vendor:
                    client.call("init", cluster_id=CLIENT_ID, role=2, options={"llm.DeviceId": "0"})
                    client.call("register", num_tensors=TENSORS, shape=SHAPE, seed=-1)
                    client.call("register", num_tensors=TENSORS, shape=SHAPE, seed=2)
                session.run(client, proxy.port)
            finally:
                code = client.close()
                client.discard()
            if code != 0:
                raise RuntimeError(f"the client of {session.name} exited with {code}")
            cases.append(proxy.take(session.name))
            if answers is not None:
                answers.append(proxy.answers)
    finally:
        proxy.close()
    return cases
