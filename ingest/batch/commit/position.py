"""A batch's place in the stream, where the exactly-once argument is made.

`BatchPosition` is one batch's: the range Spark planned for it (every partition,
read from the checkpoint's offset log), the ids of its topics, and the txn its
commits go under (app id, version, the ledger entry with the origin). It answers
the two checks that keep one batch id to one range of offsets: before anything of
the batch is written, a batch id the target has already committed must be the
same range (`check_replay`); after the MERGE, a commit Delta skipped because
another copy committed the batch id meanwhile must have been the same range
(`check_skipped`).

`QueryPosition` is kept by a batch function (one per table) from batch to batch,
and gives each batch its `BatchPosition`: what is read once per query (the
checkpoint's query id, the target's txn version when the run started, the
pipeline's origin) and what is reused while it holds (the topic ids, the last
batch's planned end, which is the next batch's start).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ingest.batch.commit import ledger
from ingest.kafka import admin as kafka_admin
from ingest.kafka import checkpoint as spark_checkpoint
from ingest.kafka.offsets import Offsets
from ingest.platform.delta import table_exists
from ingest.spec.model import Pipeline

UNREAD = -2  # the target's txn version before it is read (None: the target has none)


class Summary(Protocol):
    """What the position needs of the batch's summary (`processor.BatchSummary`)."""

    @property
    def end_offsets(self) -> Offsets: ...  # the records' own: next offset to read, per partition

    @property
    def counts(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class BatchPosition:
    pipeline: Pipeline
    batch_id: int
    start: Offsets | None  # None: the batch before's offsets are gone (or none planned)
    end: Offsets
    topic_ids: dict[str, str]
    txn: ledger.Txn
    recorded_version: int | None  # the target's txn version for the app id when the run started

    def check_replay(self, session) -> None:
        """A batch id the target had committed when the run started must be the same
        range (`ledger.check_replay`); raises before anything of the batch is written."""
        if self.recorded_version is not None and self.batch_id <= self.recorded_version:
            target = self.pipeline.target
            ledger.check_replay(session, target.location, bool(target.table), self.pipeline.name,
                                self.txn, self.start, self.end)

    def check_skipped(self, session, skipped: bool) -> None:
        """Delta skipped the MERGE of a batch id above the one recorded at the start: another
        copy committed it after this run read the txn version; the same range, or it raises."""
        if skipped and (self.recorded_version is None or self.batch_id > self.recorded_version):
            target = self.pipeline.target
            ledger.check_skipped(session, target.location, bool(target.table), self.pipeline.name,
                                 self.txn, self.start, self.end)


@dataclass
class QueryPosition:
    pipeline: Pipeline
    table_key: str | None = None  # the table among a pipeline's per-topic tables, part of its app id
    query_id: str | None = None
    last_planned: tuple[int, Offsets] | None = None  # (batch id, Spark's planned end) of the last batch
    recorded_version: int | None = UNREAD
    topic_ids: dict[str, str] | None = None
    ids_end: Offsets = field(default_factory=dict)  # the end offsets the topic ids were last given for
    origin: Offsets | None = None

    def batch(self, session, batch_id: int, summary: Summary) -> BatchPosition:
        """The batch's position, built once per batch."""
        start, end = self._planned(session, batch_id, summary.end_offsets)
        ids = self._ids(end)
        txn = ledger.batch_txn(self.pipeline.name, self._query_id(session), batch_id, end, summary.counts,
                               origin=self._origin(session, ids), table=self.table_key,
                               start_offsets=start, topic_ids=ids)
        if self.recorded_version == UNREAD:
            target = self.pipeline.target
            self.recorded_version = (ledger.txn_version(session, target.location, bool(target.table),
                                                        txn.app_id, self.pipeline.name)
                                     if table_exists(session, target) else None)
        return BatchPosition(self.pipeline, batch_id, start, end, ids, txn, self.recorded_version)

    def _planned(self, session, batch_id: int, read: Offsets) -> tuple[Offsets | None, Offsets]:
        """Spark's planned range for the batch, every partition (the records' own end
        offsets, `read`, if the offset log cannot be read)."""
        start, end = planned_range(session, self.pipeline.checkpoint, batch_id, self.last_planned)
        if end is None:
            return None, read
        self.last_planned = (batch_id, end)
        if self.table_key is not None:  # one table of a per-topic pipeline: its own topics only
            start, end = (None if start is None else _topics(start, read), _topics(end, read))
        return start, end

    def _ids(self, end: Offsets) -> dict[str, str]:
        # Asked again when a partition's end went back: its topic was deleted and created
        # again while the query ran (offsets start again at 0), and has a new id.
        went_back = any(offset < self.ids_end.get(t, {}).get(p, 0)
                        for t, parts in end.items() for p, offset in parts.items())
        if self.topic_ids is None or not set(end) <= set(self.topic_ids) or went_back:
            self.topic_ids = kafka_admin.topic_ids(self.pipeline.source.kafka, set(end))
        self.ids_end = end
        return {t: i for t, i in self.topic_ids.items() if t in end}

    def _origin(self, session, topic_ids: Mapping[str, str]) -> Offsets | None:
        """For `starting_offsets: latest`: where the pipeline first started, kept in the
        ledger across lost checkpoints (a recovery's checkpoint starts where the last
        one stopped), so `verify` audits from there. Read once per query."""
        if self.pipeline.source.kafka.starting_offsets != "latest":
            return None
        if self.origin is None:
            target = self.pipeline.target
            entries = (ledger.history_entries(session, target.location, bool(target.table), self.pipeline.name,
                                              topic_ids=topic_ids)
                       if table_exists(session, target) else [])
            origin = ledger.recorded_origin(entries) or {}
            # Only at the pipeline's first start: later, this checkpoint may be one recovery
            # seeded (its start is the resume point, not an origin), and a partition added
            # since is read from its earliest offset, so it needs none.
            started = {} if entries else spark_checkpoint.planned_start(session, self.pipeline.checkpoint, 0) or {}
            for topic, parts in started.items():  # partitions the ledger has no origin for
                for partition, offset in parts.items():
                    origin.setdefault(topic, {}).setdefault(partition, offset)
            self.origin = origin
        return self.origin

    def _query_id(self, session) -> str:
        # Spark writes the query id into the checkpoint when the query starts; it
        # lives as long as the checkpoint, as the app id must.
        if self.query_id is None:
            self.query_id = spark_checkpoint.query_id(session, self.pipeline.checkpoint)
            if self.query_id is None:
                raise RuntimeError(f"no query id in checkpoint {self.pipeline.checkpoint}/metadata")
        return self.query_id


def planned_range(session, checkpoint: str, batch_id: int,
                  last: tuple[int, Offsets] | None = None) -> tuple[Offsets | None, Offsets | None]:
    """(start, end) Spark planned for the batch, from the checkpoint's offset log; the start
    is `last`'s end when `last` is the batch before (its planned end, already read)."""
    end = spark_checkpoint.planned_end(session, checkpoint, batch_id)
    if last is not None and last[0] == batch_id - 1:
        return last[1], end
    return spark_checkpoint.planned_start(session, checkpoint, batch_id), end


def _topics(offsets: Offsets, of: Offsets) -> Offsets:
    return {topic: parts for topic, parts in offsets.items() if topic in of}
