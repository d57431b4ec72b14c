"""`target.properties` and `dead_letter.properties`: the Delta table properties a
pipeline asks for, checked before anything runs (docs/configuration.md).

Only `delta.` keys: Delta's own table properties, which Delta validates again at
creation. The values are text, as Delta stores them; a boolean property takes
"true" or "false". What may change on a table that exists is decided in
`batch.merge.properties`.
"""

from __future__ import annotations

from typing import Any

from ingest.spec.values import Check

PREFIX = "delta."
APPEND_ONLY = "delta.appendOnly"
CHANGE_DATA_FEED = "delta.enableChangeDataFeed"
DELETION_VECTORS = "delta.enableDeletionVectors"
TYPE_WIDENING = "delta.enableTypeWidening"
BOOLEAN_KEYS = (APPEND_ONLY, CHANGE_DATA_FEED, DELETION_VECTORS, "delta.enableRowTracking", TYPE_WIDENING)
EXPECTED = 'a mapping of Delta table properties, e.g. {delta.enableChangeDataFeed: "true"}'


def check(c: Check, section: str, raw: Any, updates: bool) -> dict[str, str] | None:
    """The properties of `section` (target or dead_letter); `updates`: its MERGE updates
    or deletes rows, which `delta.appendOnly: "true"` would forbid."""
    if raw is None:
        return {}
    path = f"{section}.properties"
    if not isinstance(raw, dict):
        c.wrong(path, raw, EXPECTED)
        return None
    mark, properties = c.mark(), {}
    for key, value in raw.items():
        item = f"{path}.{key}"
        if not isinstance(key, str) or not key.startswith(PREFIX) or key == PREFIX:
            hint = (f" (did you mean '{PREFIX}{key}'?)" if isinstance(key, str) and "." not in key
                    else f", e.g. {CHANGE_DATA_FEED}")
            c.add("bad_value", item, f"{key!r} is not a Delta table property; expected a key starting "
                  f"with {PREFIX}{hint}")
        elif not isinstance(value, str):
            c.wrong(item, value, "text (Delta keeps every table property as text)", wants_text=True)
        elif key in BOOLEAN_KEYS and value not in ("true", "false"):
            c.add("bad_value", item, f"{value!r} is not a boolean property's value; expected \"true\" "
                  "or \"false\"")
        elif key == APPEND_ONLY and value == "true" and updates:
            what = "updates and deletes rows" if section == "target" else "updates a lost range's row"
            c.add("bad_value", item, f"the {section}'s MERGE {what}, which an append-only table refuses; "
                  f"expected no {APPEND_ONLY} here, or \"false\"")
        else:
            properties[key] = value
    return None if c.failed(mark) else properties
