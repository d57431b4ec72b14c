"""What one batch of a streaming query costs, read around it: CPU seconds of this Python
process and of the Spark JVM (/proc), and the jobs, tasks and tasks' CPU Spark's status API
(the UI's REST endpoints) lists; codegen compilations. Local mode: the JVM is driver and
executor both, its tasks' CPU the executor's share."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import psutil

BACKGROUND = "ingest-background"  # job groups of ingest's background threads


class SparkStatus:
    """Jobs, tasks and the tasks' CPU from Spark's status API (the UI's REST endpoints)."""

    def __init__(self, spark):
        context = spark.sparkContext
        self.base = f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}"
        self.context = context

    def _get(self, what: str) -> list[dict]:
        with urllib.request.urlopen(f"{self.base}/{what}", timeout=120) as answer:
            return json.load(answer)

    def drained(self) -> None:
        """The listener bus empty: every finished job is in the status store."""
        try:
            self.context._jsc.sc().listenerBus().waitUntilEmpty()
        except Exception:
            time.sleep(2)

    def marks(self) -> tuple[int, int]:
        self.drained()
        jobs = self._get("jobs")
        stages = self._get("stages")
        return (max((j["jobId"] for j in jobs), default=-1), max((s["stageId"] for s in stages), default=-1))

    def since(self, marks: tuple[int, int]) -> dict:
        self.drained()
        jobs = [j for j in self._get("jobs") if j["jobId"] > marks[0]]
        stages = [s for s in self._get("stages") if s["stageId"] > marks[1]]
        background = [j for j in jobs if str(j.get("jobGroup") or "").startswith(BACKGROUND)]
        return {"jobs": len(jobs) - len(background), "background_jobs": len(background),
                "tasks": sum(s.get("numTasks", 0) for s in stages),
                "task_cpu_s": sum(s.get("executorCpuTime", 0) for s in stages) / 1e9,
                "by_kind": by_kind(jobs, stages)}


def by_kind(jobs: list[dict], stages: list[dict]) -> dict[str, dict]:
    """Jobs by what they are (Delta's description, else Spark's call site): how many, their
    tasks and the tasks' CPU seconds."""
    cpu = {s["stageId"]: s.get("executorCpuTime", 0) / 1e9 for s in stages}
    tasks = {s["stageId"]: s.get("numTasks", 0) for s in stages}
    kinds: dict[str, dict] = {}
    for job in jobs:
        name = str(job.get("description") or job.get("name") or "?").split("\n")[0][:90]
        if str(job.get("jobGroup") or "").startswith(BACKGROUND):
            name = "background: " + name
        kind = kinds.setdefault(name, {"jobs": 0, "tasks": 0, "task_cpu_s": 0.0})
        kind["jobs"] += 1
        kind["tasks"] += sum(tasks.get(stage, 0) for stage in job.get("stageIds", []))
        kind["task_cpu_s"] += sum(cpu.get(stage, 0.0) for stage in job.get("stageIds", []))
    return dict(sorted(kinds.items(), key=lambda item: -item[1]["jobs"]))


class Cpu:
    """CPU seconds of this Python process and of the Spark JVM, from /proc."""

    def __init__(self, spark):
        self.python = psutil.Process()
        self.jvm = psutil.Process(int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()))

    def read(self) -> tuple[float, float]:
        py, jvm = self.python.cpu_times(), self.jvm.cpu_times()
        return py.user + py.system, jvm.user + jvm.system


def compilations(spark) -> int | None:
    """Whole-stage and expression classes Spark has compiled (Janino) in this JVM so far: a
    plan whose code is not in the codegen cache is compiled again."""
    try:
        return int(spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
                   .METRIC_COMPILATION_TIME().getCount())
    except Exception:
        return None


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])
