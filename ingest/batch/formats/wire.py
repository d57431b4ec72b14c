"""The Confluent wire format, read in one place for Avro and Protobuf alike.

A framed record is the magic byte 0, the writer schema's 4-byte big-endian id,
for Protobuf the message indexes (a zigzag varint count, then each index; a
single 0 means the file's first message), then the payload. No Spark here: the
readers run inside Arrow UDFs on the executors.
"""

from __future__ import annotations

import struct

MAGIC = 0
HEADER = 5  # the magic byte and the schema id


def frame_id(value: bytes, payload_at_least: int = 0) -> int | None:
    """The schema id of a framed record, or None when the record is not framed
    (or too short to hold `payload_at_least` bytes after the header)."""
    if len(value) < HEADER + payload_at_least or value[0] != MAGIC:
        return None
    return struct.unpack(">I", value[1:HEADER])[0]


def read_indexes(value: bytes, position: int = HEADER) -> tuple[list[int], int]:
    """The Protobuf message indexes after the header, and where the message starts."""
    count, position = _zigzag_varint(value, position)
    if count == 0:
        return [0], position
    if not 0 < count <= 100:
        raise ValueError(f"{count} message indexes")
    indexes = []
    for _ in range(count):
        index, position = _zigzag_varint(value, position)
        indexes.append(index)
    return indexes, position


def _zigzag_varint(value: bytes, position: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if position >= len(value):
            raise ValueError("truncated message indexes")
        byte = value[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), position
        shift += 7
