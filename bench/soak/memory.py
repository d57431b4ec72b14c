"""What the run's processes hold: the resident memory of `ingest run` and every process under it
(its JVM has a process group of its own, so the tree, not the group, is the run), and the
JVM's own account of it through `jcmd` (heap, Metaspace, native memory by category)."""

from __future__ import annotations

import shutil
import subprocess

import psutil

from bench.soak.analysis import Resident, Sample, parse_heap_info, parse_histogram, parse_native_memory, run_sample

# The JVM's native memory tracking, for every java the run starts (the JVM reads this
# variable itself, so no Spark setting of ingest's is replaced); its summary costs little
NATIVE_MEMORY_TRACKING = "-XX:NativeMemoryTracking=summary"


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def jvm_of(pid: int) -> int | None:
    for process in tree(pid)[1:]:
        try:
            if process.name() == "java":
                return process.pid
        except psutil.Error:
            continue
    return None


def sample(pid: int, at: float) -> Sample | None:
    """The run's resident memory now, Python's and the JVM's apart; None once it is gone."""
    processes = []
    for process in tree(pid):
        try:
            processes.append(Resident(process.pid, process.ppid(), process.name(), process.memory_info().rss / 2**20))
        except psutil.Error:
            continue
    return run_sample(processes, pid, at)


def jcmd(pid: int, *command: str, timeout: float = 60) -> str:
    """A diagnostic command's output; empty when the JVM is gone or does not answer."""
    if shutil.which("jcmd") is None:
        return ""
    try:
        done = subprocess.run(["jcmd", str(pid), *command], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ""
    return done.stdout if done.returncode == 0 else ""


def jvm_report(jvm_pid: int) -> dict[str, float]:
    """Heap, Metaspace and the native memory's categories (MB committed) of the run's JVM, and
    its collections so far (counts, seconds)."""
    figures = parse_heap_info(jcmd(jvm_pid, "GC.heap_info"))
    native = parse_native_memory(jcmd(jvm_pid, "VM.native_memory", "summary"))
    return {**figures, **{f"nmt_{name}": mb for name, mb in native.items()}, **collections(jvm_pid)}


# jstat -gc's columns: YGC/YGCT young pauses, FGC/FGCT full collections, CGC/CGCT the concurrent
# cycles' pauses (remark, cleanup), GCT all of them, in seconds since the JVM started
JSTAT_FIGURES = {"YGC": "young_gcs", "FGC": "full_gcs", "CGC": "concurrent_gcs", "GCT": "gc_pause_s"}


def collections(jvm_pid: int) -> dict[str, float]:
    if shutil.which("jstat") is None:
        return {}
    try:
        done = subprocess.run(["jstat", "-gc", str(jvm_pid)], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {}
    return parse_jstat(done.stdout) if done.returncode == 0 else {}


def parse_jstat(text: str) -> dict[str, float]:
    lines = text.split("\n")
    if len(lines) < 2:
        return {}
    row = dict(zip(lines[0].split(), lines[1].split(), strict=False))
    # a collector without concurrent cycles (Parallel) shows "-" for them
    return {name: float(row[column]) for column, name in JSTAT_FIGURES.items()
            if row.get(column, "-").replace(".", "", 1).isdigit()}


def flags(jvm_pid: int) -> str:
    """The JVM's flags as it runs (its collector, its heap's bounds)."""
    lines = jcmd(jvm_pid, "VM.flags").strip().splitlines()
    return lines[-1] if lines else ""


def live_heap(jvm_pid: int) -> dict:
    """The live heap's largest classes: a full collection first, so only once, at the end."""
    return parse_histogram(jcmd(jvm_pid, "GC.class_histogram", timeout=300))
