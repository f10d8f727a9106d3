"""What every command of ``python -m llm_datadist_ffi`` shares.

* **Arguments** are checked by argparse (``int_in``: an integer type with a range), so
  a wrong value is a usage message and exit status 2, never a traceback; a misspelt
  choice (a subcommand, an action) is answered with the closest one (``ArgumentParser``).
* **Memory**: a command that allocates what its arguments say first compares that with
  the memory the kernel reports as available (``MemAvailable`` of ``/proc/meminfo``)
  and refuses, naming both figures, before allocating anything.
* **Ctrl-C**: a command's work runs in a worker thread while the main thread waits in
  short slices, so that Python's SIGINT handler runs at once even while the work is
  inside a native call that may block for its whole timeout. On Ctrl-C the command's
  child processes are killed and the process exits with status 130 without waiting for
  the worker (whose native call may still be running; process exit ends it).
* **Expected failures** (``CommandError``; an ``ImportError``, which is how a backend
  that cannot load reports, with what to do) are one line on stderr and a non-zero
  status.
"""
from __future__ import annotations

import argparse
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence

from .._core._suggest import ArgumentParser

__all__ = [
    "CommandError", "reports_errors", "ArgumentParser", "int_in", "available_memory", "check_fits", "spawn",
    "describe_exit", "run_interruptibly", "description", "memcpy_seconds", "MEMCPY_CHUNK",
]

#: How long the main thread waits at a time: the bound on the reaction to Ctrl-C.
WAIT_SLICE_S = 0.05

_children: List["subprocess.Popen[str]"] = []
_children_lock = threading.Lock()


class CommandError(Exception):
    """A failure the user can act on: printed as one line, exit status ``status``."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def _say(prog: str, error: CommandError) -> int:
    """Print ``error`` as the one line a user acts on; returns its exit status."""
    print(f"{prog}: {error}", file=sys.stderr)
    return error.status


def reports_errors(prog: str) -> Callable[[Callable[[Sequence[str]], int]], Callable[[Sequence[str]], int]]:
    """Decorate a command's ``main(argv)``: a ``CommandError`` raised in it becomes one
    line on stderr, ``"<prog>: <message>"``, and the error's exit status."""
    def decorate(main: Callable[[Sequence[str]], int]) -> Callable[[Sequence[str]], int]:
        @functools.wraps(main)
        def run(argv: Sequence[str]) -> int:
            try:
                return main(argv)
            except CommandError as error:
                return _say(prog, error)
        return run
    return decorate


def description(doc: Optional[str]) -> str:
    """The first paragraph of a module docstring, as argparse's description."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def int_in(low: int, high: Optional[int] = None) -> Callable[[str], int]:
    """An argparse ``type``: a decimal integer in ``[low, high]`` (no upper bound when
    ``high`` is None)."""
    def parse(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"{value} is out of range: must be {bound}")
        return value
    parse.__name__ = "integer"           # argparse names the type in its messages
    return parse


def available_memory() -> Optional[int]:
    """Bytes the kernel reports as available for new allocations, or None where
    ``/proc/meminfo`` does not exist (the check is then skipped)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def check_fits(need: int, what: str, hint: str, available: Optional[int] = None) -> None:
    """Raise ``CommandError`` when ``need`` bytes exceed the available memory.

    Args:
        need: the bytes the command would allocate, all processes together.
        what: what needs them, for the message.
        hint: which arguments make it smaller.
        available: the available bytes (default: ``available_memory()``).
    """
    free = available_memory() if available is None else available
    if free is not None and need > free:
        raise CommandError(f"{what} needs about {_gib(need)} ({need} bytes) but only {_gib(free)} of memory is "
                           f"available (MemAvailable); {hint}")


def spawn(args: Sequence[str]) -> "subprocess.Popen[str]":
    """Start ``python -m <args>`` with this very package (the child's working directory
    is the one holding it, so a source tree or an install alike imports the same
    code), its stdin and stdout piped; it is killed on Ctrl-C."""
    package_parent = Path(__file__).resolve().parents[2]   # this module is llm_datadist_ffi/_tools/_cli.py
    child = subprocess.Popen([sys.executable, "-m", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=package_parent)
    with _children_lock:
        _children.append(child)
    return child


MEMCPY_CHUNK = 64 * 2**20


def memcpy_seconds(nbytes: int) -> float:
    """Seconds that copying ``nbytes`` with ``numpy.copyto`` takes here, through
    buffers of at most ``MEMCPY_CHUNK`` bytes (so that the baseline of a large
    transfer costs no memory of its size); the buffers are touched before timing."""
    import numpy as np

    chunk = max(1, min(nbytes, MEMCPY_CHUNK))
    source = np.ones(chunk, dtype=np.uint8)
    target = np.zeros_like(source)
    np.copyto(target, source)
    full, rest = divmod(nbytes, chunk)
    start = time.perf_counter()
    for _ in range(full):
        np.copyto(target, source)
    if rest:
        np.copyto(target[:rest], source[:rest])
    return time.perf_counter() - start


def describe_exit(returncode: Optional[int]) -> str:
    """A child's end in words: its status, or the signal that killed it."""
    if returncode is None:
        return "is still running"
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    oom = " (the kernel's out-of-memory killer sends SIGKILL)" if name == "SIGKILL" else ""
    return f"was killed by {name}{oom}"


def _kill_children() -> None:
    with _children_lock:
        children = list(_children)
    for child in children:
        if child.poll() is None:
            child.kill()                 # SIGKILL also ends a stopped child
    for child in children:
        try:
            child.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass


def run_interruptibly(prog: str, work: Callable[[], int]) -> int:
    """Run ``work`` in a worker thread and return its status; Ctrl-C ends the process
    within ``WAIT_SLICE_S`` with status 130, ``CommandError`` is one line on stderr.

    Any other exception of ``work`` propagates: it is a bug of this package, and its
    traceback is what a report needs.
    """
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["status"] = work()
        except BaseException as exc:    # handed to the main thread, which decides
            outcome["error"] = exc

    worker = threading.Thread(target=target, name=f"{prog} worker", daemon=True)
    try:
        worker.start()
        while worker.is_alive():
            worker.join(WAIT_SLICE_S)
    except KeyboardInterrupt:
        _kill_children()
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        sys.stdout.flush()
        # The worker may sit in a native call for its whole timeout, and the engines'
        # exit hooks would wait for it: leave at once, the kernel closes every socket.
        os._exit(130)
    error = outcome.get("error")
    if isinstance(error, CommandError):
        return _say(prog, error)
    if isinstance(error, ImportError):
        print(f"{prog}: no backend can be loaded: {error}", file=sys.stderr)   # the loader says what to do
        return 1
    if isinstance(error, BaseException):
        raise error
    status = outcome.get("status")
    return status if isinstance(status, int) else 0
