"""Delta's MERGE warmed up on a scratch table beside `ingest run`'s start-up."""

from ingest.platform import warm_up
from tests.spark.batch.test_processor import jobs_since, next_job_id


def test_the_warm_up_merges_into_a_scratch_table_and_leaves_nothing(spark, tmp_path):
    mark = next_job_id(spark)

    warm_up.start(spark, scratch_in=str(tmp_path)).join(timeout=300)

    jobs = jobs_since(spark, mark)
    merges = [text for group, text in jobs if group == "ingest-background-warm-up" and "MERGE" in text]
    assert merges, f"no MERGE job ran in the warm-up's group: {jobs}"
    assert all(group == "ingest-background-warm-up" for group, _ in jobs), jobs  # none in the caller's
    assert not list(tmp_path.iterdir())  # its table is gone
    assert spark.conf.get("spark.sql.autoBroadcastJoinThreshold") != "-1"  # its settings stayed its own
