"""The pipeline's streaming query: Kafka source, trigger, checkpoint, and the
micro-batch function (`ingest.batch.processor.BatchProcessor`) behind foreachBatch."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Callable, Iterator

from ingest.batch.commit import faults
from ingest.batch.processor import BatchProcessor, BatchReport, payload_schema
from ingest.batch.routing import TopicRouter
from ingest.kafka.source import read_stream
from ingest.platform.connect import is_connect
from ingest.spec import template
from ingest.spec.model import Pipeline


def merge_bounds_on() -> bool:
    """INGEST_MERGE_BOUNDS=off is a diagnostic: the naive MERGE on `t._uid = s._uid` alone."""
    return os.environ.get("INGEST_MERGE_BOUNDS", "on").strip().lower() != "off"


def start_query(spark, pipeline: Pipeline, once: bool = False,
                on_report: Callable[[BatchReport], None] | None = None,
                starting_offsets=None):
    """Start the pipeline's streaming query; `once` processes what is there and stops."""
    processor: TopicRouter | BatchProcessor
    if template.is_per_topic(pipeline):  # a table per topic, each the one-table path
        processor = TopicRouter(pipeline, bounded=merge_bounds_on())
    else:
        processor = BatchProcessor(pipeline, payload_schema(spark, pipeline), bounded=merge_bounds_on())
    if on_report is not None and not is_connect(spark):
        # On Connect the processor is pickled to a worker beside the server: what it reports
        # would stay there. The caller reads each batch's report from the ledger instead
        # (`stream.connect_reports`).
        processor.on_report = on_report
    faults.arm(spark)
    stream = read_stream(spark, pipeline, starting_offsets)
    if isinstance(processor, BatchProcessor):  # a table per topic makes each table as its topic comes
        processor.prepare(spark, stream.schema)
    writer = (stream.writeStream
              .queryName(pipeline.name)
              .option("checkpointLocation", pipeline.checkpoint)
              .foreachBatch(processor))
    if once or pipeline.trigger.available_now:
        writer = writer.trigger(availableNow=True)
    elif pipeline.trigger.processing_time:
        writer = writer.trigger(processingTime=pipeline.trigger.processing_time)
    with _session_conf(spark, pipeline.spark_conf):
        query = writer.start()
    return query, processor


@contextmanager
def _session_conf(spark, settings) -> Iterator[None]:
    """Per-pipeline Spark settings: a query clones the session when it starts, so
    set them just around the start and put the old values back."""
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, str(value))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
