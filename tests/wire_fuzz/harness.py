"""The fuzz run: a target engine process, seeds recorded from real links, mutated
cases for a time budget, then the checks of a healthy target.

A run fails when the target dies, when a sanitizer (or the interpreter) reports on
its stderr, when its descriptors or threads do not come back near the count they had
before the mutated traffic, or when a legitimate client can no longer link and pull
exact bytes from it. The cases that were in flight when the failure was seen are
written to the corpus as a reproducer.
"""
from __future__ import annotations

import base64
import os
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import record
from .case import Case, Round, load_cases, load_rounds, save
from .engines import BROKEN, EngineProcess
from .mutate import Mutator
from .replay import run_case

CORPUS = Path(__file__).resolve().parent / "corpus"
SESSIONS_DIR, REPRODUCERS_DIR = "sessions", "reproducers"
# After the traffic every thread must end; descriptors may stay for two links whose
# client left without unlinking (the engine keeps a link until it is replaced, unlinked
# or finalized). SETTLE is longer than any wait the engine should hold for a client
# whose connections are closed (the longest: a handshake's wait for its REVERSE).
FD_SLACK, THREAD_SLACK = 4, 0
SETTLE = 35.0
LANES = 8                         # cases sent side by side in an ordinary iteration (most time is waiting)
RECENT = 16                       # rounds kept for a reproducer
CHECK_EVERY = 25                  # iterations between two reads of the target's stderr
CHECK_ID, CHECK_SEED = 50, 77     # the final check's client cluster and the bytes it pulls


@dataclass
class Result:
    seed: int
    iterations: int = 0
    cases: int = 0
    failure: str | None = None
    reproducer: Path | None = None
    baseline: tuple[int, int] = (0, 0)
    after: tuple[int, int] = (0, 0)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def committed_sessions(corpus: Path) -> list[Case]:
    return [c for path in sorted((corpus / SESSIONS_DIR).glob("*.json")) for c in load_cases(path)]


def write_sessions(corpus: Path, cases: list[Case]) -> list[Path]:
    """Replaces the committed recorded sessions with `cases`."""
    folder = corpus / SESSIONS_DIR
    for old in folder.glob("*.json"):
        old.unlink()
    paths = []
    for case in cases:
        path = folder / f"{case.name}.json"
        save(path, {"recorded_by": "python -m tests.wire_fuzz --record-only", **case.to_json()})
        paths.append(path)
    return paths


class Fuzzer:
    def __init__(self, seed: int, corpus: Path = CORPUS, log: Callable[[str], None] = print) -> None:
        self.seed = seed
        self.corpus = corpus
        self.log = log
        self.rng = random.Random(seed)
        self.port = free_port()
        self.target = record.start_target(self.port)
        self.recent: deque[Round] = deque(maxlen=RECENT)
        # the last case that used each local port: a connection the target still holds
        # after the traffic names the case that opened it
        self.port_users: dict[int, Case] = {}
        self._ports_lock = threading.Lock()
        self.committed: dict[int, Path] = {}       # id of a case of a committed reproducer -> its file
        self.result = Result(seed)

    # ---- the parts of a run ----

    def seeds(self, fresh: bool) -> list[Case]:
        """The committed sessions, and a fresh recording of the same sessions unless
        `fresh` is false (then a run depends on the seed and the corpus alone)."""
        cases = committed_sessions(self.corpus)
        if fresh:
            cases += record.record(self.port)
        if not cases:
            raise RuntimeError(f"no seeds: {self.corpus / SESSIONS_DIR} is empty and nothing was recorded")
        return cases

    def replay_reproducers(self) -> bool:
        """Every reproducer of the corpus, first: a failure found once is tried again."""
        for path in sorted((self.corpus / REPRODUCERS_DIR).glob("*.json")):
            for r in load_rounds(path):
                self.committed.update((id(c), path) for c in r.cases)
                self.result.cases += len(r.sent())
                run_round(r, self.port, self._opened)
            if not self._healthy(f"replaying {path.name}"):
                self.result.reproducer = path       # the failing input is that file: no new one
                return False
        return True

    def fuzz(self, seeds: list[Case], seconds: float) -> bool:
        mutator = Mutator(seeds, self.rng)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.result.iterations += 1
            n = self.result.iterations
            if self.rng.random() < 0.08:
                # many connections at once, some of them silent
                self._round(Round([mutator.case(n * 100 + k) for k in range(self.rng.randint(16, 48))],
                                  self.rng.randint(0, 32)))
            else:
                self._round(Round([mutator.case(n * 100 + k) for k in range(LANES)]))
            if not self.target.alive() or (n % CHECK_EVERY == 0 and self.target.broken()):
                return self._healthy(f"iteration {n}")
        return self._healthy("the end of the budget")

    def settle(self, seconds: float) -> bool:
        """Waits up to `seconds` for descriptors and threads to come back near the
        baseline."""
        base_fds, base_threads = self.result.baseline
        give_up = time.monotonic() + seconds
        while True:
            fds, threads = self.target.counts()
            self.result.after = (fds, threads)
            if fds <= base_fds + FD_SLACK and threads <= base_threads + THREAD_SLACK:
                return True
            if time.monotonic() > give_up:
                self._blame_held_connections()
                return self._fail(f"unbounded growth: {fds} descriptors and {threads} threads {seconds:g} s after "
                                  f"the traffic, against {base_fds} and {base_threads} before it")
            time.sleep(0.25)

    def legit_pull(self) -> bool:
        """A new cache on the target, a new client that links and pulls all of it: the
        bytes must be exactly the cache's."""
        cache = self.target.call("register", num_tensors=record.TENSORS, shape=record.SHAPE, seed=CHECK_SEED)
        client = EngineProcess("the checking client")
        try:
            client.call("init", cluster_id=CHECK_ID, role=2, options={"llm.DeviceId": "0"})
            dst = client.call("register", num_tensors=record.TENSORS, shape=record.SHAPE, seed=-1)
            status = client.call("link", clusters=[[record.TARGET_ID, self.port]], timeout=3000)
            if status != [0, 0]:
                return self._fail(f"a legitimate client could not link after the traffic: {status}")
            every = list(range(record.SHAPE[0]))          # a block is a row of dimension 0: all of them
            client.call("pull_blocks", cluster=record.TARGET_ID, src=cache, dst=dst, src_blocks=every,
                        dst_blocks=every)
            got = client.call("bytes", cache_id=dst)
            client.call("unlink", clusters=[[record.TARGET_ID, self.port]], timeout=3000)
        finally:
            client.close()
            client.discard()
        expected = _seeded_bytes(record.TENSORS, record.SHAPE, CHECK_SEED)
        if base64.b64decode(got) != expected:
            return self._fail("a legitimate pull after the traffic returned other bytes than the cache's")
        self.target.call("unregister", cache_id=cache)
        return True

    def finish(self) -> Result:
        """Closes the target: it must exit cleanly and have reported nothing."""
        code = self.target.close()
        if self.result.ok:
            report = self.target.broken()
            if report is not None:
                self._fail(f"report on the target's stderr at exit: {report}")
            elif code != 0:
                self._fail(f"the target exited with {code}")
        if not self.result.ok:
            text = self.target.stderr()
            found = BROKEN.search(text)
            start = max(0, found.start() - 200) if found is not None else max(0, len(text) - 4000)
            self.result.notes.append(f"the target's stderr (from character {start}):\n{text[start:start + 8000]}")
        self.target.discard()
        return self.result

    # ---- helpers ----

    def _round(self, r: Round) -> None:
        """The round's cases at once, next to its idle connections."""
        self.recent.append(r)
        self.result.cases += len(r.sent())
        run_round(r, self.port, self._opened)

    def _blame_held_connections(self) -> None:
        """Keeps, as the reproducer, the cases whose connections the target still holds,
        one case a round (a held thread nearly always holds its connection too)."""
        ports = held_peer_ports(self.target.pid, self.port)
        with self._ports_lock:
            cases = list({id(c): c for c in (self.port_users.get(p) for p in sorted(ports)) if c is not None}.values())
        self.result.notes.append(f"the target still holds {len(ports)} connections, opened by {len(cases)} cases")
        origins = {self.committed.get(id(c)) for c in cases}
        if cases and None not in origins:
            # all of them come from committed reproducers: those files are the input
            self.result.notes.append("they were sent by " + ", ".join(sorted(p.name for p in origins if p)))
            self.recent.clear()
            self.result.reproducer = min(p for p in origins if p)
        elif cases:
            self.recent = deque((Round([c]) for c in cases[-RECENT:]), maxlen=RECENT)

    def _opened(self, port: int, case: Case) -> None:
        with self._ports_lock:
            self.port_users[port] = case

    def _fail(self, what: str) -> bool:
        self.result.failure = what
        if self.recent:
            symptom = what.split(":")[0].split("(")[0].strip().replace(" ", "-")
            path = self.corpus / REPRODUCERS_DIR / f"seed{self.seed}-{self.result.iterations}-{symptom}.json"
            save(path, {"seed": self.seed, "found": what,
                        "replay": f"python -m tests.wire_fuzz --replay {path.name}",
                        "rounds": [r.to_json() for r in self.recent]})
            self.result.reproducer = path
        return False

    def _healthy(self, when: str) -> bool:
        if not self.target.alive():
            return self._fail(f"the target died ({when}; exit code {self.target.proc.poll()})")
        report = self.target.broken()
        if report is not None:
            return self._fail(f"report on the target's stderr ({when}): {report}")
        return True


def held_peer_ports(pid: int, port: int) -> set[int]:
    """The remote ports of the connections to `port` that process `pid` holds open
    (its descriptors' socket inodes, looked up in /proc/net/tcp and tcp6)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue                               # closed meanwhile
        if link.startswith("socket:["):
            inodes.add(int(link[8:-1]))
    peers = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)                                # the column names
            for line in f:
                cols = line.split()
                local, remote, inode = cols[1], cols[2], int(cols[9])
                remote_port = int(remote.rsplit(":", 1)[1], 16)
                if inode in inodes and int(local.rsplit(":", 1)[1], 16) == port and remote_port != 0:
                    peers.add(remote_port)
    return peers


def run_round(r: Round, port: int, opened: Callable[[int, Case], None] | None = None) -> None:
    quiet = []
    try:
        for _ in range(r.idle):
            try:
                quiet.append(socket.create_connection(("127.0.0.1", port), timeout=1))
            except OSError:
                break                              # the backlog is full: what the round is about
        cases = r.sent()

        def one(case: Case) -> None:
            run_case(case, port, opened=None if opened is None else lambda p: opened(p, case))

        if len(cases) == 1:
            one(cases[0])
            return
        threads = [threading.Thread(target=one, args=(c,)) for c in cases]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for s in quiet:
            s.close()


def _seeded_bytes(num_tensors: int, shape: list[int], seed: int) -> bytes:
    """The bytes of a cache the peer program fills from `seed` (engine_support.fill)."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    return b"".join(rng.integers(0, 256, size=size, dtype=np.uint8).tobytes() for _ in range(num_tensors))


def run(seconds: float, seed: int, corpus: Path = CORPUS, fresh: bool = True, settle: float = SETTLE,
        log: Callable[[str], None] = print) -> Result:
    """One fuzz run (see the module's docstring)."""
    log(f"wire fuzz: seed {seed}, {seconds:g} s budget")
    fuzzer = Fuzzer(seed, corpus, log)
    try:
        seeds = fuzzer.seeds(fresh)
        time.sleep(0.5)
        fuzzer.result.baseline = fuzzer.target.counts()
        log(f"wire fuzz: {len(seeds)} seed sessions; the target has {fuzzer.result.baseline[0]} descriptors and "
            f"{fuzzer.result.baseline[1]} threads")
        (fuzzer.replay_reproducers() and fuzzer.fuzz(seeds, seconds) and fuzzer.settle(settle)
         and fuzzer.legit_pull() and fuzzer._healthy("the final check"))
    finally:
        result = fuzzer.finish()
    log(f"wire fuzz: {result.iterations} iterations, {result.cases} cases; descriptors and threads "
        f"{result.baseline} before, {result.after} after")
    return result


def replay(path: Path, corpus: Path = CORPUS, settle: float = SETTLE, log: Callable[[str], None] = print) -> Result:
    """Replays one reproducer (or session) against a fresh target, with the checks of
    a run."""
    fuzzer = Fuzzer(0, corpus, log)
    try:
        time.sleep(0.5)
        fuzzer.result.baseline = fuzzer.target.counts()
        for r in load_rounds(path):
            run_round(r, fuzzer.port)
        fuzzer.recent.clear()                     # a replay writes no new reproducer
        (fuzzer._healthy(f"replaying {path.name}") and fuzzer.settle(settle) and fuzzer.legit_pull()
         and fuzzer._healthy("the final check"))
    finally:
        result = fuzzer.finish()
    return result


def random_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")
