"""Load a JSON Lines file into a topic: idempotent producer, time-ordered uids.

Each non-blank line of the file is one record's value, sent as written. It
must be a JSON object (the `json` format decodes objects only). Every record
gets a uid header (`message-id` by default, the header a pipeline's
`uid.header` reads): a UUIDv7, so uids sort by the time they were made and the
MERGE's uid bounds prune files; or, with `uid_field`, the text of a payload
field. `key_field` sends a payload field as the Kafka key.

The producer is idempotent with acks=all, so librdkafka's own retries never
write a record twice. `transactional` sends the file in one transaction (or
one per `transaction_size` records): a reader with read_committed sees all of
it or none of it.

Bad lines: with `on_bad_line="abort"` the whole file is checked before
anything is sent, and nothing is sent if one line is bad; with "skip" the
others are sent and the bad ones are listed in the summary. Every delivery
failure is counted and kept; none is ignored. Nothing here prints: callers
get `Progress` values while it runs and a `Summary` at the end.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from confluent_kafka import KafkaException, Producer

from ingest.errors import IngestError
from ingest.kafka.admin import nothing_listens

UID_HEADER = "message-id"
BAD_LINE_CHOICES = ("abort", "skip")
# Idempotence implies acks=all and bounded in-flight requests; said explicitly
# because these are the settings the exactly-once promise rests on.
PRODUCER_DEFAULTS = {"enable.idempotence": True, "acks": "all"}
MAX_ERRORS_KEPT = 20
METADATA_TIMEOUT_S = 10.0

# librdkafka logs each retry (a refused connection, every few ms); what matters
# reaches the caller as an exception or a delivery report, with its reason.
_QUIET = logging.getLogger("ingest.kafka.produce.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
_TAIL_BITS = 74  # rand_a (12) + rand_b (62)


class ProduceError(IngestError):
    """The records could not be sent (broker, topic or transaction trouble)."""


class TopicNotFound(ProduceError):
    """The topic does not exist (or cannot be described): bad input, not a delivery failure."""


class BadLines(IngestError):
    """Lines that are not JSON objects (or lack a field asked for); nothing was sent."""

    def __init__(self, file: str, bad_lines: tuple[BadLine, ...]):
        self.file, self.bad_lines = file, bad_lines
        super().__init__(f"{len(bad_lines)} bad line(s) in {file}")


# --- uids ------------------------------------------------------------------------


class Uuid7:
    """UUIDv7 (RFC 9562): 48-bit Unix milliseconds, version 7, 74 random bits
    around the variant, as the canonical lowercase text.

    Monotonic within one generator: in the same millisecond (or when the clock
    steps back) the 74 random bits are taken as a counter and incremented, so
    every uid is greater than the one before, also as text. The counter starts
    each millisecond below 2**73, leaving 2**73 increments before it would
    carry into the timestamp (which is then advanced by one millisecond).
    """

    def __init__(self, clock_ms: Callable[[], int] | None = None,
                 random_bits: Callable[[int], int] = secrets.randbits):
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        self._random_bits = random_bits
        self._last_ms, self._tail = -1, 0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        return str(uuid.UUID(int=self.next_int()))

    def next_int(self) -> int:
        with self._lock:
            now = self._clock_ms()
            if now > self._last_ms:
                self._last_ms, self._tail = now, self._fresh_tail()
            else:
                self._tail += 1
                if self._tail >> _TAIL_BITS:
                    self._last_ms, self._tail = self._last_ms + 1, self._fresh_tail()
            return layout(self._last_ms, self._tail)

    def _fresh_tail(self) -> int:
        return self._random_bits(_TAIL_BITS - 1)


def layout(unix_ms: int, tail: int) -> int:
    """The 128 bits: ms(48) | ver=7(4) | tail's top 12 | variant 0b10(2) | tail's low 62."""
    rand_a, rand_b = tail >> 62, tail & ((1 << 62) - 1)
    return ((unix_ms & ((1 << 48) - 1)) << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b


def uuid7_time_ms(text: str) -> int:
    """The Unix milliseconds a UUIDv7 was made at."""
    return uuid.UUID(text).int >> 80


# --- the file ----------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    topic: str
    uid_header: str = UID_HEADER
    uid_field: str | None = None  # take the uid from this payload field instead of a UUIDv7
    key_field: str | None = None  # a dotted path reaches into objects: customer.id
    transactional: bool = False
    transaction_size: int | None = None  # records per transaction; None: the whole file
    on_bad_line: str = "abort"
    # JSON object -> value bytes (kafka.encoders: avro, protobuf); None: the line's JSON text as it is
    encode: Callable[[dict], bytes] | None = field(default=None, compare=False)
    # a line whose field of this name is true is sent as a tombstone (null value) with its key
    tombstone_field: str | None = None


@dataclass(frozen=True)
class BadLine:
    line: int  # 1-based
    reason: str


@dataclass(frozen=True)
class Line:
    """One good line: its value as written, and the key and uid taken from it."""

    number: int
    value: bytes | None  # None: a tombstone
    key: bytes | None
    uid: str | None  # from `uid_field`; None: a fresh UUIDv7 at send time


def read_lines(path: str | Path, options: Options) -> Iterator[Line | BadLine]:
    """Every non-blank line, parsed; a bad line is a `BadLine`, never an exception."""
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, start=1):
            text = raw.strip()
            if text:
                yield parse_line(number, text, options)


def parse_line(number: int, text: bytes, options: Options) -> Line | BadLine:
    try:
        payload = json.loads(text.decode("utf-8"))
    except UnicodeDecodeError as error:
        return BadLine(number, f"not UTF-8 text (byte {error.start + 1})")
    except json.JSONDecodeError as error:
        return BadLine(number, f"not valid JSON: {error.msg} (column {error.colno})")
    if not isinstance(payload, dict):
        return BadLine(number, f"a JSON {_json_kind(payload)}; expected an object")
    key, problem = _field_text(payload, options.key_field, "--key-field")
    uid, uid_problem = _field_text(payload, options.uid_field, "--uid-field")
    if problem or uid_problem:
        return BadLine(number, problem or uid_problem)
    if options.tombstone_field is not None and payload.get(options.tombstone_field) is True:
        return Line(number, None, key.encode() if key is not None else None, uid)
    value = text
    if options.encode is not None:
        try:
            value = options.encode(payload)
        except ProduceError:
            raise  # the registry, not the line
        except Exception as error:  # the serializer's many kinds all mean: does not fit the schema
            return BadLine(number, f"does not fit the schema: {error}"[:300])
    return Line(number, value, key.encode() if key is not None else None, uid)


def _field_text(payload: dict, name: str | None, option: str) -> tuple[str | None, str | None]:
    """(text, None), or (None, why not); strings as they are, other values as JSON."""
    if name is None:
        return None, None
    value = payload.get(name) if name in payload else _nested(payload, name)
    if value is None:
        return None, f"no value for field {name!r} ({option})"
    return (value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))), None


def _nested(payload: dict, path: str):
    """`customer.id`: the field `id` of the object `customer`; None where the path is not there."""
    value = payload
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _json_kind(value) -> str:
    kinds = {list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


@dataclass(frozen=True)
class Scan:
    records: int
    bad_lines: tuple[BadLine, ...]


def scan(path: str | Path, options: Options) -> Scan:
    """The first pass: how many records, which lines are bad."""
    records, bad = 0, []
    for item in read_lines(path, options):
        if isinstance(item, BadLine):
            bad.append(item)
        else:
            records += 1
    return Scan(records, tuple(bad))


# --- sending ---------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    """One message: value bytes (None for a tombstone), key, headers, partition."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int | None = None


@dataclass
class Deliveries:
    """The delivery reports: every failure is counted, each distinct error kept with its count."""

    delivered: int = 0
    failed: int = 0
    by_error: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # failures that are not one record's

    def __call__(self, error, message) -> None:
        if error is None:
            self.delivered += 1
            return
        where = f"{message.topic()}[{message.partition()}]" if message is not None else "?"
        self._count(f"{where}: {error.str()}")

    def refused(self, topic: str, reason: str) -> None:
        """A record the producer refused to queue."""
        self._count(f"{topic}: {reason}")

    def _count(self, text: str) -> None:
        self.failed += 1
        if text in self.by_error or len(self.by_error) < MAX_ERRORS_KEPT:
            self.by_error[text] = self.by_error.get(text, 0) + 1

    @property
    def errors(self) -> tuple[str, ...]:
        counted = (f"{text} ({count} record{'s' if count > 1 else ''})" for text, count in self.by_error.items())
        return (*counted, *self.notes)


class Sender:
    """An idempotent (optionally transactional) producer that never loses a failure.

    `send` queues, `flush` waits for every delivery report. In a transaction,
    `commit` returns False (after aborting) when the broker refused it.
    """

    def __init__(self, config: dict, transactional_id: str | None = None, timeout_s: float = 60):
        # librdkafka's error codes, kept to tell "nothing listens there" from a slow answer
        self._error_codes: set[int] = set()
        settings = {**PRODUCER_DEFAULTS, "logger": _QUIET, "error_cb": lambda e: self._error_codes.add(e.code()),
                    **config}
        if transactional_id:
            settings["transactional.id"] = transactional_id
        self.deliveries = Deliveries()
        self.timeout_s = timeout_s
        self._producer = Producer(settings)
        self._transactional = bool(transactional_id)
        if self._transactional:
            self._call("init_transactions", self._producer.init_transactions, timeout_s)

    def check_topic(self, topic: str) -> int:
        """The topic's partition count; ProduceError if the broker or the topic is not there.
        When every broker refuses the connection, that is said after admin's grace, not the
        whole timeout."""
        started = time.monotonic()
        while True:
            waited = time.monotonic() - started
            try:
                metadata = self._producer.list_topics(topic, timeout=max(0.1, min(1.0, METADATA_TIMEOUT_S - waited)))
                break
            except KafkaException as error:
                self._producer.poll(0)  # serves error_cb
                waited = time.monotonic() - started
                if waited >= METADATA_TIMEOUT_S or nothing_listens(self._error_codes, waited):
                    raise ProduceError(f"no answer from the brokers within {waited:.0f}s: "
                                       f"{error.args[0].str()}") from None
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            reason = found.error.str() if found is not None and found.error else "not found"
            raise TopicNotFound(f"topic {topic!r} is not available: {reason}")
        return len(found.partitions)

    def send(self, topic: str, record: Record) -> None:
        extra: dict[str, Any] = {} if record.partition is None else {"partition": record.partition}
        while True:
            try:
                self._producer.produce(topic, value=record.value, key=record.key,
                                       headers=list(record.headers), on_delivery=self.deliveries,
                                       **extra)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                self._producer.poll(0.1)
            except KafkaException as error:  # refused before sending, e.g. too large
                if error.args[0].fatal():
                    raise ProduceError(f"fatal producer error: {error.args[0].str()}") from None
                self.deliveries.refused(topic, error.args[0].str())
                break
        self._producer.poll(0)

    def begin(self) -> None:
        self._call("begin_transaction", self._producer.begin_transaction)

    def commit(self) -> bool:
        """Commit the open transaction; on a refusal abort it and return False."""
        try:
            self._producer.commit_transaction(self.timeout_s)
            return True
        except KafkaException as error:
            self.deliveries.notes.append(f"transaction not committed: {error.args[0].str()}")
            if error.args[0].fatal():
                raise ProduceError(f"fatal producer error: {error.args[0].str()}") from None
            self.abort()
            return False

    def abort(self) -> None:
        self._call("abort_transaction", self._producer.abort_transaction, self.timeout_s)

    def flush(self) -> int:
        """Wait for every delivery report; the number still not reported (0 when done)."""
        return self._producer.flush(self.timeout_s)

    def poll(self) -> None:
        self._producer.poll(0)

    def _call(self, what: str, method, *args) -> None:
        try:
            method(*args)
        except KafkaException as error:
            raise ProduceError(f"{what} failed: {error.args[0].str()}") from None


# --- the whole file ----------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    sent: int
    delivered: int
    failed: int
    total: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Summary:
    file: str
    topic: str
    records: int  # good lines in the file
    sent: int
    delivered: int  # acknowledged (and, in transactions, committed)
    failed: int
    errors: tuple[str, ...]
    bad_lines: tuple[BadLine, ...]
    transactions: int  # committed
    seconds: float

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.delivered == self.records


def produce_file(path: str | Path, options: Options, config: dict,
                 on_progress: Callable[[Progress], None] | None = None,
                 new_uid: Callable[[], str] | None = None,
                 progress_every_s: float = 0.5) -> Summary:
    """Send every good line of `path` to `options.topic`; see the module doc.

    Raises BadLines (nothing sent) and ProduceError (broker or topic missing)."""
    if options.on_bad_line not in BAD_LINE_CHOICES:
        raise ValueError(f"on_bad_line must be one of {BAD_LINE_CHOICES}")
    checked = scan(path, options)
    if checked.bad_lines and options.on_bad_line == "abort":
        raise BadLines(str(path), checked.bad_lines)
    transactional_id = f"ingest-produce-{uuid.uuid4().hex}" if options.transactional else None
    sender = Sender(config, transactional_id)
    sender.check_topic(options.topic)
    run = _FileRun(path, options, sender, checked, on_progress, new_uid or Uuid7(), progress_every_s)
    return run.send_all()


@dataclass
class _FileRun:
    path: str | Path
    options: Options
    sender: Sender
    checked: Scan
    on_progress: Callable[[Progress], None] | None
    new_uid: Callable[[], str]
    progress_every_s: float
    sent: int = 0
    transactions: int = 0
    in_transaction: int = 0
    committed: int = 0  # records in committed transactions
    started: float = field(default_factory=time.monotonic)
    _last_progress: float = 0.0

    def send_all(self) -> Summary:
        try:
            for item in read_lines(self.path, self.options):
                if isinstance(item, Line):
                    self._send(item)
            self._finish()
        except BaseException:
            self._give_up()
            raise
        return self._summary()

    def _send(self, line: Line) -> None:
        if self.options.transactional and self.in_transaction == 0:
            self.sender.begin()
        uid = line.uid if line.uid is not None else self.new_uid()
        record = Record(line.value, line.key, ((self.options.uid_header, uid.encode()),))
        self.sender.send(self.options.topic, record)
        self.sent += 1
        self.in_transaction += 1
        if self.options.transaction_size and self.in_transaction >= self.options.transaction_size:
            self._commit()
        self._report()

    def _commit(self) -> None:
        if self.sender.commit():
            self.transactions += 1
            self.committed += self.in_transaction
        self.in_transaction = 0

    def _finish(self) -> None:
        if self.options.transactional and self.in_transaction:
            self._commit()
        left = self.sender.flush()
        if left:
            self.sender.deliveries.notes.append(f"{left} record(s) without a delivery report "
                                                 f"after {self.sender.timeout_s:.0f}s")
        self._report(final=True)

    def _give_up(self) -> None:
        """Interrupted or failed: an open transaction is aborted, queued records are flushed."""
        try:
            if self.options.transactional and self.in_transaction:
                self.sender.abort()
            else:
                self.sender.flush()
        except Exception:  # already failing; the original error is the one to show
            pass

    def _report(self, final: bool = False) -> None:
        now = time.monotonic()
        if self.on_progress is None or not (final or now - self._last_progress >= self.progress_every_s):
            return
        self.sender.poll()
        self._last_progress = now
        d = self.sender.deliveries
        self.on_progress(Progress(self.sent, d.delivered, d.failed, self.checked.records, now - self.started))

    def _summary(self) -> Summary:
        d = self.sender.deliveries
        # In transactions only a commit makes records visible to read_committed readers.
        delivered = self.committed if self.options.transactional else d.delivered
        return Summary(str(self.path), self.options.topic, self.checked.records, self.sent,
                       delivered, self.checked.records - delivered, d.errors,
                       self.checked.bad_lines, self.transactions, time.monotonic() - self.started)
