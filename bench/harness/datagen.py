"""Bench data: JSON events pre-produced to the embedded broker, once per bench run.

About 300-byte JSON objects of 10 fields, each stamped with a `message-id`
header uid: time-ordered (UUIDv7, the default) or random (UUIDv4). 2% of the
sends are a re-send of a recent record (same uid and payload, new offset), as a
producer retry would be, and a few transactions are aborted: their records must
never land. With `late_retries` (the throughput topic, P1's data), the events'
`ts` follow an event clock over EVENT_SPAN_MS and the last sends are late
retries: records of the topic's first minutes sent again with the clock's time
then as `ts`, long after the Spark peer's watermark has let their originals go.
The committed uids are written one per line to `<topic>.uids`, the
answer `legs.audit` checks a table against.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from ingest.kafka.produce import (
    Uuid7,  # the generator `ingest produce` stamps records with
)

SCHEMA = ("event_id STRING, user_id STRING, session_id STRING, event_type STRING, page STRING, "
          "referrer STRING, country STRING, device STRING, amount DOUBLE, ts TIMESTAMP")
UID_HEADER = "message-id"
DUPLICATE_SHARE = 0.02
ABORTED_TRANSACTIONS = 3
ABORTED_RECORDS = 100  # per aborted transaction
LATE_RETRIES = 5  # in the throughput topic: sends the Spark peer's watermark lets through as duplicates
EVENT_SPAN_MS = 60 * 60_000  # the event time a topic with late retries covers, first send to last
EARLY_SHARE = 0.05  # late retries re-send records of this first share of the topic

_EVENTS = ("view", "click", "add_to_cart", "checkout", "search")
_COUNTRIES = ("DE", "FR", "US", "GB", "NL", "ES", "IT", "PL", "SE", "JP")
_DEVICES = ("android", "ios", "desktop-chrome", "desktop-firefox", "tablet")


def _iso(ts_ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts_ms // 1000)) + f".{ts_ms % 1000:03d}Z"


def payload(uid: str, ts_ms: int, rnd: random.Random) -> bytes:
    """One event as compact JSON (about 300 bytes); every value is free of quotes and escapes."""
    item = rnd.randrange(100_000)
    ts = _iso(ts_ms)
    return (f'{{"event_id":"{uid}","user_id":"user-{rnd.randrange(1_000_000):07d}",'
            f'"session_id":"{rnd.getrandbits(64):016x}","event_type":"{rnd.choice(_EVENTS)}",'
            f'"page":"/catalog/category-{item % 97:02d}/item-{item:05d}?variant={rnd.randrange(12)}",'
            f'"referrer":"https://www.example.com/search?q=item+{item:05d}&page={rnd.randrange(9) + 1}",'
            f'"country":"{rnd.choice(_COUNTRIES)}","device":"{rnd.choice(_DEVICES)}",'
            f'"amount":{rnd.uniform(1, 500):.2f},"ts":"{ts}"}}').encode()


@dataclass
class Produced:
    topic: str
    sent: int  # records in committed sends, duplicates included
    unique: int
    aborted: int
    uids_file: Path
    seconds: float
    value_bytes: int  # mean JSON size
    late_retries: int = 0


def producer_config(client_config: dict) -> dict:
    return {**client_config, "enable.idempotence": True, "acks": "all", "linger.ms": 20,
            "batch.size": 1_000_000, "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000, "queue.buffering.max.kbytes": 512_000}


def send(producer: Producer, topic: str, value: bytes, uid: str, partition: int = -1) -> None:
    """`partition` -1: the producer's partitioner picks one."""
    while True:
        try:
            producer.produce(topic, value=value, headers=[(UID_HEADER, uid.encode())], partition=partition)
            return
        except BufferError:  # local queue full: let librdkafka drain it
            producer.poll(0.05)


def _transactional(client_config: dict) -> Producer:
    txn = Producer({**producer_config(client_config), "transactional.id": f"bench-{uuid.uuid4().hex}"})
    txn.init_transactions(60)
    return txn


def _abort_one(txn: Producer, topic: str, rnd: random.Random, make_uid) -> None:
    txn.begin_transaction()
    for _ in range(ABORTED_RECORDS):
        uid = make_uid()
        send(txn, topic, payload(uid, time.time_ns() // 1_000_000, rnd), uid)
    txn.flush(30)
    txn.abort_transaction(30)


def produce_topic(client_config: dict, topic: str, records: int, time_ordered: bool, out_dir: Path,
                  recent: Sequence[tuple[str, int]] = (), seed: int = 7,
                  late_retries: int = 0, partitions: int = 1) -> Produced:
    """`records` committed sends (duplicates included) and a few aborted transactions.

    `recent` (uid, ts_ms) pairs are records already in a target: half of the
    duplicates re-send one of them, as a retry of the previous batch's record would.

    With `late_retries`, `ts` is an event clock over EVENT_SPAN_MS, not the wall clock
    of the few seconds producing takes, and the last `late_retries` sends are retries of
    records of the first EARLY_SHARE, the same uid and fields but `ts` the clock's time
    then (the retry re-stamps the event): to a watermark on `ts` they are on time, and
    their originals are older than the watermark delay. The sends go round robin over the
    `partitions`, so the partitions' event times advance together and no original is
    behind the watermark of its own batch."""
    rnd = random.Random(seed)
    clock_start = time.time_ns() // 1_000_000 - EVENT_SPAN_MS
    early: list[tuple[str, int, bytes]] = []  # originals for the late retries
    late_from = records - late_retries

    def event_ms(i: int) -> int:
        return clock_start + i * EVENT_SPAN_MS // records if late_retries else time.time_ns() // 1_000_000

    make_uid = Uuid7() if time_ordered else (lambda: str(uuid.uuid4()))
    producer, txn = Producer(producer_config(client_config)), _transactional(client_config)
    aborts_at = {records * (k + 1) // (ABORTED_TRANSACTIONS + 1) for k in range(ABORTED_TRANSACTIONS)}
    window: list[tuple[str, bytes]] = []  # recent records, for retries
    uids_file = out_dir / f"{topic}.uids"
    started, total_bytes, unique = time.monotonic(), 0, 0
    with open(uids_file, "w") as uids:
        for i in range(records):
            if i in aborts_at:
                producer.flush(60)
                _abort_one(txn, topic, rnd, make_uid)
            if i == late_from and late_retries:
                early = rnd.sample(early, late_retries)
            if i >= late_from:
                uid, original_ms, value = early[i - late_from]
                value = value.replace(f'"ts":"{_iso(original_ms)}"'.encode(), f'"ts":"{_iso(event_ms(i))}"'.encode())
            elif window and rnd.random() < DUPLICATE_SHARE:
                uid, value = _duplicate(window, recent, rnd)
            else:
                uid = make_uid()
                ts_ms = event_ms(i)
                value = payload(uid, ts_ms, rnd)
                uids.write(uid + "\n")
                unique += 1
                window.append((uid, value))
                if len(window) > 5000:
                    del window[:1000]
                if late_retries and i < records * EARLY_SHARE:
                    early.append((uid, ts_ms, value))
            total_bytes += len(value)
            send(producer, topic, value, uid, i % partitions if late_retries else -1)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records of {topic} were not delivered")
    return Produced(topic, records, unique, ABORTED_TRANSACTIONS * ABORTED_RECORDS, uids_file,
                    time.monotonic() - started, total_bytes // max(records, 1), late_retries)


def _duplicate(window, recent, rnd: random.Random) -> tuple[str, bytes]:
    if recent and rnd.random() < 0.5:
        uid, ts_ms = rnd.choice(recent)
        return uid, payload(uid, ts_ms, rnd)
    return rnd.choice(window)


def create_topic(client_config: dict, name: str, partitions: int) -> None:
    from ingest.kafka.local_broker import create_topic as create

    create(client_config, name, partitions=partitions)

