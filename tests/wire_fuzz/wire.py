"""The mock's message framing, as far as the fuzzer needs it.

Only the fixed header is known here, and it is read from the mock's own source
(mock_libs/wire/protocol.h: ``msg_hdr``, ``enum msg_type``, ``PROTO_MAGIC``), so a change
there reaches the fuzzer without an edit; tests/abi/test_wire_protocol.py checks this
reading against the compiler's. Message bodies are never built by hand: they
come from recorded traffic and are only mutated, so a change of a body's layout reaches
the fuzzer with the next recording.
"""
from __future__ import annotations

import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

PROTOCOL_H = Path(__file__).resolve().parents[2] / "mock_libs" / "wire" / "protocol.h"
_C_TYPES = {"uint8_t": "B", "uint16_t": "H", "uint32_t": "I", "uint64_t": "Q"}

assert sys.byteorder == "little", "the recorded corpus is little-endian (the mock's wire is host-endian)"


def _read_protocol_h() -> tuple[tuple[tuple[str, int, int], ...], dict[int, str], int]:
    """(name, offset, width) of every msg_hdr field, the message types by number, and
    the magic number, from protocol.h."""
    text = re.sub(r"/\*.*?\*/", "", PROTOCOL_H.read_text(), flags=re.S)
    body = re.search(r"typedef struct msg_hdr \{(.*?)\} msg_hdr;", text, re.S)
    types = re.search(r"enum msg_type \{(.*?)\};", text, re.S)
    magic = re.search(r"#define PROTO_MAGIC (0x[0-9A-Fa-f]+)u", text)
    if body is None or types is None or magic is None:
        raise RuntimeError(f"{PROTOCOL_H}: msg_hdr, enum msg_type or PROTO_MAGIC not found")
    fields, offset = [], 0
    for c_type, name in re.findall(r"(\w+)\s+(\w+);", body.group(1)):
        width = struct.calcsize(_C_TYPES[c_type])
        offset += -offset % width                     # natural alignment, as the compiler lays it out
        fields.append((name, offset, width))
        offset += width
    names = re.findall(r"^\s*MSG_(\w+)", types.group(1), re.M)
    if not re.search(r"MSG_\w+\s*=\s*1\s*,", types.group(1)) or "=" in types.group(1).split(",", 1)[1]:
        raise RuntimeError(f"{PROTOCOL_H}: enum msg_type is expected to count from 1 without gaps")
    return tuple(fields), {number: name for number, name in enumerate(names, 1)}, int(magic.group(1), 16)


def _layout(fields: tuple[tuple[str, int, int], ...]) -> struct.Struct:
    """The header as a struct format, with pad bytes where the compiler puts them."""
    fmt, at = "<", 0
    for _, offset, width in fields:
        fmt += "x" * (offset - at) + {1: "B", 2: "H", 4: "I", 8: "Q"}[width]
        at = offset + width
    widest = max(width for _, _, width in fields)
    return struct.Struct(fmt + "x" * (-at % widest))


FIELDS, TYPE_NAMES, MAGIC = _read_protocol_h()
HEADER = _layout(FIELDS)
HEADER_SIZE = HEADER.size
FIELD_NAMES = tuple(name for name, _, _ in FIELDS)
FIELD = {name: (offset, width) for name, offset, width in FIELDS}
assert {"magic", "type", "payload_len"} <= set(FIELD), FIELD_NAMES


def field_bytes(message: bytes, name: str) -> bytes:
    """The raw bytes of one header field of a message (shorter if the message is)."""
    offset, width = FIELD[name]
    return message[offset:offset + width]


@dataclass(frozen=True)
class Header:
    """A parsed header; ``fields`` holds every field of msg_hdr by name."""
    fields: dict[str, int]

    @classmethod
    def parse(cls, data: bytes) -> Header:
        return cls(dict(zip(FIELD_NAMES, HEADER.unpack_from(data))))

    @property
    def magic(self) -> int:
        return self.fields["magic"]

    @property
    def type(self) -> int:
        return self.fields["type"]

    @property
    def status(self) -> int:
        return self.fields.get("status", 0)

    @property
    def a(self) -> int:
        return self.fields.get("a", 0)

    @property
    def payload_len(self) -> int:
        return self.fields["payload_len"]

    def type_name(self) -> str:
        return TYPE_NAMES.get(self.type, f"type {self.type}")


def split_messages(stream: bytes) -> tuple[list[bytes], bytes]:
    """Cuts one direction of a connection into whole messages (header and payload);
    returns them and the bytes left over (an incomplete last message)."""
    messages: list[bytes] = []
    at = 0
    while len(stream) - at >= HEADER_SIZE:
        header = Header.parse(stream[at:at + HEADER_SIZE])
        if header.magic != MAGIC:
            break
        end = at + HEADER_SIZE + header.payload_len
        if end > len(stream):
            break
        messages.append(stream[at:end])
        at = end
    return messages, stream[at:]


def describe(message: bytes) -> str:
    """A one-line summary of a message, for the corpus and reports."""
    if len(message) < HEADER_SIZE:
        return f"{len(message)} bytes (shorter than a header)"
    h = Header.parse(message)
    rest = " ".join(f"{k}={v:#x}" for k, v in h.fields.items() if k not in ("magic", "type", "payload_len"))
    return f"{h.type_name()} {rest} payload_len={h.payload_len} ({len(message) - HEADER_SIZE} sent)"
