"""Applying an oracle's copies to byte buffers (the model's memory)."""
from __future__ import annotations

from typing import Any, MutableSequence, Sequence

from .outcome import Copy


def apply_copies(copies: Sequence[Copy], src: Sequence[Any], dst: MutableSequence[Any]) -> None:
    """Perform ``copies`` from the tensors ``src`` into the tensors ``dst`` (each tensor a
    ``bytearray`` or a one-dimensional ``uint8`` numpy array).

    Every source range is read before any destination range is written, so ``src``
    and ``dst`` may be the same tensors: a call's source and destination bytes never
    overlap (PR-5, PR-24), and reading first makes that assumption harmless.
    """
    chunks = [src[c.src_tensor][c.src_offset:c.src_offset + c.length].copy() for c in copies]
    for c, chunk in zip(copies, chunks):
        assert len(chunk) == c.length, f"copy {c} reads past the source tensor"
        target = dst[c.dst_tensor]
        assert c.dst_offset + c.length <= len(target), f"copy {c} writes past the destination tensor"
        target[c.dst_offset:c.dst_offset + c.length] = chunk
