"""The wire fuzzer (tests/wire_fuzz): its recording, its mutator, the failures it must
see, and a short run against the mock (marked slow: .ci/run runs it, for a minute,
against the sanitizer build; docs/security.md §4)."""
from __future__ import annotations

import json
import os
import random
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wire_fuzz import harness, record
from wire_fuzz.engines import EngineProcess
from wire_fuzz.harness import run_round
from wire_fuzz.case import Case, Round, load_cases, load_rounds
from wire_fuzz.mutate import EDGES, Mutator
from wire_fuzz.replay import run_case
from wire_fuzz.wire import FIELDS, HEADER_SIZE, Header, describe, field_bytes, split_messages

pytestmark = pytest.mark.mock_only(reason="fuzzes the mock engine's own wire protocol")

CLIENT_MESSAGES = {"HELLO", "REVERSE", "PIN", "UNPIN", "READ", "WRITE", "RESOLVE", "DISCONNECT"}


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A copy of the committed corpus: reproducers of these tests go there."""
    copy = tmp_path / "corpus"
    shutil.copytree(harness.CORPUS, copy)
    return copy


@pytest.fixture
def target() -> Iterator[tuple[EngineProcess, int]]:
    port = harness.free_port()
    engine = record.start_target(port)
    try:
        yield engine, port
    finally:
        code = engine.close()
        report = engine.broken()
        engine.discard()
    assert (code, report) == (0, None)


def answered(headers: list[Header]) -> list[tuple[str, int]]:
    return [(h.type_name(), h.status) for h in headers]


def test_a_recording_holds_every_message_a_client_sends_and_replays_to_the_same_answers(
        target: tuple[EngineProcess, int]) -> None:
    _, port = target
    answers: list[dict[int, list[Header]]] = []
    cases = record.record(port, answers)
    assert [c.name for c in cases] == [s.name for s in record.SESSIONS]
    assert set().union(*(c.types() for c in cases)) >= CLIENT_MESSAGES
    by_name = {c.name: c for c in cases}
    # through the recording proxy no client can prove its identity (its first connection's
    # endpoints are the proxy's, docs/security.md §2.2): every one moves bytes over the sockets
    assert "READ" in by_name["transfers-process-vm"].types()
    assert {"READ", "WRITE"} <= set(by_name["transfers-socket"].types())
    hellos = [h for h in map(Header.parse, (s.data for s in by_name["link-twice"].steps)) if h.type_name() == "HELLO"]
    assert [h.a for h in hellos] == [0, 1]                                # HELLO_LINK, then HELLO_CHECK_ONLY
    # the recorded conversation, replayed: the target answers as it answered the real client
    for case, heard in zip(cases, answers):
        ports: list[int] = []
        got = run_case(case, port, answer_wait=5, opened=ports.append)
        assert len(set(ports)) == len(ports) == len({s.conn for s in case.steps})
        assert {conn: answered(h) for conn, h in got.items()} == {conn: answered(h) for conn, h in heard.items()}
        assert all(status == 0 for conn in heard.values() for name, status in answered(conn)
                   if name in ("HELLO_REPLY", "REVERSE_REPLY", "DISCONNECT_REPLY", "WRITE_REPLY", "READ_REPLY"))


def test_one_handshake_sent_sixteen_times_at_once_leaves_the_target_alive_and_clean(
        target: tuple[EngineProcess, int]) -> None:
    """Found by the fuzzer (seed 11, a burst of cases from one session): REVERSEs with
    the same token found the same pending handshake; the first installed the link, the
    HELLO's thread freed the pending record and the others read it (AddressSanitizer:
    heap-use-after-free in on_reverse). Seen under the sanitizer build only."""
    engine, port = target
    (session,) = record.record(port, sessions=[s for s in record.SESSIONS if s.name == "transfers-socket"])
    assert session.types()[:2] == ["HELLO", "REVERSE"]
    handshake = Case("HELLO, then REVERSE", session.steps[:2])
    for _ in range(8):
        run_round(Round([handshake], copies=16), port)
    assert engine.alive() and engine.broken() is None


def test_the_committed_sessions_are_whole_recorded_messages() -> None:
    files = sorted((harness.CORPUS / harness.SESSIONS_DIR).glob("*.json"))
    assert sorted(p.stem for p in files) == sorted(s.name for s in record.SESSIONS)
    for path in files:
        (case,) = load_cases(path)
        assert json.loads(path.read_text())["recorded_by"] == "python -m tests.wire_fuzz --record-only"
        for step in case.steps:
            messages, rest = split_messages(step.data)
            assert len(messages) == 1 and rest == b"", f"{path.name}: {step.to_json()['what']}"


def seeds() -> list[Case]:
    return harness.committed_sessions(harness.CORPUS)


def test_the_mutator_makes_the_same_cases_for_the_same_seed_and_others_for_another() -> None:
    def cases(seed: int) -> list[dict[str, object]]:
        mutator = Mutator(seeds(), random.Random(seed))
        return [mutator.case(n).to_json() for n in range(200)]

    assert cases(7) == cases(7)
    assert cases(7) != cases(8)


def test_the_mutator_sets_every_header_field_to_every_edge_value() -> None:
    mutator = Mutator(seeds(), random.Random(0))
    seen: set[tuple[str, int]] = set()
    for n in range(3000):
        for step in mutator.case(n).steps:
            if len(step.data) >= HEADER_SIZE:
                for name, offset, width in FIELDS:
                    seen.add((name, int.from_bytes(step.data[offset:offset + width], "little")))
    wanted = {(name, edge & ((1 << 8 * width) - 1)) for name, _, width in FIELDS for edge in EDGES}
    assert wanted - seen == set()


def test_the_mutator_slows_closes_resets_splices_and_truncates() -> None:
    mutator = Mutator(seeds(), random.Random(1))
    made = [mutator.case(n) for n in range(500)]
    steps = [s for c in made for s in c.steps]
    assert any(s.chunk > 0 for s in steps)
    assert {s.after for s in steps} == {"", "shut_wr", "close", "reset"}
    assert any(len(s.data) < HEADER_SIZE for s in steps)                              # cut inside a header
    assert any(split_messages(s.data)[1] for s in steps if len(s.data) >= HEADER_SIZE)  # cut inside a body
    def tokens(case: Case) -> set[bytes]:
        # REVERSE names its handshake in field a (a token the client drew)
        return {field_bytes(s.data, "a") for s in case.steps if describe(s.data).startswith("REVERSE ")}

    recorded = set().union(*(tokens(c) for c in seeds()))
    assert any(len(tokens(c) & recorded) > 1 for c in made)                            # sessions spliced


def test_a_run_fails_and_keeps_the_cases_in_flight_when_the_target_dies(corpus: Path) -> None:
    fuzzer = harness.Fuzzer(5, corpus, log=lambda _: None)
    try:
        fuzzer.result.baseline = fuzzer.target.counts()
        threading.Timer(1.0, fuzzer.target.proc.kill).start()
        assert not fuzzer.fuzz(seeds(), 30)
    finally:
        result = fuzzer.finish()
    assert result.failure is not None and result.failure.startswith("the target died")
    assert result.reproducer is not None and result.reproducer.parent == corpus / harness.REPRODUCERS_DIR
    kept = json.loads(result.reproducer.read_text())
    assert kept["seed"] == 5 and kept["found"] == result.failure
    assert len(load_rounds(result.reproducer)) == min(result.iterations, harness.RECENT) > 0


def test_a_run_fails_when_threads_and_descriptors_do_not_come_back(corpus: Path) -> None:
    fuzzer = harness.Fuzzer(6, corpus, log=lambda _: None)
    silent = []
    try:
        fuzzer.result.baseline = fuzzer.target.counts()
        # each connection that says nothing holds a descriptor and a thread until its
        # first message's wait ends, far longer than the second allowed here
        silent = [socket.create_connection(("127.0.0.1", fuzzer.port)) for _ in range(harness.FD_SLACK + 3)]
        accepted = time.monotonic() + 5
        while fuzzer.target.counts()[0] < fuzzer.result.baseline[0] + len(silent) and time.monotonic() < accepted:
            time.sleep(0.05)
        assert not fuzzer.settle(1.0)
        assert fuzzer.result.failure is not None and fuzzer.result.failure.startswith("unbounded growth")
        assert fuzzer.result.after[0] >= fuzzer.result.baseline[0] + len(silent)
        # the connections held are found by their ports, which name the cases that opened them
        assert harness.held_peer_ports(fuzzer.target.pid, fuzzer.port) >= {s.getsockname()[1] for s in silent}
    finally:
        for s in silent:
            s.close()
        fuzzer.finish()


@pytest.mark.slow
def test_a_short_fuzz_run_leaves_the_target_alive_flat_and_serving_exact_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    seconds = float(os.environ.get("LLDD_FUZZ_SECONDS", "20"))
    seed = int(os.environ.get("LLDD_FUZZ_SEED") or harness.random_seed())
    with capsys.disabled():
        result = harness.run(seconds, seed)
    assert result.ok, "\n".join([f"seed {seed}: {result.failure}; reproducer: {result.reproducer}", *result.notes])
    assert result.cases > 5 * seconds
