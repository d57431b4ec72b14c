"""Quicker JVM starts for the suite's child processes.

A test that crosses a process boundary (`ingest run` killed at a fault point, the
demo, a notebook's kernel, the CLI) pays a driver JVM start each time, and a
start is mostly loading and compiling classes the JVM throws away minutes
later. A class data archive (AppCDS) of the classes a short ingest run loads,
dumped once by a JVM started with `-XX:ArchiveClassesAtExit` and mapped by every
later one, saves a third of a short child's CPU (a session, a Delta write, a MERGE
and a streaming batch, idle: 25-26 CPU-seconds without, 15-19 with). The dump
runs as a child runs (the options below), in a process of its own when the session
starts: 40-46 CPU-seconds, once per venv (`archive_key`). A child started before it
is ready, or on another classpath (the installed wheel's venv, where the demo runs),
starts without it, silently (`-Xshare:auto`, the default).

The children also compile with C1 only (`-XX:TieredStopAtLevel=1`). The suite is
CPU-bound (two workers on two cores, a child beside them), and C2 compiling a
short run's hot code costs more CPU than the code ever saves: an `ingest run
--once` of four 50-record batches, three runs each on an idle machine, took 48-60
CPU-seconds (wall 25-31 s) with both compilers, 31-40 CPU-seconds (wall 19-24 s)
with C1 only. (Measured on wall time alone with a core to spare, C2 looked the
better choice: its compiling ran on the idle core.)

The suite's JVMs, the test session's and the children's, evaluate Spark's plans
interpreted (`INTERPRETED`). A test batch holds a few rows, and for each new plan
Spark first writes Java source and compiles it (Janino, then the JIT compiles the
result again): in a profile of two matrix cells (JFR), that was 30% of the test
session's sampled CPU. Interpreted, three cells took 197 CPU-seconds in the
session's JVM instead of 253, test_cdc_crash's child runs 81 instead of 116, and
test_verify_cdc.py with test_cdc_crash.py 277 machine CPU-seconds instead of 369-420.
Which way Spark evaluates an expression is Spark's choice, not a behaviour of
ingest's; the spark-submit cluster test, the Connect suite and the bench keep
Spark's default (whole-stage code generation), as users run.

None of this changes what a run does. The children get it all through
`PYSPARK_SUBMIT_ARGS`: the JVM options as `spark.driver.defaultJavaOptions`
(ingest's own `spark.driver.extraJavaOptions`, its log4j file, still applies) and
`INTERPRETED` as `--conf`. The test session's own JVM starts without the JVM
options (it lives for the whole suite) and takes `INTERPRETED` in its conf.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

from ingest.kafka.local_broker import C1_ONLY
from ingest.platform.processes import process_alive

VARIABLE = "PYSPARK_SUBMIT_ARGS"
DUMP_TIMEOUT_S = 600
ARCHIVES = Path.home() / ".cache" / "ingest" / "cds"
KEPT_ARCHIVES = 3  # the venvs of a few clones (this one, a fresh clone for a check, the last)
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}
_DUMP_WORK = """
import sys, tempfile
from ingest.platform.session import get_session
spark = get_session("ingest-class-archive", conf={"spark.sql.shuffle.partitions": "2"}, master="local[2]")
folder = tempfile.mkdtemp()
spark.range(100).selectExpr("id", "cast(id as string) as name").write.format("delta").save(folder + "/t")
spark.sql(f"MERGE INTO delta.`{folder}/t` t USING (SELECT id, 'x' AS name FROM range(50, 150)) s "
          "ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
spark.read.format("delta").load(folder + "/t").groupBy("name").count().collect()
(spark.readStream.format("delta").load(folder + "/t").writeStream.foreachBatch(lambda batch, n: batch.count())
 .option("checkpointLocation", folder + "/c").trigger(availableNow=True).start().awaitTermination())
spark.stop()
"""


def archive_path() -> Path:
    """One archive per Java and installed jar set (`archive_key`)."""
    import pyspark

    said = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines(keepends=True)
    java = "".join(line for line in said if not line.startswith("Picked up"))  # JAVA_TOOL_OPTIONS' note
    return ARCHIVES / f"driver-{archive_key(java, Path(pyspark.__file__).parent / 'jars')}.jsa"


def archive_key(java: str, jars: Path) -> str:
    """A JVM maps a dynamic archive only if each jar of its classpath has the path, size and
    modification time the dumping JVM saw; otherwise it starts without it, silently. A fresh
    clone's venv installs the same jars under a new path and time: keyed by their names alone,
    its children found the last clone's archive and never used it."""
    entries = [f"{jar.resolve()} {jar.stat().st_size} {jar.stat().st_mtime_ns}" for jar in sorted(jars.glob("*.jar"))]
    return hashlib.sha256("\n".join([java, *entries]).encode()).hexdigest()[:16]


def prune_archives(folder: Path, keep: int = KEPT_ARCHIVES) -> None:
    """The archives of venvs no longer used (each fresh clone makes one, 190 MB): all but the
    `keep` last used (`configure` marks an archive used at each session's start)."""
    archives = sorted(folder.glob("driver-*.jsa"), key=lambda a: a.stat().st_mtime, reverse=True)
    for stale in archives[keep:]:
        stale.unlink(missing_ok=True)


def submit_args(archive: Path, share: str = "SharedArchiveFile") -> str:
    """A child's options, mapping the archive; the dump's (`ArchiveClassesAtExit`) are the
    same, so it loads the classes a child loads (no code generation's) at a child's cost."""
    options = f"-XX:{share}={archive} {C1_ONLY} -Xlog:disable"
    confs = " ".join(f"--conf {key}={value}" for key, value in {"spark.ui.enabled": "false", **INTERPRETED}.items())
    return f'--conf "spark.driver.defaultJavaOptions={options}" {confs} pyspark-shell'


def _dump(archive: Path) -> None:
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    partial.touch()  # a dump under way, for the next session's `_start_dump`; the JVM writes it at its exit
    env = {**os.environ, VARIABLE: submit_args(partial, share="ArchiveClassesAtExit")}
    done = subprocess.run([sys.executable, "-c", _DUMP_WORK], env=env, capture_output=True, timeout=DUMP_TIMEOUT_S)
    if done.returncode == 0 and partial.exists():
        partial.replace(archive)  # whole or not at all: a JVM never maps a half-written file
        prune_archives(archive.parent)
    else:
        partial.unlink(missing_ok=True)


def _start_dump(archive: Path) -> None:
    """The dump in a process of its own, which also renames the archive when it is whole: a
    test session shorter than the dump (about a minute) would otherwise leave a 190 MB
    partial file behind in the cache at each start. One dump of an archive at a time."""
    if not any(archive.parent.glob(f"{archive.name}.*.partial")):
        subprocess.Popen([sys.executable, "-m", "tests.child_jvms", str(archive)], cwd=Path(__file__).parents[1],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)


def _remove_dead_dumps(folder: Path) -> None:
    """The partial files of dumps that died (killed, or the machine stopped): their process
    is gone, or they are older than a dump's timeout (its number may have been reused)."""
    for partial in folder.glob("*.jsa.*.partial"):
        pid = partial.name.rsplit(".", 2)[1]
        stale = time.time() - partial.stat().st_mtime > 2 * DUMP_TIMEOUT_S
        if pid.isdigit() and (stale or not process_alive(int(pid))):
            partial.unlink(missing_ok=True)


# Where no test starts a Spark child: the dump (40-46 CPU-s) would only slow `make check`.
WITHOUT_CHILDREN = ("tests/unit", "tests/spark")


def starts_children(args: Sequence[str]) -> bool:
    """Whether a run of these pytest arguments (paths, node ids) may start child JVMs."""
    paths = [Path(arg.split("::")[0]).as_posix() for arg in args if not arg.startswith("-")]
    return not paths or any(not path.startswith(WITHOUT_CHILDREN) for path in paths)


def configure(args: Sequence[str] = ()) -> None:
    """Children started from now on get the options; the archive follows in the background,
    where `args` may start children. Off where the caller set PYSPARK_SUBMIT_ARGS or
    INGEST_TEST_PLAIN_JVMS=1."""
    if VARIABLE in os.environ or os.environ.get("INGEST_TEST_PLAIN_JVMS") == "1":
        return
    try:
        archive = archive_path()
    except (ImportError, OSError):
        return  # no pyspark or no java: the tests that need them say so themselves
    os.environ[VARIABLE] = submit_args(archive)
    if "PYTEST_XDIST_WORKER" in os.environ:  # the controller builds it for all
        return
    archive.parent.mkdir(parents=True, exist_ok=True)
    _remove_dead_dumps(archive.parent)
    if archive.exists():
        os.utime(archive)  # used: kept by `prune_archives`
    elif starts_children(args):
        _start_dump(archive)


@contextmanager
def own_jvm_options():
    """The test session's JVM: started without the children's options."""
    given = os.environ.pop(VARIABLE, None)
    try:
        yield
    finally:
        if given is not None:
            os.environ[VARIABLE] = given


if __name__ == "__main__":
    _dump(Path(sys.argv[1]))
