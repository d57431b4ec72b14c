"""What `verify` reports: the counts of where each audited record went, the findings the
counts cannot say, and a few examples of each kind of fault (the record audit's; the
change audit's is `verify_changes.ChangesReport`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Duplicate:
    uid: str
    rows: int


@dataclass(frozen=True)
class Missing:
    uid: str
    topic: str  # where the uid's first copy is
    partition: int
    offset: int


@dataclass(frozen=True)
class Unaccounted:
    topic: str
    partition: int
    offset: int
    why: str


@dataclass(frozen=True)
class DeadLetterCopies:
    topic: str
    partition: int
    offset: int
    rows: int


@dataclass(frozen=True)
class VerifyReport:
    pipeline: str
    topic_records: int  # every record read from the topic (read_committed)
    before_start: int  # before the pipeline's starting offsets: not audited
    not_yet_ingested: int  # after the end offsets in the Delta log: not audited
    unique_uids: int  # distinct uids of the audited records that reach the MERGE
    target_rows: int
    dead_letters: int  # rows of this pipeline in the dead-letter table
    filtered: int  # audited records that transform.where drops
    duplicates: int  # uids with more than one target row
    missing: int  # uids of audited records in neither the target, dead letters nor filter
    unaccounted: int  # audited offsets in none of the three
    dead_letter_duplicates: int  # offsets with more than one dead-letter row
    duplicate_examples: tuple[Duplicate, ...] = ()
    missing_examples: tuple[Missing, ...] = ()
    unaccounted_examples: tuple[Unaccounted, ...] = ()
    dead_letter_duplicate_examples: tuple[DeadLetterCopies, ...] = ()
    notes: tuple[str, ...] = ()
    # what the counts above cannot say: a missing target, offsets consumed outside the
    # target's ledger, good records in the dead letters, rows that no record explains
    findings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.unaccounted or self.dead_letter_duplicates
                    or self.findings)

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}
