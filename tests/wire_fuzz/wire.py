"""The mock's message framing, as far as the fuzzer needs it.

Only the fixed 40-byte header is known here (mock_libs/transport.h, ``msg_hdr``):
magic, type, version, status, count, a, b and payload_len, host-endian. Message
bodies are never built by hand: they come from recorded traffic and are only
mutated, so a change of a body's layout reaches the fuzzer with the next recording.
"""
from __future__ import annotations

import struct
import sys
from dataclasses import dataclass

HEADER = struct.Struct("=IHHIIQQQ")
HEADER_SIZE = HEADER.size
assert HEADER_SIZE == 40
MAGIC = 0x4C4C4444
VERSION = 1

# The message types of transport.h's enum msg_type, by name, for the corpus's
# readable summaries and for type mutations (numbers outside it are tried too).
TYPE_NAMES = {
    1: "HELLO", 2: "HELLO_REPLY", 3: "REVERSE", 4: "REVERSE_REPLY", 5: "DISCONNECT", 6: "DISCONNECT_REPLY",
    7: "PIN", 8: "PIN_REPLY", 9: "UNPIN", 10: "READ", 11: "READ_REPLY", 12: "WRITE", 13: "WRITE_REPLY",
    14: "RESOLVE", 15: "RESOLVE_REPLY", 16: "RELEASE", 17: "RELEASE_REPLY", 18: "PIN_ADDR",
    19: "PIN_ADDR_REPLY",
}

# (name, byte offset, width in bytes) of every header field.
FIELDS = (("magic", 0, 4), ("type", 4, 2), ("version", 6, 2), ("status", 8, 4), ("count", 12, 4),
          ("a", 16, 8), ("b", 24, 8), ("payload_len", 32, 8))

assert sys.byteorder == "little", "the recorded corpus is little-endian (the mock's wire is host-endian)"


@dataclass(frozen=True)
class Header:
    magic: int
    type: int
    version: int
    status: int
    count: int
    a: int
    b: int
    payload_len: int

    @classmethod
    def parse(cls, data: bytes) -> Header:
        return cls(*HEADER.unpack_from(data))

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
    return (f"{h.type_name()} status={h.status} count={h.count} a={h.a:#x} b={h.b:#x} "
            f"payload_len={h.payload_len} ({len(message) - HEADER_SIZE} sent)")
