"""`transform.select` / `transform.where` over decoded records, failing per record.

Spark 4 runs ANSI SQL: one bad cast fails the whole job. When that happens the
batch's records are searched by halves for the ones that fail, which go to the
dead letters with stage `transform`; the rest are transformed as usual. The
search costs nothing while no record fails.
"""

from __future__ import annotations

from typing import Callable, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ingest.batch.staged import RAW, REASON, STAGE
from ingest.errors import first_line
from ingest.spec.columns import OP, SEQUENCE
from ingest.spec.model import Transform

Coordinate = tuple[str, int, int]
# A change's own columns (cdc): ingest's, not the row's, so a `select` that names only the
# row's columns keeps them, as it keeps the raw record
CHANGE_OWN = (SEQUENCE, OP)


def apply(decoded: DataFrame, transform: Transform | None,
          failed: Sequence[tuple[Coordinate, str]] = ()) -> DataFrame:
    """Transformed records; decode failures, `failed` and filtered ones are kept, marked in STAGE."""
    if transform is None:
        return decoded
    payload = [c for c in decoded.columns if c not in (RAW, STAGE, REASON)]
    ok = decoded.where(F.col(STAGE).isNull())
    rejected = decoded.where(F.col(STAGE).isNotNull()).select(RAW, STAGE, REASON)
    if failed:
        bad = _coordinates_frame(decoded, failed)
        ok = ok.join(bad, _coordinate_key(ok), "left_anti")
        rejected = rejected.unionByName(
            decoded.join(bad, _coordinate_key(decoded), "inner")
            .select(RAW, F.lit("transform").alias(STAGE), F.col("__why").alias(REASON)))
    transformed = _select_and_filter(ok, transform, payload)
    return transformed.unionByName(rejected, allowMissingColumns=True)


def _select_and_filter(ok: DataFrame, transform: Transform, payload: list[str]) -> DataFrame:
    expressions: list = []
    for expression in transform.select:
        if expression.strip() == "*":
            expressions.extend(f"`{name}`" for name in payload)
        else:
            expressions.append(expression)
    selected = ok.selectExpr(RAW, *expressions)
    left_out = [f"`{name}`" for name in CHANGE_OWN if name in payload and name not in selected.columns]
    if left_out:
        expressions.extend(left_out)
        selected = ok.selectExpr(RAW, *expressions)
    if not transform.where:
        return selected.select(RAW, F.lit(None).cast("string").alias(STAGE),
                               F.lit(None).cast("string").alias(REASON), *selected.columns[1:])
    # Evaluate `where` on the input columns, as SQL's WHERE would, then keep the verdict.
    keep = F.coalesce(F.expr(transform.where), F.lit(False))
    judged = ok.withColumn("__keep", keep).selectExpr(RAW, "__keep", *expressions)
    return judged.select(
        RAW,
        F.when(~F.col("__keep"), F.lit("filtered")).alias(STAGE),
        F.when(~F.col("__keep"), F.lit("transform.where")).alias(REASON),
        *[c for c in judged.columns if c not in (RAW, "__keep")],
    )


def _coordinate_key(frame: DataFrame):
    return [frame[RAW]["topic"].eqNullSafe(F.col("__t")),
            frame[RAW]["partition"] == F.col("__p"),
            frame[RAW]["offset"] == F.col("__o")]


def _coordinates_frame(decoded: DataFrame, failed) -> DataFrame:
    rows = [(t, p, o, why) for (t, p, o), why in failed]
    return decoded.sparkSession.createDataFrame(rows, "__t STRING, __p INT, __o LONG, __why STRING")


def is_record_error(error: Exception) -> bool:
    """A data exception (SQLSTATE class 22: bad cast, overflow, divide by zero...)."""
    get_state = getattr(error, "getSqlState", None)
    state = get_state() if get_state else None
    if state:
        return state.startswith("22")
    text = str(error)
    return any(mark in text for mark in ("SQLSTATE: 22", "CAST_INVALID_INPUT", "ARITHMETIC_OVERFLOW",
                                         "DIVIDE_BY_ZERO"))


def find_failing(decoded: DataFrame, transform: Transform) -> list[tuple[Coordinate, str]]:
    """The records whose transform raises, each with the error's first line."""
    ok = decoded.where(F.col(STAGE).isNull())
    payload = [c for c in decoded.columns if c not in (RAW, STAGE, REASON)]
    coordinates = sorted(
        (r[0], r[1], r[2]) for r in
        ok.select(f"{RAW}.topic", f"{RAW}.partition", f"{RAW}.offset").collect())

    position = F.struct(F.col(f"{RAW}.topic"), F.col(f"{RAW}.partition"), F.col(f"{RAW}.offset"))

    def error_in(lo: int, hi: int) -> str | None:
        low, high = _position_literal(coordinates[lo]), _position_literal(coordinates[hi])
        part = ok.where((position >= low) & (position <= high))
        try:
            _select_and_filter(part, transform, payload).write.format("noop").mode("overwrite").save()
            return None
        except Exception as error:  # only data exceptions are a record's fault
            if not is_record_error(error):
                raise
            return first_line(error)

    return _bisect(len(coordinates), error_in, coordinates)


def _position_literal(coordinate: Coordinate):
    topic, partition, offset = coordinate
    return F.struct(F.lit(topic).alias("topic"), F.lit(partition).cast("int").alias("partition"),
                    F.lit(offset).cast("long").alias("offset"))


def _bisect(count: int, error_in: Callable[[int, int], str | None], coordinates) -> list:
    found = []
    pending = [(0, count - 1)] if count else []
    while pending:
        lo, hi = pending.pop()
        why = error_in(lo, hi)
        if why is None:
            continue
        if lo == hi:
            found.append((coordinates[lo], why))
        else:
            mid = (lo + hi) // 2
            pending.extend([(mid + 1, hi), (lo, mid)])
    return found

