"""Checks of single YAML values (type, choice, duration), each collecting a
problem with its key path and line instead of raising, so that the loader can
report every problem of a file at once.

Messages follow one form: "what is wrong; expected what", with a "did you mean"
for misspellings and a hint when YAML itself changed the value (an unquoted
`no` is a boolean, an unquoted 2024-01-01 is a date).
"""

from __future__ import annotations

import difflib
import re
from datetime import date
from typing import Any, Iterable

from ingest.errors import Problem
from ingest.spec.yaml_tree import LineIndex, join, parent_path

DURATION = re.compile(r"\s*(\d+)\s*([A-Za-z]+)\s*")
UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
# Common short forms, only to suggest the full word (Spark's interval parser wants it).
UNIT_ABBREVIATIONS = {"s": "second", "sec": "second", "m": "minute", "min": "minute",
                      "h": "hour", "hr": "hour", "d": "day", "w": "week", "wk": "week"}
TRUE_WORDS, FALSE_WORDS = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def closest(value: Any, choices: Iterable[str]) -> str | None:
    """The choice `value` most likely misspells (case aside), if any is close."""
    by_lower = {str(choice).lower(): str(choice) for choice in choices}
    close = difflib.get_close_matches(str(value).lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[close[0]] if close else None


def did_you_mean(value: Any, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    match = closest(value, choices)
    return f" (did you mean {match!r}?)" if match else ""


def _boolean_trap(value: Any, text: str | None) -> bool:
    """YAML 1.1 turned an unquoted yes/no/on/off into a boolean."""
    return isinstance(value, bool) and text is not None and text.lower() not in ("true", "false")


def one_of(choices: Iterable[str], word: str = "or") -> str:
    """'a or b', 'a, b or c'."""
    choices = [str(choice) for choice in choices]
    return choices[0] if len(choices) == 1 else f"{', '.join(choices[:-1])} {word} {choices[-1]}"


def parse_duration(text: str) -> tuple[int | None, str | None]:
    """("1 hour" -> 3600, None); for a near miss ("1 hr") -> (None, "1 hour")."""
    match = DURATION.fullmatch(text)
    if match is None:
        return None, None
    number, unit = int(match.group(1)), match.group(2).lower()
    singular = unit[:-1] if unit.endswith("s") and unit[:-1] in UNIT_SECONDS else unit
    if singular in UNIT_SECONDS:
        return number * UNIT_SECONDS[singular], None
    guess = UNIT_ABBREVIATIONS.get(unit.rstrip("s") or unit) or next(
        iter(difflib.get_close_matches(singular, list(UNIT_SECONDS), n=1, cutoff=0.5)), None)
    if guess is None:
        return None, None
    return None, f"{number} {guess}{'' if number == 1 else 's'}"


class Check:
    """Collects problems and warnings for one file while values are checked."""

    def __init__(self, index: LineIndex, from_vars: Iterable[str] = (),
                 reported: Iterable[Problem] = ()):
        self.index = index
        self.from_vars = set(from_vars)  # paths whose text came from ${VAR}: may be coerced
        # a path with a problem already (e.g. a missing variable) gets no second one about
        # the value it was left with
        self.silenced = {problem.path for problem in reported}
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self.suggested: set[str] = set()  # key paths offered as "did you mean"

    def add(self, code: str, path: str, message: str) -> None:
        if path in self.silenced:
            return
        self.problems.append(Problem(code, path, message, self.index.line(path), self.index.file))

    def warn(self, code: str, path: str, message: str) -> None:
        self.warnings.append(Problem(code, path, message, self.index.line(path), self.index.file,
                                     warning=True))

    def mark(self) -> int:
        return len(self.problems)

    def failed(self, mark: int) -> bool:
        return len(self.problems) > mark

    # --- mappings and keys ---

    def root(self, raw: Any, allowed: tuple[str, ...], expected: str) -> dict | None:
        if raw is None:
            self.add("wrong_type", "", f"the file is empty; expected {expected}")
            return None
        return self.mapping("", raw, allowed, expected)

    def mapping(self, path: str, raw: Any, allowed: tuple[str, ...],
                expected: str | None = None) -> dict | None:
        """`raw` if it is a mapping; every key not in `allowed` is reported."""
        if raw is None and self._reported(path):  # `need` said it is missing: once is enough
            return None
        if not isinstance(raw, dict):
            self.wrong(path, raw, expected or f"a mapping with keys {', '.join(allowed)}")
            return None
        for key in raw:
            if key not in allowed:
                self.unknown_key(join(path, key), key, allowed)
        return raw

    def _reported(self, path: str) -> bool:
        return any(problem.path == path for problem in self.problems)

    def unknown_key(self, path: str, key: Any, allowed: tuple[str, ...]) -> None:
        expected = f"one of {', '.join(allowed)}"
        text = self.index.text(path)
        if not isinstance(key, str) and text is not None:
            self.add("yaml_boolean" if isinstance(key, bool) else "wrong_type", path,
                     f"YAML read the unquoted key {text} as {self.describe(path, key)}; "
                     f"expected {expected}")
            return
        hint = did_you_mean(key, allowed)
        if hint:
            self.suggested.add(join(parent_path(path), closest(key, allowed)))
        self.add("unknown_key", path, f"unknown key; expected {expected}{hint}")

    def misspelt(self, path: str) -> bool:
        """True when an unknown key was already reported as a misspelling of `path`."""
        return path in self.suggested

    def need(self, values: dict, parent: str, key: str, expected: str) -> Any:
        """The value of a required key, or None after reporting it missing
        (unless a misspelt key was already reported in its place)."""
        value = values.get(key)
        if value is None and not self.misspelt(join(parent, key)):
            state = "has no value" if key in values else "is missing"
            self.add("missing_key", join(parent, key), f"{state}; expected {expected}")
        return value

    # --- scalars ---

    def text(self, path: str, value: Any, expected: str = "a string",
             quote_hint: bool = True) -> str | None:
        """A non-empty string; None (absent, or already reported) passes through."""
        if value is None:
            return None
        if not isinstance(value, str):
            self.wrong(path, value, expected, wants_text=quote_hint)
            return None
        if not value.strip():
            self.add("bad_value", path, f"empty; expected {expected}")
            return None
        return value

    def texts(self, path: str, value: Any, expected: str, non_empty: bool = False,
              unique: bool = False, item: str = "a string") -> list[str] | None:
        if value is None:
            return None
        if not isinstance(value, list):
            self.wrong(path, value, expected)
            return None
        if non_empty and not value:
            self.add("bad_value", path, f"empty list; expected {expected}")
        items = [self.text(f"{path}[{n}]", element, item) for n, element in enumerate(value)]
        if unique:
            self._duplicates(path, value)
        return None if None in items else items

    def _duplicates(self, path: str, values: list) -> None:
        seen = set()
        for n, value in enumerate(values):
            if isinstance(value, str) and value in seen:
                self.add("bad_value", f"{path}[{n}]", f"{value!r} is listed twice; expected each once")
            seen.add(value if isinstance(value, str) else None)

    def enum(self, path: str, value: Any, choices: tuple[str, ...], noun: str, default: str,
             extra: str = "") -> str | None:
        expected = one_of(choices) + (f", {extra}" if extra else "")
        if value is None:
            return default
        if not isinstance(value, str):
            self.wrong(path, value, expected, wants_text=True)
            return None
        if value not in choices:
            self.add("bad_enum", path, f"{value!r} is not {noun}; expected {expected}"
                     f"{did_you_mean(value, choices)}")
            return None
        return value

    def integer(self, path: str, value: Any, minimum: int, expected: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, str) and path in self.from_vars and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.wrong(path, value, expected)
            return None
        if value < minimum:
            self.add("bad_value", path, f"{value} is too small; expected {expected}")
            return None
        return value

    def boolean(self, path: str, value: Any, default: bool | None) -> bool | None:
        if value is None:
            return default
        if isinstance(value, str) and path in self.from_vars:
            word = value.strip().lower()
            value = True if word in TRUE_WORDS else False if word in FALSE_WORDS else value
        if not isinstance(value, bool):
            self.wrong(path, value, "true or false (without quotes)")
            return None
        return value

    def scalar_map(self, path: str, value: Any) -> dict[str, str] | None:
        """{key: value} with text, number or boolean values, as the strings Spark takes."""
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.wrong(path, value, "a mapping of key: value")
            return None
        result = {}
        for key, item in value.items():
            item_path = join(path, key)
            if not isinstance(key, str):
                self.wrong(item_path, key, "a text key")
            elif isinstance(item, (dict, list, date)) or item is None:
                self.wrong(item_path, item, "a single value (text, number or true/false)")
            else:
                result[key] = str(item).lower() if isinstance(item, bool) else str(item)
        return result

    # --- messages ---

    def wrong(self, path: str, value: Any, expected: str, wants_text: bool = False) -> None:
        """A wrong-type problem, naming YAML's trap when it caused it."""
        text = self.index.text(path)
        if wants_text and _boolean_trap(value, text):
            self.add("yaml_boolean", path, f"YAML read the unquoted {text} as the boolean "
                     f"{str(value).lower()}; expected {expected}: write \"{text}\" in quotes")
        elif wants_text and text is not None and isinstance(value, date):
            self.add("yaml_date", path, f"YAML read the unquoted {text} as a date; "
                     f"expected {expected}: write \"{text}\" in quotes")
        else:
            hint = f' (write "{text}" in quotes)' if wants_text and text is not None else ""
            self.add("wrong_type", path,
                     f"found {self.describe(path, value)}; expected {expected}{hint}")

    def describe(self, path: str, value: Any) -> str:
        if value is None:
            return "nothing (null)"
        if _boolean_trap(value, self.index.text(path)):
            return (f"the boolean {str(value).lower()} (YAML reads an unquoted "
                    f"{self.index.text(path)} as {str(value).lower()})")
        if isinstance(value, bool):
            return f"the boolean {str(value).lower()}"
        if isinstance(value, (int, float)):
            return f"the number {value}"
        if isinstance(value, date):
            return f"the date {value.isoformat()}"
        if isinstance(value, str):
            return f"the string {value!r}"
        return "a list" if isinstance(value, list) else "a mapping"
