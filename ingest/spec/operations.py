"""The contract's operations keys: `metrics`, `maintenance`, `on_data_loss` and `table_threads`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ingest.spec.model import ON_DATA_LOSS, Maintenance, Metrics, Operations, Source
from ingest.spec.values import Check, parse_duration

METRICS_KEYS = ("prometheus", "consumer_group")
PROMETHEUS_KEYS = ("port",)
MAINTENANCE_KEYS = ("optimize_every", "vacuum_retain", "delete_log_retain")
TOP_KEYS = ("metrics", "maintenance", "on_data_loss", "table_threads")


def operations(c: Check, top: dict) -> Operations:
    return Operations(_metrics(c, top.get("metrics")), _maintenance(c, top.get("maintenance")),
                      c.enum("on_data_loss", top.get("on_data_loss"), ON_DATA_LOSS,
                             "a data-loss policy", default="fail") or "fail",
                      _table_threads(c, top.get("table_threads")))


def _table_threads(c: Check, raw: Any) -> int:
    if raw is None:
        return Operations.table_threads
    threads = c.integer("table_threads", raw, 1, "a number of tables committed at once, 1 or more")
    return threads or Operations.table_threads


def one_data_loss_policy(c: Check, source: Source | None, ops: Operations, explicit: bool):
    """`source.kafka.allow_data_loss: true` is the older spelling of `on_data_loss: record`:
    either sets both, so Spark's source and the run agree; they may not contradict."""
    if source is None:
        return source, ops
    allow = source.kafka.allow_data_loss
    if allow and explicit and ops.on_data_loss == "fail":
        c.add("exclusive_keys", "on_data_loss", "on_data_loss: fail contradicts source.kafka.allow_data_loss: "
              "true; expected one of them (allow_data_loss: true is the older spelling of record)")
        return source, ops
    if allow or ops.on_data_loss == "record":
        source = replace(source, kafka=replace(source.kafka, allow_data_loss=True))
        ops = replace(ops, on_data_loss="record")
    return source, ops


def _metrics(c: Check, raw: Any) -> Metrics:
    metrics = c.mapping("metrics", raw, METRICS_KEYS) if raw is not None else None
    if not metrics:
        return Metrics()
    port = None
    prometheus = metrics.get("prometheus")
    if prometheus is not None and c.mapping("metrics.prometheus", prometheus, PROMETHEUS_KEYS):
        port = c.integer("metrics.prometheus.port",
                         c.need(prometheus, "metrics.prometheus", "port", "a TCP port, e.g. 9464"),
                         1, "a TCP port from 1 to 65535")
        if port is not None and port > 65535:
            c.add("bad_value", "metrics.prometheus.port", f"{port} is too large; expected a TCP port "
                  "from 1 to 65535")
            port = None
    group = c.text("metrics.consumer_group", metrics.get("consumer_group"), "a Kafka consumer group id")
    return Metrics(port, group)


def _maintenance(c: Check, raw: Any) -> Maintenance:
    maintenance = c.mapping("maintenance", raw, MAINTENANCE_KEYS) if raw is not None else None
    if not maintenance:
        return Maintenance()
    every = maintenance.get("optimize_every")
    batches = seconds = None
    if isinstance(every, str):
        seconds = _duration(c, "maintenance.optimize_every", every)
    elif every is not None:
        batches = c.integer("maintenance.optimize_every", every, 1,
                            'a number of batches (e.g. 100) or a duration (e.g. "1 hour")')
    retain = c.text("maintenance.vacuum_retain", maintenance.get("vacuum_retain"),
                    'a duration, e.g. "168 hours"', quote_hint=False)
    retain_seconds = _duration(c, "maintenance.vacuum_retain", retain) if retain else None
    default = Maintenance()
    keep = c.text("maintenance.delete_log_retain", maintenance.get("delete_log_retain"),
                  'a duration, e.g. "30 days"', quote_hint=False)
    keep_seconds = _duration(c, "maintenance.delete_log_retain", keep) if keep else None
    return Maintenance(batches, seconds,
                       retain if retain_seconds else default.vacuum_retain,
                       retain_seconds or default.vacuum_retain_seconds,
                       keep if keep_seconds else default.delete_log_retain,
                       keep_seconds or default.delete_log_retain_seconds)


def _duration(c: Check, path: str, text: str) -> int | None:
    seconds, suggestion = parse_duration(text)
    if seconds:
        return seconds
    hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
    c.add("bad_duration", path, f"{text!r} is not a duration; expected a whole number and a unit, "
          f'e.g. "1 hour"{hint}')
    return None


def to_document(ops: Operations) -> dict:
    """Only what differs from the defaults, so a plain pipeline's document stays as it was."""
    document: dict = {}
    metrics = {key: value for key, value in (
        ("prometheus", {"port": ops.metrics.prometheus_port} if ops.metrics.prometheus_port else None),
        ("consumer_group", ops.metrics.consumer_group)) if value}
    if metrics:
        document["metrics"] = metrics
    m, default = ops.maintenance, Maintenance()
    maintenance = {}
    if m.optimize_every_batches or m.optimize_every_seconds:
        maintenance["optimize_every"] = m.optimize_every_batches or f"{m.optimize_every_seconds} seconds"
    if m.vacuum_retain_seconds != default.vacuum_retain_seconds:
        maintenance["vacuum_retain"] = m.vacuum_retain
    if m.delete_log_retain_seconds != default.delete_log_retain_seconds:
        maintenance["delete_log_retain"] = m.delete_log_retain
    if maintenance:
        document["maintenance"] = maintenance
    document["on_data_loss"] = ops.on_data_loss  # the name to use (allow_data_loss is the old one)
    if ops.table_threads != Operations.table_threads:
        document["table_threads"] = ops.table_threads
    return document
