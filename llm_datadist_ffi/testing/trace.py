"""Reading call traces: merge the per-process files, summarise them, attach them to a
failing test's report.

A process with ``LLM_DATADIST_FFI_TRACE=DIR`` in its environment writes every public
call of the package to ``DIR/trace-<pid>-<start µs>.json`` (see docs/user-guide.md,
"Call traces"). This module turns a directory of such files into what people look at:

- :func:`merge`: one Chrome trace (``{"traceEvents": [...]}``) in which each process is
  one track, named after its engine ("PROMPT cluster 1 (pid 4242)"), for Perfetto or
  ``chrome://tracing``;
- :func:`summary`: per method the number of calls, the bytes moved, the throughput
  (bytes over the summed durations) and the errors by status code;
- :func:`attach_to_report`: both of them on a failing test's pytest report.

The command line is ``python -m llm_datadist_ffi trace merge DIR [-o FILE]`` and
``python -m llm_datadist_ffi trace summary DIR``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from .._core._trace import TRACE_ENV

__all__ = ["TRACE_ENV", "read_events", "merge", "write_merged", "MethodStats", "stats", "summary",
           "directory_for", "attach_to_report", "main"]

PathLike = Union[str, "os.PathLike[str]"]
_FILE = re.compile(r"trace-\d+-\d+\.json$")


def _trace_files(directory: PathLike) -> List[Path]:
    return sorted(p for p in Path(directory).iterdir() if _FILE.match(p.name))


def _read_file(path: Path) -> List[Dict[str, Any]]:
    """The events of one process's file. A line that does not parse (the last one of a
    process killed while writing it) is skipped."""
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        text = line.strip().rstrip(",")
        if text in ("", "[", "]"):
            continue
        try:
            event = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def read_events(source: PathLike) -> List[Dict[str, Any]]:
    """Every event of ``source``: a directory of per-process files, or a merged file."""
    path = Path(source)
    data: Any = merge(path) if path.is_dir() else json.loads(path.read_text(encoding="utf-8"))
    events: List[Dict[str, Any]] = data["traceEvents"] if isinstance(data, dict) else data
    return events


def merge(directory: PathLike) -> Dict[str, Any]:
    """The trace files of ``directory`` as one Chrome trace.

    Each file is one process; two files with the same pid (a pid reused, or processes
    of two hosts) get distinct pids here. Per process the last ``process_name`` wins (a
    process is named after its first engine once that exists) and comes first; the
    call events follow in the order of their start time.
    """
    metadata: List[Dict[str, Any]] = []
    calls: List[Dict[str, Any]] = []
    used: set[int] = set()
    for path in _trace_files(directory):
        events = _read_file(path)
        if not events:
            continue
        pid = int(events[0].get("pid", 0))
        while pid in used:                      # another process had this pid
            pid += 1 << 22
        used.add(pid)
        names: Dict[Any, Dict[str, Any]] = {}
        for event in events:
            event = dict(event, pid=pid)
            if event.get("ph") == "M":
                names[(event.get("name"), event.get("tid"))] = event
            else:
                calls.append(event)
        metadata.extend(names.values())
    calls.sort(key=lambda e: (e.get("ts", 0), e.get("pid", 0)))
    return {"traceEvents": metadata + calls, "displayTimeUnit": "ms"}


def write_merged(directory: PathLike, output: Optional[PathLike] = None) -> Path:
    """Merge ``directory`` into ``output`` (default ``DIR/merged.json``); returns the path."""
    target = Path(output) if output is not None else Path(directory) / "merged.json"
    target.write_text(json.dumps(merge(directory), indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    return target


@dataclass
class MethodStats:
    """What the calls of one method did."""

    calls: int = 0
    bytes: int = 0
    seconds: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def gb_per_s(self) -> Optional[float]:
        """Bytes moved over the summed durations, in 10^9 bytes per second (None when
        nothing moved)."""
        return self.bytes / self.seconds / 1e9 if self.bytes and self.seconds > 0 else None


def stats(events: Iterable[Dict[str, Any]]) -> Dict[str, MethodStats]:
    """Per method name, the calls of ``events`` (complete events only)."""
    out: Dict[str, MethodStats] = defaultdict(MethodStats)
    for event in events:
        if event.get("ph") != "X":
            continue
        entry = out[str(event.get("name"))]
        args = event.get("args") or {}
        entry.calls += 1
        entry.bytes += int(args.get("bytes") or 0)
        entry.seconds += float(event.get("dur") or 0) / 1e6
        status = args.get("status")
        if status is not None and status != "LLM_SUCCESS":
            code = args.get("status_code")
            entry.errors[f"{status} ({code:#010x})" if isinstance(code, int) else str(status)] += 1
    return dict(out)


def summary(source: PathLike) -> str:
    """A table of :func:`stats` of ``source`` (a directory or a merged file), one line
    per method, busiest first."""
    table = stats(read_events(source))
    if not table:
        return f"no calls traced in {source}"
    rows = [("method", "calls", "bytes", "GB/s", "errors")]
    for name, entry in sorted(table.items(), key=lambda item: (-item[1].calls, item[0])):
        rate = entry.gb_per_s
        errors = ", ".join(f"{code} x{count}" for code, count in sorted(entry.errors.items()))
        rows.append((name, str(entry.calls), str(entry.bytes), "-" if rate is None else f"{rate:.3f}", errors or "-"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]:>{widths[3]}}  {row[4]}"
        for row in rows)


def directory_for(nodeid: str, root: Optional[PathLike] = None) -> Optional[Path]:
    """The trace directory of one test: a subdirectory of ``root`` (default: the
    ``LLM_DATADIST_FFI_TRACE`` of this process's environment) named after the test id, or
    None when there is no root. A plugin gives it to the test's processes as their
    ``LLM_DATADIST_FFI_TRACE``, so that each test's trace holds only its own calls."""
    base = root if root is not None else os.environ.get(TRACE_ENV)
    if not base:
        return None
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:150] or "test"
    return Path(base) / name


def attach_to_report(item: Any, report: Any, directory: PathLike) -> Optional[Path]:
    """Attach the trace of a failing test to its pytest report.

    For the pytest plugin's ``pytest_runtest_makereport`` hook wrapper: call it with the
    test item, the report of the phase that failed and the ``LLM_DATADIST_FFI_TRACE``
    directory the test's processes wrote to (one directory per test keeps the timeline
    to that test: :func:`directory_for` names it; the plugin passes it to the processes
    it starts in their environment, and its hook wrapper ends with
    ``attach_to_report(item, report, directory_for(item.nodeid))`` when that is not None).

    When ``report.failed`` and the directory holds trace files, it merges them into
    ``DIR/merged.json`` and adds two sections to the report, shown under the failure:
    "llm_datadist_ffi trace" with the merged file's path (open it in Perfetto or
    ``chrome://tracing``) and "llm_datadist_ffi trace summary" with :func:`summary`. It
    also records the path as the user property ``llm_datadist_ffi_trace`` (it appears in
    JUnit XML). Returns the merged file's path, or None when nothing was attached.
    """
    if not getattr(report, "failed", False) or not Path(directory).is_dir() or not _trace_files(directory):
        return None
    merged = write_merged(directory)
    when = getattr(report, "when", "call")
    report.sections.append((f"llm_datadist_ffi trace ({when})",
                            f"merged trace of {getattr(item, 'nodeid', '?')}: {merged}\n"
                            "(open it in https://ui.perfetto.dev or chrome://tracing)"))
    report.sections.append((f"llm_datadist_ffi trace summary ({when})", summary(merged)))
    report.user_properties.append(("llm_datadist_ffi_trace", str(merged)))
    return merged


def main(argv: Sequence[str]) -> int:
    """``python -m llm_datadist_ffi trace {merge,summary}``."""
    parser = argparse.ArgumentParser(prog="python -m llm_datadist_ffi trace",
                                     description=f"Call traces written with {TRACE_ENV}=DIR.")
    sub = parser.add_subparsers(dest="action", required=True)
    merge_cmd = sub.add_parser("merge", help="join the per-process files of DIR into one Chrome trace")
    merge_cmd.add_argument("directory", metavar="DIR")
    merge_cmd.add_argument("-o", "--output", metavar="FILE", help="where to write it (default: DIR/merged.json)")
    summary_cmd = sub.add_parser("summary", help="calls, bytes, GB/s and errors per method")
    summary_cmd.add_argument("source", metavar="DIR", help="a trace directory or a merged file")
    args = parser.parse_args(list(argv))
    try:
        if args.action == "merge":
            if not Path(args.directory).is_dir():
                raise OSError(f"{args.directory} is not a directory")
            print(write_merged(args.directory, args.output))
        else:
            print(summary(args.source))
    except (OSError, ValueError, KeyError) as exc:
        print(f"python -m llm_datadist_ffi trace {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0
