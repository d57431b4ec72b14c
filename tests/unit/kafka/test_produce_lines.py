"""Reading a JSON Lines file for `ingest produce`: good lines, bad lines and their numbers."""

import pytest

from ingest.kafka.produce import (
    BadLine,
    BadLines,
    Line,
    Options,
    parse_line,
    produce_file,
    read_lines,
    scan,
)

TOPIC = Options(topic="orders")


def write(tmp_path, text: bytes):
    path = tmp_path / "orders.jsonl"
    path.write_bytes(text)
    return path


def test_a_good_line_is_sent_as_written():
    line = parse_line(3, b'{"order_id": "o1",  "amount": 2}', TOPIC)
    assert line == Line(3, b'{"order_id": "o1",  "amount": 2}', None, None)


@pytest.mark.parametrize("text, reason", [
    (b'{"order_id": "o1",', "not valid JSON: Expecting property name enclosed in double quotes (column 19)"),
    (b"[1, 2]", "a JSON array; expected an object"),
    (b"42", "a JSON number; expected an object"),
    (b'"o1"', "a JSON string; expected an object"),
    (b"null", "a JSON null; expected an object"),
    (b'{"a": "\xff"}', "not UTF-8 text (byte 8)"),
])
def test_bad_lines_say_why(text, reason):
    assert parse_line(7, text, TOPIC) == BadLine(7, reason)


def test_key_and_uid_fields_as_text():
    options = Options(topic="t", key_field="customer", uid_field="order_no")
    line = parse_line(1, b'{"customer": "c1", "order_no": 17}', options)
    assert (line.key, line.uid) == (b"c1", "17")


@pytest.mark.parametrize("payload", [b'{"customer": null}', b'{"other": 1}'])
def test_a_missing_key_field_is_a_bad_line(payload):
    found = parse_line(2, payload, Options(topic="t", key_field="customer"))
    assert found == BadLine(2, "no value for field 'customer' (--key-field)")


def test_line_numbers_count_blank_lines_and_crlf(tmp_path):
    path = write(tmp_path, b'{"a": 1}\r\n\r\n{"a": \r\n   \n{"a": 3}\n')
    items = list(read_lines(path, TOPIC))
    assert [(type(i).__name__, i.line if isinstance(i, BadLine) else i.number) for i in items] == [
        ("Line", 1), ("BadLine", 3), ("Line", 5)]
    assert items[0].value == b'{"a": 1}'


def test_scan_counts_records_and_collects_every_bad_line(tmp_path):
    path = write(tmp_path, b'{"a": 1}\nnope\n{"a": 2}\n[]\n')
    assert scan(path, TOPIC).records == 2
    assert [b.line for b in scan(path, TOPIC).bad_lines] == [2, 4]


def test_abort_checks_the_whole_file_before_connecting(tmp_path):
    path = write(tmp_path, b'{"a": 1}\nnope\n{"a": 2}\n{\n')
    # No broker at this address: reaching it would fail differently.
    with pytest.raises(BadLines) as raised:
        produce_file(path, TOPIC, {"bootstrap.servers": "127.0.0.1:1"})
    assert [b.line for b in raised.value.bad_lines] == [2, 4]


def test_the_key_can_come_from_a_nested_field():
    """issue 54.7: --key-field customer.id reaches into the object."""
    line = parse_line(1, b'{"order_id": "o1", "customer": {"id": "c1", "tier": 2}}',
                      Options(topic="orders", key_field="customer.id"))
    assert line == Line(1, b'{"order_id": "o1", "customer": {"id": "c1", "tier": 2}}', b"c1", None)
    missing = parse_line(2, b'{"order_id": "o2", "customer": "c2"}', Options(topic="orders", key_field="customer.id"))
    assert missing == BadLine(2, "no value for field 'customer.id' (--key-field)")


def test_a_line_marked_by_the_tombstone_field_is_a_tombstone_with_its_key():
    """issue 54.7: a delete of a key (a null value) could not be sent."""
    options = Options(topic="orders", key_field="id", tombstone_field="_delete")
    assert parse_line(1, b'{"id": 7, "_delete": true}', options) == Line(1, None, b"7", None)
    kept = parse_line(2, b'{"id": 8, "_delete": false, "name": "x"}', options)
    assert kept == Line(2, b'{"id": 8, "_delete": false, "name": "x"}', b"8", None)
