"""`ingest produce` against the real broker: what lands, with which headers, and what fails loudly."""

import json
import re
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ingest.cli import main
from ingest.kafka.produce import METADATA_TIMEOUT_S, Options, produce_file
from tests.integration.processes import wait_for


def orders(count, start=0):
    return [{"order_id": f"o{i}", "customer": f"c{i % 4}", "amount": float(i)} for i in range(start, start + count)]


def write_jsonl(tmp_path, lines, name="orders.jsonl"):
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def consume_all(kafka, topic, isolation="read_committed", timeout=30.0):
    """Every record up to the end offsets, read from the start."""
    consumer = Consumer({**kafka.client_config(), "group.id": f"t-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        records, done = [], {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout
        while len(done) < len(ends) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                if message is None and isolation == "read_committed":
                    done |= _caught_up(consumer, topic, ends)
                continue
            records.append(message)
            if message.offset() + 1 >= ends[message.partition()]:
                done.add(message.partition())
            done |= _caught_up(consumer, topic, ends)
        return records
    finally:
        consumer.close()


def _caught_up(consumer, topic, ends):
    """Partitions whose position reached the end (transaction markers take offsets too)."""
    positions = consumer.position([TopicPartition(topic, p) for p in ends])
    return {tp.partition for tp in positions if tp.offset >= ends[tp.partition]}


def end_offsets(kafka, topic):
    """The sum of the topic's end offsets. A topic made a moment ago may not have its partitions'
    leaders yet, and nothing sent to it waited for them (a producer would): the broker's
    NOT_LEADER_FOR_PARTITION is asked again."""
    consumer = Consumer({**kafka.client_config(), "group.id": f"t-{uuid.uuid4().hex}"})

    def ends():  # a tuple, for wait_for: an empty topic's 0 is an answer too
        try:
            parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            return (sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts),)
        except KafkaException as error:
            if error.args[0].code() != KafkaError.NOT_LEADER_FOR_PARTITION:
                raise
            return None

    try:
        return wait_for(ends, 30, f"the leaders of {topic}'s partitions")[0]
    finally:
        consumer.close()


def headers(message):
    return dict(message.headers() or [])


def test_a_file_lands_once_with_time_ordered_uids_and_keys(kafka, topic, tmp_path):
    lines = orders(60)
    path = write_jsonl(tmp_path, lines)
    progress = []
    summary = produce_file(path, Options(topic, key_field="customer"), kafka.client_config(),
                           on_progress=progress.append)

    assert (summary.records, summary.sent, summary.delivered, summary.failed) == (60, 60, 60, 0)
    assert summary.ok and summary.errors == ()
    assert progress[-1].delivered == 60 and progress[-1].total == 60
    records = consume_all(kafka, topic)
    assert sorted(json.loads(m.value())["order_id"] for m in records) == sorted(o["order_id"] for o in lines)
    for message in records:
        assert message.key().decode() == json.loads(message.value())["customer"]
        assert uuid.UUID(headers(message)["message-id"].decode()).version == 7
    uids = [headers(m)["message-id"].decode() for m in records]
    assert len(set(uids)) == 60
    for partition in {m.partition() for m in records}:
        in_partition = [headers(m)["message-id"].decode() for m in records if m.partition() == partition]
        assert in_partition == sorted(in_partition)  # produced in time order, read in offset order


def test_values_are_sent_as_written_and_uid_can_come_from_a_field(kafka, topic, tmp_path):
    path = write_jsonl(tmp_path, ['{"order_no": 17,   "amount": 1.50}', '{"order_no": "A-9"}'])
    summary = produce_file(path, Options(topic, uid_field="order_no", uid_header="uid"),
                           kafka.client_config())

    assert summary.delivered == 2
    found = {headers(m)["uid"]: m.value() for m in consume_all(kafka, topic)}
    assert found == {b"17": b'{"order_no": 17,   "amount": 1.50}', b"A-9": b'{"order_no": "A-9"}'}


def test_cli_abort_on_a_bad_line_sends_nothing_and_names_the_line(kafka, topic, tmp_path, capsys):
    path = write_jsonl(tmp_path, orders(3) + ['{"order_id": "o3", amount: 1}'] + orders(2, 4))
    code = main(["produce", str(path), "--topic", topic, "--bootstrap", kafka.bootstrap])

    out = capsys.readouterr().out
    assert code == 2
    assert f"{path}:4: not valid JSON" in out and "nothing was sent" in out
    assert end_offsets(kafka, topic) == 0


def test_cli_skip_sends_the_others_and_lists_the_bad_lines(kafka, topic, tmp_path, capsys):
    path = write_jsonl(tmp_path, orders(2) + ["nope", "[1]"] + orders(3, 2))
    code = main(["produce", str(path), "--topic", topic, "--bootstrap", kafka.bootstrap,
                 "--on-bad-line", "skip"])

    out = capsys.readouterr().out
    assert code == 0
    assert "5 of 5 record(s) delivered, 0 failed" in out
    assert f"{path}:3: not valid JSON" in out and f"{path}:4: a JSON array; expected an object" in out
    assert len(consume_all(kafka, topic)) == 5


def test_transactions_per_n_records_are_all_committed(kafka, topic, tmp_path):
    path = write_jsonl(tmp_path, orders(25))
    summary = produce_file(path, Options(topic, transactional=True, transaction_size=10),
                           kafka.client_config())

    assert (summary.transactions, summary.delivered, summary.failed) == (3, 25, 0)
    assert len(consume_all(kafka, topic)) == 25


@pytest.fixture
def small_topic(kafka):
    """A topic whose broker refuses records above 300 bytes: a real delivery failure."""
    name = f"small-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka.client_config())
    admin.create_topics([NewTopic(name, 1, 1, config={"max.message.bytes": "300"})])[name].result(30)
    return name


def test_delivery_failures_are_counted_and_fail_the_command(kafka, small_topic, tmp_path, capsys):
    path = write_jsonl(tmp_path, orders(2) + [{"order_id": "big", "note": "x" * 1000}] + orders(2, 2))
    code = main(["produce", str(path), "--topic", small_topic, "--bootstrap", kafka.bootstrap])

    captured = capsys.readouterr()
    assert code == 1
    # The broker refuses the whole request the big record is in, whatever else it holds.
    delivered = len(consume_all(kafka, small_topic))
    assert delivered <= 4
    assert f"{delivered} of 5 record(s) delivered, {5 - delivered} failed" in captured.out
    assert "Message size too large" in captured.err


def test_a_failed_transaction_is_aborted_and_nothing_of_it_is_visible(kafka, small_topic, tmp_path):
    path = write_jsonl(tmp_path, orders(3) + [{"order_id": "big", "note": "x" * 1000}])
    summary = produce_file(path, Options(small_topic, transactional=True), kafka.client_config())

    assert (summary.transactions, summary.delivered, summary.failed) == (0, 0, 4)
    assert any("transaction not committed" in e for e in summary.errors)
    assert consume_all(kafka, small_topic) == []


def test_cli_missing_topic_is_bad_input(kafka, tmp_path, capsys):
    path = write_jsonl(tmp_path, orders(1))
    code = main(["produce", str(path), "--topic", f"absent-{uuid.uuid4().hex[:6]}",
                 "--bootstrap", kafka.bootstrap])

    assert code == 2
    assert "is not available" in capsys.readouterr().err


def test_a_record_the_client_refuses_is_a_failure_and_the_rest_are_sent(kafka, topic, tmp_path, capsys):
    path = write_jsonl(tmp_path, orders(2) + [{"order_id": "big", "note": "x" * 3000}] + orders(1, 2))
    code = main(["produce", str(path), "--topic", topic, "--bootstrap", kafka.bootstrap,
                 "-X", "message.max.bytes=2000"])

    captured = capsys.readouterr()
    assert code == 1
    assert "3 of 4 record(s) delivered, 1 failed" in captured.out
    assert f"error: {topic}: " in captured.err and "(1 record)" in captured.err
    assert len(consume_all(kafka, topic)) == 3


def test_cli_unreachable_broker_fails_within_seconds(tmp_path, capsys):
    from ingest.kafka.local_broker import free_port

    path = write_jsonl(tmp_path, orders(1))
    started = time.monotonic()
    code = main(["produce", str(path), "--topic", "orders", "--bootstrap", f"127.0.0.1:{free_port()}"])

    assert code == 1
    assert re.search(r"no answer from the brokers within \d+s", capsys.readouterr().err)
    # nothing listens there: said after admin's grace for a starting broker, not the metadata timeout
    assert time.monotonic() - started < METADATA_TIMEOUT_S
