"""The Confluent frame both readers start from."""

import struct

import pytest

from ingest.batch.formats import wire


def test_a_framed_record_gives_its_schema_id():
    assert wire.frame_id(b"\x00" + struct.pack(">I", 777) + b"payload") == 777


def test_an_unframed_or_short_record_gives_none():
    assert wire.frame_id(b'{"id": 1}') is None
    assert wire.frame_id(b"\x00\x00\x01") is None
    assert wire.frame_id(b"\x00" + struct.pack(">I", 7)) == 7
    assert wire.frame_id(b"\x00" + struct.pack(">I", 7), payload_at_least=1) is None


def test_message_indexes_of_nested_and_later_messages():
    assert wire.read_indexes(b"\x00rest", 0) == ([0], 1)
    assert wire.read_indexes(bytes([4, 2, 6]), 0) == ([1, 3], 3)  # zigzag: 4->2, 2->1, 6->3
    assert wire.read_indexes(b"\x00\x00\x00\x00\x07\x00msg") == ([0], 6)


def test_truncated_indexes_are_an_error():
    with pytest.raises(ValueError, match="truncated"):
        wire.read_indexes(bytes([4, 2]), 0)
