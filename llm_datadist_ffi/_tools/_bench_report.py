"""The benchmark suite's report: the machine, the rows, the goals, as text, JSON or a plot.

The goals are those of the project's performance work (one-sided transfers at memcpy
speed); each is stated with its target and the figure this run measured, and is met,
not met, or not measured (with the reason: a path the backend does not offer, a size
not selected). They are judged from the rows alone, so a JSON report can be judged
again later by anyone.
"""
from __future__ import annotations

import argparse
import importlib
import os
import platform
from typing import Any, Dict, List, Optional

import numpy as np

PLOT_EXTRA = "pip install llm_datadist_ffi[plot]"
#: A Python part below zero: the machine's load changed between the two timings.
NOISE = "the C call alone measured slower than the whole method: the machine's load moved; run on a quiet machine"
KIB = 1024


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> Dict[str, Any]:
    from .. import __version__

    return {"cores": os.cpu_count(), "cpu_model": _cpu_model(), "kernel": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "numpy": np.__version__, "llm_datadist_ffi": __version__}


def size_text(nbytes: int) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", KIB)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


# ---- goals ----------------------------------------------------------------------------------------

def _goal(goal: str, target: str, figure: Optional[str], met: Optional[bool], note: str = "") -> Dict[str, Any]:
    status = "not measured" if met is None else ("met" if met else "not met")
    return {"goal": goal, "target": target, "measured": figure, "status": status, "note": note}


def goals(transfers: List[Dict[str, Any]], per_call: List[Dict[str, Any]], block_lists: List[Dict[str, Any]],
          cores: int) -> List[Dict[str, Any]]:
    """Each goal with its target and this run's figure (the worst row where the target
    is a floor for every row, the row that decides otherwise)."""
    single = [r for r in transfers if r["threads"] == 1]
    result = []

    shared = [r for r in single if r["path"] == "shared" and r["memory"] == "library" and r["block_bytes"] >= 16 * KIB]
    if shared:
        worst = min(shared, key=lambda r: r["x_memcpy"])
        # judged on the contiguous memcpy floor, as the target says; the floor of a plain
        # memcpy of the same regions between library memory is reported beside it
        with_regions = [r for r in shared if r.get("x_regions") is not None]
        note = ""
        if with_regions:
            low = min(with_regions, key=lambda r: r["x_regions"])
            floor = min(with_regions, key=lambda r: r["memcpy_seconds"] / r["regions_seconds"])
            note = (f"against a plain memcpy of the same regions between library memory: worst "
                    f"{low['x_regions']:.2f}x ({_where(low)}); that memcpy itself reaches "
                    f"{floor['memcpy_seconds'] / floor['regions_seconds']:.2f}x of the contiguous floor at worst "
                    f"({_where(floor)})")
        result.append(_goal("1. library memory moves as a plain copy (shared mapping)",
                            ">= 0.95x memcpy, every block size >= 16 KiB, contiguous and scattered",
                            f"{worst['x_memcpy']:.2f}x (worst: {_where(worst)})", worst["x_memcpy"] >= 0.95, note))
    else:
        library = [r for r in single if r["memory"] == "library" and r["path"] == "process_vm"
                   and r["block_bytes"] >= 16 * KIB]
        note = "no link of this run offered a shared mapping"
        if library:
            worst = min(library, key=lambda r: r["x_memcpy"])
            note += f"; library memory in another process took the {worst['path']} path, worst {_where(worst)}"
            result.append(_goal("1. library memory moves as a plain copy (shared mapping)",
                                ">= 0.95x memcpy, every block size >= 16 KiB, contiguous and scattered",
                                f"{worst['x_memcpy']:.2f}x", False, note))
        else:
            result.append(_goal("1. library memory moves as a plain copy (shared mapping)",
                                ">= 0.95x memcpy, every block size >= 16 KiB, contiguous and scattered", None, None,
                                note + "; no cross-process library memory row >= 16 KiB was selected"))
    user = [r for r in single if r["path"] == "process_vm" and r["memory"] == "user" and r["shape"] == "scattered"
            and r["block_bytes"] >= 64 * KIB]
    target = ">= 0.8x memcpy, scattered, every block size >= 64 KiB"
    if user:
        worst = min(user, key=lambda r: r["x_memcpy"])
        result.append(_goal("1. registered user memory (process_vm)", target,
                            f"{worst['x_memcpy']:.2f}x (worst: {_where(worst)})", worst["x_memcpy"] >= 0.8))
    else:
        result.append(_goal("1. registered user memory (process_vm)", target, None, None,
                            "no process_vm row of user memory >= 64 KiB"))

    remote = [r for r in per_call if r["path"] in ("process_vm", "shared")]
    if remote:
        # every one-sided path must meet it: the slowest row decides, the others are named
        slowest = max(remote, key=lambda r: r["us_per_call"])
        others = "; ".join(f"{r['path']}, {r['memory']} memory: {r['us_per_call']:.1f} us"
                           for r in remote if r is not slowest)
        result.append(_goal("2. one-block pull through the native API", "<= 10 us per call",
                            f"{slowest['us_per_call']:.1f} us ({slowest['path']}, {slowest['memory']} memory)",
                            slowest["us_per_call"] <= 10, others))
        python = max(r["us_python"] for r in remote)
        result.append(_goal("2. ... of which in Python", "<= 5 us",
                            f"{python:.1f} us at most (C call alone: {slowest['us_c_call']:.1f} us in the slowest row)",
                            None if python < 0 else python <= 5, NOISE if python < 0 else ""))
        vm = [r for r in per_call if r["path"] == "process_vm"]
        sock = [r for r in per_call if r["path"] == "socket"]
        if vm and sock:
            ratio = min(r["us_per_call"] for r in sock) / min(r["us_per_call"] for r in vm)
            result.append(_goal("2. socket path's per-call cost", "<= 2x the process_vm path's",
                                f"{ratio:.2f}x", ratio <= 2))
        else:
            result.append(_goal("2. socket path's per-call cost", "<= 2x the process_vm path's", None, None,
                                "needs rows of both the socket and the process_vm path"))
    else:
        result.append(_goal("2. one-block pull through the native API", "<= 10 us per call, <= 5 us in Python",
                            None, None, "no cross-process process_vm or shared row"))

    if block_lists:
        result.append(_block_list_goal(block_lists))

    identified = [r for r in transfers if r["path"] in ("process_vm", "shared")]
    most = max((r["threads"] for r in identified), default=0)
    parallel = [r for r in identified if r["threads"] == most and most > 1]
    if parallel:
        # against the best memcpy of the run: the machine's load only ever lowers a floor,
        # and a floor caught low would flatter the threads
        memcpy = max(r["memcpy_gb_per_s"] for r in transfers)
        best = max(parallel, key=lambda r: r["gb_per_s"])
        ratio = best["gb_per_s"] / memcpy
        figure = (f"{ratio:.2f}x: {best['gb_per_s']:.2f} GB/s with {most} threads on {cores} cores ({_where(best)}) "
                  f"against the run's best memcpy, {memcpy:.2f} GB/s")
        if cores >= 4:
            result.append(_goal("4. threads pulling disjoint blocks over one link",
                                ">= 1.5x the single-thread memcpy rate (>= 4 cores)", figure, ratio >= 1.5))
        else:
            result.append(_goal("4. threads pulling disjoint blocks over one link",
                                ">= 1.5x the single-thread memcpy rate (>= 4 cores)", figure, None,
                                f"this machine has {cores} cores; the target applies from 4"))
    else:
        result.append(_goal("4. threads pulling disjoint blocks over one link",
                            ">= 1.5x the single-thread memcpy rate (>= 4 cores)", None, None,
                            "needs --threads 2 or more and the process_vm or shared path"))
    result.append(_goal("5. the benchmark suite", "every goal's figure as a ratio in one run",
                        f"{len(transfers)} transfer rows, every one's bytes checked", True))
    return result


def extra_block_costs(block_lists: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """For each list form, every longer list against the shortest: the Python time each
    block beyond the shortest list's adds to a call, in us ("us"), with the two lengths
    ("from", "to"). The fixed cost of a call drops out of the difference."""
    slopes = []
    for form in sorted({r["form"] for r in block_lists}):
        rows = sorted((r for r in block_lists if r["form"] == form), key=lambda r: r["blocks"])
        base = rows[0]
        for row in rows[1:]:
            if row["blocks"] > base["blocks"]:
                slopes.append({"form": form, "from": base["blocks"], "to": row["blocks"],
                               "us": (row["us_python"] - base["us_python"]) / (row["blocks"] - base["blocks"])})
    return slopes


def _block_list_goal(block_lists: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Goal 3, judged by the marginal cost of a block: what the longest list and every
    shorter one cost in Python beyond the shortest list, per extra block, at its worst.
    The cost of the call itself (the shortest list's) is goal 2's figure."""
    goal, target = "3. block-list handling per block (Python lists and numpy arrays)", \
        "<= 0.2 us per block up to the request limit"
    slopes = extra_block_costs(block_lists)
    if not slopes:
        return _goal(goal, target, None, None, "needs block lists of two lengths (--list-blocks 2 or more)")
    worst = max(slopes, key=lambda s: s["us"])
    longest = max(r["blocks"] for r in block_lists)
    c_part = max(r["us_c_per_block"] for r in block_lists if r["blocks"] == longest)
    shortest = [r for r in block_lists if r["blocks"] == worst["from"]]
    fixed = max(r["us_python"] for r in shortest)
    noisy = any(r["us_python"] < 0 for r in block_lists)
    figure = (f"{worst['us']:.3f} us in Python per extra block (worst: {worst['form']}, {worst['from']} to "
              f"{worst['to']} blocks); C, with the 64 B copies: {c_part:.3f} us per block at {longest} blocks")
    note = (f"the Python cost of the call itself, {fixed:.1f} us with {worst['from']} block(s), is goal 2's, not "
            "the blocks'; the C part includes moving each block's bytes; the figure judged is Python's")
    return _goal(goal, target, figure, None if noisy else worst["us"] <= 0.2, NOISE if noisy else note)


def _where(row: Dict[str, Any]) -> str:
    return f"{row['op']} {row['path']} {row['memory']} {row['shape']} {size_text(row['block_bytes'])}"


def assemble(args: argparse.Namespace, transfers: List[Dict[str, Any]], per_call: List[Dict[str, Any]],
             block_lists: List[Dict[str, Any]], paths: Dict[str, str], seconds: float) -> Dict[str, Any]:
    info = machine()
    return {
        "machine": info,
        "settings": {"sizes": args.sizes, "bytes": args.bytes, "tensors": args.tensors, "paths": args.paths,
                     "memory": args.memory, "ops": args.ops, "threads": args.threads, "repeat": args.repeat,
                     "calls": args.calls, "list_blocks": args.list_blocks},
        "seconds": seconds, "paths": paths, "transfers": transfers, "per_call": per_call,
        "block_lists": block_lists, "goals": goals(transfers, per_call, block_lists, int(info["cores"] or 1)),
    }


# ---- text ---------------------------------------------------------------------------------------

def _opt(value: Optional[float], fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def text(report: Dict[str, Any]) -> str:
    m, s = report["machine"], report["settings"]
    lines = [f"machine: {m['cores']} cores, {m['cpu_model']}, {m['kernel']}; Python {m['python']}, "
             f"numpy {m['numpy']}, llm_datadist_ffi {m['llm_datadist_ffi']}",
             f"{size_text(s['bytes'])} per transfer over {s['tensors']} tensors, best of {s['repeat']}; "
             f"ran {report['seconds']:.0f} s",
             "paths: " + "; ".join(f"{path}: {state}" for path, state in report["paths"].items()),
             "",
             "Transfers. x memcpy: against a memcpy of the same byte count; x raw: against process_vm_readv "
             "(pull) or process_vm_writev (push) of the same regions; x regions (library memory): against a plain "
             "memcpy of the same regions between two library allocations; every floor timed right after each "
             "repetition.",
             f"{'op':<5} {'path':<11} {'memory':<8} {'shape':<11} {'block':>8} {'thr':>3} {'GB/s':>7} "
             f"{'memcpy':>7} {'x memcpy':>8} {'raw':>7} {'x raw':>6} {'x regions':>9}"]
    for r in report["transfers"]:
        lines.append(f"{r['op']:<5} {r['path']:<11} {r['memory']:<8} {r['shape']:<11} {size_text(r['block_bytes']):>8} "
                     f"{r['threads']:>3} {r['gb_per_s']:>7.2f} {r['memcpy_gb_per_s']:>7.2f} {r['x_memcpy']:>8.2f} "
                     f"{_opt(r['raw_gb_per_s'], '7.2f'):>7} {_opt(r['x_raw'], '6.2f'):>6} "
                     f"{_opt(r.get('x_regions'), '9.2f'):>9}")
    lines += ["", "One-block pull through the native API (us per call; C alone: the same call with its arguments "
              "converted beforehand; floors: one block's memcpy and raw process_vm_readv).",
              f"{'path':<11} {'memory':<8} {'block':>8} {'call':>7} {'C':>7} {'Python':>7} {'memcpy':>7} "
              f"{'raw':>7} {'x raw':>6}"]
    for r in report["per_call"]:
        lines.append(f"{r['path']:<11} {r['memory']:<8} {size_text(r['block_bytes']):>8} {r['us_per_call']:>7.2f} "
                     f"{r['us_c_call']:>7.2f} {r['us_python']:>7.2f} {r['us_memcpy_one_block']:>7.2f} "
                     f"{_opt(r['us_raw_process_vm'], '7.2f'):>7} {_opt(r['x_raw_process_vm'], '6.2f'):>6}")
    extra = {(s["form"], s["to"]): s["us"] for s in extra_block_costs(report["block_lists"])}
    lines += ["", "Block lists: a scattered pull of 64 B blocks of 2 tensors in this process (Python: the method "
              "minus the C call alone; per extra block: beyond the shortest list of the same form).",
              f"{'blocks':>7} {'form':<6} {'call us':>10} {'Python us':>10} {'Python/extra blk':>16} {'C/blk':>8}"]
    for r in report["block_lists"]:
        lines.append(f"{r['blocks']:>7} {r['form']:<6} {r['us_per_call']:>10.1f} {r['us_python']:>10.1f} "
                     f"{_opt(extra.get((r['form'], r['blocks'])), '16.3f'):>16} {r['us_c_per_block']:>8.3f}")
    lines += ["", "Goals"]
    for g in report["goals"]:
        lines.append(f"- {g['goal']}: target {g['target']}; measured {g['measured'] or '-'}: {g['status'].upper()}"
                     + (f" ({g['note']})" if g["note"] else ""))
    return "\n".join(lines)


# ---- plot ---------------------------------------------------------------------------------------

def require_matplotlib() -> None:
    """Raise ``CommandError`` naming the extra to install when matplotlib is missing."""
    from ._cli import CommandError

    try:
        importlib.import_module("matplotlib")
    except ImportError:
        raise CommandError(f"--plot needs matplotlib, which is not installed: {PLOT_EXTRA}") from None


def plot(report: Dict[str, Any], path: str) -> None:
    """GB/s against block size: one line per path and memory kind (single-thread pulls),
    contiguous and scattered side by side, the floors dashed."""
    # imported by name: matplotlib is an optional extra, without type information in CI
    importlib.import_module("matplotlib").use("Agg")     # files only, never a window
    plt: Any = importlib.import_module("matplotlib.pyplot")

    rows = [r for r in report["transfers"] if r["op"] == "pull" and r["threads"] == 1]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.8), sharey=True)
    for axis, shape in zip(axes, ("contiguous", "scattered")):
        mine = [r for r in rows if r["shape"] == shape]
        for key in sorted({(r["path"], r["memory"]) for r in mine}):
            line = sorted((r for r in mine if (r["path"], r["memory"]) == key), key=lambda r: r["block_bytes"])
            axis.plot([r["block_bytes"] for r in line], [r["gb_per_s"] for r in line], marker="o",
                      label=f"{key[0]}, {key[1]} memory")
        sizes = sorted({r["block_bytes"] for r in mine})
        memcpy = [max(r["memcpy_gb_per_s"] for r in mine if r["block_bytes"] == b) for b in sizes]
        axis.plot(sizes, memcpy, "k--", label="floor: memcpy of the same bytes")
        raw = [[r["raw_gb_per_s"] for r in mine if r["block_bytes"] == b and r["raw_gb_per_s"] is not None]
               for b in sizes]
        if all(raw):
            axis.plot(sizes, [max(v) for v in raw], "k:", label="floor: raw process_vm_readv, same regions")
        axis.set_xscale("log", base=2)
        axis.set_xticks(sizes, [size_text(b) for b in sizes], rotation=30)
        axis.set_xlabel("block size")
        axis.set_title(f"pull, {shape} blocks")
        axis.grid(True, alpha=0.3)
    axes[0].set_ylabel("GB/s")
    axes[1].legend(fontsize="small")
    m = report["machine"]
    figure.suptitle(f"{size_text(report['settings']['bytes'])} per transfer; {m['cores']} cores, {m['cpu_model']}",
                    fontsize="medium")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
