"""Reading call traces: merge the per-process files, summarise them, attach them to a
failing test's report.

A process with ``LLM_DATADIST_FFI_TRACE=DIR`` in its environment writes every public
call of the package to ``DIR/trace-<pid>-<start µs>.json`` (see docs/user-guide.md,
"Call traces"); the pytest plugin gives the processes of each test a subdirectory of its
own, ``DIR/<test id>/`` (:func:`directory_for`). This module reads the files of a
directory and of its subdirectories, and turns them into what people look at:

- :func:`merge`: one Chrome trace (``{"traceEvents": [...]}``) in which each process is
  one track, named after its engine ("PROMPT cluster 1 (pid 4242)"), for Perfetto or
  ``chrome://tracing``;
- :func:`summary`: per method the number of calls, the bytes moved, the throughput
  (bytes over the summed durations, in the unit that fits: B/s, kB/s, MB/s or GB/s) and
  the errors by status code;
- :func:`attach_to_report`: both of them on a failing test's pytest report.

The command line is ``python -m llm_datadist_ffi trace merge DIR [-o FILE]`` and
``python -m llm_datadist_ffi trace summary DIR``; both fail (status 1) with a hint when
there is nothing to read.
"""
from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from .._core._trace import TRACE_ENV

__all__ = ["TRACE_ENV", "trace_files", "read_events", "merge", "write_merged", "MethodStats", "stats", "rate_text",
           "summary", "directory_for", "attach_to_report", "main"]

PathLike = Union[str, "os.PathLike[str]"]
_FILE = re.compile(r"trace-\d+-\d+\.json$")


def trace_files(directory: PathLike) -> List[Path]:
    """The per-process trace files of ``directory`` and of its subdirectories at any depth
    (the pytest plugin's ``DIR/<test id>/``), in path order."""
    return sorted(p for p in Path(directory).rglob("trace-*.json") if _FILE.match(p.name) and p.is_file())


def _nothing_to_read(directory: PathLike) -> str:
    return (f"no trace files in {directory} or its subdirectories (trace-<pid>-<start>.json); set "
            f"{TRACE_ENV}={directory} in the environment of the processes to trace (for a test run: pytest's "
            "environment) before they import llm_datadist_ffi, and run them again")


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
    """The trace files of ``directory`` and its subdirectories as one Chrome trace.

    Each file is one process; two files with the same pid (a pid reused, or processes
    of two hosts or two tests) get distinct pids here. Per process the last
    ``process_name`` wins (a process is named after its first engine once that exists)
    and comes first; a process of a subdirectory (one test's, with the pytest plugin)
    has the subdirectory's name appended to its track's name. The call events follow in
    the order of their start time.
    """
    metadata: List[Dict[str, Any]] = []
    calls: List[Dict[str, Any]] = []
    used: set[int] = set()
    root = Path(directory)
    for path in trace_files(root):
        events = _read_file(path)
        if not events:
            continue
        pid = int(events[0].get("pid", 0))
        while pid in used:                      # another process had this pid
            pid += 1 << 22
        used.add(pid)
        where = path.parent.relative_to(root).as_posix()
        names: Dict[Any, Dict[str, Any]] = {}
        for event in events:
            event = dict(event, pid=pid)
            if event.get("ph") == "M":
                if event.get("name") == "process_name" and where != ".":
                    label = (event.get("args") or {}).get("name", "")
                    event["args"] = {**event["args"], "name": f"{label} [{where}]"}
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

    @property
    def rate(self) -> str:
        """:attr:`gb_per_s` in the unit that fits it (:func:`rate_text`); ``"-"`` when
        nothing moved."""
        return "-" if self.gb_per_s is None else rate_text(self.gb_per_s * 1e9)


_RATE_UNITS = (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3))


def rate_text(bytes_per_second: float) -> str:
    """A rate with three significant digits in the largest decimal unit it reaches
    (``"3.00GB/s"``, ``"16.0kB/s"``, ``"32.0B/s"``): the small traffic of a test run
    reads as well as a benchmark's. One word, so that scripts can split the table."""
    value, unit = bytes_per_second, "B/s"
    for name, scale in _RATE_UNITS:
        if bytes_per_second >= scale:
            value, unit = bytes_per_second / scale, name
            break
    digits = 0 if value >= 100 else (1 if value >= 10 else 2)
    return f"{value:.{digits}f}{unit}"


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
    per method, busiest first; the rate column is :attr:`MethodStats.rate`."""
    table = stats(read_events(source))
    if not table:
        return f"no calls traced in {source}"
    rows = [("method", "calls", "bytes", "rate", "errors")]
    for name, entry in sorted(table.items(), key=lambda item: (-item[1].calls, item[0])):
        errors = ", ".join(f"{code} x{count}" for code, count in sorted(entry.errors.items()))
        rows.append((name, str(entry.calls), str(entry.bytes), entry.rate, errors or "-"))
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
    if not getattr(report, "failed", False) or not Path(directory).is_dir() or not trace_files(directory):
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
    """``python -m llm_datadist_ffi trace {merge,summary}``: 0, or 1 when there is nothing
    to read (no trace file, or no call in a merged file) or it cannot be read."""
    from .._core._suggest import ArgumentParser

    parser = ArgumentParser(prog="python -m llm_datadist_ffi trace",
                                     description=f"Call traces written with {TRACE_ENV}=DIR.")
    sub = parser.add_subparsers(dest="action", required=True)
    merge_cmd = sub.add_parser("merge", help="join the per-process files of DIR into one Chrome trace")
    merge_cmd.add_argument("directory", metavar="DIR")
    merge_cmd.add_argument("-o", "--output", metavar="FILE", help="where to write it (default: DIR/merged.json)")
    summary_cmd = sub.add_parser("summary", help="calls, bytes, rate and errors per method")
    summary_cmd.add_argument("source", metavar="DIR", help="a trace directory or a merged file")
    args = parser.parse_args(list(argv))
    try:
        source = Path(args.directory if args.action == "merge" else args.source)
        if args.action == "merge" and not source.is_dir():
            raise OSError(f"{source} is not a directory")
        if source.is_dir() and not trace_files(source):
            raise ValueError(_nothing_to_read(source))
        if args.action == "merge":
            print(write_merged(source, args.output))
        elif not stats(read_events(source)):
            raise ValueError(f"no calls traced in {source}")
        else:
            print(summary(source))
    except (OSError, ValueError, KeyError) as exc:
        print(f"python -m llm_datadist_ffi trace {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0
