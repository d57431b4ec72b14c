"""The driver's Python side of a batch: building its plan through py4j, with and without
PySpark's DataFrame debugging (`ingest.platform.session.DRIVER_DEFAULTS`).

PySpark caches the debugging setting per process at its first DataFrame function, so
each variant runs in a process of its own: the variants alternate, `--reps` times each.
A process makes one session (local[2], ingest's local defaults) and two pipelines,
insert-only JSON and CDC JSON with a row of Debezium's decimal, timestamp and date
encodings, and times the batch function's driver work on a static 500-record batch
shaped as Kafka's: decode, stage, mark the kept rows, and the summary's aggregation
(the batch's first job), after three batches of warm-up. No broker, no table. Usage:

    bench/run driver_calls [--reps 3] [--batches 10] [--out bench/results/driver_calls.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from bench import RESULTS

VARIANTS = {"debugging on (PySpark's default)": "true", "debugging off (ingest's)": "false"}
RECORDS = 500
KAFKA = ("topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, key BINARY, value BINARY, "
         "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
PIPELINES = {
    "insert_only": {"source": {"schema": "order_id STRING, amount DOUBLE"}, "uid": {"header": "message-id"}},
    "cdc_typed": {"source": {"schema": "id BIGINT, price DECIMAL(10,2), at TIMESTAMP, day DATE"},
                  "cdc": {"key": ["id"]}},
}


def _value(kind: str, n: int) -> bytes:
    if kind == "insert_only":
        return json.dumps({"order_id": f"o{n}", "amount": n * 1.5}).encode()
    row = {"id": n, "price": "D54=", "at": 1_700_000_000_000, "day": 19_000}
    return json.dumps({"before": None, "after": row, "op": "c", "ts_ms": 1,
                       "source": {"connector": "postgresql", "lsn": n}}).encode()


def child(debugging: str, batches: int) -> dict:
    import yaml
    from py4j.clientserver import ClientServerConnection

    from ingest.batch.processor import BatchProcessor, mark_kept, payload_schema, slim, staged_records, summarize
    from ingest.platform.session import get_session
    from ingest.spec.loader import load_file

    spark = get_session("bench-driver-calls", master="local[2]",
                        conf={"spark.ui.enabled": "false", "spark.python.sql.dataFrameDebugging.enabled": debugging})
    calls = [0]
    send = ClientServerConnection.send_command

    def counted(self, command):
        calls[0] += 1
        return send(self, command)

    ClientServerConnection.send_command = counted
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for kind, spec in PIPELINES.items():
            document = {"name": kind, "source": {"kafka": {"bootstrap_servers": "unused:9092", "topics": ["t"]},
                                                 "format": "json", **spec["source"]},
                        **{k: v for k, v in spec.items() if k != "source"},
                        "target": {"path": f"{work}/{kind}"}, "checkpoint": f"{work}/{kind}-checkpoint",
                        "dead_letter": {"path": f"{work}/{kind}-dead"}}
            file = Path(work) / f"{kind}.yaml"
            file.write_text(yaml.safe_dump(document))
            pipeline = load_file(file, environ={}).pipeline
            processor = BatchProcessor(pipeline, payload_schema(spark, pipeline))
            batch = spark.createDataFrame(
                [("t", n % 2, n, datetime(2026, 1, 1), str(n).encode(), _value(kind, n),
                  [("message-id", f"m{n}".encode())]) for n in range(RECORDS)], KAFKA).cache()
            batch.count()
            millis, counts = [], []
            for n in range(3 + batches):
                before, started = calls[0], time.perf_counter()
                source = mark_kept(slim(staged_records(processor._decode(batch), pipeline, ())), pipeline)
                summarize(source, pipeline)
                if n >= 3:
                    millis.append((time.perf_counter() - started) * 1000)
                    counts.append(calls[0] - before)
            results[kind] = {"median_ms": statistics.median(millis), "py4j_calls": statistics.median(counts)}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS / "driver_calls.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.batches)))
        return 0
    runs = []
    for rep in range(args.reps):
        for name, value in (VARIANTS.items() if rep % 2 == 0 else reversed(VARIANTS.items())):
            done = subprocess.run([sys.executable, "-m", "bench.studies.driver_calls", "--child", value,
                                   "--batches", str(args.batches)], capture_output=True, text=True, check=True)
            measured = json.loads(done.stdout.strip().splitlines()[-1])
            runs.append({"variant": name, "rep": rep, **measured})
            print(f"rep {rep} {name}: " + ", ".join(f"{kind} {m['median_ms']:.0f} ms ({m['py4j_calls']:.0f} calls)"
                                                  for kind, m in measured.items()), flush=True)
    summary = {}
    for kind in PIPELINES:
        per = {name: statistics.median(r[kind]["median_ms"] for r in runs if r["variant"] == name)
               for name in VARIANTS}
        on, off = per.values()
        summary[kind] = {**per, "ratio_off_to_on": round(off / on, 3)}
        print(f"{kind}: " + ", ".join(f"{name} {ms:.0f} ms" for name, ms in per.items()) + f", off/on {off / on:.2f}")
    args.out.write_text(json.dumps({"records": RECORDS, "batches": args.batches, "runs": runs,
                                    "summary": summary}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
