"""Draw a merged call trace as a timeline picture (one row per process and thread).

    python docs/render_trace.py MERGED.json OUT.png [--title TEXT]

MERGED.json is what ``python -m llm_datadist_ffi trace merge DIR`` writes. Each call is a
bar from its start to its end, labelled with the method; a call that failed is red and
names its status code. Perfetto or ``chrome://tracing`` show the same file interactively;
this script is for pictures in documents. It needs matplotlib, which the package does not
depend on (``pip install matplotlib``).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Dict, List, Tuple


def rows_of(events: List[Dict[str, Any]]) -> Tuple[List[Tuple[int, int]], Dict[Tuple[int, int], str]]:
    """The (pid, tid) rows in the order of their first call, and a label for each."""
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    rows: List[Tuple[int, int]] = []
    for event in events:
        key = (event["pid"], event["tid"])
        if event["ph"] == "X" and key not in rows:
            rows.append(key)
    labels = {key: f"{processes.get(key[0], key[0])}\n{threads.get(key, key[1])}" for key in rows}
    return rows, labels


def render(merged: Path, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = json.loads(merged.read_text())["traceEvents"]
    calls = [e for e in events if e["ph"] == "X"]
    rows, labels = rows_of(events)
    origin = min(e["ts"] for e in calls)
    end = max(e["ts"] + e["dur"] for e in calls)
    span_ms = (end - origin) / 1000
    fig, ax = plt.subplots(figsize=(12, 1.2 + 1.1 * len(rows)), dpi=110)
    for event in calls:
        y = len(rows) - 1 - rows.index((event["pid"], event["tid"]))
        start = (event["ts"] - origin) / 1000
        width = max(event["dur"] / 1000, span_ms / 600)        # a very short call stays visible
        failed = event["args"].get("status", "LLM_SUCCESS") != "LLM_SUCCESS"
        ax.broken_barh([(start, width)], (y - 0.3, 0.6), facecolors="#d62728" if failed else "#4c72b0",
                       edgecolor="black", linewidth=0.4)
        name = event["name"].split(".", 1)[-1]
        moved = event["args"].get("bytes")
        text = name + (f"\n{moved // 1024} KiB" if moved else "")
        if failed:
            text = f"{name}\n{event['args']['status']}"
        if width > span_ms / 25 or failed:
            ax.text(start + width / 2, y + (0.42 if failed else 0), text, ha="center",
                    va="bottom" if failed else "center", fontsize=7,
                    color="#d62728" if failed else "white")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([labels[key] for key in reversed(rows)], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.1)
    ax.set_xlim(0, span_ms * 1.02)
    ax.set_xlabel("ms since the first call")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", linestyle=":", linewidth=0.5)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("merged", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--title", default="llm_datadist_ffi call trace")
    args = parser.parse_args()
    render(args.merged, args.out, args.title)


if __name__ == "__main__":
    main()
