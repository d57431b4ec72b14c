"""The MERGE's ON condition and update rule, as SQL text.

One function for the runtime and for `ingest plan`, so the plan shows exactly
what runs. Bounds are literals computed from the batch: Delta prunes target
files only on literal predicates over target columns, never on `t._uid = s._uid`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ingest.spec.model import Pipeline
from ingest.spec.variant_path import reference_sql

PLACEHOLDERS = {
    "uid_min": "<batch min _uid>",
    "uid_max": "<batch max _uid>",
    "horizon_lo": "<batch min {column} - {within}>",
    "horizon_hi": "<batch max {column} + {within}>",
}


def sql_string(value: str) -> str:
    """A SQL string literal; uids come from producers, so quote them safely."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def merge_condition(pipeline: Pipeline, bounds: Mapping[str, str] | None = None) -> str:
    """`t._uid = s._uid` plus the batch's literal bounds.

    `bounds` has uid_min/uid_max and, with a dedup horizon, horizon_lo/horizon_hi
    (instants as 'YYYY-MM-DD HH:MM:SS.ffffffZ', in UTC); a missing key drops that bound,
    which is always exact, only slower. None renders placeholders (for `plan`).
    """
    parts = ["t._uid = s._uid"]
    if bounds is None:
        parts.append(f"t._uid BETWEEN {PLACEHOLDERS['uid_min']} AND {PLACEHOLDERS['uid_max']}")
        horizon = pipeline.target.dedup_horizon
        if horizon:
            lo = PLACEHOLDERS["horizon_lo"].format(column=horizon.column, within=horizon.within)
            hi = PLACEHOLDERS["horizon_hi"].format(column=horizon.column, within=horizon.within)
            parts.append(f"{reference_sql(horizon.column, 't')} BETWEEN {lo} AND {hi}")
        return " AND ".join(parts)
    if "uid_min" in bounds and "uid_max" in bounds:
        parts.append(f"t._uid BETWEEN {sql_string(bounds['uid_min'])} AND {sql_string(bounds['uid_max'])}")
    horizon = pipeline.target.dedup_horizon
    if horizon and "horizon_lo" in bounds and "horizon_hi" in bounds:
        parts.append(f"{reference_sql(horizon.column, 't')} BETWEEN TIMESTAMP {sql_string(bounds['horizon_lo'])}"
                     f" AND TIMESTAMP {sql_string(bounds['horizon_hi'])}")
    return " AND ".join(parts)


def upsert_condition(pipeline: Pipeline, payload: Sequence[str] = (),
                     unordered: Sequence[str] = ()) -> str:
    """When a matched source row replaces the target row: a later `order_by` wins;
    ties go to the later Kafka timestamp, then the later position (across partitions
    the position alone says nothing about which record is newer); the same record
    again changes nothing. With `payload` (the columns both sides have), a row whose
    values are all the same is left as it is; `unordered` of them (VARIANT, which SQL
    cannot compare) are compared as JSON text."""
    s_order, t_order = (reference_sql(pipeline.target.order_by or "", side) for side in ("s", "t"))
    later_record = ("struct(s._kafka_timestamp, s._topic, s._partition, s._offset) > "
                    "struct(t._kafka_timestamp, t._topic, t._partition, t._offset)")
    later = (f"(({s_order} > {t_order}) OR ({t_order} IS NULL AND {s_order} IS NOT NULL) "
             f"OR (({s_order} <=> {t_order}) AND {later_record}))")
    if not payload:
        return later
    same = " AND ".join(f"(to_json(struct(s.`{c}`)) <=> to_json(struct(t.`{c}`)))" if c in unordered
                        else f"(s.`{c}` <=> t.`{c}`)" for c in payload)
    return f"{later} AND NOT ({same})"
