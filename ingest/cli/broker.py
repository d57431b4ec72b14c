"""`ingest broker`: an embedded single-node Kafka for local development, up until
Ctrl-C or SIGTERM."""

from __future__ import annotations

import sys

from ingest.cli.options import positive_int, topic_to_create
from ingest.cli.output import BAD_INPUT, CHECK_FAILED, OK

NEEDS_SPARK = False  # the broker is a Java process of its own


def add(commands, parents) -> None:
    command = commands.add_parser(
        "broker", parents=parents, help="an embedded Kafka broker for local development",
        description="Start a single-node Apache Kafka (KRaft, transactions on) on 127.0.0.1 and "
        "print its bootstrap address. Ctrl-C or SIGTERM stops it (exit 0).")
    command.add_argument("--port", type=positive_int, default=None,
                         help="client port (default: a free one)")
    command.add_argument("--data-dir", default=None, metavar="DIR",
                         help="where Kafka keeps its log; kept, so topics survive a restart "
                         "(default: a temporary folder, removed on stop)")
    command.add_argument("--topic", dest="topics", action="append", default=[], type=topic_to_create,
                         metavar="NAME[:PARTITIONS]",
                         help="create this topic once the broker is up (default 1 partition); "
                         "repeat for more; one that exists already is kept")
    command.add_argument("--bootstrap", metavar="HOST:PORT", default=None,
                         help="start no broker: create the --topic topics on the one running there "
                         "(e.g. $KAFKA_BOOTSTRAP), then exit")


def run(args) -> int:
    import signal
    from pathlib import Path

    from ingest.kafka.local_broker import BrokerError, LocalKafka, ensure_topic

    if args.bootstrap:
        return _create_on_running(args)
    # a loaded laptop can take minutes for a first JVM start
    broker = LocalKafka(work_dir=Path(args.data_dir) if args.data_dir else None, port=args.port,
                        start_timeout_s=300)
    stopping = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    try:
        broker.start()
        for name, partitions in args.topics:
            created = ensure_topic(broker.client_config(), name, partitions)
            print(f"topic {name}: " + (f"created, {partitions} partition(s)" if created
                                       else "exists already, kept as it is"), file=sys.stderr)
        print(f"Kafka is up at {broker.bootstrap}  (Ctrl-C stops it)", file=sys.stderr)
        print(f"export KAFKA_BOOTSTRAP={broker.bootstrap}", flush=True)
        while not stopping and not broker.wait(0.5):
            pass
        if not stopping:
            print(f"error: the broker exited by itself; see {broker.log_file}", file=sys.stderr)
            return CHECK_FAILED
    except BrokerError as error:
        print(f"error: {error}", file=sys.stderr)
        return BAD_INPUT if "already in use" in str(error) else CHECK_FAILED
    except KeyboardInterrupt:
        pass
    finally:
        broker.close()
        signal.signal(signal.SIGTERM, previous)
    print("Kafka stopped", file=sys.stderr)
    return OK


def _create_on_running(args) -> int:
    """A running broker gets new topics without a restart (which would recreate the ones it has
    unless it keeps a --data-dir)."""
    from confluent_kafka import KafkaException

    from ingest.kafka.local_broker import ensure_topic

    if not args.topics:
        print("--bootstrap creates the --topic topics on a running broker; expected at least one --topic",
              file=sys.stderr)
        return BAD_INPUT
    for name, partitions in args.topics:
        try:
            created = ensure_topic({"bootstrap.servers": args.bootstrap, "socket.timeout.ms": "10000"}, name,
                                   partitions)
        except KafkaException as error:
            print(f"error: topic {name} on {args.bootstrap}: {error.args[0].str() if error.args else error}",
                  file=sys.stderr)
            return CHECK_FAILED
        print(f"topic {name}: " + (f"created, {partitions} partition(s)" if created
                                   else "exists already, kept as it is"), file=sys.stderr)
    return OK
