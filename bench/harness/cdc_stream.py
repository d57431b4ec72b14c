"""The change stream of `bench/run cdc_peer` (pure Python, unit-tested in tests/unit/test_cdc_peer.py):
Debezium change events of a `customers` table, the state they should leave, the state the
textbook foreachBatch MERGE leaves given the batches Spark cut, and the keys a table got wrong.

The table holds `keys` rows before the stream (ids from FIRST_ID). The stream: a tenth creates
of new keys, the rest changes to existing keys, half spread over the whole table and half to
the newest keys (the hot rows); a live key is updated or, one time in ten, deleted, a deleted
key created again. A share of the sends are out-of-order re-sends: an earlier change, unchanged,
sent again after its key has changed since (a connector that restarts re-sends from its last
committed offset), `resend_lag` to twice that many sends after the original.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace

FIRST_ID = 1_000_000  # seven digits: the `_uid` text order is the ids' order, min/max per file tight
FIRST_LSN = 10_000_000  # every change's position is above the initial rows' (their `_sequence` is 0)
INITIAL_TIER = "snapshot"
TS_MS0 = 1_700_000_000_000
ROW = "id BIGINT, name STRING, email STRING, tier STRING"
ROW_COLUMNS = ("id", "name", "email", "tier")


@dataclass(frozen=True)
class Change:
    """One Debezium change event of the `customers` table."""

    key: int
    op: str  # Debezium's: c (create), u (update), d (delete)
    lsn: int  # the source position (`source.lsn`): the order the database committed in
    resent: bool = False  # an earlier change sent again, unchanged

    @property
    def row(self) -> tuple[int, str, str, str] | None:
        """The row after the change; None for a delete. Each change writes a tier of its own,
        so a key left at an older change shows."""
        return None if self.op == "d" else row_of(self.key, f"v{self.lsn}")

    def value(self) -> bytes:
        """The envelope as Debezium's JSON converter writes it (schemas.enable=false)."""
        # a delete's before image holds the key only (Postgres' default replica identity)
        image = dict(zip(ROW_COLUMNS, self.row or (self.key, None, None, None), strict=True))
        ts_ms = TS_MS0 + self.lsn - FIRST_LSN
        envelope = {"before": image if self.op == "d" else None, "after": None if self.op == "d" else image,
                    "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "shop",
                               "ts_ms": ts_ms, "db": "shop", "schema": "public", "table": "customers",
                               "lsn": self.lsn},
                    "op": self.op, "ts_ms": ts_ms + 7}
        return json.dumps(envelope, separators=(",", ":")).encode()

    def message_key(self) -> bytes:
        return json.dumps({"id": self.key}, separators=(",", ":")).encode()


def row_of(key: int, tier: str | None) -> tuple[int, str, str, str]:
    return (key, f"name-{key}", f"user{key}@example.com", tier or INITIAL_TIER)


@dataclass(frozen=True)
class Shape:
    """What the stream holds."""

    keys: int  # rows of the table before the stream: ids FIRST_ID .. FIRST_ID + keys - 1
    changes: int  # sends, re-sends included (tombstones are not counted here)
    resend_lag: int  # a re-sent change was first sent at least this many sends before
    new_share: float = 0.1  # creates of new keys
    recent_share: float = 0.45  # changes to the newest keys; the rest spread over all
    recent_keys: int = 0  # how many are the newest (0: a hundredth of the table, at least 100)
    delete_share: float = 0.1  # of the changes to a live key
    resend_share: float = 0.02
    seed: int = 53

    @property
    def hot(self) -> int:
        return self.recent_keys or max(100, self.keys // 100)


def change_stream(shape: Shape) -> list[Change]:
    """The changes in the order they are sent, re-sends included."""
    rnd = random.Random(shape.seed)
    live = dict.fromkeys(range(FIRST_ID, FIRST_ID + shape.keys), True)
    latest: dict[int, int] = {}  # key -> the position of its newest change sent so far
    next_id, lsn = FIRST_ID + shape.keys, FIRST_LSN
    sent: list[Change] = []
    while len(sent) < shape.changes:
        if rnd.random() < shape.resend_share and (again := _superseded(sent, latest, shape, rnd)):
            sent.append(again)
            continue
        draw = rnd.random()
        if draw < shape.new_share:
            key, next_id = next_id, next_id + 1
        elif draw < shape.new_share + shape.recent_share:
            key = next_id - 1 - rnd.randrange(min(shape.hot, next_id - FIRST_ID))
        else:
            key = FIRST_ID + rnd.randrange(next_id - FIRST_ID)
        if not live.get(key, False):
            op = "c"
        else:
            op = "d" if rnd.random() < shape.delete_share else "u"
        lsn += 1
        live[key], latest[key] = op != "d", lsn
        sent.append(Change(key, op, lsn))
    return sent


def _superseded(sent: list[Change], latest: dict[int, int], shape: Shape, rnd: random.Random) -> Change | None:
    """An earlier change whose key has changed since, sent `resend_lag` to twice that before."""
    end = len(sent) - shape.resend_lag
    if end <= 0:
        return None
    start = max(0, end - shape.resend_lag)
    for _ in range(20):
        earlier = sent[rnd.randrange(start, end)]
        if not earlier.resent and latest[earlier.key] > earlier.lsn:
            return replace(earlier, resent=True)
    return None


def initial_rows(keys: int) -> dict[int, tuple]:
    return {key: row_of(key, None) for key in range(FIRST_ID, FIRST_ID + keys)}


def expected_state(keys: int, changes: Iterable[Change]) -> dict[int, tuple]:
    """The live rows once every change is applied in position order: each key as its change
    with the highest position left it (gone after a delete), whatever order they came in."""
    newest: dict[int, Change] = {}
    for change in changes:
        if change.key not in newest or change.lsn > newest[change.key].lsn:
            newest[change.key] = change
    state = initial_rows(keys)
    for key, change in newest.items():
        if change.row is None:
            state.pop(key, None)
        else:
            state[key] = change.row
    return state


def textbook_state(keys: int, batches: Iterable[Sequence[Change]]) -> dict[int, tuple]:
    """What the textbook MERGE leaves: per batch, each key's change with the highest position
    in that batch; a delete removes the row, any other change writes it. Nothing remembers a
    position across batches, so a change re-sent in a later batch than a newer one wins."""
    state = initial_rows(keys)
    for batch in batches:
        last: dict[int, Change] = {}
        for change in batch:
            if change.key not in last or change.lsn > last[change.key].lsn:
                last[change.key] = change
        for key, change in last.items():
            if change.row is None:
                state.pop(key, None)
            else:
                state[key] = change.row
    return state


@dataclass(frozen=True)
class Wrong:
    """How a table differs from the expected live rows, counted in keys."""

    missing: int  # expected live, absent
    extra: int  # present, expected gone (deleted or never there)
    differing: int  # present with other values than expected
    duplicated: int  # present more than once

    @property
    def keys(self) -> int:
        return self.missing + self.extra + self.differing + self.duplicated

    def figures(self) -> dict[str, int]:
        return {**asdict(self), "keys": self.keys}


def wrong_keys(expected: dict[int, tuple], found: Iterable[tuple]) -> Wrong:
    """`found`: the table's live rows as (id, name, email, tier)."""
    seen: dict[int, tuple] = {}
    duplicated = set()
    for row in found:
        key = row[0]
        if key in seen:
            duplicated.add(key)
        seen[key] = tuple(row)
    missing = sum(1 for key in expected if key not in seen)
    extra = sum(1 for key in seen if key not in expected and key not in duplicated)
    differing = sum(1 for key, row in seen.items()
                    if key in expected and key not in duplicated and row != expected[key])
    return Wrong(missing, extra, differing, len(duplicated))


def stream_figures(shape: Shape, changes: Sequence[Change]) -> dict:
    """What the stream holds, by kind."""
    fresh = [c for c in changes if not c.resent]
    initial = range(FIRST_ID, FIRST_ID + shape.keys)
    return {"keys": shape.keys, "changes": len(changes),
            "creates": sum(c.op == "c" for c in fresh), "updates": sum(c.op == "u" for c in fresh),
            "deletes": sum(c.op == "d" for c in fresh), "resent": len(changes) - len(fresh),
            "resent_keys": len({c.key for c in changes if c.resent}),
            "tombstones": sum(c.op == "d" for c in changes),
            "keys_changed": len({c.key for c in changes}),
            "initial_keys_changed": len({c.key for c in changes if c.key in initial}),
            "new_keys": len({c.key for c in changes if c.key >= FIRST_ID + shape.keys})}


# --- the messages and Spark's batches ---------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """Where each change landed: (partition, offset) -> the change (None: a tombstone)."""

    at: dict[tuple[int, int], Change | None] = field(default_factory=dict)

    def batches(self, ranges: Sequence[dict[int, tuple[int, int]]]) -> list[list[Change]]:
        """The changes of each batch, given per batch each partition's [start, end) offsets."""
        out = []
        for batch in ranges:
            changes = [self.at[(p, o)] for p, (start, end) in batch.items() for o in range(start, end)
                       if (p, o) in self.at]
            out.append([c for c in changes if c is not None])
        return out


def offset_ranges(progress: Sequence[dict], topic: str) -> list[dict[int, tuple[int, int]]]:
    """Per batch with records, each partition's [start, end) from a query's progress (a
    source's offsets are JSON text or already parsed)."""
    ranges = []
    for batch in progress:
        if not batch.get("numInputRows"):
            continue
        source = batch["sources"][0]
        start, end = (_parsed(source["startOffset"]), _parsed(source["endOffset"]))
        ranges.append({int(p): ((start or {}).get(topic, {}).get(p, 0), int(o))
                       for p, o in end[topic].items()})
    return ranges


def _parsed(offsets) -> dict:
    return json.loads(offsets) if isinstance(offsets, str) else offsets
