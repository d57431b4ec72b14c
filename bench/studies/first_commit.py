"""R4: time to first commit of `ingest run --once`, against a bare SparkSession
start plus one Delta write, both as fresh processes timed the same way.

Each side is a new process; the clock runs from its launch until its first
commit file appears in the table's `_delta_log` (polled every 20 ms): for
`ingest run`, the first MERGE commit (version 1: version 0 creates the table);
for the bare side, the write's commit (version 0). Both get their session from
`ingest.platform.session.get_session` with its local defaults, so both start the same
JVM with the same jars.

`python -m bench.studies.first_commit --bare TABLE ROWS` is the bare side; without
`--bare` the module runs R4 alone through the suite.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench import REPO
from bench.harness.datagen import SCHEMA, UID_HEADER
from bench.harness.legs import fresh_dir
from bench.harness.runner import Part, log, main

BARE = "--bare"
COMMIT = "{:020d}.json"


def pipeline_yaml(bootstrap: str, topic: str, root: Path) -> str:
    return "\n".join([
        "name: bench_first_commit",
        "source:",
        "  kafka:",
        f"    bootstrap_servers: {bootstrap}",
        f"    topics: [{topic}]",
        "  format: json",
        f'  schema: "{SCHEMA}"',
        "uid:",
        f"  header: {UID_HEADER}",
        "target:",
        f"  path: {root / 'target'}",
        f"checkpoint: {root / 'checkpoint'}",
        "dead_letter:",
        f"  path: {root / 'dead_letter'}",
        "",
    ])


def ingest_command(bootstrap: str, topic: str, root: Path) -> tuple[list[str], Path]:
    spec = root / "pipeline.yaml"
    spec.write_text(pipeline_yaml(bootstrap, topic, root))
    first_commit = root / "target" / "_delta_log" / COMMIT.format(1)
    return [sys.executable, "-m", "ingest", "run", str(spec), "--once"], first_commit


def ingest_milestones(root: Path) -> dict[str, Path]:
    """Files that mark where an `ingest run`'s start-up has got to, in the order they appear."""
    return {"query_started": root / "checkpoint" / "metadata",
            "batch_planned": root / "checkpoint" / "offsets" / "0",
            "table_created": root / "target" / "_delta_log" / COMMIT.format(0)}


def bare_command(root: Path, rows: int) -> tuple[list[str], Path]:
    table = root / "target"
    return [sys.executable, "-m", "bench.studies.first_commit", BARE, str(table), str(rows)], \
        table / "_delta_log" / COMMIT.format(0)


def time_to_first_commit(command: list[str], commit: Path, log: Path, timeout: float = 600,
                         milestones: dict[str, Path] | None = None) -> dict:
    """Seconds from launch to `commit` existing, to each of `milestones`, and to the process's exit."""
    started = time.perf_counter()
    seen: dict[str, float] = {}
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    try:
        first = _await_file(commit, process, started + timeout, milestones or {}, seen) - started
        code = process.wait(timeout=max(1.0, started + timeout - time.perf_counter()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if code != 0:
        raise RuntimeError(f"{' '.join(command[-3:])} exited {code}; see {log}")
    return {"first_commit_seconds": round(first, 3), "exit_seconds": round(time.perf_counter() - started, 3),
            **{f"{name}_seconds": round(at - started, 3) for name, at in seen.items()}}


def _await_file(path: Path, process: subprocess.Popen, deadline: float, milestones: dict[str, Path],
                seen: dict[str, float]) -> float:
    """When `path` appeared (perf_counter), polled every 20 ms while `process` runs; `seen`
    receives when each of `milestones` appeared."""
    while time.perf_counter() < deadline:
        exited = process.poll() is not None
        for name, milestone in milestones.items():
            if name not in seen and milestone.exists():
                seen[name] = time.perf_counter()
        if path.exists():
            return time.perf_counter()
        if exited:
            raise RuntimeError(f"exited ({process.returncode}) before writing {path}")
        time.sleep(0.02)
    raise TimeoutError(f"no {path} after the time limit")


def run_all(kafka, topic: str, rows: int, work: Path, reps: int, log) -> list[dict]:
    runs = []
    for rep in range(reps):
        sides = ("ingest_run", "bare_session_write")
        for side in sides if rep % 2 == 0 else reversed(sides):
            root = fresh_dir(work / "r4" / f"{side}-{rep}")
            command, commit = (ingest_command(kafka.bootstrap, topic, root) if side == "ingest_run"
                               else bare_command(root, rows))
            milestones = ingest_milestones(root) if side == "ingest_run" else None
            timed = time_to_first_commit(command, commit, root / "output.log", milestones=milestones)
            log(f"  {side:18} rep {rep}: first commit {timed['first_commit_seconds']:.1f}s")
            runs.append({"side": side, "rep": rep, **timed})
    return runs


def bare_write(table: str, rows: int) -> None:
    from ingest.platform.session import get_session

    spark = get_session("bench-bare")
    (spark.range(rows).selectExpr("uuid() AS _uid", "id", "current_timestamp() AS ts")
     .write.format("delta").save(table))
    spark.stop()


PART = Part("r4", "bench.studies.first_commit", before_spark=True,
            measure=lambda run: run_all(run.kafka, run.small.name, run.scale.r4_records, run.work, run.reps, log),
            title=lambda scale: "R4: time to first commit, fresh processes")


if __name__ == "__main__":
    if sys.argv[1:2] == [BARE]:  # launched by bare_command, from the repository's root
        bare_write(sys.argv[2], int(sys.argv[3]))
    else:  # R4 alone, kept beside the suite's results as r4.json
        sys.exit(main([PART], alone=PART))
