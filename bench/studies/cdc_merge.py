"""CDC: one batch of Debezium changes into a large table against the same batch into an empty one.

Run side by side in one process (one Spark session, one embedded broker):

    bench/run cdc_merge [--rows 1000000] [--files 40] [--changes 2000] [--reps 2]
                        [--patterns recent,spread] [--vectors off|on|both]

The large table holds `rows` keys (ids 1000000..., one row each, soft-delete
layout: `_deleted`, `_sequence`, `_op`), written in key order as a table
loaded in key order is, so each file's min/max `_uid` is tight. Each batch is
`changes` changes (updates, deletes and inserts, 10% deletes) of keys:

- `recent`: the newest keys (the hot rows of a CDC table): the MERGE's literal
  `_uid` bounds prune the table to the files that hold them;
- `spread`: keys drawn over the whole table: the bounds cannot prune, and the
  MERGE reads every file (the cost CDC pays for updates of old rows).

Each leg is run into the large table (put back afterwards with RESTORE) and into
an empty table; the figure is the ratio of MERGE seconds, large / empty, and the
files scanned. `--vectors`: the tables with deletion vectors off (Delta's default
before ingest turned them on for updating MERGEs), on, or both side by side (each
rep runs the legs of one setting, then the other's): with them a MERGE marks the
changed rows of a file in a vector and writes only the changed rows again.
Results go to stdout as JSON lines; bench/results/README.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

FIRST_ID = 1_000_000  # seven digits: the uid's text order is the ids' order
ROW = "id BIGINT, name STRING, email STRING, tier STRING"


def build_large(spark, path: str, rows: int, files: int) -> int:
    from delta.tables import DeltaTable

    (spark.range(FIRST_ID, FIRST_ID + rows)
     .selectExpr("CAST(id AS STRING) AS _uid", "id", "concat('name-', id) AS name",
                 "concat('user', id, '@example.com') AS email", "'a' AS tier",
                 "id - 900000 AS _sequence", "'r' AS _op", "'snapshot' AS _topic",
                 "CAST(0 AS INT) AS _partition", "id - 1000000 AS _offset",
                 "current_timestamp() AS _kafka_timestamp", "current_timestamp() AS _ingested_at",
                 "false AS _deleted")
     .repartitionByRange(files, "_uid").sortWithinPartitions("_uid")
     .write.format("delta").save(path))
    return DeltaTable.forPath(spark, path).history(1).collect()[0].version


def produce_changes(config: dict, topic: str, rows: int, changes: int, spread: bool, lsn0: int) -> None:
    from confluent_kafka import Producer

    rng = random.Random(17)
    producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 20})
    for n in range(changes):
        if spread:
            key = FIRST_ID + rng.randrange(rows)
        else:
            key = FIRST_ID + rows - 1 - rng.randrange(changes) + (changes // 10)  # a tenth are new keys
        op = "d" if rng.random() < 0.1 else "u"
        image = {"id": key, "name": f"name-{key}", "email": f"user{key}@example.com", "tier": f"t{n % 7}"}
        envelope = {"before": image if op == "d" else None, "after": None if op == "d" else image,
                    "op": op, "ts_ms": 1_700_000_000_000 + n, "source": {"lsn": lsn0 + n}}
        producer.produce(topic, key=str(key).encode(), value=json.dumps(envelope).encode(),
                         partition=key % 2)
    assert producer.flush(60) == 0


def pipeline_for(bootstrap: str, topic: str, root: Path, target: str, vectors: bool = False):
    from ingest.spec.model import Cdc, DeadLetter, KafkaSource, Pipeline, Source, Target, Uid, frozen_map

    properties = frozen_map({"delta.enableDeletionVectors": str(vectors).lower()})
    return Pipeline(name="cdc_bench",
                    source=Source(KafkaSource(bootstrap_servers=bootstrap, topics=(topic,)), "json", ROW),
                    uid=Uid(field="id"), target=Target(path=target, mode="upsert", properties=properties),
                    checkpoint=str(root / "checkpoint"), dead_letter=DeadLetter(path=str(root / "dead")),
                    cdc=Cdc(key=("id",)))


def one_batch(spark, pipeline) -> dict:
    from delta.tables import DeltaTable

    from ingest.stream.query import start_query

    reports = []
    query, _ = start_query(spark, pipeline, once=True, on_report=reports.append)
    query.awaitTermination(3600)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    merge = DeltaTable.forPath(spark, pipeline.target.path).history(1).collect()[0]
    metrics = merge.operationMetrics
    return {"batches": len(reports), "batch_seconds": round(sum(r.seconds for r in reports), 2),
            "merge_seconds": int(metrics.get("executionTimeMs", 0)) / 1000,
            "files_rewritten": int(metrics.get("numTargetFilesRemoved", 0)),
            "vectors_added": int(metrics.get("numTargetDeletionVectorsAdded", 0)),
            **{k: int(v) for k, v in metrics.items() if "Skipping" in k},
            "rows_updated": int(metrics.get("numTargetRowsUpdated", 0)),
            "rows_inserted": int(metrics.get("numTargetRowsInserted", 0))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run cdc_merge", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--changes", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--patterns", default="recent,spread", help="recent, spread or both (comma)")
    parser.add_argument("--vectors", choices=("off", "on", "both"), default="off")
    args = parser.parse_args(argv)
    patterns = [p == "spread" for p in ("recent", "spread") if p in args.patterns.split(",")]
    settings = {"off": [False], "on": [True], "both": [False, True]}[args.vectors]

    from delta.tables import DeltaTable

    from ingest.kafka.local_broker import LocalKafka, create_topic
    from ingest.platform.session import get_session

    work = Path(tempfile.mkdtemp(prefix="cdc-bench-"))
    spark = get_session("cdc-bench", conf={"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"})
    broker = LocalKafka(work_dir=work / "kafka")
    broker.start()
    try:
        large = str(work / "large")
        started = time.perf_counter()
        build_large(spark, large, args.rows, args.files)
        print(json.dumps({"built": args.rows, "files": args.files,
                          "seconds": round(time.perf_counter() - started, 1)}), flush=True)
        for rep in range(args.reps):
            for vectors in settings:
                # the large table as the setting has it; RESTORE puts back this version, property included
                spark.sql(f"ALTER TABLE delta.`{large}` SET TBLPROPERTIES "
                          f"('delta.enableDeletionVectors' = '{str(vectors).lower()}')")
                version = DeltaTable.forPath(spark, large).history(1).collect()[0].version
                for spread in patterns:
                    legs = ("large", "empty") if rep % 2 == 0 else ("empty", "large")
                    for into in legs:
                        name = f"cdc-{'spread' if spread else 'recent'}-{into}-{rep}-{'dv' if vectors else 'nodv'}"
                        create_topic(broker.client_config(), name, partitions=2)
                        produce_changes(broker.client_config(), name, args.rows, args.changes, spread,
                                        lsn0=10_000_000)
                        root = work / name
                        target = large if into == "large" else str(root / "table")
                        result = one_batch(spark, pipeline_for(broker.bootstrap, name, root, target, vectors))
                        if into == "large":
                            DeltaTable.forPath(spark, large).restoreToVersion(version)
                        print(json.dumps({"leg": "spread" if spread else "recent", "into": into, "rep": rep,
                                          "vectors": vectors, **result}), flush=True)
    finally:
        broker.close()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
