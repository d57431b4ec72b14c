"""Where `${VAR}` values come from (environment, `conf/<env>.yaml`, a Databricks
secret scope), and secret masking: the one place that decides what is printed
as `***`. Every output (plan, validate, status, logs, Delta commit metadata)
goes through `mask` or `mask_mapping`.

The conf format is documented in docs/configuration.md.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ingest.errors import Problem, SpecErrors
from ingest.spec.yaml_tree import LineIndex, join, read_yaml

MASK = "***"
DEFAULT_ENV = "local"
# Key names whose values are secret wherever they appear (Kafka options, spark_conf, ...).
SECRET_KEY = re.compile(
    r"password|secret|token|jaas|sasl.*config|key(store)?\.password|api.?key|credential"
    r"|private.?key|access.?key|account\.key",
    re.IGNORECASE,
)
VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CONF_KEYS = ("vars", "secrets", "secret_scope", "session")
# `session:`, for a session ingest starts itself (not spark-submit's, not Databricks'): key ->
# the Spark setting it becomes
SESSION_KEYS = {"master": "spark.master", "driver_memory": "spark.driver.memory", "conf": ""}
LOCAL_MASTER = re.compile(r"local(\[(\*|[1-9][0-9]*)\])?")
MEMORY = re.compile(r"([1-9][0-9]*)([kmgt])", re.IGNORECASE)
MEMORY_MIB = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
# Spark refuses a driver heap under 450 MiB (1.5 times its 300 MiB reserve) at start
MIN_DRIVER_MIB = 512
YAML_SUFFIXES = (".yaml", ".yml")  # both name pipeline and conf files

SecretReader = Callable[[str, str], "str | None"]


@dataclass(frozen=True)
class Settings:
    """One environment's conf file, read and checked."""

    env: str = DEFAULT_ENV
    conf_file: str = "conf/local.yaml"
    found: bool = False
    vars: Mapping[str, str] = field(default_factory=dict)
    secret_names: frozenset[str] = frozenset()
    secret_scope: str | None = None
    scope_keys: Mapping[str, str] = field(default_factory=dict)  # variable -> key in the scope
    session_conf: Mapping[str, str] = field(default_factory=dict)  # spark.master, spark.driver.memory

    def places(self, name: str) -> str:
        """Where `name` was looked for, for a missing-variable message."""
        conf = f"{self.conf_file} vars" if self.found else f"{self.conf_file} (no such file)"
        places = ["the environment", conf]
        if name in self.scope_keys:
            places.append(f"secret scope {self.secret_scope!r} key {self.scope_keys[name]!r}")
        return ", ".join(places)


@dataclass(frozen=True)
class Lookup:
    value: str | None
    secret: bool


def is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and SECRET_KEY.search(key) is not None


def is_secret_var(settings: Settings, name: str) -> bool:
    """Marked in the conf's `secrets`, or named like a secret (KAFKA_PASSWORD)."""
    return name in settings.secret_names or is_secret_key(name)


def lookup(settings: Settings, name: str, environ: Mapping[str, str],
           read_secret: SecretReader | None = None) -> Lookup:
    """A variable's value: the environment first, then the conf's vars, then the secret scope."""
    secret = is_secret_var(settings, name)
    if name in environ:
        return Lookup(environ[name], secret)
    if name in settings.vars:
        return Lookup(settings.vars[name], secret)
    if name in settings.scope_keys and settings.secret_scope:
        reader = read_secret or default_secret_reader()
        value = reader(settings.secret_scope, settings.scope_keys[name]) if reader else None
        return Lookup(value, True)
    return Lookup(None, secret)


def default_secret_reader() -> SecretReader | None:
    """dbutils.secrets.get on Databricks; elsewhere there is no secret scope."""
    if "DATABRICKS_RUNTIME_VERSION" not in os.environ:
        return None
    from ingest.platform.databricks import read_secret

    return read_secret


_URL_PASSWORD = re.compile(r"(://[^/@:]*):[^/@]*@")


def mask(text: str, secret_values: Iterable[str]) -> str:
    """`text` with every secret value replaced by ***; longest first, so that a
    secret containing another is not left half shown."""
    for value in sorted({v for v in secret_values if v}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def mask_url(url: str) -> str:
    """The URL without the password of any user:password@ in it."""
    return _URL_PASSWORD.sub(r"\1:***@", url)


def mask_mapping(values: Any) -> Any:
    """A copy of nested dicts/lists with the values of secret-looking keys as ***."""
    if isinstance(values, Mapping):
        return {key: MASK if is_secret_key(key) else mask_mapping(value)
                for key, value in values.items()}
    if isinstance(values, (list, tuple)):
        return [mask_mapping(value) for value in values]
    return values


def mask_values(values: Any, secret_values: Iterable[str]) -> Any:
    """A copy of nested dicts/lists with `mask` applied to every text in them."""
    if isinstance(values, Mapping):
        return {key: mask_values(value, secret_values) for key, value in values.items()}
    if isinstance(values, (list, tuple)):
        return [mask_values(value, secret_values) for value in values]
    return mask(values, secret_values) if isinstance(values, str) else values


def conf_path(env: str, conf_dir: str | Path | None = None) -> Path:
    """`<conf_dir>/<env>.yaml`, or `.yml` when only that one exists."""
    folder = Path(conf_dir if conf_dir is not None else os.environ.get("INGEST_CONF_DIR", "conf"))
    for suffix in YAML_SUFFIXES:
        if (folder / f"{env}{suffix}").is_file():
            return folder / f"{env}{suffix}"
    return folder / f"{env}.yaml"


def load_settings(env: str = DEFAULT_ENV, conf_dir: str | Path | None = None) -> Settings:
    """Read `conf/<env>.yaml`; raises SpecErrors. A missing file is fine only for
    the default env, so `ingest validate` works outside a project folder; a
    conf folder given on purpose (argument or INGEST_CONF_DIR) must exist."""
    path = conf_path(env, conf_dir)
    given = conf_dir if conf_dir is not None else os.environ.get("INGEST_CONF_DIR")
    if given is not None and not Path(given).is_dir():
        raise SpecErrors([Problem("unreadable_file", "", "no such folder; expected a folder of "
                                  "<env>.yaml conf files (--conf-dir or INGEST_CONF_DIR)", None, str(given))])
    if not path.is_file():
        if env == DEFAULT_ENV:
            return Settings(env=env, conf_file=str(path))
        raise SpecErrors([Problem("unknown_env", "", f"no conf file for environment {env!r}; "
                                  f"expected one of {_known_envs(path.parent)}", None, str(path))])
    return settings_from_text(read_text_file(path, "conf file"), str(path), env)


def read_text_file(path: str | Path, what: str) -> str:
    """A file's UTF-8 text; an unreadable or non-UTF-8 file is a problem, never a traceback."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        reason = f"not UTF-8: byte 0x{error.object[error.start]:02x} at position {error.start}"
    except OSError as error:
        reason = error.strerror or str(error)
    raise SpecErrors([Problem("unreadable_file", "", f"cannot read the {what} ({reason}); "
                              f"expected a readable UTF-8 YAML file", None, str(path))])


def _known_envs(conf_dir: Path) -> str:
    names = sorted({p.stem for suffix in YAML_SUFFIXES for p in conf_dir.glob(f"*{suffix}")}) \
        if conf_dir.is_dir() else []
    return ", ".join(names) if names else f"a {conf_dir}/<env>.yaml file (none found)"


def settings_from_text(text: str, file: str, env: str = DEFAULT_ENV) -> Settings:
    doc = read_yaml(text, file)
    check = _ConfCheck(doc.index, list(doc.problems))
    settings = check.settings(doc.value, env) if not doc.problems else None
    if check.problems:
        raise SpecErrors(check.problems)
    return settings


class _ConfCheck:
    """Checks a conf file's values, collecting every problem."""

    def __init__(self, index: LineIndex, problems: list[Problem]):
        self.index = index
        self.problems = problems

    def add(self, code: str, path: str, message: str) -> None:
        self.problems.append(Problem(code, path, message, self.index.line(path), self.index.file))

    def settings(self, raw: Any, env: str) -> Settings:
        raw = self.top(raw)
        scope = raw.get("secret_scope")
        if scope is not None and not isinstance(scope, str):
            self.add("wrong_type", "secret_scope", "expected the name of a Databricks secret scope")
            scope = None
        names, scope_keys = self.secrets(raw.get("secrets"), scope)
        variables = self.variables(raw.get("vars"), names)
        session = self.session(raw.get("session"))
        return Settings(env, self.index.file, True, variables, frozenset(names), scope, scope_keys, session)

    def top(self, raw: Any) -> dict:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.add("wrong_type", "", f"expected a mapping with keys {', '.join(CONF_KEYS)}")
            return {}
        for key in raw:
            if key not in CONF_KEYS:
                self.add("unknown_key", join("", key),
                         f"unknown key; expected one of {', '.join(CONF_KEYS)}")
        return raw

    def variables(self, raw: Any, secret_names: set[str]) -> dict[str, str]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.add("wrong_type", "vars", "expected a mapping of VARIABLE: value")
            return {}
        result = {}
        for name, value in raw.items():
            path = join("vars", name)
            if self.var_name(path, name) and self.var_value(path, name, value, secret_names):
                result[name] = _conf_text(value)
        return result

    def var_name(self, path: str, name: Any) -> bool:
        if isinstance(name, str) and VAR_NAME.fullmatch(name):
            return True
        self.add("bad_value", path, f"{name!r} is not a variable name; expected letters, digits and _")
        return False

    def var_value(self, path: str, name: str, value: Any, secret_names: set[str]) -> bool:
        if name in secret_names:
            self.add("bad_value", path, "a secret's value is written in the conf file; expected it "
                     "in the environment or the secret scope (remove it from vars)")
            return False
        if isinstance(value, (dict, list)) or value is None:
            self.add("wrong_type", path, "expected a single value (text or number)")
            return False
        return True

    def session(self, raw: Any) -> dict[str, str]:
        """`session: {master: local[N], driver_memory: 4g}` as the Spark settings they become."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.add("wrong_type", "session", f"expected a mapping with keys {', '.join(SESSION_KEYS)}")
            return {}
        conf = {}
        for key, value in raw.items():
            path = join("session", key)
            if key not in SESSION_KEYS:
                self.add("unknown_key", path, f"unknown key; expected one of {', '.join(SESSION_KEYS)}")
            elif key == "conf":
                conf.update(self.start_conf(value))
            elif self.session_value(path, key, value):
                conf[SESSION_KEYS[key]] = str(value)
        return conf

    def start_conf(self, raw: Any) -> dict[str, str]:
        """`session.conf`: Spark settings read when the application starts (a Hadoop file system's,
        a Delta log store's), which a pipeline's `spark_conf` comes too late for."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.add("wrong_type", "session.conf", "expected a mapping of spark.<setting>: value")
            return {}
        conf = {}
        for key, value in raw.items():
            path = join("session.conf", key)
            if not isinstance(key, str) or not key.startswith("spark."):
                self.add("bad_value", path, f"{key!r} is not a Spark setting; expected spark.<setting>")
            elif key in SESSION_KEYS.values():
                name = next(k for k, v in SESSION_KEYS.items() if v == key)
                self.add("bad_value", path, f"{key} is set by session.{name}; expected it there")
            elif is_secret_key(key):
                self.add("bad_value", path, "a secret's value is written in the conf file; expected it "
                         "from the environment (e.g. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) or the "
                         "machine's role")
            elif isinstance(value, (dict, list)) or value is None:
                self.add("wrong_type", path, "expected a single value (text, number or boolean)")
            else:
                conf[key] = _conf_text(value)
        return conf

    def session_value(self, path: str, key: str, value: Any) -> bool:
        text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
        if key == "master":
            if LOCAL_MASTER.fullmatch(text):
                return True
            self.add("bad_value", path, f"{value!r}; expected local, local[N] (N threads) or local[*] "
                     "(one per core); a cluster's master is spark-submit's --master")
            return False
        size = MEMORY.fullmatch(text)
        if size and int(size.group(1)) * MEMORY_MIB[size.group(2).lower()] >= MIN_DRIVER_MIB:
            return True
        self.add("bad_value", path, f"{value!r}; expected a JVM heap size of at least {MIN_DRIVER_MIB}m "
                 "with its unit: 512m, 2g, 4g")
        return False

    def secrets(self, raw: Any, scope: str | None) -> tuple[set[str], dict[str, str]]:
        """`secrets: [NAME, ...]` (from the environment) or `{NAME: scope key}` (Databricks)."""
        if raw is None:
            return set(), {}
        if isinstance(raw, list):
            names = {name for position, name in enumerate(raw)
                     if self.var_name(f"secrets[{position}]", name)}
            return names, {}
        if isinstance(raw, dict):
            if scope is None:
                self.add("missing_key", "secrets", "variables mapped to secret scope keys, but "
                         "no scope; expected secret_scope: <name of the Databricks secret scope>")
            keys = {name: str(key) for name, key in raw.items()
                    if self.var_name(join("secrets", name), name)}
            return set(keys), keys
        self.add("wrong_type", "secrets", "expected a list of variable names, "
                 "or a mapping of variable: key in the secret scope")
        return set(), {}


def _conf_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
