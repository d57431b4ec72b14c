"""Safe YAML -> plain values, with the 1-based line of every key path.

We compose PyYAML's node tree and build the values ourselves instead of
calling `safe_load`, because `safe_load` keeps the last of two duplicate keys
silently, loses line numbers, and stops at the first tag it refuses. Here
duplicate keys and tags become problems, and the walk goes on.

Paths: `source.kafka.topics[0]`; the root is "". Used for pipelines and for
`conf/<env>.yaml`; knows nothing of either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from ingest.errors import Problem

_CORE = "tag:yaml.org,2002:"
# Only the tags plain YAML resolves to; anything explicit beyond these (python
# objects, !!binary, !!set, local !tags) is refused, so loading never builds objects.
SAFE_TAGS = {_CORE + name
             for name in ("str", "int", "float", "bool", "null", "timestamp", "seq", "map")}
CONTEXT_LINES = 2  # lines shown on either side of a YAML syntax error


@dataclass(frozen=True)
class LineIndex:
    """Key path -> 1-based line; plain scalars' source text for YAML-trap hints."""

    file: str
    lines: dict[str, int] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    def line(self, path: str) -> int | None:
        """The line of `path`, or of its nearest ancestor that has one."""
        while True:
            if path in self.lines:
                return self.lines[path]
            if not path:
                return None
            path = parent_path(path)

    def text(self, path: str) -> str | None:
        return self.texts.get(path)


@dataclass(frozen=True)
class YamlDoc:
    value: Any  # dict / list / scalar; None for an empty file
    index: LineIndex
    problems: tuple[Problem, ...] = ()


def join(parent: str, key: Any) -> str:
    return f"{parent}.{key}" if parent else str(key)


def item(parent: str, position: int) -> str:
    return f"{parent}[{position}]"


def parent_path(path: str) -> str:
    if path.endswith("]"):
        return path[: path.rindex("[")]
    return path.rpartition(".")[0]


def read_yaml(text: str, file: str) -> YamlDoc:
    """Parse `text`; a syntax error is the only problem reported, with context lines."""
    index = LineIndex(file)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        return YamlDoc(None, index, (_syntax_problem(error, text, file),))
    except yaml.YAMLError as error:  # reader errors (e.g. a control character) have no mark
        return YamlDoc(None, index, (Problem("yaml_syntax", "", f"not valid YAML: {error}", 1, file),))
    if root is None:
        return YamlDoc(None, index)
    index.lines[""] = root.start_mark.line + 1  # problems of the whole file: its first line
    walk = _Walk(index)
    value = walk.value(root, "")
    return YamlDoc(value, index, tuple(walk.problems))


class _Walk:
    """Builds plain values from nodes, recording lines and collecting problems."""

    def __init__(self, index: LineIndex):
        self.index = index
        self.problems: list[Problem] = []
        self.constructor = SafeConstructor()

    def problem(self, code: str, path: str, message: str, line: int) -> None:
        self.problems.append(Problem(code, path, message, line, self.index.file))

    def value(self, node, path: str) -> Any:
        if node.tag not in SAFE_TAGS:
            self.problem("yaml_tag", path, f"tag {node.tag!r} is not allowed; "
                         "expected plain YAML values (files are loaded safely, no tags)",
                         node.start_mark.line + 1)
            return None
        if isinstance(node, MappingNode):
            return self.mapping(node, path)
        if isinstance(node, SequenceNode):
            return self.sequence(node, path)
        return self.scalar(node, path)

    def mapping(self, node: MappingNode, path: str) -> dict:
        result: dict = {}
        first_line: dict = {}
        for key_node, value_node in node.value:
            key = self.key(key_node, path)
            key_path = join(path, key)
            line = key_node.start_mark.line + 1
            if key in first_line:
                self.problem("duplicate_key", key_path, f"duplicate key (first at line "
                             f"{first_line[key]}); expected each key once", line)
                continue
            first_line[key] = line
            self.index.lines[key_path] = line
            result[key] = self.value(value_node, key_path)
        return result

    def key(self, node, path: str) -> Any:
        """Keys are scalars; a plain `yes:` key stays visible as True for the trap hint."""
        if not isinstance(node, ScalarNode) or node.tag not in SAFE_TAGS:
            return f"<{node.tag.rsplit(':', 1)[-1]} key at line {node.start_mark.line + 1}>"
        key = self.constructor.construct_object(node)
        if node.style is None and not isinstance(key, str):
            self.index.texts[join(path, key)] = node.value
        return key

    def sequence(self, node: SequenceNode, path: str) -> list:
        values = []
        for position, child in enumerate(node.value):
            child_path = item(path, position)
            self.index.lines[child_path] = child.start_mark.line + 1
            values.append(self.value(child, child_path))
        return values

    def scalar(self, node: ScalarNode, path: str) -> Any:
        value = self.constructor.construct_object(node)
        if node.style is None and not isinstance(value, str):
            # kept so a message can say "YAML read the unquoted `no` as false"
            self.index.texts[path] = node.value
        self.index.lines.setdefault(path, node.start_mark.line + 1)
        return value


def _syntax_problem(error: yaml.MarkedYAMLError, text: str, file: str) -> Problem:
    mark = error.problem_mark or error.context_mark
    what = error.problem or "not valid YAML"
    if error.context:
        what = f"{what} ({error.context})"
    message = f"YAML syntax error: {what}; expected {_syntax_hint(what)}"
    if mark is None:
        return Problem("yaml_syntax", "", message, 1, file)
    # an error at the end of the text points past its last line: show that line
    lines = text.splitlines() or [""]
    line0 = min(mark.line, len(lines) - 1)
    column = mark.column if line0 == mark.line else len(lines[line0])
    return Problem("yaml_syntax", "", message, line0 + 1, file, _context(text, line0, column))


# PyYAML's words for the usual mistakes, and what the writer most likely meant.
SYNTAX_HINTS = (
    ("'\\t'", "spaces for indentation (YAML does not allow tabs)"),
    ("<block end>", "the keys of one mapping at the same indentation"),
    ("mapping values are not allowed", "one key per line, and quotes around a value that "
     "contains ': '"),
    ("flow sequence", "a list closed by ] with its items separated by commas"),
    ("flow mapping", "a mapping closed by } with its entries separated by commas"),
    ("quoted scalar", "a closing quote for the quoted value"),
    ("stream end", "more text: a [, { or quote is left open"),
    ("undefined alias", "an &anchor defined before its *alias"),
    ("a single document", "one YAML document per file (no second ---)"),
)


def _syntax_hint(what: str) -> str:
    for words, hint in SYNTAX_HINTS:
        if words in what:
            return hint
    return "valid YAML (check the indentation; quote values that contain ': ' or start with @ or `)"


def _context(text: str, line0: int, column: int) -> str:
    """A few numbered lines around the error, with a caret under its column."""
    lines = text.splitlines() or [""]
    first, last = max(0, line0 - CONTEXT_LINES), min(len(lines), line0 + CONTEXT_LINES + 1)
    width = len(str(last))
    shown = []
    for number in range(first, last):
        marker = ">" if number == line0 else " "
        shown.append(f"  {marker} {number + 1:>{width}} | {lines[number]}".rstrip())
        if number == line0:
            shown.append(f"    {' ' * width} | {' ' * column}^")
    return "\n".join(shown)
