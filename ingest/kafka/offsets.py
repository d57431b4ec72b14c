"""Kafka positions: topic -> partition -> the next offset to read.

One type for every layer, and one reading and writing of the Kafka source's JSON
(`{"topic": {"0": 42}}`), which Spark's checkpoint, the ledger's commit metadata
and `replay --from/--to` all use.
"""

from __future__ import annotations

from typing import Mapping

Offsets = dict[str, dict[int, int]]  # topic -> partition -> next offset to read
OffsetsView = Mapping[str, Mapping[int, int]]  # the same, for a reader that does not change it


def from_json(source: Mapping) -> Offsets:
    """Offsets from the Kafka source's JSON object (partitions as strings or ints)."""
    return {str(topic): {int(p): int(o) for p, o in parts.items()} for topic, parts in source.items()}


def to_json(offsets: OffsetsView) -> dict[str, dict[str, int]]:
    """The Kafka source's JSON object, topics and partitions sorted."""
    return {t: {str(p): int(o) for p, o in sorted(parts.items())} for t, parts in sorted(offsets.items())}
