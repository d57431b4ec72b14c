"""Where one ingest run's time goes: py-spy on this (the driver's) Python process.

The driver's Python thread spends a batch waiting on the JVM, so py-spy runs
with --idle and each sample is charged to the innermost `ingest` frame on the
stack: that names the step (summarize, dead letters, MERGE...) the JVM was busy with.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from bench.harness.legs import Topic, bench_pipeline, fresh_dir, run_ingest
from bench.harness.meter import Meter
from bench.harness.runner import Part, main


def py_spy() -> Path | None:
    found = Path(sys.executable).parent / "py-spy"
    return found if found.exists() else None


def profile_ingest(bench, topic: Topic) -> dict:
    root = fresh_dir(bench.work / "profile")
    pipeline = bench_pipeline(bench.kafka.bootstrap, topic.name, root, bench.max_offsets)
    samples = root / "py-spy.txt"
    recorder = _start_py_spy(samples)
    try:
        with Meter(bench.spark) as meter:
            reports = run_ingest(bench.spark, pipeline)
    finally:
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
            recorder.wait(timeout=60)
    return {
        "records": sum(r.summary.read for r in reports),
        "batches": len(reports),
        "seconds": round(meter.usage.seconds, 2),
        "driver_share_by_function": driver_shares(samples) if recorder is not None else {},
        "py_spy": recorder is not None,
    }


def _start_py_spy(output: Path) -> subprocess.Popen | None:
    tool = py_spy()
    if tool is None:
        return None
    command = [str(tool), "record", "--pid", str(os.getpid()), "--rate", "50", "--idle", "--nonblocking",
               "--format", "raw", "--output", str(output)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def driver_shares(samples: Path) -> dict[str, float]:
    """Share of the batch thread's samples per innermost `ingest` function."""
    counts: dict[str, int] = {}
    if not samples.exists():
        return {}
    for line in samples.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f for f in stack.split(";") if _INGEST_FRAME.search(f)]
        if not frames or not any("runner.py" in f for f in frames):
            continue  # another thread: the sampler, py4j's listeners
        counts[_short(frames[-1])] = counts.get(_short(frames[-1]), 0) + int(count)
    total = sum(counts.values()) or 1
    return {k: round(v / total, 3) for k, v in sorted(counts.items(), key=lambda item: -item[1])}


_INGEST_FRAME = re.compile(r"[(/]ingest/\w+\.py:")


def _short(frame: str) -> str:
    """'merge_batch (/work/main/ingest/batch/merge/upsert.py:85)' -> 'merge.py:85 merge_batch'."""
    name, _, where = frame.partition(" (")
    return f"{where.rsplit('/', 1)[-1].rstrip(')')} {name.split('.<locals>')[0]}"


PART = Part("profile", "bench.profiles.driver_profile",
            measure=lambda run: profile_ingest(run.bench, run.topic),
            title=lambda scale: "profiling one ingest run")


if __name__ == "__main__":  # this part alone, kept beside the suite's results as profile.json
    sys.exit(main([PART], alone=PART))
