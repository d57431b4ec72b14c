"""What every command prints the same way, and the codes it exits with.

Exit codes: 0 ok, 1 a check failed, 2 bad input (spec, arguments, files);
130 after Ctrl-C, as a shell reports it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from ingest.errors import Problem
from ingest.spec.settings import mask

OK, CHECK_FAILED, BAD_INPUT = 0, 1, 2
INTERRUPTED = 130


def print_problems(problems, file: str, stream=None, secrets: Iterable[str] = ()) -> int:
    """validate's findings are its result (stdout); another command's are diagnostics (stderr)."""
    for problem in sorted(problems, key=by_line):
        print(mask(problem.render(), secrets), file=stream)
    count = sum(1 for problem in problems if not problem.warning)
    print(f"{count} error{'s' if count != 1 else ''} in {file}", file=stream)
    return BAD_INPUT


def by_line(problem: Problem):
    return (problem.line or 0, problem.path)


def to_json(value) -> str:
    return json.dumps(value, indent=2, default=str)


def audit_figure(value) -> str:
    """A count an audit could not make is shown as '-', not as 0."""
    return "-" if value is None else str(value)


def render_per_table(report, render_one) -> str:
    """A table per topic: one section per table, under the pipeline's verdict."""
    lines = [f"{report.pipeline}: {len(report.tables)} table(s), one per topic: "
             f"{'OK' if report.ok else 'ATTENTION'}"]
    if report.kafka_error:
        lines.append(f"error: {report.kafka_error}")
    for one in report.tables:
        lines.append(f"\n[{one.table}] topics {', '.join(one.topics)}")
        lines.append(render_one(one.report))
    return "\n".join(lines)
