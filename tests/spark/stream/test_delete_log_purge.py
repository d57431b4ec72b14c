"""`ingest maintain` purges the hard-delete log: a delete logged longer ago than
maintenance.delete_log_retain goes, a younger one stays, and the log is vacuumed."""

from ingest.batch.merge import delete_log
from ingest.spec.model import Cdc, DeadLetter, KafkaSource, Maintenance, Operations, Pipeline, Source, Target, Uid
from ingest.stream.maintenance import maintain


def hard_deletes(root, retain="3 days", retain_seconds=3 * 24 * 3600):
    maintenance = Maintenance(delete_log_retain=retain, delete_log_retain_seconds=retain_seconds)
    return Pipeline(name="customers", source=Source(KafkaSource("unused:9092", ("t",)), "json", "id BIGINT"),
                    uid=Uid(field="id"), target=Target(path=f"{root}/target", mode="upsert", deletes="hard"),
                    checkpoint=f"{root}/cp", dead_letter=DeadLetter(path=f"{root}/dead"),
                    cdc=Cdc(key=("id",)), operations=Operations(maintenance=maintenance))


def test_maintain_purges_deletes_older_than_the_retention(spark, tmp_path):
    pipeline = hard_deletes(tmp_path)
    log = delete_log.location(pipeline.target).path
    spark.sql("SELECT CAST(id AS STRING) AS _uid, id * 10 AS _sequence, 't' AS _topic, 0 AS _partition, "
              "id AS _offset, current_timestamp() AS _kafka_timestamp, "
              "current_timestamp() - make_dt_interval(CAST(id AS INT), 12) AS _ingested_at "
              "FROM range(1, 6)").write.format("delta").save(log)  # logged 1.5 to 5.5 days ago

    done = maintain(spark, pipeline, optimize=False, vacuum=True)

    assert [(d.table, d.action) for d in done] == [("delete log", "purge"), ("delete log", "vacuum")]
    assert done[0].detail.startswith("3 deletes logged more than 3 days ago forgotten"), done[0].detail
    kept = sorted(r._uid for r in spark.read.format("delta").load(log).collect())
    assert kept == ["1", "2"]
    assert maintain(spark, pipeline, optimize=False, vacuum=True)[0].detail.startswith("0 deletes")
