"""`ingest produce`: a JSON Lines file into a topic, with an idempotent producer
and a uid header on every record."""

from __future__ import annotations

import sys

from ingest.cli.options import positive_int, settings_of
from ingest.cli.output import BAD_INPUT, CHECK_FAILED, INTERRUPTED, OK

NEEDS_SPARK = False


def add(commands, parents) -> None:
    command = commands.add_parser(
        "produce", parents=parents, help="load a JSON Lines file into a topic",
        description="Send each line of a JSON Lines file (one JSON object per line) to a topic "
        "with an idempotent producer (acks=all), stamping a time-ordered uid (UUIDv7) in a "
        "header. A bad line stops everything before anything is sent, unless "
        "--on-bad-line skip. Exit 1 if any record was not delivered, 2 on bad input.")
    command.add_argument("file", metavar="FILE.jsonl", help="one JSON object per line")
    command.add_argument("--topic", required=True, help="the topic to write to (must exist)")
    command.add_argument("--bootstrap", metavar="HOST:PORT",
                         help="the brokers (default: KAFKA_BOOTSTRAP from the environment or conf/ENV.yaml)")
    command.add_argument("--key-field", metavar="FIELD",
                         help="send this payload field as the Kafka key; a dotted path reaches into an object "
                         "(customer.id)")
    command.add_argument("--tombstone-field", metavar="FIELD",
                         help="a line whose FIELD is true is sent as a tombstone: a null value with its key "
                         "(needs --key-field), e.g. {\"id\": 7, \"_delete\": true}")
    command.add_argument("--uid-header", default="message-id", metavar="NAME",
                         help="the header that carries the uid (default: message-id)")
    command.add_argument("--uid-field", metavar="FIELD",
                         help="take the uid from this payload field instead of a new UUIDv7")
    command.add_argument("--transactional", action="store_true",
                         help="send in a transaction: readers see all of it or none of it")
    command.add_argument("--transaction-size", type=positive_int, metavar="N",
                         help="with --transactional: one transaction per N records (default: the whole file)")
    command.add_argument("--on-bad-line", choices=("abort", "skip"), default="abort",
                         help="abort (default): send nothing if a line is bad; skip: send the others")
    command.add_argument("-X", dest="client_options", action="append", default=[], metavar="KEY=VALUE",
                         help="a librdkafka producer setting, e.g. -X security.protocol=SASL_SSL (repeatable)")
    command.add_argument("--format", choices=("json", "avro", "protobuf"), default="json",
                         help="json (default): each line as it is; avro, protobuf: each line encoded "
                         "with --schema")
    command.add_argument("--schema", metavar="FILE",
                         help="with --format avro: the Avro schema (.avsc); protobuf: the .proto file")
    command.add_argument("--message", metavar="NAME",
                         help="with --format protobuf: the message type, e.g. shop.Order; each line "
                         "in protobuf's JSON mapping")
    command.add_argument("--registry", metavar="URL",
                         help="with --format avro or protobuf: a Schema Registry (user:password@ in "
                         "the URL for basic auth); records in the Confluent wire format, the schema "
                         "registered under TOPIC-value. Without it: plain records, as "
                         "source.schema_file reads")


def _encoder(args):
    from ingest.kafka import encoders

    if args.format == "protobuf":
        return encoders.protobuf_encoder(args.schema, args.message, args.topic, args.registry)
    return encoders.avro_encoder(args.schema, args.topic, args.registry)


def run(args) -> int:
    import os

    from ingest.kafka import produce
    from ingest.spec.settings import lookup

    config = _client_options(args.client_options)
    if config is None:
        return BAD_INPUT
    bootstrap = args.bootstrap or lookup(settings_of(args), "KAFKA_BOOTSTRAP", os.environ).value
    if not bootstrap:
        print("no brokers: give --bootstrap HOST:PORT, or set KAFKA_BOOTSTRAP "
              f"(environment or conf/{args.env}.yaml)", file=sys.stderr)
        return BAD_INPUT
    if args.transaction_size and not args.transactional:
        print("--transaction-size needs --transactional", file=sys.stderr)
        return BAD_INPUT
    encoded = args.format in ("avro", "protobuf")
    if encoded != bool(args.schema) or (args.registry and not encoded) \
            or (args.format == "protobuf") != bool(args.message):
        print("--format avro needs --schema FILE.avsc, --format protobuf --schema FILE.proto and "
              "--message NAME (and --registry URL for the Confluent wire format); --schema and "
              "--registry go with those formats only, --message with protobuf only", file=sys.stderr)
        return BAD_INPUT
    try:
        encode = _encoder(args) if encoded else None
    except Exception as error:  # unreadable, does not compile, or not a schema (the libraries' own errors)
        print(f"cannot use the schema {args.schema}: {getattr(error, 'strerror', None) or error}",
              file=sys.stderr)
        return BAD_INPUT
    if args.tombstone_field and not args.key_field:
        print("--tombstone-field needs --key-field: a tombstone deletes the record of its key", file=sys.stderr)
        return BAD_INPUT
    options = produce.Options(args.topic, args.uid_header, args.uid_field, args.key_field,
                              args.transactional, args.transaction_size, args.on_bad_line, encode,
                              tombstone_field=args.tombstone_field)
    progress = _ProduceProgress(sys.stderr)
    try:
        summary = produce.produce_file(args.file, options, {**config, "bootstrap.servers": bootstrap},
                                       on_progress=progress.show)
    except OSError as error:
        print(f"cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return BAD_INPUT
    except produce.BadLines as bad:
        _print_bad_lines(bad.file, bad.bad_lines)
        print(f"{len(bad.bad_lines)} bad line(s) in {bad.file}; nothing was sent "
              "(--on-bad-line skip sends the good ones)")
        return BAD_INPUT
    except produce.ProduceError as error:
        progress.clear()
        print(f"error: {error}", file=sys.stderr)
        return BAD_INPUT if isinstance(error, produce.TopicNotFound) else CHECK_FAILED
    except KeyboardInterrupt:
        progress.clear()
        print("interrupted: records already sent stay in the topic; an open transaction was aborted",
              file=sys.stderr)
        return INTERRUPTED
    progress.clear()
    return _print_summary(summary)


def _client_options(pairs: list[str]) -> dict[str, str] | None:
    config = {}
    for number, pair in enumerate(pairs, start=1):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():  # the text is not echoed: it may hold a password
            print(f"-X option {number}: expected KEY=VALUE", file=sys.stderr)
            return None
        config[key.strip()] = value
    return config


def _print_bad_lines(file: str, bad_lines, limit: int = 20) -> None:
    for bad in bad_lines[:limit]:
        print(f"{file}:{bad.line}: {bad.reason}")
    if len(bad_lines) > limit:
        print(f"... and {len(bad_lines) - limit} more")


def _print_summary(summary) -> int:
    rate = summary.sent / summary.seconds if summary.seconds > 0 else 0.0
    txns = f", {summary.transactions} transaction(s) committed" if summary.transactions else ""
    print(f"{summary.file} -> {summary.topic}: {summary.delivered:,} of {summary.records:,} record(s) "
          f"delivered, {summary.failed:,} failed{txns}, {summary.seconds:.1f}s ({rate:,.0f} records/s)")
    if summary.bad_lines:
        print(f"skipped {len(summary.bad_lines)} bad line(s):")
        _print_bad_lines(summary.file, summary.bad_lines)
    for error in summary.errors:
        print(f"error: {error}", file=sys.stderr)
    return OK if summary.ok else CHECK_FAILED


class _ProduceProgress:
    """A bar with the rate on a terminal; a plain line every few seconds otherwise."""

    WIDTH, PLAIN_EVERY_S = 30, 5.0

    def __init__(self, stream):
        self.stream, self.live = stream, stream.isatty()
        self._shown, self._last_plain = False, 0.0

    def show(self, p) -> None:
        done = p.sent / p.total if p.total else 1.0
        counts = f"{p.sent:,}/{p.total:,} sent, {p.delivered:,} delivered, {p.failed:,} failed, {p.rate:,.0f}/s"
        if self.live:
            filled = int(done * self.WIDTH)
            bar = "#" * filled + "." * (self.WIDTH - filled)
            print(f"\r[{bar}] {done:4.0%} {counts}", end="", file=self.stream, flush=True)
            self._shown = True
        elif p.seconds - self._last_plain >= self.PLAIN_EVERY_S:
            self._last_plain = p.seconds
            print(f"progress: {counts}", file=self.stream, flush=True)

    def clear(self) -> None:
        if self._shown:
            print(file=self.stream)
            self._shown = False
