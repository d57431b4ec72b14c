"""`ingest verify`: the target and the dead letters audited against the topic
(ingest/audit/ does the audit; this module prints its report)."""

from __future__ import annotations

from ingest.cli.options import load_one, pipeline_file, session
from ingest.cli.output import CHECK_FAILED, OK, render_per_table, to_json
from ingest.spec.settings import mask

NEEDS_SPARK = True


def add(commands, parents) -> None:
    command = commands.add_parser(
        "verify", parents=parents, help="audit the target and dead letters against the topic",
        description="Read the topic (read_committed) and check that every record it holds is in "
        "the target (by uid), the dead letters (by offset) or the transform.where filter: "
        "duplicate uids, missing uids, unaccounted offsets. Records the pipeline has not consumed "
        "yet are counted, not audited. Exit 1 on any finding.")
    pipeline_file(command)
    command.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args) -> int:
    from ingest.audit.dispatch import verify_pipeline
    pipeline = load_one(args).pipeline
    report = verify_pipeline(session(args, "ingest-verify"), pipeline)
    text = to_json(report.to_dict()) if args.json else render_any_verify(report) + _locations(pipeline)
    print(mask(text, pipeline.secret_values))
    return OK if report.ok else CHECK_FAILED


def _locations(pipeline) -> str:
    from ingest.spec.locations import shown_location

    return (f"\n  target       {shown_location(pipeline.target.location)}"
            f"\n  dead letters {shown_location(pipeline.dead_letter.location)}")


def render_any_verify(report) -> str:
    """The report `dispatch.verify_pipeline` gave: per table, of changes, or of records."""
    from ingest.audit.per_table import PerTableReport
    from ingest.audit.verify_changes import ChangesReport

    if isinstance(report, PerTableReport):
        return render_per_table(report, render_any_verify)
    return render_verify_changes(report) if isinstance(report, ChangesReport) else render_verify(report)


def render_verify(report) -> str:
    r = report
    audited = r.topic_records - r.not_yet_ingested - r.before_start
    figures = [
        ("topic records", r.topic_records, f"{audited} audited, {r.not_yet_ingested} not yet ingested, "
                                           f"{r.before_start} before the start"),
        ("unique uids", r.unique_uids, "of the audited records"),
        ("target rows", r.target_rows, ""),
        ("dead letters", r.dead_letters, ""),
        ("filtered", r.filtered, "by transform.where"),
        ("duplicate uids", r.duplicates, "uids with more than one target row"),
        ("missing uids", r.missing, "in neither the target, the dead letters nor the filter"),
        ("unaccounted offsets", r.unaccounted, "records in none of the three"),
        ("dead-letter copies", r.dead_letter_duplicates, "offsets with more than one dead letter"),
    ]
    verdict = "OK" if r.ok else "FAILED"
    lines = [f"verify {r.pipeline}: {verdict}"]
    lines += [f"  {name:<20}{value:>10}  {note}".rstrip() for name, value, note in figures]
    examples = [
        ("duplicate uids", r.duplicates, [f"{e.uid}: {e.rows} rows" for e in r.duplicate_examples]),
        ("missing uids", r.missing,
         [f"{e.uid} (first at {e.topic}/{e.partition}@{e.offset})" for e in r.missing_examples]),
        ("unaccounted offsets", r.unaccounted,
         [f"{e.topic}/{e.partition}@{e.offset}: {e.why}" for e in r.unaccounted_examples]),
        ("dead-letter copies", r.dead_letter_duplicates,
         [f"{e.topic}/{e.partition}@{e.offset}: {e.rows} rows" for e in r.dead_letter_duplicate_examples]),
    ]
    for title, count, shown in examples:
        if shown:
            lines += [f"{title} (first {len(shown)} of {count}):"] + [f"  {line}" for line in shown]
    lines += [f"finding: {finding}" for finding in r.findings]
    lines += [f"note: {note}" for note in r.notes]
    return "\n".join(lines)


def render_verify_changes(report) -> str:
    r = report
    audited = r.topic_records - r.not_yet_ingested - r.before_start
    figures = [("topic records", r.topic_records, f"{audited} audited, {r.not_yet_ingested} not yet ingested, "
                                                  f"{r.before_start} before the start"),
               ("changes", r.changes, "applied: good envelopes among the audited records"),
               ("keys", r.keys, f"{r.live} live, {r.deleted} deleted by their last change"),
               ("dead letters", r.dead_letters, f"{r.failed} audited record(s) cannot be applied"),
               ("filtered", r.filtered, "tombstones after a delete, transform.where"),
               ("differing keys", r.differing, "the table does not hold the last change"),
               ("unaccounted offsets", r.unaccounted, "failures not in the dead letters, or good ones in them")]
    lines = [f"verify {r.pipeline}: {'OK' if r.ok else 'FAILED'}"]
    lines += [f"  {name:<20}{value:>10}  {note}".rstrip() for name, value, note in figures]
    if r.examples:
        lines.append(f"differing keys (first {len(r.examples)} of {r.differing}):")
        lines += [f"  {e.uid}: expected {e.expected}, found {e.found}" for e in r.examples]
    if r.unaccounted_examples:
        lines.append(f"unaccounted offsets (first {len(r.unaccounted_examples)} of {r.unaccounted}):")
        lines += [f"  {e.topic}/{e.partition}@{e.offset}: {e.why}" for e in r.unaccounted_examples]
    lines += [f"finding: {finding}" for finding in r.findings]
    lines += [f"note: {note}" for note in r.notes]
    return "\n".join(lines)
