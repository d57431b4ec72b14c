"""A path in a VARIANT column where the spec names a column: `payload:order.id::string`.

`uid.field`, `uid.fields`, `target.order_by` and `target.dedup_horizon.column` take one
with `source.schema: variant`. The syntax is Spark SQL's (`column:step.step::type`, steps
`.name`, `['name']` or `[index]`); a reference without `:` is a plain column. The path is
read with `try_variant_get`, not with `::`'s cast: under ANSI SQL a value that does not cast
fails the whole batch, where here it is null and the record a dead letter naming the path.

No Spark here: the parse and the SQL text; the batch path turns the text into a column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ingest.spec.values import did_you_mean

PAYLOAD = "payload"  # the column `source.schema: variant` decodes each record into
VARIANT_SCHEMA = "variant"  # the value of `source.schema` that asks for it
EXAMPLE = "payload:order.id::string"
TYPES = ("string", "boolean", "tinyint", "smallint", "int", "integer", "bigint", "long", "float",
         "double", "decimal", "date", "timestamp", "timestamp_ltz", "timestamp_ntz", "binary", "variant")
TIMESTAMPS = ("timestamp", "timestamp_ltz")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACKET = r"""\[\s*(?:'(?P<single>[^']*)'|"(?P<double>[^"]*)"|(?P<index>\d+))\s*\]"""
_FIRST = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)|" + _BRACKET)
_STEP = re.compile(r"\.\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)|" + _BRACKET)
_DECIMAL = re.compile(r"decimal\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?")


class BadPath(ValueError):
    """What is wrong with a path, and what was expected."""


def is_path(reference: str) -> bool:
    """A column reference with `:` names a path in a VARIANT column."""
    return ":" in reference


@dataclass(frozen=True)
class VariantPath:
    column: str
    steps: tuple[str | int, ...]  # a field name, or an array index
    type: str | None  # as `::` gives it, lowercase; None when the path has none

    @property
    def read_as(self) -> str:
        """The type the value is read as: the path's own, else STRING (what a uid is)."""
        return self.type or "string"

    def json_path(self) -> str:
        """The path as `variant_get` reads it: `$.order.id`, `$["order id"]`, `$[0]`."""
        parts = ["$"]
        for step in self.steps:
            if isinstance(step, int):
                parts.append(f"[{step}]")
            elif _NAME.fullmatch(step):
                parts.append(f".{step}")
            else:
                parts.append(f'["{step}"]' if '"' not in step else f"['{step}']")
        return "".join(parts)

    def sql(self, qualifier: str | None = None) -> str:
        column = f"{qualifier}.`{self.column}`" if qualifier else f"`{self.column}`"
        return f"try_variant_get({column}, {_literal(self.json_path())}, '{self.read_as}')"

    @staticmethod
    def parse(text: str) -> VariantPath:
        """The path `text` names; BadPath saying what is wrong otherwise."""
        column, sep, rest = text.partition(":")
        column = column.strip()
        if not sep or not _NAME.fullmatch(column):
            raise BadPath(f"{column!r} is not a column name; expected a VARIANT column, then ':' and the "
                          f"path, e.g. {EXAMPLE}")
        path, typed, kind = rest.partition("::")
        steps = _steps(path.strip())
        return VariantPath(column, steps, _type(kind.strip()) if typed else None)


def _steps(path: str) -> tuple[str | int, ...]:
    if not path:
        raise BadPath(f"no path after ':'; expected the steps to a value, e.g. {EXAMPLE}")
    steps: list[str | int] = []
    position, pattern = 0, _FIRST
    while position < len(path):
        match = pattern.match(path, position)
        if match is None:
            after = f" after {path[:position].strip()!r}" if position else ""
            raise BadPath(f"cannot read {path[position:]!r}{after}; expected .name, ['name'] or [index] "
                          f"steps, e.g. {EXAMPLE}")
        if match.group("index") is not None:
            steps.append(int(match.group("index")))
        else:
            steps.append(next(g for g in (match.group("name"), match.group("single"), match.group("double"))
                              if g is not None))
        position = match.end()
        while position < len(path) and path[position].isspace():
            position += 1
        pattern = _STEP
    return tuple(steps)


def _type(text: str) -> str:
    if not text:
        raise BadPath(f"no type after '::'; expected a type to read the value as, e.g. {EXAMPLE}")
    lowered = text.lower()
    decimal = _DECIMAL.fullmatch(lowered)
    if decimal:
        precision, scale = decimal.groups()
        return "decimal" if precision is None else f"decimal({precision},{scale or 0})"
    if lowered not in TYPES:
        raise BadPath(f"{text!r} is not a type{did_you_mean(lowered, TYPES)}; expected one of "
                      f"{', '.join(TYPES)}")
    return lowered


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def reference_sql(reference: str, qualifier: str | None = None) -> str:
    """SQL for a column the spec names: a plain column quoted, a path read with
    `try_variant_get`; `qualifier` is the MERGE's side (`s` or `t`). The spec was checked:
    a path here parses."""
    if is_path(reference):
        return VariantPath.parse(reference).sql(qualifier)
    return f"{qualifier}.`{reference}`" if qualifier else f"`{reference}`"
