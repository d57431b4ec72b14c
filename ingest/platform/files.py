"""Small files where the job runs: a local (or mounted) path read as a file, any
other location through Spark, so every file system the session reaches works.

The checkpoint's files and a log's last lines are read here, and the temporary
files a killed Spark left are deleted here; no module above repeats the
local-or-Spark branch.
"""

from __future__ import annotations

import re
from pathlib import Path

# `.<name>.<uuid>.tmp`, and on a local file system its checksum `..<name>.<uuid>.tmp.crc`:
# Hadoop's CheckpointFileManager writes a log file there and renames it when complete.
_SPARK_TEMP_FILE = re.compile(r"^\..+\.tmp(\.crc)?$")


def local_path(location: str) -> Path | None:
    """The local (or mounted) path of a location, or None for an object-store URI."""
    if location.startswith("file:"):
        return Path(location.removeprefix("file:").removeprefix("//"))
    if "://" in location or location.startswith("dbfs:"):
        return None
    return Path(location)


# Set on a Spark Connect session whose server runs apart (`ingest run --remote sc://...`):
# a path there is the server's, whatever this machine holds at the same path.
_DISK_APART = "_ingest_disk_apart"


def mark_disk_apart(session) -> None:
    """`session`'s files are read through its server (Spark), never from this machine's disk."""
    setattr(session, _DISK_APART, True)


def disk_apart(session) -> bool:
    return bool(getattr(session, _DISK_APART, False))


def _on_this_disk(session, location: str) -> Path | None:
    """The local path to read `location` at, or None to read it through Spark."""
    return None if disk_apart(session) else local_path(location)


def read_text(session, location: str) -> str | None:
    """A small file's text, or None when it does not exist."""
    local = _on_this_disk(session, location)
    if local is not None:
        return local.read_text(errors="replace") if local.is_file() else None
    from pyspark.errors import AnalysisException

    try:
        # text()'s own `wholetext` defaults to False and would replace an option set before it
        rows = session.read.text(location, wholetext=True).collect()
    except AnalysisException:  # no such file
        return None
    return rows[0].value if rows else None


def numbered_files(session, folder: str) -> dict[int, str]:
    """n -> text of every file named by a number in a folder; {} when there is no folder."""
    local = _on_this_disk(session, folder)
    if local is not None:  # no Spark job, and no stack trace logged for a missing folder
        if not local.is_dir():
            return {}
        return {int(f.name): f.read_text() for f in local.iterdir() if f.name.isdigit()}
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    try:
        rows = (session.read.text(folder, wholetext=True)
                .select(F.col("_metadata.file_name").alias("name"), "value").collect())
    except AnalysisException:  # the folder does not exist
        return {}
    return {int(r.name): r.value for r in rows if r.name.isdigit()}


def delete_temp_files(session, folder: str) -> list[str] | None:
    """Delete the temporary files Spark left in `folder` (a process killed while it wrote
    a log file leaves one), through the session's own Hadoop file system; their names.
    None on Spark Connect, where the client has no file system of the server's."""
    if getattr(session, "_jvm", None) is None:
        return None
    jvm_path = session._jvm.org.apache.hadoop.fs.Path(folder)
    fs = jvm_path.getFileSystem(session._jsc.hadoopConfiguration())
    if not fs.exists(jvm_path):
        return []
    found = sorted((s.getPath() for s in fs.listStatus(jvm_path) if _SPARK_TEMP_FILE.match(s.getPath().getName())),
                   key=lambda path: path.getName())
    for path in found:
        fs.delete(path, False)
    return [path.getName() for path in found]


def tail(path: Path, lines: int, missing: str = "") -> str:
    """A log's last lines, or `missing` when there is no log to read."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return missing
