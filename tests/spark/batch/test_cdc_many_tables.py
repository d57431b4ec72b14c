"""A whole database in one job: each table's decode is built once per run, however many tables.

What turns a table's envelopes into changes is built from its row (thousands of calls into the
JVM) and kept for the run's later batches. A database's tables each have a row of their own, and
a batch with 50 tables changing decodes 50 rows, batch after batch."""

from pyspark.sql.types import StructType

from ingest.batch.formats.cdc import decode_envelope
from ingest.spec.model import Cdc
from tests.spark.batch.test_cdc_decode_plan import KAFKA, calls_into_the_jvm

TABLES = 20  # more than the 16 kept decodes before each table had its own


def test_every_tables_decode_is_built_once_and_not_again_on_the_next_batch(spark):
    cdc = Cdc(key=("id",))
    rows = [StructType.fromDDL(f"id BIGINT, name STRING, note_{n} STRING") for n in range(TABLES)]
    empty = spark.createDataFrame([], KAFKA)

    def batch():  # each table's share of one batch, decoded with its own row
        return [decode_envelope(empty, cdc, row, from_messages=True) for row in rows]

    first, _ = calls_into_the_jvm(batch)
    second, decoded = calls_into_the_jvm(batch)
    assert second < first / 4, f"the second batch's decodes made {second} calls into the JVM, the first {first}"
    assert all(f"note_{n}" in frame.columns for n, frame in enumerate(decoded))  # each its own row
