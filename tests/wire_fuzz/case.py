"""What the fuzzer sends: a case is a list of steps, each one send on one of the
case's connections, numbered from 0 in the order they are first used.

A recorded session is a case whose steps are the client's messages in the order the
server saw them; a mutated case or a reproducer is the same format, so every file of
the corpus replays the same way. Files are JSON with the bytes in hex and, for a
human reader, a one-line description of each step's first message.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .wire import describe

AFTER = ("", "shut_wr", "close", "reset")   # what the step does to its connection once sent


@dataclass(frozen=True)
class Step:
    conn: int
    data: bytes
    reply: bool = False     # the recorded server answered this message: wait for the answer
    chunk: int = 0          # > 0: send this many bytes at a time (slow sending)
    pause_ms: int = 0       # the pause between two chunks
    after: str = ""         # one of AFTER

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"conn": self.conn, "what": describe(self.data), "data": self.data.hex()}
        if self.reply:
            out["reply"] = True
        if self.chunk:
            out["chunk"], out["pause_ms"] = self.chunk, self.pause_ms
        if self.after:
            out["after"] = self.after
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Step:
        after = str(d.get("after", ""))
        if after not in AFTER:
            raise ValueError(f"unknown step ending {after!r}")
        return cls(int(d["conn"]), bytes.fromhex(d["data"]), bool(d.get("reply", False)), int(d.get("chunk", 0)),
                   int(d.get("pause_ms", 0)), after)

    def but(self, **changes: Any) -> Step:
        return replace(self, **changes)


@dataclass
class Case:
    name: str
    steps: list[Step] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "steps": [s.to_json() for s in self.steps]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Case:
        return cls(str(d["name"]), [Step.from_json(s) for s in d["steps"]])

    def types(self) -> list[str]:
        """The first message type of every step, by name (for checks of a recording)."""
        return [describe(s.data).split(" ", 1)[0] for s in self.steps]


def save(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1) + "\n")


@dataclass
class Round:
    """Cases sent at the same time, each `copies` times, next to `idle` connections
    that send nothing."""
    cases: list[Case]
    idle: int = 0
    copies: int = 1

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"idle": self.idle, "cases": [c.to_json() for c in self.cases]}
        if self.copies != 1:
            out["copies"] = self.copies
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Round:
        return cls([Case.from_json(c) for c in d["cases"]], int(d.get("idle", 0)), int(d.get("copies", 1)))

    def sent(self) -> list[Case]:
        """Every case of the round, copies included."""
        return [c for c in self.cases for _ in range(self.copies)]


def load_rounds(path: Path) -> list[Round]:
    """What a corpus file holds: a recorded session (one case) or a reproducer
    (``{"rounds": [...]}``, replayed one round after the other)."""
    d = json.loads(path.read_text())
    if "rounds" in d:
        return [Round.from_json(r) for r in d["rounds"]]
    return [Round([Case.from_json(d)])]


def load_cases(path: Path) -> list[Case]:
    """Every case of a corpus file, in order."""
    return [c for r in load_rounds(path) for c in r.cases]
