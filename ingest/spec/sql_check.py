"""The second pass of `validate`: Spark's own parser and analyzer judge
`source.schema` (DDL) and the `transform` expressions, on an empty DataFrame of
the payload, so an unknown type, a misspelt column or function, or a `where`
that is not a condition is reported before a run, with its key path. No job
runs; it works on a local session and on Spark Connect alike.

Problems come back with key paths and no lines: `Loaded.place` puts them on
the file's lines. The column rules mirror the batch path: `where` is judged on
the decoded columns (as SQL's WHERE), the uid and the target's columns on the
transform's output.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator

from ingest.errors import Problem
from ingest.platform.connect import server_lost
from ingest.spec import plan_text
from ingest.spec.columns import INGEST_COLUMNS, column_references
from ingest.spec.model import REGISTRY_FORMATS, Pipeline, Source, Transform
from ingest.spec.values import did_you_mean
from ingest.spec.variant_path import PAYLOAD, VariantPath, is_path

# PySpark logs every analysis error it raises at ERROR with a JVM stack trace;
# here an error is an expected answer, already reported as a problem.
NOISY_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
SPARK_TYPES = ("STRING", "VARCHAR", "CHAR", "BOOLEAN", "TINYINT", "SMALLINT", "INT", "INTEGER",
               "BIGINT", "LONG", "FLOAT", "DOUBLE", "DECIMAL", "DATE", "TIMESTAMP",
               "TIMESTAMP_NTZ", "TIMESTAMP_LTZ", "BINARY", "ARRAY", "MAP", "STRUCT", "VARIANT",
               "INTERVAL")
# Operators that change the number of rows: a transform maps one record to one row.
NOT_ROW_BY_ROW = {"Aggregate": "an aggregate", "Generate": "a generator (such as explode)",
                  "Window": "a window function"}
DDL_EXAMPLE = '"order_id STRING, amount DOUBLE, ts TIMESTAMP"'


def check_sql(pipeline: Pipeline, spark, payload=None) -> list[Problem]:
    """Every DDL / SQL / column problem of a loaded pipeline, with key paths.
    `payload`: the decoded columns (StructType) when they come from a reader
    schema (avro, protobuf), which the caller asked the registry for."""
    problems: list[Problem] = []
    with quiet_spark_errors():
        for path, source in _schema_variants(pipeline.source):
            decoded = _decoded_frame(spark, source, problems, path, payload)
            if decoded is None:
                continue
            output = _transformed(decoded, pipeline.transform, problems)
            if output is not None:
                problems += _column_problems(pipeline, output.schema)
                problems += _path_problems(pipeline, output)
                problems += _changing_uid(pipeline, output)
    return _unique(problems)


def _schema_variants(source: Source) -> list[tuple[str, Source]]:
    """The shared schema and each topic's own (`source.schemas`): the transform and the
    uid must fit every one of them."""
    from dataclasses import replace

    # json without a schema (cdc): the columns come with the messages, the run checks them
    shared = source.schema is not None or (not source.schemas and source.format != "json")
    variants = [("source.schema", source)] if shared else []
    variants += [(f"source.schemas.{topic}", replace(source, schema=ddl))
                 for topic, ddl in source.schemas.items()]
    return variants


def _unique(problems: list[Problem]) -> list[Problem]:
    return list(dict.fromkeys(problems))


def parse_schema(spark, ddl: str):
    """`source.schema` as a StructType (raises Spark's ParseException if invalid)."""
    return spark.createDataFrame([], ddl).schema


def output_schema(spark, pipeline: Pipeline, payload=None):
    """The payload columns after `transform`: what the target holds besides ingest's own."""
    problems: list[Problem] = []
    with quiet_spark_errors():
        decoded = _decoded_frame(spark, pipeline.source, problems, payload=payload)
        output = _transformed(decoded, pipeline.transform, problems) if decoded else None
    return None if problems or output is None else output.schema


@contextmanager
def quiet_spark_errors() -> Iterator[None]:
    from pyspark.logger import PySparkLogger

    # Made through PySparkLogger: a plain logging.getLogger would create them as plain
    # loggers, and PySpark's later `logger.exception(..., errorClass=...)` would raise
    # TypeError in place of the error it reports (a transform's record error included).
    loggers = [PySparkLogger.getLogger(name) for name in NOISY_LOGGERS]
    saved = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, disabled in zip(loggers, saved, strict=True):
            logger.disabled = disabled


def _decoded_frame(spark, source: Source, problems: list[Problem], path: str = "source.schema",
                   payload=None):
    """An empty DataFrame of the decoded payload, as `decode` produces it."""
    from pyspark.errors import PySparkException

    if payload is not None:
        return spark.createDataFrame([], payload)
    if source.format in REGISTRY_FORMATS:
        return None  # no reader schema to check against
    ddl = {"string": "value STRING", "bytes": "value BINARY"}.get(source.format, source.schema)
    if source.variant:
        ddl = f"{PAYLOAD} VARIANT"
    try:
        frame = spark.createDataFrame([], ddl)
    except PySparkException as error:
        if server_lost(error):  # not the schema's fault: the run says the server stopped answering
            raise
        problems.append(Problem("bad_ddl", path, f"{spark_message(error)}; expected a "
                                f"Spark DDL schema, e.g. {DDL_EXAMPLE}{_type_hint(error)}"))
        return None
    return frame if _ddl_columns_ok(frame.schema, problems) else None


def _ddl_columns_ok(schema, problems: list[Problem]) -> bool:
    names = [field.name for field in schema.fields]
    if not names:
        problems.append(Problem("bad_ddl", "source.schema", f"no columns; expected {DDL_EXAMPLE}"))
    twice = sorted({name for name in names if [n.lower() for n in names].count(name.lower()) > 1})
    if twice:
        problems.append(Problem("bad_ddl", "source.schema", f"column {twice[0]!r} is declared "
                                "twice (Spark ignores case); expected each column once"))
    return bool(names) and not twice


def _transformed(decoded, transform: Transform | None, problems: list[Problem]):
    """The frame after `select`, keeping only expressions Spark accepts; `where` is
    judged on the decoded columns, as the batch path applies it."""
    if transform is None:
        return decoded
    kept: list[str] = []
    mark = len(problems)
    for position, expression in enumerate(transform.select):
        if expression.strip() == "*":
            kept += [f"`{name}`" for name in decoded.columns]
            continue
        # called at once, inside this iteration: the defaults only pin what it reads
        problem = _expression_problem(lambda kept=tuple(kept), expression=expression:
                                      decoded.selectExpr(*kept, expression),
                                      f"transform.select[{position}]", expression, decoded.columns)
        if problem is None:
            kept.append(expression)
        else:
            problems.append(problem)
    if transform.where:
        problem = _expression_problem(lambda: decoded.where(transform.where),
                                      "transform.where", transform.where, decoded.columns)
        problems += [problem] if problem else []
    output = decoded.selectExpr(*kept)
    problems += _duplicate_outputs(output.columns)
    # with an expression left out, the output's columns are not the real ones:
    # checking column names against them would only add false problems
    return None if len(problems) > mark else output


def _expression_problem(build, path: str, expression: str, columns: list[str]):
    """None if Spark resolves the expression (and it keeps one row per record)."""
    from pyspark.errors import PySparkException

    kind = "condition" if path == "transform.where" else "expression"
    expected = f"a Spark SQL {kind} over {', '.join(columns)}"
    try:
        frame = build()
        _ = frame.schema  # Spark Connect analyses lazily: ask for the schema
    except PySparkException as error:
        if server_lost(error):
            raise
        return Problem("bad_sql", path, f"{expression!r}: {spark_message(error)}; expected "
                       f"{expected}{_function_hint(error)}")
    operator = _row_changing_operator(frame)
    if operator:
        return Problem("bad_sql", path, f"{expression!r} is {NOT_ROW_BY_ROW[operator]}, which "
                       f"changes the number of rows; expected {expected}, one row per record")
    return None


def _row_changing_operator(frame) -> str | None:
    """Aggregate / Generate / Window in the analysed plan."""
    plan = plan_text.analysed_plan(frame)
    return next((op for op in plan_text.operators(plan) if op in NOT_ROW_BY_ROW), None) if plan else None


# Deterministic to Spark's optimizer (one value per query), yet another value on a replay.
TIME_FUNCTIONS = {"CurrentTimestamp", "Now", "CurrentDate", "LocalTimestamp", "CurrentTime",
                  "CurrentBatchTimestamp", "CurrentTimeZone"}


def _changing_uid(pipeline: Pipeline, output) -> list[Problem]:
    """A uid column computed by `uuid()`, `rand()`, `current_timestamp()`... gives a
    replayed record another uid: the retry would be inserted twice."""
    uid = pipeline.uid
    columns = [uid.field] if uid.field else list(uid.fields)
    changing = changing_columns(output) if columns else {}
    return [Problem("bad_sql", "uid", f"column {column!r} comes from {changing[column.lower()]}, which gives "
                    "a replayed record another value; expected a uid from the record's own data")
            for column in columns if column.lower() in changing]


def changing_columns(frame) -> dict[str, str]:
    """Output columns (lowercase) whose value is not a function of the record, with
    the expression that makes it so. A classic session asks each expression of the plan
    whether it is deterministic; Spark Connect reads the plan's text (`plan_text`)."""
    jdf = getattr(frame, "_jdf", None)
    if jdf is None:
        plan = plan_text.analysed_plan(frame)
        return plan_text.changing_columns(plan, frame.columns) if plan else {}
    plan = jdf.queryExecution().analyzed()
    tainted: dict[int, str] = {}  # expression id -> the non-deterministic expression

    def visit(node) -> None:
        children = node.children()
        for i in range(children.size()):
            visit(children.apply(i))
        expressions = node.expressions()
        for i in range(expressions.size()):
            expression = expressions.apply(i)
            if expression.nodeName() != "Alias":
                continue
            cause = _changing_part(expression)
            references = expression.references().toSeq()
            for j in range(references.size()):
                cause = cause or tainted.get(references.apply(j).exprId().id())
            if cause:
                tainted[expression.exprId().id()] = cause

    visit(plan)
    output = plan.output()
    found = {}
    for i in range(output.size()):
        attribute = output.apply(i)
        if attribute.exprId().id() in tainted:
            found[attribute.name().lower()] = tainted[attribute.exprId().id()]
    return found


def _changing_part(expression) -> str | None:
    if not expression.deterministic() or expression.nodeName() in TIME_FUNCTIONS:
        return expression.sql() if expression.nodeName() != "Alias" else _changing_part(expression.child())
    children = expression.children()
    for i in range(children.size()):
        cause = _changing_part(children.apply(i))
        if cause:
            return cause
    return None


def _duplicate_outputs(columns: list[str]) -> list[Problem]:
    lowered = [name.lower() for name in columns]
    twice = sorted({name for name in columns if lowered.count(name.lower()) > 1})
    return [Problem("bad_sql", "transform.select", f"column {name!r} appears twice in the output; "
                    "expected each column once (give one an alias with AS)") for name in twice]


def _column_problems(pipeline: Pipeline, schema) -> list[Problem]:
    fields = {field.name.lower(): field for field in schema.fields}
    where = "after transform" if pipeline.transform else "of the payload"
    problems = []
    for path, column in column_references(pipeline.uid, pipeline.target):
        if column.lower() not in fields and not is_path(column):  # a path: _path_problems
            names = [field.name for field in schema.fields]
            problems.append(Problem("bad_column", path, f"{column!r} is not a column {where}; "
                                    f"expected one of {', '.join(names)}{did_you_mean(column, names)}"))
    problems += _horizon_type(pipeline, fields)
    owner = "transform.select" if pipeline.transform else "source.schema"
    problems += [Problem("bad_column", owner, f"column {name} is one ingest adds; expected another "
                         "name (rename it with AS)") for name in INGEST_COLUMNS if name in fields]
    return problems


def _path_problems(pipeline: Pipeline, output) -> list[Problem]:
    """A `payload:...` reference (the spec has parsed it) names a VARIANT column of the
    output, and Spark reads the path as its type."""
    from pyspark.errors import PySparkException

    fields = {field.name.lower(): field for field in output.schema.fields}
    where = "after transform" if pipeline.transform else "of the payload"
    problems = []
    for key, reference in column_references(pipeline.uid, pipeline.target):
        if not is_path(reference):
            continue
        key = "target.dedup_horizon.column" if key == "target.dedup_horizon" else key
        path = VariantPath.parse(reference)
        field = fields.get(path.column.lower())
        if field is None or field.dataType.typeName() != "variant":
            found = "not a column" if field is None else f"{field.dataType.simpleString().upper()}, not a VARIANT"
            problems.append(Problem("bad_path", key, f"{reference!r}: {path.column!r} is {found} {where}; "
                                    "expected a VARIANT column (source.schema: variant makes payload)"))
            continue
        try:
            _ = output.selectExpr(path.sql()).schema
        except PySparkException as error:
            if server_lost(error):
                raise
            problems.append(Problem("bad_path", key, f"{reference!r}: {spark_message(error)}; expected a path "
                                    "Spark reads, e.g. payload:order.id::string"))
    return problems


def _horizon_type(pipeline: Pipeline, fields: dict) -> list[Problem]:
    horizon = pipeline.target.dedup_horizon
    if horizon is not None and is_path(horizon.column):
        return []  # its type is the path's (`columns.check_paths`)
    field = fields.get(horizon.column.lower()) if horizon else None
    if field is None or field.dataType.typeName() == "timestamp":
        return []
    return [Problem("bad_column", "target.dedup_horizon", f"column {horizon.column!r} is "
                    f"{field.dataType.simpleString().upper()}; expected a TIMESTAMP column")]


def spark_message(error) -> str:
    """The first line of Spark's message, without SQLSTATE and the plan dump."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    text = re.sub(r"\s*SQLSTATE: \w+;?", "", text)
    text = re.sub(r";?\s*line \d+ pos \d+;?$", "", text)
    text = re.sub(r"\.\s*\(line (\d+), pos (\d+)\)", r" (line \1, position \2)", text)
    return text.strip().rstrip(";.")


def _type_hint(error) -> str:
    name = _parameter(error, "typeName")
    return did_you_mean(name.upper(), SPARK_TYPES) if name else ""


def _function_hint(error) -> str:
    """Spark's catalog lists its functions with a job (seconds); PySpark's own
    function names are the same built-ins, known at once."""
    from pyspark.sql import functions

    name = _parameter(error, "routineName")
    known = [name for name in dir(functions) if not name.startswith("_")]
    return did_you_mean(name.split(".")[-1], known) if name else ""


def _parameter(error, key: str) -> str | None:
    try:
        value = (error.getMessageParameters() or {}).get(key)
    except Exception:  # older or Connect exceptions may not carry parameters
        return None
    return value.strip('"`') if value else None
