"""`${VAR}` and `${VAR:-default}` in a pipeline's YAML, resolved before the contract
is checked: from `conf/<env>.yaml`, the environment or a secret reader (`settings`
says which), with template variables such as `${topic}` kept for the run.

`Resolved` remembers which key paths came from a variable (a wrong value there is
reported as coming from it) and which values are secret (masked in every message).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from ingest.errors import Problem
from ingest.spec import settings as conf
from ingest.spec import template
from ingest.spec.values import did_you_mean, one_of
from ingest.spec.yaml_tree import LineIndex, join

VAR_REF = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
VAR_INNER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)


@dataclass
class Resolved:
    value: Any
    from_vars: set[str]  # paths whose value came (partly) from a variable
    secrets: set[str]
    problems: list[Problem]


class Resolver:
    """Replaces ${VAR} and ${VAR:-default} in every string value of the tree."""

    def __init__(self, index: LineIndex, settings: conf.Settings, environ: Mapping[str, str],
                 read_secret: conf.SecretReader | None):
        self.index, self.settings, self.environ = index, settings, environ
        self.read_secret = read_secret
        self.out = Resolved(None, set(), set(), [])

    def tree(self, value: Any) -> Resolved:
        self.out.value = self.walk(value, "")
        return self.out

    def walk(self, value: Any, path: str) -> Any:
        if isinstance(value, dict):
            resolved = {key: self.walk(child, join(path, key)) for key, child in value.items()}
            self.secret_keys(resolved)
            return resolved
        if isinstance(value, list):
            return [self.walk(child, f"{path}[{n}]") for n, child in enumerate(value)]
        if isinstance(value, str) and "${" in value:
            self.out.from_vars.add(path)
            return VAR_REF.sub(lambda match: self.reference(match, path), value)
        return value

    def secret_keys(self, mapping: dict) -> None:
        """Values under secret-looking keys are secret even when written literally."""
        for key, value in mapping.items():
            if conf.is_secret_key(key) and isinstance(value, (str, int, float)):
                self.out.secrets.add(str(value))

    def reference(self, match: re.Match, path: str) -> str:
        if match.group(0) == "$${":
            return "${"  # $${ escapes a literal ${
        if match.group(1) is None:
            self.problem("bad_variable", path, f"{match.string[match.start():]!r} has no closing }}; "
                         "expected ${NAME} or ${NAME:-default} (write $${ for a literal ${)")
            return match.group(0)
        inner = VAR_INNER.fullmatch(match.group(1))
        if inner is None:
            self.problem("bad_variable", path, f"{match.group(0)!r} is not a variable reference; "
                         "expected ${NAME} or ${NAME:-default} (write $${ for a literal ${)")
            return match.group(0)
        return self.value(inner.group(1), inner.group(2), path, match.group(0))

    def value(self, name: str, default: str | None, path: str, written: str) -> str:
        if name in template.VARIABLES:
            return self.template_variable(name, path, written)
        found = conf.lookup(self.settings, name, self.environ, self.read_secret)
        value = found.value
        if not value and default is not None:  # shell semantics: `:-` also covers empty
            value = default
        if value is None and path in template.TEMPLATE_KEYS and _looks_like_template(name):
            self.problem("unknown_template", path, f"{written} is not a template variable "
                         f"(nor a variable set in {self.settings.places(name)}); expected "
                         f"{one_of('${' + v + '}' for v in template.VARIABLES)}"
                         f"{did_you_mean('${' + name + '}', ['${' + v + '}' for v in template.VARIABLES])}")
            return ""
        if value is None:
            self.problem("missing_variable", path, f"${{{name}}} is not set (looked in "
                         f"{self.settings.places(name)}); expected a value there, "
                         f"or a default: ${{{name}:-value}}")
            return ""
        if found.secret:
            self.out.secrets.add(value)
        return value

    def template_variable(self, name: str, path: str, written: str) -> str:
        """Kept as written: filled in per topic at run time (`template.for_topic`)."""
        if path not in template.TEMPLATE_KEYS:
            self.problem("unknown_template", path, f"{written} is a template variable, filled in "
                         f"per topic; expected it only in {one_of(template.TEMPLATE_KEYS)}")
            return ""
        if written != template.TOPIC:
            self.problem("unknown_template", path, f"{written} takes no default; expected "
                         f"{template.TOPIC}")
            return ""
        return written

    def problem(self, code: str, path: str, message: str) -> None:
        self.out.problems.append(Problem(code, path, message, self.index.line(path), self.index.file))


def _looks_like_template(name: str) -> bool:
    """Template variables are lower case; an unset lower-case name, or one close to a
    template variable (`${Topic}`), is taken for a misspelt one, not for the environment."""
    return name == name.lower() or name.lower() in template.VARIABLES \
        or did_you_mean(name, template.VARIABLES) != ""
