"""One small error hierarchy.

Retriable is a marker: only errors that carry it may be retried, in one place.
Anything else, including an exception we do not know, is fatal.
"""

from __future__ import annotations

from dataclasses import dataclass


class IngestError(Exception):
    """Base of every error `ingest` raises on purpose."""


class RunFailed(IngestError):
    """A pipeline's query failed: which pipeline, in which batch, at which offsets, and why.

    `offsets` is {topic: {partition: offset}}: the failed batch's, or the last committed
    ones when the failure came before a batch was planned. `cause` is the exception the
    query ended with (a Spark StreamingQueryException, or what the batch raised)."""

    def __init__(self, message: str, pipeline: str, batch_id: int | None = None,
                 offsets: dict | None = None, cause: BaseException | None = None):
        super().__init__(message)
        self.pipeline, self.batch_id, self.offsets, self.cause = pipeline, batch_id, offsets, cause


class UnsupportedSchema(IngestError):
    """An Avro or Protobuf schema with a shape ingest cannot map to Spark columns (a
    recursive record or message, a union of several types, .proto text instead of
    descriptors); one error for both formats, so a caller need not know which."""


class Retriable:
    """Marker mixin: the operation may succeed if tried again as is."""


# Stable problem codes: tests, docs/spec-errors.md and users' scripts key on
# them, so a code is never renamed; new ones may be added.
PROBLEM_CODES = {
    "unreadable_file": "the file cannot be read",
    "yaml_syntax": "the text is not valid YAML",
    "yaml_tag": "an explicit YAML tag (only plain YAML is loaded)",
    "duplicate_key": "a key given twice in one mapping",
    "unknown_key": "a key the contract does not define",
    "missing_key": "a required key is absent",
    "wrong_type": "a value of the wrong YAML type",
    "yaml_boolean": "an unquoted yes/no/on/off read as a boolean where text was expected",
    "yaml_date": "an unquoted date read as a date where text was expected",
    "bad_enum": "a value outside a fixed set of choices",
    "bad_name": "a pipeline name outside [a-z][a-z0-9_]*",
    "bad_duration": "a duration that is not '<number> <unit>'",
    "bad_value": "a value of the right type that is not allowed",
    "bad_offsets": "a starting_offsets map that is not {topic: {partition: offset}}",
    "reserved_option": "a Kafka option that ingest sets itself",
    "exclusive_keys": "two keys that exclude each other are both given",
    "uid_rules": "not exactly one uid rule",
    "order_by_rules": "order_by without upsert, or upsert without order_by",
    "schema_rules": "schema missing for json, or given for another format",
    "bad_column": "a column that is not in the payload, or of the wrong type",
    "bad_path": "a path in a VARIANT column (payload:order.id::string) that is malformed or does not fit its key",
    "bad_variable": "a malformed ${...} reference",
    "missing_variable": "a ${VAR} with no value in any place looked in",
    "unknown_template": "a template variable other than ${topic}, or one outside the target and dead_letter",
    "template_rules": "per-topic dead letters or schemas without ${topic} in the target",
    "unknown_env": "no conf/<env>.yaml for the selected environment",
    "duplicate_name": "two pipelines share a name, a checkpoint or a target",
    "bad_ddl": "source.schema is not a Spark DDL schema",
    "bad_sql": "a transform expression Spark cannot parse or resolve",
    "cdc_rules": "a cdc or deletes/history setting that does not fit the rest of the pipeline",
    "unsafe_writers": "a second writing driver the log store cannot make safe (S3, one driver only)",
    "reader_schema": "the registry or schema_file gives no reader schema that maps to Spark columns",
    "coordinates_uid": "warning: a uid from Kafka coordinates is only safe with idempotent producers",
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: where (file, line, key path), what, and what was expected."""

    code: str
    path: str  # dotted key path, e.g. "target.mode" or "transform.select[1]"; "" for the file
    message: str  # "what is wrong; expected what"
    line: int | None = None  # 1-based
    file: str | None = None
    context: str = ""  # extra lines shown under the message (YAML syntax errors)
    warning: bool = False

    def __post_init__(self):
        if self.code not in PROBLEM_CODES:
            raise ValueError(f"unknown problem code {self.code!r}")

    def render(self) -> str:
        where = ":".join(str(part) for part in (self.file, self.line) if part is not None)
        parts = [part for part in (where, self.path) if part]
        head = ": ".join(parts + [("warning: " if self.warning else "") + self.message])
        return head + ("\n" + self.context if self.context else "")


class SpecError(IngestError):
    """A pipeline spec (or its conf) is not valid: bad input, exit code 2."""


class SpecErrors(SpecError):
    """Every problem found in one spec, sorted by line; messages are already masked."""

    def __init__(self, problems):
        self.problems = tuple(sorted(problems, key=problem_order))
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(problem.render() for problem in self.problems)


def problem_order(problem: Problem):
    return (problem.file or "", problem.line or 0, problem.path)


def first_line(error: BaseException, limit: int | None = 300) -> str:
    """An error's first non-blank line, for a log line or a dead letter's reason (a JVM
    error's message is its whole stack trace; py4j keeps the message in `desc`)."""
    lines = _message_lines(error)
    return lines[0][:limit] if lines else type(error).__name__


def first_lines(error: BaseException, count: int) -> str:
    """An error's first `count` non-blank lines, indented under the line that names it."""
    lines = _message_lines(error)
    return "\n  ".join(lines[:count]) if lines else type(error).__name__


def _message_lines(error: BaseException) -> list[str]:
    text = getattr(error, "desc", None) or str(error)
    return [line.strip() for line in str(text).splitlines() if line.strip()]
