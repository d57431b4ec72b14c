"""A DataFrame's analysed plan as Spark prints it, read without a JVM handle.

`validate` refuses transforms that change the number of rows and uids that change
on a replay by looking at the analysed plan. A classic session walks the plan's
JVM objects (`sql_check`); a Spark Connect client has no JVM, only the text the
server's `explain` sends back, which is the same `treeString`. This reads that
text: the operators, and which output columns come from a function whose value
is not a function of the record (a non-deterministic expression, or one of the
clock's functions, which Spark's optimizer fixes once per query).
"""

from __future__ import annotations

import re

ANALYSED = "== Analyzed Logical Plan =="
# How the analysed plan prints Spark's non-deterministic expressions and the clock's
# functions (matched case-insensitively, as a call).
CHANGING_FUNCTIONS = ("uuid", "rand", "randn", "random", "randstr", "uniform", "shuffle",
                      "monotonically_increasing_id", "spark_partition_id", "input_file_name",
                      "input_file_block_start", "input_file_block_length",
                      "current_timestamp", "now", "current_date", "localtimestamp", "current_time",
                      "current_batch_timestamp", "current_timezone")
_CALL = re.compile(r"(?<![\w.])(" + "|".join(CHANGING_FUNCTIONS) + r")\(", re.IGNORECASE)
_ALIAS = re.compile(r"^(.*) AS (.+?)#(\d+)L?$", re.DOTALL)
_REFERENCE = re.compile(r"#(\d+)")
_TREE_PREFIX = re.compile(r"^[\s:+\-!']*")


def analysed_plan(frame) -> str | None:
    """The analysed plan's tree, one operator per line; None if the session gives neither
    a JVM handle nor an explain string."""
    jdf = getattr(frame, "_jdf", None)  # Connect raises an AttributeError subclass: None
    if jdf is not None:
        return jdf.queryExecution().analyzed().treeString()
    explain = getattr(frame, "_explain_string", None)
    if explain is None:
        return None
    return analysed_section(explain(mode="extended"))


def analysed_section(extended: str) -> str | None:
    """The tree under "== Analyzed Logical Plan ==" of an extended explain, without
    the line of output columns that heads it."""
    if ANALYSED not in extended:
        return None
    section = extended.split(ANALYSED, 1)[1].split("\n== ", 1)[0]
    lines = [line for line in section.strip("\n").splitlines() if line.strip()]
    return "\n".join(lines[1:])


def operators(plan: str) -> list[str]:
    """Each line's operator name, top down."""
    return [_TREE_PREFIX.sub("", line).split(" ")[0] for line in plan.splitlines()]


def changing_columns(plan: str, columns: list[str]) -> dict[str, str]:
    """Of `columns` (the frame's output), those (lowercase) whose value comes from a
    changing function, with that function as `name()`."""
    tainted: dict[str, str] = {}  # expression id -> the changing function
    lines = plan.splitlines()
    for line in reversed(lines):  # children print below their parent
        for expression, name_id in _aliases(_TREE_PREFIX.sub("", line)):
            call = _CALL.search(expression)
            cause = f"{call.group(1).lower()}()" if call else next(
                (tainted[i] for i in _REFERENCE.findall(expression) if i in tainted), None)
            if cause:
                tainted[name_id] = cause
    found = {}
    for column in columns:
        output = _first_reference(lines, column)
        if output is not None and output in tainted:
            found[column.lower()] = tainted[output]
    return found


def _aliases(line: str) -> list[tuple[str, str]]:
    """(expression, expression id) of each `expression AS name#id` of an operator's line."""
    found = []
    for item in _items(line):
        alias = _ALIAS.match(item)
        if alias:
            found.append((alias.group(1), alias.group(3)))
    return found


def _items(line: str) -> list[str]:
    """The line cut at the commas and brackets outside any parentheses: an operator's
    argument lists, one expression per item."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for char in line:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if depth == 0 and char in ",[]":
            items.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    items.append("".join(current).strip())
    return [item for item in items if item]


def _first_reference(lines: list[str], column: str) -> str | None:
    """The expression id of `column` nearest the plan's top: the output's own."""
    pattern = re.compile(rf"(?<![\w.]){re.escape(column)}#(\d+)", re.IGNORECASE)
    for line in lines:
        found = pattern.search(line)
        if found:
            return found.group(1)
    return None
