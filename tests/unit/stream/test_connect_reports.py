"""What a client on Spark Connect learns across the process boundary: the batch report
rebuilt from a ledger entry and Delta's MERGE metrics, the worker's exception from the
query's error; and that the batch function pickles to the worker."""

from __future__ import annotations

import threading

from pyspark import cloudpickle

from ingest.batch.commit import ledger
from ingest.batch.processor import BatchProcessor, BatchReport
from ingest.batch.routing import TopicRouter
from ingest.spec.loader import load_text
from ingest.stream.connect_reports import merge_result, summary_of, worker_message
from tests.unit.spec.test_errors import TEST_ENVIRON, TEST_SETTINGS
from tests.unit.spec.test_template import PER_TOPIC

ONE_TOPIC = (PER_TOPIC.replace('pattern: "shop\\\\..*"', "topics: [orders]").replace("${topic}", "orders")
             .replace('  schemas:\n    shop.refunds: "refund_id STRING, amount DOUBLE"\n', ""))


def load(text):
    return load_text(text, "shop.yaml", environ=TEST_ENVIRON, settings=TEST_SETTINGS).pipeline


def test_a_report_from_the_ledger_reads_as_the_workers_would():
    txn = ledger.batch_txn("shop", "q1", 3, {"orders": {0: 12, 1: 7}},
                           counts={"read": 9, "unique": 6, "decode": 1, "transform": 0, "uid": 0, "filtered": 1},
                           start_offsets={"orders": {0: 5, 1: 5}})
    metrics = {"numTargetRowsInserted": "5", "numTargetRowsUpdated": "1", "numTargetRowsDeleted": "0"}
    entry = ledger.parse_metadata(txn.metadata)

    report = BatchReport("shop", 3, summary_of(entry), merge_result(metrics), 1.25)

    assert report.line() == ("shop batch 3: read 9, merged 6 (inserted 5, updated 1, deleted 0, unchanged 0), "
                             "dead letters 1 (decode 1, transform 0, uid 0), filtered 1, 1.2s, "
                             "offsets orders/0:5-12 orders/1:5-7")


def test_the_workers_exception_is_taken_from_the_traceback():
    error = ("[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_EXCEPTION] Found error inside "
             "foreachBatch Python process: Traceback (most recent call last):\n"
             '  File "worker.py", line 85, in main\n    process(df, batch_id)\n'
             "ingest.batch.commit.ledger.ReplayMismatch: shop: batch 3 was already committed\n"
             "with other offsets\n\nJVM stacktrace:\norg.apache.spark.api.python.PythonException\n\tat x")

    assert worker_message(error) == ("ingest.batch.commit.ledger.ReplayMismatch: shop: batch 3 was already "
                                     "committed\nwith other offsets")
    assert worker_message("no traceback here") == "no traceback here"


def test_the_batch_functions_pickle_and_their_lock_is_made_again():
    processor = BatchProcessor(load(ONE_TOPIC), None)
    processor._preparing = threading.Thread(target=lambda: None)  # never goes to the worker

    copy = cloudpickle.loads(cloudpickle.dumps(processor))
    assert copy.pipeline == processor.pipeline and copy._preparing is None

    router = cloudpickle.loads(cloudpickle.dumps(TopicRouter(load(PER_TOPIC))))
    with router._lock:  # a lock of its own
        assert router.pipeline.name == "shop"
