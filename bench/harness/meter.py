"""What one timed run costs: wall time, CPU seconds, peak driver memory; and the
SQL metrics Spark kept for the run's queries.

Spark runs in local mode, so the driver JVM is the whole engine: its CPU and
memory plus this Python process's (the foreachBatch code and librdkafka
threads) are the cost of a leg. The embedded broker is a separate process and
is not counted.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass

import psutil


@dataclass
class Usage:
    seconds: float
    cpu_seconds: float
    rss_peak_mb: float  # driver JVM + this process, sampled every 0.1 s
    heap_peak_mb: float | None  # driver JVM heap: the sum of its pools' peaks


def spark_jvm(spark=None) -> psutil.Process | None:
    """The local-mode driver JVM this process launched (not the broker's JVM)."""
    for child in psutil.Process().children(recursive=True):
        try:
            command = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "pyspark-shell" in command or "SparkSubmit" in command:
            return child
    return None


class Meter:
    """`with Meter(spark) as meter: ...` then `meter.usage`."""

    def __init__(self, spark=None):
        self.spark = spark
        self.processes = [psutil.Process()] + ([jvm] if spark is not None and (jvm := spark_jvm()) else [])
        self.usage: Usage | None = None
        self._peak, self._done = 0.0, threading.Event()

    def __enter__(self) -> Meter:
        self._reset_heap_peaks()
        self._cpu0 = self._cpu()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        seconds = time.perf_counter() - self._t0
        self._done.set()
        self._sampler.join()
        self.usage = Usage(seconds, self._cpu() - self._cpu0, self._peak / 2**20, self._heap_peak())

    def _cpu(self) -> float:
        total = 0.0
        for process in self.processes:
            times = process.cpu_times()
            total += times.user + times.system
        return total

    def _sample(self) -> None:
        while True:
            rss = sum(p.memory_info().rss for p in self.processes)
            self._peak = max(self._peak, rss)
            if self._done.wait(0.1):
                return

    def _heap_pools(self):
        if self.spark is None:
            return []
        factory = self.spark.sparkContext._jvm.java.lang.management.ManagementFactory
        return [p for p in factory.getMemoryPoolMXBeans() if p.getType().name() == "HEAP"]

    def _reset_heap_peaks(self) -> None:
        for pool in self._heap_pools():
            pool.resetPeakUsage()

    def _heap_peak(self) -> float | None:
        pools = self._heap_pools()
        return sum(p.getPeakUsage().getUsed() for p in pools) / 2**20 if pools else None


class SqlMetrics:
    """Reads the SQL executions Spark's UI keeps (its REST API) since the last mark."""

    def __init__(self, spark):
        context = spark.sparkContext
        self.base = (f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}"
                     if context.uiWebUrl else None)
        self.seen_execution = -1

    def mark(self) -> None:
        """Forget what ran so far: the next call returns only later executions."""
        self.seen_execution = max([e["id"] for e in self._get("sql")], default=self.seen_execution)

    def since_mark(self) -> list[dict]:
        """SQL executions, with their plan nodes' metrics."""
        return [e for e in self._get("sql") if e["id"] > self.seen_execution]

    def _get(self, what: str) -> list[dict]:
        if self.base is None:
            return []
        query = "?details=true&planDescription=false&length=100000"
        with urllib.request.urlopen(f"{self.base}/{what}{query}", timeout=60) as answer:
            return json.load(answer)


def merge_files(executions: list[dict]) -> list[dict]:
    """Per MERGE: target files before and after data skipping (the MERGE command's own metrics;
    DESCRIBE HISTORY's operationMetrics in OSS Delta 4.4 does not carry them)."""
    found = []
    for execution in executions:
        for node in execution.get("nodes", []):
            if node.get("nodeName") != "Execute MergeIntoCommand":
                continue
            metrics = {m["name"]: m["value"] for m in node.get("metrics", [])}
            found.append({
                "files_before_skipping": _number(metrics.get("number of target files before skipping")),
                "files_scanned": _number(metrics.get("number of target files after skipping")),
            })
    return found


def _number(text: str | None) -> int | None:
    if text is None:
        return None
    digits = "".join(ch for ch in str(text) if ch.isdigit())
    return int(digits) if digits else None
