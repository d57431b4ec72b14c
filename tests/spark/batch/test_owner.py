"""One writing pipeline per table (`ingest.batch.commit.owner`): recorded in the table's first
commit, adopted where none is, checked before a batch writes anything, with no Spark job."""

import pytest
from delta.tables import DeltaTable

from ingest.batch.commit.owner import OWNER, OwnerCheck, TableOwned, hand_over_sql
from ingest.spec.model import Target
from tests.spark.batch.test_processor import kafka_rows, make_processor, order


def owner_of(spark, path) -> str | None:
    return (DeltaTable.forPath(spark, path).detail().first().properties or {}).get(OWNER)


def operations(spark, path) -> list[str]:
    return [r.operation for r in DeltaTable.forPath(spark, path).history().orderBy("version").collect()]


def jobs_of(spark, action) -> list[int]:
    """The Spark jobs `action` runs."""
    group = "test-owner-check"
    spark.sparkContext.setJobGroup(group, "the owner check")
    try:
        action()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def test_a_table_without_an_owner_is_adopted_kept_and_handed_over(spark, tmp_path):
    path = str(tmp_path / "made_by_hand")
    spark.createDataFrame([(1,)], "id INT").write.format("delta").save(path)  # as before owners were kept
    table = Target(path=path)
    first = OwnerCheck("shop_a", table)

    first.check(spark)
    assert owner_of(spark, path) == "shop_a"
    assert operations(spark, path) == ["WRITE", "SET TBLPROPERTIES"]
    assert jobs_of(spark, lambda: first.check(spark)) == []  # checked again: no job, no commit
    assert operations(spark, path) == ["WRITE", "SET TBLPROPERTIES"]

    second = OwnerCheck("shop_b", table)
    with pytest.raises(TableOwned) as refused:
        second.check(spark)
    message = str(refused.value)
    assert message.startswith(f"shop_b: table {path} is written by pipeline shop_a (table property "
                              f"{OWNER}), not by shop_b; nothing of this batch was written.")
    assert message.endswith(f"stop shop_a first, then: ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
                            f"('{OWNER}' = 'shop_b')")
    assert owner_of(spark, path) == "shop_a"

    spark.sql(hand_over_sql(table, "shop_b"))  # as the message says
    second.check(spark)
    with pytest.raises(TableOwned, match="is written by pipeline shop_b"):
        first.check(spark)  # the handle it keeps sees the table's latest version


def test_a_batch_into_a_table_another_pipeline_writes_writes_nothing(spark, kafka, tmp_path):
    processor, reports, _ = make_processor(spark, kafka, tmp_path)
    processor(kafka_rows(spark, [(0, 0, order(1), "u-1")]), 0)
    target = processor.pipeline.target.path
    assert operations(spark, target) == ["CREATE TABLE", "MERGE"]  # the owner came with the first commit
    assert owner_of(spark, target) == "orders"

    spark.sql(hand_over_sql(processor.pipeline.target, "orders_elsewhere"))
    before = operations(spark, target)
    with pytest.raises(TableOwned, match="is written by pipeline orders_elsewhere"):
        processor(kafka_rows(spark, [(0, 1, order(2), "u-2"), (0, 2, b"{broken", "u-3")]), 1)
    assert operations(spark, target) == before
    assert not DeltaTable.isDeltaTable(spark, str(tmp_path / "dead"))  # its dead letter was not written
    assert len(reports) == 1
