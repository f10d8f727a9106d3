"""Mock engines in processes of their own, driven through the engine tests' peer
program (tests/support/engine_support.py: one JSON command per line on stdin, one answer
per line on stdout). The fuzz target is one of them; the legitimate clients that
the recording and the final check run are others.

Each process's stderr goes to a file, so that the harness can look for sanitizer
reports there, and the process inherits this process's environment (the CI stage
sets the sanitizer build and its preloads for the whole run).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

SUPPORT = Path(__file__).resolve().parents[1] / "support"
PEER_PROGRAM = SUPPORT / "engine_support.py"         # the native API
VENDOR_PROGRAM = SUPPORT / "vendor_peer.py"          # the vendor-compatible API

# What a sanitizer or the interpreter writes when the process is broken; any of
# these on the target's stderr fails the run.
BROKEN = re.compile(r"ERROR: (AddressSanitizer|LeakSanitizer|ThreadSanitizer)|WARNING: ThreadSanitizer|"
                    r"runtime error:|Fatal Python error|double free|corrupted|stack smashing")


class EngineError(Exception):
    def __init__(self, op: str, status: int, message: str) -> None:
        super().__init__(f"{op}: 0x{status:08X}: {message}")
        self.status = status


def _package_path() -> str:
    """The directory holding the llm_datadist_ffi this process would import."""
    spec = importlib.util.find_spec("llm_datadist_ffi")
    if spec is None or spec.origin is None:
        raise RuntimeError("llm_datadist_ffi is not importable")
    return str(Path(spec.origin).resolve().parent.parent)


class EngineProcess:
    """An engine of the native API: ``call(op, **args)`` runs one command of the peer
    program and returns its result."""

    program: list[str] = [str(PEER_PROGRAM)]

    def __init__(self, name: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        path = os.pathsep.join(p for p in (_package_path(), os.environ.get("PYTHONPATH", "")) if p)
        self._stderr: IO[bytes] = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, *self.program], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     cwd=tempfile.gettempdir(),
                                     env={**os.environ, "PYTHONPATH": path, **(env or {})})
        self.pid = self.proc.pid

    def call(self, op: str, **args: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} ended during {op!r} (exit code {self.proc.wait()}):\n{self.stderr()}")
        reply: dict[str, Any] = json.loads(line)
        if not reply["ok"]:
            raise EngineError(op, int(reply["status"]), str(reply["error"]))
        return reply["result"]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def broken(self) -> str | None:
        """The first line of a sanitizer or crash report on stderr, if there is one."""
        text = self.stderr()
        found = BROKEN.search(text)
        if found is None:
            return None
        start = text.rfind("\n", 0, found.start()) + 1
        end = text.find("\n", found.end())
        return text[start:end if end >= 0 else len(text)]

    def counts(self) -> tuple[int, int]:
        """(open descriptors, threads) of the process, from /proc."""
        return len(os.listdir(f"/proc/{self.pid}/fd")), len(os.listdir(f"/proc/{self.pid}/task"))

    def close(self, timeout: float = 30) -> int:
        """Ends the process's loop (it closes its engine) and returns its exit code."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass                       # it is gone already
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.proc.stdout.close()
        return code

    def discard(self) -> None:
        self._stderr.close()


class VendorProcess(EngineProcess):
    """A process of the vendor-compatible API (tests/support/vendor_peer.py): ``run(code,
    value)`` executes statements there and returns the value of an expression."""

    program = [str(VENDOR_PROGRAM)]

    def run(self, code: str, value: str | None = None) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"code": code, "value": value}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} ended (exit code {self.proc.wait()}):\n{self.stderr()}")
        reply: dict[str, Any] = json.loads(line)
        if not reply["ok"]:
            raise EngineError(code, int(reply["status"] or 0), str(reply["message"]))
        return reply["value"]
