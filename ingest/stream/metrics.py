"""Metrics of running pipelines: Prometheus `/metrics` on the driver, and the
committed offsets mirrored into a Kafka consumer group for the usual lag tools.

Batch figures come from each batch's `BatchReport` (the batch path knows
nothing of metrics). Kafka end offsets, the lag and the target's Delta version
are refreshed by one background thread: after every batch, and every
`refresh_s` while no batch comes (a stuck run shows a growing lag).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from ingest.batch.processor import BatchReport, unchanged_count
from ingest.errors import IngestError
from ingest.kafka import admin as kafka_admin
from ingest.kafka.consumer_group import GroupMirror
from ingest.kafka.offsets import Offsets
from ingest.spec import template
from ingest.spec.model import Pipeline

log = logging.getLogger("ingest.run")

DURATION_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
PARTITION = ("pipeline", "topic", "partition")


class MetricsError(IngestError):
    """The /metrics endpoint cannot be served (the port is taken)."""


class _Families:
    """The metric families of one /metrics endpoint; every series is labelled by pipeline."""

    def __init__(self, registry):
        from prometheus_client import Counter, Gauge, Histogram

        def counter(name, doc, labels=("pipeline",)):
            return Counter(name, doc, labels, registry=registry)

        def gauge(name, doc, labels=("pipeline",)):
            return Gauge(name, doc, labels, registry=registry)

        self.batches = counter("ingest_batches", "Micro-batches committed")
        self.read = counter("ingest_records_read", "Records read from Kafka")
        self.merged = counter("ingest_records_merged", "Unique records merged into the target, by result "
                              "(inserted, updated, deleted, unchanged: already there or older)", ("pipeline", "result"))
        self.dead = counter("ingest_records_dead_lettered", "Records written to the dead-letter table",
                            ("pipeline", "stage"))
        self.filtered = counter("ingest_records_filtered", "Records dropped by transform.where (counted)")
        self.unknown = counter("ingest_records_with_unknown_fields",
                               "Records merged with fields the schema does not name (source.unknown_fields: warn)")
        self.duration = Histogram("ingest_batch_duration_seconds", "Wall time of a micro-batch",
                                  ("pipeline",), buckets=DURATION_BUCKETS, registry=registry)
        self.last_commit = gauge("ingest_last_commit_timestamp_seconds", "Unix time of the last batch commit")
        self.version = gauge("ingest_delta_version", "Latest version of the target's Delta log")
        self.end = gauge("ingest_partition_end_offset", "Kafka end offset (last stable offset)", PARTITION)
        self.committed = gauge("ingest_partition_committed_offset",
                               "Next offset to read, as committed in the target's Delta log", PARTITION)
        self.lag = gauge("ingest_partition_lag_records", "End offset minus committed offset", PARTITION)
        self.lag_seconds = gauge("ingest_partition_lag_seconds",
                                 "Age of the oldest record not yet committed (0 when caught up)", PARTITION)


@dataclass
class _Watched:
    pipeline: Pipeline
    families: _Families | None
    committed: Offsets
    group: GroupMirror | None = None
    seen: set = field(default_factory=set)  # (topic, partition) series already published


class Metrics:
    """One per run; `observe` after each batch, `close` when the run ends."""

    def __init__(self, spark, refresh_s: float = 10.0):
        self.spark, self.refresh_s = spark, refresh_s
        self._watched: dict[str, _Watched] = {}
        self._servers: dict[int, tuple] = {}  # port -> (server, families)
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, pipeline: Pipeline, committed: Offsets) -> None:
        """Start serving `pipeline`'s figures; `committed` is where it resumes from."""
        settings = pipeline.operations.metrics
        families = self._endpoint(settings.prometheus_port) if settings.prometheus_port else None
        group = GroupMirror(pipeline.source.kafka, settings.consumer_group) if settings.consumer_group else None
        self._watched[pipeline.name] = _Watched(pipeline, families, {t: dict(p) for t, p in committed.items()},
                                                group)
        if families is not None and self._thread is None:
            self._thread = threading.Thread(target=self._refresh_loop, name="ingest-metrics", daemon=True)
            self._thread.start()
        self._wake.set()

    def _endpoint(self, port: int) -> _Families:
        if port not in self._servers:
            from prometheus_client import CollectorRegistry, start_http_server

            registry = CollectorRegistry()
            families = _Families(registry)
            try:
                server, _ = start_http_server(port, registry=registry)
            except OSError as error:
                raise MetricsError(f"metrics.prometheus.port {port}: cannot serve /metrics there "
                                   f"({error.strerror or error})") from None
            log.info("metrics: http://0.0.0.0:%d/metrics", port)
            self._servers[port] = (server, families)
        return self._servers[port][1]

    def observe(self, report: BatchReport) -> None:
        """After a batch's Delta commits, before Spark's checkpoint commit."""
        watched = self._watched.get(report.pipeline)
        if watched is None:
            return
        for topic, parts in report.summary.end_offsets.items():
            watched.committed.setdefault(topic, {}).update(parts)
        if watched.group is not None:
            try:
                watched.group.commit(report.summary.end_offsets)
            except Exception as error:  # a lag tool's view is not worth failing a run for
                log.warning("%s: could not commit offsets to consumer group %s: %s",
                            report.pipeline, watched.group.group, error)
        if watched.families is not None:
            self._count(watched.families, report)
            self._wake.set()

    @staticmethod
    def _count(f: _Families, report: BatchReport) -> None:
        s, m, name = report.summary, report.merged, report.pipeline
        f.batches.labels(name).inc()
        f.read.labels(name).inc(s.read)
        for result, count in (("inserted", m.inserted), ("updated", m.updated),
                              ("deleted", m.deleted), ("unchanged", unchanged_count(s, m))):
            f.merged.labels(name, result).inc(count)
        for stage in ("decode", "transform", "uid"):
            f.dead.labels(name, stage).inc(s.by_stage.get(stage, 0))
        f.filtered.labels(name).inc(s.by_stage.get("filtered", 0))
        f.unknown.labels(name).inc(s.unknown_fields)
        f.duration.labels(name).observe(report.seconds)
        f.last_commit.labels(name).set(time.time())

    def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.refresh_s)
            self._wake.clear()
            for watched in list(self._watched.values()):
                if watched.families is not None and not self._stop.is_set():
                    try:
                        self._refresh(watched)
                    except Exception as error:  # the broker is away for a moment: try again later
                        log.debug("metrics refresh of %s failed: %s", watched.pipeline.name, error)

    def _refresh(self, w: _Watched) -> None:
        f, name = w.families, w.pipeline.name
        marks = kafka_admin.watermarks(w.pipeline.source.kafka, timeout=10)
        positions: dict = {}
        lags: dict = {}
        for topic, parts in marks.items():
            for partition, (low, end) in parts.items():
                at = max(low, w.committed.get(topic, {}).get(partition, low))
                labels = (name, topic, str(partition))
                f.end.labels(*labels).set(end)
                f.committed.labels(*labels).set(at)
                f.lag.labels(*labels).set(max(0, end - at))
                lags[labels] = end - at
                if end > at:
                    positions.setdefault(topic, {})[partition] = at
        stamps = kafka_admin.record_timestamps(w.pipeline.source.kafka, positions)
        now_ms = time.time() * 1000
        for labels, lag in lags.items():
            stamp = stamps.get(labels[1], {}).get(int(labels[2]))
            f.lag_seconds.labels(*labels).set(max(0.0, (now_ms - stamp) / 1000) if lag > 0 and stamp else 0.0)
        version = _delta_version(self.spark, w.pipeline)
        if version is not None:
            f.version.labels(name).set(version)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(30)
        servers, self._servers = self._servers, {}
        for server, _ in servers.values():
            server.shutdown()
            server.server_close()
        watched, self._watched = self._watched, {}
        for one in watched.values():
            if one.group is not None:
                one.group.close()


def _delta_version(spark, pipeline: Pipeline) -> int | None:
    from ingest.platform.delta import delta_table, table_exists

    target = pipeline.target
    if template.is_per_topic(pipeline) or not table_exists(spark, target):  # one version per table there
        return None
    table = delta_table(spark, target)
    return int(table.history(1).select("version").first().version)
