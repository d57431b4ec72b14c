"""From a soak's samples to its figures: the run's batch lines and the JVM's own reports
parsed, and a phase's thirds compared. No I/O: tests/unit/test_soak.py checks it.

A phase is cut in three equal spans of time. The first is the warm-up (the JVM compiling,
its heap growing to what the load needs, Delta's first checkpoints) and is left out; the
last is compared with the middle one. Medians, not means: on a shared machine one batch
that waited for a core is not a trend.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

RSS_GOAL = 1.1  # RSS of the last third / the middle third
BATCH_GOAL = 1.2  # batch time of the last third / the middle third

# ingest.batch.processor.BatchReport.line: "<pipeline> batch <id>: read <n>, ... <s>s, offsets ..."
BATCH_LINE = re.compile(r"^(?P<pipeline>\S+) batch (?P<id>\d+): read (?P<read>\d+), .*?"
                        r"(?P<seconds>\d+(?:\.\d+)?)s, offsets ")
# jcmd GC.heap_info: one line per generation or heap ("PSYoungGen total 611840K, used 104934K",
# "garbage-first heap total 262144K, used 104857K"), then Metaspace's
HEAP_LINE = re.compile(r"^\s*(?P<name>\S.*?)\s+total (?P<total>\d+)K, used (?P<used>\d+)K")
METASPACE_LINE = re.compile(r"^\s*Metaspace\s+used (?P<used>\d+)K, committed (?P<committed>\d+)K")
# jcmd VM.native_memory summary (-XX:NativeMemoryTracking=summary)
NMT_TOTAL = re.compile(r"^Total: reserved=(?P<reserved>\d+)KB, committed=(?P<committed>\d+)KB")
NMT_THREADS = re.compile(r"^\(thread #(?P<threads>\d+)\)")
NMT_CATEGORY = re.compile(r"^-\s+(?P<name>.+?) \(reserved=(?P<reserved>\d+)KB, committed=(?P<committed>\d+)KB")
# jcmd GC.class_histogram: "   1:   1234567   123456789  [B (java.base@17.0.15)"
HISTOGRAM_LINE = re.compile(r"^\s*\d+:\s+(?P<instances>\d+)\s+(?P<bytes>\d+)\s+(?P<name>\S+)")
HISTOGRAM_TOTAL = re.compile(r"^Total\s+(?P<instances>\d+)\s+(?P<bytes>\d+)")


@dataclass(frozen=True)
class Batch:
    at: float  # seconds since the soak began, when the line was read
    batch_id: int
    read: int
    seconds: float


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the soak began
    rss_mb: float  # every process of the run: Python and its JVM
    python_mb: float
    jvm_mb: float


@dataclass(frozen=True)
class Resident:
    pid: int
    parent: int
    name: str
    mb: float


def run_sample(processes: list[Resident], root: int, at: float) -> Sample | None:
    """The run's resident memory from its process tree: Python (the root), its JVM, anything else
    it started. A process the JVM starts shares the JVM's memory until it execs (posix_spawn)
    and then reads as a second copy of the JVM: counted, a soak's sample once read 2,985 MB
    (a 1,414 MB JVM twice). Left out: its own memory after exec is a few MB."""
    jvms = {p.pid for p in processes if p.name == "java" and p.parent == root}
    python = sum(p.mb for p in processes if p.pid == root)
    jvm = sum(p.mb for p in processes if p.pid in jvms)
    other = sum(p.mb for p in processes if p.pid != root and p.pid not in jvms and p.parent not in jvms)
    if not python:
        return None
    return Sample(at, python + jvm + other, python, jvm)


def parse_batch_line(line: str, at: float) -> Batch | None:
    found = BATCH_LINE.match(line.strip())
    if found is None:
        return None
    return Batch(at, int(found["id"]), int(found["read"]), float(found["seconds"]))


def parse_heap_info(text: str) -> dict[str, float]:
    """Heap committed and used (every generation summed) and Metaspace, in MB."""
    figures: dict[str, float] = {}
    total = used = 0
    for line in text.splitlines():
        if found := METASPACE_LINE.match(line):
            figures["metaspace_used_mb"] = int(found["used"]) / 1024
            figures["metaspace_committed_mb"] = int(found["committed"]) / 1024
        elif found := HEAP_LINE.match(line):
            total += int(found["total"])
            used += int(found["used"])
    if total:
        figures["heap_committed_mb"] = total / 1024
        figures["heap_used_mb"] = used / 1024
    return figures


def parse_native_memory(text: str) -> dict[str, float]:
    """Committed MB per category of the JVM's native memory tracking, its total, and the JVM's threads."""
    figures: dict[str, float] = {}
    for line in text.splitlines():
        if found := NMT_THREADS.match(line.strip()):
            figures["threads"] = int(found["threads"])
        elif found := NMT_TOTAL.match(line.strip()):
            figures["Total"] = int(found["committed"]) / 1024
        elif found := NMT_CATEGORY.match(line.strip()):
            figures[found["name"].strip()] = int(found["committed"]) / 1024
    return figures


def parse_histogram(text: str, top: int = 15) -> dict:
    """The live heap (a histogram collects first): its total and largest classes, largest first."""
    rows = [{"class": found["name"], "instances": int(found["instances"]), "mb": round(int(found["bytes"]) / 2**20, 1)}
            for line in text.splitlines() if (found := HISTOGRAM_LINE.match(line))]
    total = next((int(found["bytes"]) / 2**20 for line in text.splitlines() if (found := HISTOGRAM_TOTAL.match(line))),
                 None)
    return {"total_mb": None if total is None else round(total, 1),
            "top": sorted(rows, key=lambda row: -row["mb"])[:top]}


def thirds(points: list[tuple[float, float]], start: float, end: float) -> list[float | None]:
    """The median of the values in each third of [start, end] (None where a third has none)."""
    span = (end - start) / 3
    parts: list[list[float]] = [[], [], []]
    for at, value in points:
        if start <= at <= end:
            parts[min(int((at - start) / span), 2) if span > 0 else 0].append(value)
    return [statistics.median(part) if part else None for part in parts]


def ratio(last: float | None, middle: float | None) -> float | None:
    if last is None or not middle:
        return None
    return last / middle


def phase_figures(samples: list[Sample], batches: list[Batch], start: float, end: float) -> dict:
    """RSS and batch time per third of a phase, and the last third over the middle one."""
    rss = thirds([(s.at, s.rss_mb) for s in samples], start, end)
    python = thirds([(s.at, s.python_mb) for s in samples], start, end)
    jvm = thirds([(s.at, s.jvm_mb) for s in samples], start, end)
    seconds = thirds([(b.at, b.seconds) for b in batches], start, end)
    rss_ratio, batch_ratio = ratio(rss[2], rss[1]), ratio(seconds[2], seconds[1])
    return {
        "minutes": round((end - start) / 60, 1),
        "samples": sum(1 for s in samples if start <= s.at <= end),
        "batches": sum(1 for b in batches if start <= b.at <= end),
        "records_read": sum(b.read for b in batches if start <= b.at <= end),
        "rss_mb_thirds": _rounded(rss),
        "python_mb_thirds": _rounded(python),
        "jvm_mb_thirds": _rounded(jvm),
        "rss_mb_max": round(max((s.rss_mb for s in samples if start <= s.at <= end), default=0.0)),
        "batch_s_thirds": _rounded(seconds, 2),
        "rss_ratio": _rounded([rss_ratio], 3)[0],
        "batch_ratio": _rounded([batch_ratio], 3)[0],
        "rss_ok": rss_ratio is not None and rss_ratio <= RSS_GOAL,
        "batch_ok": batch_ratio is not None and batch_ratio <= BATCH_GOAL,
    }


JVM_FIGURES = ("heap_committed_mb", "heap_used_mb", "metaspace_used_mb", "nmt_Code", "nmt_GC", "nmt_Thread",
               "nmt_Other", "threads")


def jvm_figures(reports: list[dict], start: float, end: float) -> dict:
    """Where the JVM's memory goes, per third: the heap (committed, used), Metaspace, code, the
    collector, threads and their stacks, direct buffers (NMT's Other), and all beside the heap."""
    beside = [{"at": r["at"], "beside_heap_mb": r["nmt_Total"] - r["nmt_Java Heap"]}
              for r in reports if "nmt_Total" in r and "nmt_Java Heap" in r]
    return {name: _rounded(thirds([(r["at"], r[name]) for r in series if name in r], start, end))
            for series, names in ((reports, JVM_FIGURES), (beside, ("beside_heap_mb",))) for name in names}


def gc_figures(reports: list[dict], start: float, end: float) -> dict:
    """The collections between the first and the last JVM report of a span (jstat's counters
    since the JVM started; a SIGKILL starts them again, so a span of one JVM only)."""
    within = [r for r in reports if start <= r["at"] <= end and "gc_pause_s" in r]
    if len(within) < 2:
        return {}
    first, last = within[0], within[-1]
    minutes = (last["at"] - first["at"]) / 60
    figures = {name: last.get(name, 0) - first.get(name, 0) for name in ("young_gcs", "concurrent_gcs", "full_gcs")}
    pause_s = last["gc_pause_s"] - first["gc_pause_s"]
    return {"minutes": round(minutes, 1), **figures, "gc_pause_s": round(pause_s, 2),
            "pause_share": round(pause_s / (minutes * 60), 4) if minutes else None}


def _rounded(values: list[float | None], digits: int = 0) -> list[float | None]:
    return [None if v is None else round(v, digits) for v in values]


def exact_figures(delivered: set[str], landed: list[str]) -> dict:
    """Every uid the broker acknowledged landed once, and nothing else landed."""
    counted: dict[str, int] = {}
    for uid in landed:
        counted[uid] = counted.get(uid, 0) + 1
    missing = delivered - counted.keys()
    extra = counted.keys() - delivered
    duplicated = [uid for uid, n in counted.items() if n > 1]
    return {"delivered": len(delivered), "rows": len(landed), "missing": len(missing), "extra": len(extra),
            "duplicated": len(duplicated), "exact": not missing and not extra and not duplicated,
            "missing_examples": sorted(missing)[:5], "extra_examples": sorted(extra)[:5]}


def render(result: dict) -> str:
    """The figures as `make soak` prints them."""
    steady, lines = result["steady"], []
    lines.append(f"soak: {result['config']['rate']} records/s, trigger {result['config']['trigger']}, "
                 f"steady {steady['minutes']} min then faults {result['faults']['minutes']} min; "
                 f"load average {result['load_average']}")
    lines.append(f"  steady: {steady['batches']} batches, RSS MB by third {steady['rss_mb_thirds']} "
                 f"(Python {steady['python_mb_thirds']}, JVM {steady['jvm_mb_thirds']}), "
                 f"max {steady['rss_mb_max']}")
    if jvm := result.get("jvm_steady"):
        lines.append("  JVM MB by third: " + ", ".join(f"{name.removeprefix('nmt_')} {values}"
                                                       for name, values in jvm.items() if any(values)))
    steady_end = result["config"]["minutes"] * 60 * (1 - result["config"]["fault_share"])
    if gc := gc_figures(result.get("jvm", []), 0.0, steady_end):
        lines.append(f"  collections in the steady phase ({gc['minutes']} min): {gc['young_gcs']:.0f} young, "
                     f"{gc['concurrent_gcs']:.0f} pauses of concurrent cycles, {gc['full_gcs']:.0f} full; "
                     f"paused {gc['gc_pause_s']} s ({gc['pause_share']:.1%} of the time)")
    live_heap = result.get("live_heap_at_steady_end")
    if isinstance(live_heap, dict) and (live := live_heap.get("total_mb")):
        lines.append(f"  live heap at the steady phase's end (after a full collection): {live} MB")
    lines.append(f"  RSS last/middle third: {steady['rss_ratio']} (goal <= {RSS_GOAL}: "
                 f"{'yes' if steady['rss_ok'] else 'NO'})")
    lines.append(f"  batch s by third {steady['batch_s_thirds']}; last/middle: {steady['batch_ratio']} "
                 f"(goal <= {BATCH_GOAL}: {'yes' if steady['batch_ok'] else 'NO'})")
    faults = result["faults"]
    lines.append(f"  faults: {faults['kills']} SIGKILLs, {faults['broker_restarts']} broker restart(s), "
                 f"{faults['batches']} batches, exits of its own {faults['own_exits']}, "
                 f"RSS max {faults['rss_mb_max']} MB")
    files = result["files"]
    lines.append(f"  files: target {files['target']} (data {files['target_data']}, log {files['target_log']}), "
                 "checkpoint " + ", ".join(f"{k} {v}" for k, v in files["checkpoint"].items()))
    exact = result["exact"]
    lines.append(f"  exact: {'yes' if exact['exact'] and result['verify_exit'] == 0 else 'NO'} "
                 f"({exact['delivered']} delivered, {exact['rows']} rows, missing {exact['missing']}, "
                 f"extra {exact['extra']}, duplicated {exact['duplicated']}; verify exit {result['verify_exit']})")
    return "\n".join(lines)
