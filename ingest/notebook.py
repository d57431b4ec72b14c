"""Small helpers for analysts' notebooks, local Jupyter and Databricks alike.

    from ingest.notebook import spark_session, pipeline_tables, commits, show, plot_batches
    spark = spark_session()                                  # Databricks: the notebook's own `spark`
    tables = pipeline_tables("pipelines/orders.yaml")        # any pipeline file, from the project folder
    show(commits(spark, tables.target))                      # an HTML table; display() on Databricks
    plot_batches(spark, tables.target)                       # records per batch over time

A relative pipeline path is read from the project folder, whatever the notebook's
working folder: the nearest folder from there upwards that holds the file, else the
checkout `ingest` is installed from (`pip install -e .[notebook]`). Its relative
locations (conf/local.yaml's `DATA_ROOT: ./.ingest/data`) are under that folder too,
as `ingest run` started there sees them.

Everything returns Spark DataFrames, plain values or matplotlib figures, so a
notebook can keep going with Spark SQL. Reading only: nothing here writes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ingest.platform.delta import is_path

ROOT_VARIABLE = "DATA_ROOT"
DEFAULT_ROOT = Path(".ingest/data")  # conf/local.yaml's DATA_ROOT, where the demo writes too
NOTEBOOK_SPARK_CONF = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}
# The ledger entry each ingest commit carries in userMetadata (see ingest.batch.commit.ledger).
LEDGER_SCHEMA = ("ingest INT, pipeline STRING, app_id STRING, batch_id LONG, "
                 "end_offsets MAP<STRING, MAP<STRING, LONG>>, counts MAP<STRING, LONG>")


def spark_session(app_name: str = "ingest-notebook"):
    """The session a notebook should use: the running one on Databricks (or any
    notebook that already has `spark`), else a local one with Delta (local[2],
    or INGEST_SPARK_MASTER)."""
    from ingest.platform.session import get_session

    master = os.environ.get("INGEST_SPARK_MASTER", "local[2]")
    return get_session(app_name, conf=NOTEBOOK_SPARK_CONF, master=master)


@dataclass(frozen=True)
class DemoTables:
    """Where a pipeline (`ingest demo`'s: pipelines/orders.yaml) keeps its tables; from
    `pipeline_tables`, also the file it was read from, its project folder and the
    pipeline itself (`spec`, with the locations as they are read)."""

    root: str
    target: str
    dead_letter: str
    checkpoint: str
    pipeline: str = "orders"
    file: str = ""
    project: str = ""
    spec: Any = None


def pipeline_tables(path: str | os.PathLike, env: str = "local",
                    conf_dir: str | os.PathLike | None = None) -> DemoTables:
    """Where the pipeline in `path` keeps its tables: `${VAR}`s from the environment, then
    the project's `conf/<env>.yaml` (or `conf_dir`'s); a relative `path`, and relative
    locations in the file, from the project folder (the module's docstring)."""
    from ingest.spec.loader import load_file

    file = find_pipeline_file(path)
    project = _project_of(file)
    if conf_dir is None and (project / "conf").is_dir():
        conf_dir = project / "conf"
    pipeline = load_file(file, env, conf_dir=None if conf_dir is None else Path(conf_dir)).pipeline
    pipeline = replace(
        pipeline, checkpoint=_under(project, pipeline.checkpoint),
        target=replace(pipeline.target, path=_under(project, pipeline.target.path)),
        dead_letter=replace(pipeline.dead_letter, path=_under(project, pipeline.dead_letter.path)))
    return DemoTables(os.environ.get(ROOT_VARIABLE, ""), pipeline.target.location,
                      pipeline.dead_letter.location, pipeline.checkpoint, pipeline.name,
                      str(file), str(project), pipeline)


def find_pipeline_file(path: str | os.PathLike, start: Path | None = None) -> Path:
    """`path` itself when absolute; else the first of `start` (the working folder) and the
    folders above it that holds it, then the checkout this package runs from. A notebook's
    working folder is its own (notebooks/), a job's anything: neither changes the answer."""
    given = Path(path).expanduser()
    if given.is_absolute():
        return given
    here = (start or Path.cwd()).resolve()
    candidates = [here, *here.parents]
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file():  # an editable install: the clone itself
        candidates.append(checkout)
    for folder in candidates:
        if (folder / given).is_file():
            return folder / given
    raise FileNotFoundError(f"pipeline file {str(given)!r} not found in {here} or a folder above it"
                            + (f", nor in {checkout}" if candidates[-1] == checkout else "")
                            + "; expected a path from the project folder, or an absolute one")


def _project_of(file: Path) -> Path:
    """The nearest folder above the pipeline file with a conf/ folder (pipelines/x.yaml's
    project), else the file's own folder."""
    for folder in file.resolve().parents:
        if (folder / "conf").is_dir():
            return folder
    return file.resolve().parent


def _under(project: Path, location: str | None) -> str | None:
    """A relative local path under the project folder; URIs, absolute paths and None as they are."""
    if not location or ":" in location.split("/")[0] or Path(location).is_absolute():
        return location
    return os.path.normpath(project / location)


def status(spark, tables: DemoTables):
    """`ingest.status` of the pipeline `pipeline_tables` read (its locations under the
    project folder): offsets, lag per partition, or `kafka_error` when the broker is away."""
    from ingest.audit.status import status as read_status

    return read_status(spark, tables.spec)


def demo_tables(root: str | os.PathLike | None = None) -> DemoTables:
    """The demo's locations under `root`, else $DATA_ROOT, else the nearest
    .ingest/data folder from here upwards (a notebook runs in notebooks/)."""
    chosen = str(root or os.environ.get(ROOT_VARIABLE) or _nearest_default())
    # s3://..., abfss://..., dbfs:/... are kept as written; Path would fold their slashes
    base = chosen.rstrip("/") if ":" in chosen.split("/")[0] else str(Path(chosen).expanduser().resolve())
    return DemoTables(base, f"{base}/tables/orders", f"{base}/dead_letter/orders",
                      f"{base}/checkpoints/orders")


def _nearest_default(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / DEFAULT_ROOT).is_dir():
            return folder / DEFAULT_ROOT
    return here / DEFAULT_ROOT


def read_table(spark, location: str, version: int | None = None):
    """A Delta table by path or catalog name; `version` reads it as it was then (time travel)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(location) if is_path(location) else reader.table(location)



def history(spark, location: str):
    """DESCRIBE HISTORY of a Delta table by path or catalog name."""
    name = f"delta.`{location}`" if is_path(location) else location
    return spark.sql(f"DESCRIBE HISTORY {name}")


def commits(spark, location: str, pipeline: str | None = None):
    """The commits ingest made, oldest first, with the ledger entry as columns:
    version, timestamp, operation, pipeline, app_id, batch_id, end_offsets
    (topic -> partition -> next offset), counts (read, unique and per stage,
    when the version recorded them), operationMetrics, userMetadata."""
    from pyspark.sql import functions as F

    entries = (history(spark, location)
               .withColumn("ledger", F.from_json("userMetadata", LEDGER_SCHEMA))
               .where(F.col("ledger.ingest") == 1))
    if pipeline:
        entries = entries.where(F.col("ledger.pipeline") == pipeline)
    return entries.select("version", "timestamp", "operation", "ledger.pipeline", "ledger.app_id",
                          "ledger.batch_id", "ledger.end_offsets", "ledger.counts",
                          "operationMetrics", "userMetadata").orderBy("version")


def commit_of_offset(spark, location: str, topic: str, partition: int, offset: int,
                     pipeline: str | None = None):
    """The first commit whose batch read past `offset` of that partition: the one
    that brought the record in. None if no commit did yet."""
    from pyspark.sql import functions as F

    end = F.element_at(F.element_at("end_offsets", F.lit(topic)), F.lit(str(partition)))
    found = (commits(spark, location, pipeline).where(end > offset)
             .orderBy("version").limit(1).collect())
    return found[0] if found else None


def dead_letters(spark, location: str):
    """The dead-letter table with the raw bytes decoded as text for reading:
    `value_text`, `key_text` and `header_text` (key, value); UTF-8, bytes that are
    not valid UTF-8 replaced by \ufffd."""
    from pyspark.sql import functions as F

    def text(column):
        return F.make_valid_utf8(column.cast("string"))

    return (read_table(spark, location)
            .withColumn("value_text", text(F.col("value")))
            .withColumn("key_text", text(F.col("key")))
            .withColumn("header_text", F.transform(
                "headers", lambda h: F.struct(h["key"].alias("key"), text(h["value"]).alias("value")))))


BATCH_COLUMNS = ("version LONG, timestamp TIMESTAMP, batch_id LONG, offsets LONG, read LONG, "
                 "inserted LONG, updated LONG, dead_letters LONG, filtered LONG, duplicates_removed LONG")


def batches(spark, target: str, pipeline: str | None = None):
    """One row per MERGE commit of the target, oldest first: version, timestamp,
    batch_id, offsets (how far the batch moved, all partitions together; a
    partition's first batch counts from offset 0), read, inserted, updated,
    dead_letters, filtered, and duplicates_removed: records read that were neither
    inserted, updated, dead letters nor filtered, that is copies of a uid seen
    before, in the batch or earlier. The per-batch counts come from the ledger
    entry (`counts`); commits made before ingest recorded them show nulls there.
    A table's history is small: it is read on the driver."""
    merges = commits(spark, target, pipeline).where("operation = 'MERGE'").collect()
    reached: dict[tuple[str, str], int] = {}
    rows = [_batch_row(commit, reached) for commit in merges]
    return spark.createDataFrame(rows, BATCH_COLUMNS)


def _batch_row(commit, reached: dict) -> tuple:
    moved = 0
    for topic, parts in (commit.end_offsets or {}).items():
        for partition, end in parts.items():
            moved += end - reached.get((topic, partition), 0)
            reached[(topic, partition)] = end
    metrics = commit.operationMetrics or {}
    inserted = int(metrics.get("numTargetRowsInserted", 0))
    updated = int(metrics.get("numTargetRowsUpdated", 0))
    counts = commit.counts
    if not counts:
        return (commit.version, commit.timestamp, commit.batch_id, moved, None, inserted, updated,
                None, None, None)
    dead = sum(counts.get(stage, 0) for stage in ("decode", "transform", "uid"))
    filtered = counts.get("filtered", 0)
    duplicates = counts["read"] - inserted - updated - dead - filtered
    return (commit.version, commit.timestamp, commit.batch_id, moved, counts["read"], inserted, updated,
            dead, filtered, duplicates)


# --- showing and drawing --------------------------------------------------------------


def show(value, rows: int = 20) -> None:
    """A DataFrame or figure shown the notebook's way: Databricks' `display()` there,
    else a Spark DataFrame's first `rows` rows as an HTML table (through pandas, every
    value whole: a dead letter's raw text is not cut; nulls as `null`), or the figure itself."""
    display = _databricks_display()
    if display is not None:
        display(value)
        return
    from IPython.display import HTML
    from IPython.display import display as ipython_display

    if hasattr(value, "toPandas") and hasattr(value, "schema"):  # a Spark DataFrame
        head = _readable_text(value).limit(rows + 1).toPandas()
        _whole_numbers(head, value.schema)
        more = f"<p>the first {rows} rows; <code>show(df, rows=N)</code> for more</p>" if len(head) > rows else ""
        ipython_display(HTML(head.head(rows).to_html(index=False, na_rep="null") + more))
        return
    ipython_display(value)


def _whole_numbers(head, schema) -> None:
    """Integer columns with a null shown as integers (pandas made them floats: 150.0), for display."""
    import pandas as pd
    from pyspark.sql.types import IntegralType

    for field in schema.fields:
        if isinstance(field.dataType, IntegralType) and head[field.name].isna().any():
            head[field.name] = pd.Series(["null" if pd.isna(value) else int(value) for value in head[field.name]],
                                         index=head.index, dtype=object)


def _readable_text(frame):
    """Top-level text columns as valid UTF-8 (bytes that are not, as \ufffd): a reason or a
    value cast from a record's raw bytes may hold any bytes, which pandas cannot take."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    return frame.select(*[F.make_valid_utf8(F.col(f"`{f.name}`")).alias(f.name)
                          if isinstance(f.dataType, StringType) else F.col(f"`{f.name}`")
                          for f in frame.schema.fields])


def _databricks_display():
    """Databricks puts `display` in the notebook's namespace; None elsewhere."""
    if "DATABRICKS_RUNTIME_VERSION" not in os.environ:
        return None
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    return shell.user_ns.get("display") if shell is not None else None


def plot_batches(spark, target: str, pipeline: str | None = None):
    """Records per batch over time: read, inserted, updated, dead letters, duplicates removed."""
    import matplotlib.pyplot as plt

    rows = batches(spark, target, pipeline).orderBy("version").collect()
    figure, axes = plt.subplots(figsize=(9, 4))
    times = [row.timestamp for row in rows]
    for column, style in (("read", "o-"), ("inserted", "s-"), ("updated", "^-"),
                          ("dead_letters", "x-"), ("duplicates_removed", "d-")):
        values = [getattr(row, column) for row in rows]
        if any(value for value in values):
            axes.plot(times, [value or 0 for value in values], style, label=column.replace("_", " "))
    axes.set(title=f"batches of {target}", xlabel="commit time", ylabel="records")
    axes.legend()
    figure.autofmt_xdate()
    return figure


def plot_lag_over_time(spark, target: str):
    """How long records waited in Kafka, per batch: from each record's Kafka timestamp
    to the batch that ingested it (`_ingested_at`), mean and max, in seconds."""
    import matplotlib.pyplot as plt
    from pyspark.sql import functions as F

    waited = F.col("_ingested_at").cast("double") - F.col("_kafka_timestamp").cast("double")
    rows = (read_table(spark, target).groupBy("_ingested_at")
            .agg(F.avg(waited).alias("mean"), F.max(waited).alias("max"))
            .orderBy("_ingested_at").collect())
    figure, axes = plt.subplots(figsize=(9, 3))
    times = [row._ingested_at for row in rows]
    axes.plot(times, [row["mean"] for row in rows], "o-", label="mean")
    axes.plot(times, [row["max"] for row in rows], "^-", label="max")
    axes.set(title=f"time in Kafka before ingestion, per batch ({target})", xlabel="batch time",
             ylabel="seconds")
    axes.legend()
    figure.autofmt_xdate()
    return figure


def plot_lag(report):
    """Lag per partition from a status report (`ingest.status(spark, path)`): what Kafka
    holds beyond where the next batch starts."""
    import matplotlib.pyplot as plt

    partitions = [p for p in report.partitions if p.lag is not None]
    figure, axes = plt.subplots(figsize=(9, 3))
    names = [f"{p.topic}/{p.partition}" for p in partitions]
    axes.bar(names, [p.lag for p in partitions])
    axes.set(title=f"lag of {report.pipeline} (records not ingested yet)", xlabel="partition",
             ylabel="records")
    return figure


def dead_letters_by_stage(spark, location: str):
    """Dead letters counted by stage and reason, most frequent first."""
    from pyspark.sql import functions as F

    return (read_table(spark, location).groupBy("stage", "reason").count()
            .orderBy(F.desc("count"), "stage", "reason"))


# what a reason names first: `field dest.zip: value ...`, `column orderdate: value ...`,
# `missing required field 'page' ...`
_FIELD_OF_REASON = r"^(?:field|column) ([^:]+):|^missing required field '([^']+)'"


def dead_letters_by_field(spark, location: str):
    """Dead letters counted by the field their reason names (`field`: null when the
    reason names none: a record that is not JSON, a missing uid), with the reason of
    one of them: what is wrong where, most frequent first."""
    from pyspark.sql import functions as F

    named = F.coalesce(F.nullif(F.regexp_extract("reason", _FIELD_OF_REASON, 1), F.lit("")),
                       F.nullif(F.regexp_extract("reason", _FIELD_OF_REASON, 2), F.lit("")))
    return (read_table(spark, location).withColumn("field", named)
            .groupBy("stage", "field").agg(F.count(F.lit(1)).alias("count"),
                                           F.min("reason").alias("reason, for one"))
            .orderBy(F.desc("count"), "stage", "field"))


def plot_dead_letters(spark, location: str):
    """Dead letters by stage (decode, transform, uid) as bars."""
    import matplotlib.pyplot as plt

    counts = {row.stage: row["count"] for row in read_table(spark, location).groupBy("stage").count().collect()}
    figure, axes = plt.subplots(figsize=(6, 3))
    stages = sorted(counts)
    axes.bar(stages, [counts[stage] for stage in stages])
    axes.set(title="dead letters by stage", xlabel="stage", ylabel="records")
    return figure
