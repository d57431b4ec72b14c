"""The code as it was before a lever of issue #53, for a leg beside today's in one run
(`bench/run record_path --variant NAME`): each entry patches today's code back in place for
that leg, and nothing else, so a kept lever's before -> after (bench/results/README.md) can
be measured again."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator
from unittest import mock


@contextmanager
def changing_rows_always() -> Iterator[None]:
    """Lever 2's before: the upsert's rows that change nothing dropped by a join with the
    target before the MERGE, deletion vectors or not."""
    with mock.patch("ingest.batch.merge.upsert.writes_vectors", lambda session, pipeline: False):
        yield


BEFORE: dict[str, Callable] = {"changing-rows": changing_rows_always}
