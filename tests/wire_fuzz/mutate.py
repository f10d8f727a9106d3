"""The mutator: derives a case from the seeds with a seeded random generator, so a
run is the same for the same seed and the same seeds.

The header's fields are mutated by name (wire.FIELDS); bodies only byte- and
word-wise, never by layout, so the mutator needs no change when a body does.
"""
from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence

from .case import AFTER, Case, Step
from .wire import FIELD, FIELDS, HEADER_SIZE, TYPE_NAMES, field_bytes

EDGES = (0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1)
FORMATS = {1: "B", 2: "H", 4: "I", 8: "Q"}


def _edge(rng: random.Random, width: int) -> int:
    """An edge value that fits in `width` bytes: one of EDGES cut to the width, the
    largest value, a value around the sign bit, or a small number."""
    mask = (1 << (8 * width)) - 1
    return rng.choice([e & mask for e in EDGES] + [mask, mask >> 1, (mask >> 1) + 1, rng.randrange(16)])


def _put(data: bytearray, offset: int, width: int, value: int) -> None:
    struct.pack_into("<" + FORMATS[width], data, offset, value)


def _get(data: bytes | bytearray, offset: int, width: int) -> int:
    return int(struct.unpack_from("<" + FORMATS[width], data, offset)[0])


class Mutator:
    def __init__(self, seeds: Sequence[Case], rng: random.Random) -> None:
        if not seeds or not any(s.steps for s in seeds):
            raise ValueError("the mutator needs at least one recorded session with messages")
        self.seeds = [s for s in seeds if s.steps]
        self.rng = rng
        self.ops: list[tuple[str, Callable[[list[Step]], None]]] = [
            ("header field", self.header_field), ("header field", self.header_field),
            ("payload_len", self.payload_len), ("body word", self.body_word), ("body word", self.body_word),
            ("bit flips", self.bit_flips), ("truncate", self.truncate), ("splice", self.splice),
            ("duplicate", self.duplicate), ("drop", self.drop), ("swap", self.swap),
            ("other connection", self.other_connection), ("pipeline", self.pipeline),
            ("append bytes", self.append_bytes), ("slow", self.slow), ("ending", self.ending),
            ("stop early", self.stop_early),
        ]

    def case(self, number: int) -> Case:
        """A new mutated case (its name says where it came from)."""
        seed = self.rng.choice(self.seeds)
        steps = list(seed.steps)
        names = []
        for _ in range(self.rng.choice((1, 1, 1, 2, 2, 3, 4))):
            name, op = self.rng.choice(self.ops)
            op(steps)
            names.append(name)
            if not steps:
                steps = list(self.rng.choice(self.seeds).steps)
        return Case(f"{number}: {seed.name} + {', '.join(names)}", steps)

    def _pick(self, steps: list[Step], min_len: int = 0) -> int | None:
        """A step at least `min_len` long: a message type first, then a step of that
        type, so that the one HELLO of a session is picked as often as its many PINs."""
        by_type: dict[bytes, list[int]] = {}
        for i, s in enumerate(steps):
            if len(s.data) >= min_len:
                by_type.setdefault(field_bytes(s.data, "type"), []).append(i)
        if not by_type:
            return None
        return self.rng.choice(by_type[self.rng.choice(sorted(by_type))])

    def header_field(self, steps: list[Step]) -> None:
        i = self._pick(steps, HEADER_SIZE)
        if i is None:
            return
        data = bytearray(steps[i].data)
        name, offset, width = self.rng.choice(FIELDS)
        if name == "type" and self.rng.random() < 0.5:
            value = self.rng.choice([*TYPE_NAMES, 0, len(TYPE_NAMES) + 1])      # a real type in the wrong place
        else:
            value = _edge(self.rng, width)
        _put(data, offset, width, value)
        steps[i] = steps[i].but(data=bytes(data))

    def payload_len(self, steps: list[Step]) -> None:
        """A length near the real one, or an edge value."""
        i = self._pick(steps, HEADER_SIZE)
        if i is None:
            return
        data = bytearray(steps[i].data)
        offset, width = FIELD["payload_len"]
        real = len(data) - HEADER_SIZE
        value = self.rng.choice([real + self.rng.choice((-8, -1, 1, 8, 4096)), _edge(self.rng, width)])
        _put(data, offset, width, value % 2**(8 * width))
        steps[i] = steps[i].but(data=bytes(data))

    def body_word(self, steps: list[Step]) -> None:
        """An aligned word of a body set to an edge value: reaches counts, ids, lengths,
        timeouts and flags of any layout."""
        i = self._pick(steps, HEADER_SIZE + 4)
        if i is None:
            return
        data = bytearray(steps[i].data)
        width = self.rng.choice([w for w in (4, 8) if len(data) - HEADER_SIZE >= w])
        offset = HEADER_SIZE + width * self.rng.randrange((len(data) - HEADER_SIZE) // width)
        value = self.rng.choice([_edge(self.rng, width), _get(data, offset, width) ^ (1 << self.rng.randrange(8 * width))])
        _put(data, offset, width, value)
        steps[i] = steps[i].but(data=bytes(data))

    def bit_flips(self, steps: list[Step]) -> None:
        i = self._pick(steps, 1)
        if i is None:
            return
        data = bytearray(steps[i].data)
        for _ in range(self.rng.randint(1, 8)):
            bit = self.rng.randrange(8 * len(data))
            data[bit // 8] ^= 1 << (bit % 8)
        steps[i] = steps[i].but(data=bytes(data))

    def truncate(self, steps: list[Step]) -> None:
        """A message cut short; the case may end there or go on."""
        i = self._pick(steps, 1)
        if i is None:
            return
        data = steps[i].data
        cut = self.rng.choice([0, 1, HEADER_SIZE - 1, HEADER_SIZE, self.rng.randrange(len(data))])
        steps[i] = steps[i].but(data=data[:min(cut, len(data) - 1)])     # 0 bytes: a connection left idle
        if self.rng.random() < 0.5:
            del steps[i + 1:]

    def splice(self, steps: list[Step]) -> None:
        """Messages of another session (other tokens, other ids) in this one."""
        other = self.rng.choice(self.seeds).steps
        start = self.rng.randrange(len(other))
        piece = other[start:start + self.rng.randint(1, 4)]
        at = self.rng.randint(0, len(steps))
        conns = sorted({s.conn for s in steps}) or [0]
        conn = self.rng.choice(conns + [max(conns) + 1])
        steps[at:at] = [s.but(conn=conn) if self.rng.random() < 0.5 else s for s in piece]

    def duplicate(self, steps: list[Step]) -> None:
        i = self._pick(steps)
        if i is not None:
            steps.insert(i, steps[i])

    def drop(self, steps: list[Step]) -> None:
        i = self._pick(steps)
        if i is not None and len(steps) > 1:
            del steps[i]

    def swap(self, steps: list[Step]) -> None:
        if len(steps) > 1:
            i, j = self.rng.sample(range(len(steps)), 2)
            steps[i], steps[j] = steps[j], steps[i]

    def other_connection(self, steps: list[Step]) -> None:
        """A message on the wrong connection of the link, or on a fresh one."""
        i = self._pick(steps)
        if i is None:
            return
        conns = sorted({s.conn for s in steps})
        steps[i] = steps[i].but(conn=self.rng.choice(conns + [max(conns) + 1]))

    def pipeline(self, steps: list[Step]) -> None:
        """Two messages in one send, without waiting for the first answer."""
        i = self._pick(steps)
        if i is None or i + 1 >= len(steps):
            return
        steps[i] = steps[i].but(data=steps[i].data + steps[i + 1].data, reply=steps[i + 1].reply)
        del steps[i + 1]

    def append_bytes(self, steps: list[Step]) -> None:
        i = self._pick(steps)
        if i is None:
            return
        extra = self.rng.choice([bytes(self.rng.randrange(64)), self.rng.randbytes(self.rng.randrange(1, 300)),
                                 b"\xff" * self.rng.randrange(1, 64)])
        steps[i] = steps[i].but(data=steps[i].data + extra)

    def slow(self, steps: list[Step]) -> None:
        i = self._pick(steps)
        if i is not None:
            steps[i] = steps[i].but(chunk=self.rng.randint(1, 7), pause_ms=self.rng.randint(1, 5))

    def ending(self, steps: list[Step]) -> None:
        """A half-close, a close or a reset in the middle of the case."""
        i = self._pick(steps)
        if i is not None:
            steps[i] = steps[i].but(after=self.rng.choice(AFTER[1:]))

    def stop_early(self, steps: list[Step]) -> None:
        """A client that goes away in the middle of its session."""
        if len(steps) > 1:
            del steps[self.rng.randrange(1, len(steps)):]
