"""Avro against JSON on the same records, side by side in one Spark session.

decode     `batch.formats.decode.decode` over Kafka-shaped rows held in memory (no broker):
           JSON (`from_json`) against Avro (fastavro in an Arrow UDF, Confluent
           framing, the writer schema by id), into the no-op sink
pipeline   the whole `ingest` query (start_query, available-now) over two topics of
           the embedded broker holding the same records, JSON and Avro (the test
           stand-in registry serves the Avro schema)

Legs alternate, repeated (the pipeline leg also swaps which goes first each
repetition); the figures are the medians and their ratio (Avro rate / JSON rate),
with the load average seen before and after. Usage: bench/run formats [--records N] [--repeat K].
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import statistics
import struct
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench import RESULTS
from bench.harness.datagen import SCHEMA, payload

AVRO_SCHEMA = {"type": "record", "name": "Event", "fields": [
    *[{"name": n, "type": ["null", "string"], "default": None} for n in (
        "event_id", "user_id", "session_id", "event_type", "page", "referrer", "country", "device")],
    {"name": "amount", "type": ["null", "double"], "default": None},
    {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
]}
SCHEMA_ID = 1


def records(count: int) -> list[tuple[str, bytes, bytes]]:
    """(uid, JSON value, Avro value in the Confluent wire format) of the same events."""
    from fastavro import parse_schema, schemaless_writer

    schema, rnd, start_ms = parse_schema(AVRO_SCHEMA), random.Random(7), 1_795_000_000_000
    out = []
    for i in range(count):
        uid = f"{i:08d}-bench"
        text = payload(uid, start_ms + i, rnd)
        event = json.loads(text)
        event["ts"] = datetime.fromisoformat(event["ts"].replace("Z", "+00:00"))
        body = io.BytesIO()
        schemaless_writer(body, schema, event)
        out.append((uid, text, b"\x00" + struct.pack(">I", SCHEMA_ID) + body.getvalue()))
    return out


def kafka_rows(spark, values: list[bytes]):
    now = datetime.now(timezone.utc)
    rows = [("bench", i % 2, i, now, None, v, []) for i, v in enumerate(values)]
    schema = ("topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, "
              "value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
    return spark.createDataFrame(rows, schema).repartition(2).cache()


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def decode_leg(spark, data, repeat: int) -> dict:
    from ingest.batch.formats.decode import decode
    from ingest.batch.formats.schemas import SchemaDecoder

    json_rows, avro_rows = kafka_rows(spark, [d[1] for d in data]), kafka_rows(spark, [d[2] for d in data])
    json_rows.count(), avro_rows.count()
    struct_type = spark.createDataFrame([], SCHEMA).schema
    avro_decoder = _decoder(SchemaDecoder)
    legs = {"json": lambda: decode(json_rows, "json", struct_type),
            "avro": lambda: decode(avro_rows, "avro", avro_decoder)}
    for check in legs.values():  # every record decodes: a bench of failures would flatter
        assert check().where("__stage IS NOT NULL").count() == 0
    seconds = {name: [] for name in legs}
    for _ in range(repeat):
        for name, frame in legs.items():
            seconds[name].append(timed(lambda frame=frame: frame().write.format("noop").mode("overwrite").save()))
    return _rates(seconds, len(data))


def _decoder(cls):
    """A framed Avro decoder whose writer schema is already known (no registry in this leg)."""
    from ingest.batch.formats import avro
    from ingest.batch.formats.registry import RegistryClient
    from ingest.spec.model import Registry

    text = json.dumps(AVRO_SCHEMA)
    decoder = cls("avro", text, avro.spark_schema(avro.parse(text)),
                  RegistryClient(Registry(url="http://127.0.0.1:9")))
    decoder.writers[SCHEMA_ID] = text
    return decoder


def pipeline_leg(spark, data, repeat: int, work: Path) -> dict:
    from dataclasses import replace

    from ingest.kafka.local_broker import LocalKafka, create_topic
    from ingest.spec.model import DeadLetter, KafkaSource, Pipeline, Registry, Source, Target, Uid
    from tests.schema_registry_stand_in import StandInRegistry

    registry = StandInRegistry().start()
    schema_id, _ = registry.register("bench-avro-value", {"schema": json.dumps(AVRO_SCHEMA)})
    assert schema_id == SCHEMA_ID
    with LocalKafka(work_dir=work / "kafka") as kafka:
        for topic, column in (("bench-json", 1), ("bench-avro", 2)):
            create_topic(kafka.client_config(), topic, partitions=2)
            _produce(kafka, topic, [(d[0], d[column]) for d in data])
        base = Pipeline(name="bench", source=Source(KafkaSource(kafka.bootstrap, ("bench-json",)),
                                                    "json", SCHEMA),
                        uid=Uid(header="message-id"), target=Target(), checkpoint="",
                        dead_letter=DeadLetter())
        avro_source = Source(KafkaSource(kafka.bootstrap, ("bench-avro",)), "avro",
                             registry=Registry(url=registry.url, subject="bench-avro-value"))
        seconds: dict[str, list[float]] = {"json": [], "avro": []}
        legs = [("json", base.source), ("avro", avro_source)]
        for n in range(repeat):
            # alternating which goes first: a warmer JVM or page cache favours neither
            for name, source in (legs if n % 2 == 0 else legs[::-1]):
                root = work / f"{name}-{n}"
                pipeline = replace(base, source=source, target=Target(path=str(root / "t")),
                                   checkpoint=str(root / "c"), dead_letter=DeadLetter(path=str(root / "d")))
                seconds[name].append(timed(lambda pipeline=pipeline: _run(spark, pipeline, len(data))))
    registry.stop()
    return _rates(seconds, len(data))


def _produce(kafka, topic: str, items) -> None:
    from confluent_kafka import Producer

    producer = Producer({**kafka.client_config(), "linger.ms": 50, "enable.idempotence": True})
    for i, (uid, value) in enumerate(items):
        producer.produce(topic, value, partition=i % 2, headers=[("message-id", uid.encode())])
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def _run(spark, pipeline, expected: int) -> None:
    from ingest.stream.query import start_query

    reports = []
    query, _ = start_query(spark, pipeline, once=True, on_report=reports.append)
    try:
        query.awaitTermination()
    finally:
        query.stop()
    merged = sum(r.summary.good for r in reports)
    assert merged == expected, f"{pipeline.source.format}: {merged} of {expected} records landed"


def _rates(seconds: dict, count: int) -> dict:
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    rates = {name: count / s for name, s in medians.items()}
    return {"records": count, "seconds": medians, "records_per_s": rates,
            "avro_to_json": rates["avro"] / rates["json"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run formats", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--legs", default="decode,pipeline")
    args = parser.parse_args(argv)
    from ingest.platform.session import get_session

    spark = get_session("ingest-bench-formats", conf={"spark.sql.shuffle.partitions": "2",
                                                      "spark.ui.enabled": "false"}, master="local[2]")
    data = records(args.records)
    load_before = list(os.getloadavg())
    results = {}
    with tempfile.TemporaryDirectory(prefix="ingest-bench-formats-") as work:
        if "decode" in args.legs:
            results["decode"] = decode_leg(spark, data, args.repeat)
            print("decode", json.dumps(results["decode"]), flush=True)
        if "pipeline" in args.legs:
            results["pipeline"] = pipeline_leg(spark, data, args.repeat, Path(work))
            print("pipeline", json.dumps(results["pipeline"]), flush=True)
    results["load_average"] = {"before": load_before, "after": list(os.getloadavg())}
    print("load average before", load_before, "after", results["load_average"]["after"])
    (RESULTS / "formats.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
