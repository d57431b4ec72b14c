"""The docs agree with the code: links resolve, the reference (docs/contract.md and
docs/configuration.md) names exactly the keys, defaults, commands, flags and exit codes
the code has, and every command shown in a shell block parses as the CLI reads it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from ingest import cli
from ingest.spec import contract, contract_source, loader, operations

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
CONTRACT = REPO / "docs" / "contract.md"
CONFIGURATION = REPO / "docs" / "configuration.md"
# Every command takes these; the contract says so once instead of in every row.
COMMON_FLAGS = {"-h", "--help", "--env", "--conf-dir"}


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces as hyphens."""
    text = FENCE.sub("", page.read_text())
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_links_stay_in_the_repository(page):
    for target in LINK.findall(page.read_text()):
        if target.startswith(("https://", "http://", "mailto:")):
            continue
        file, _, anchor = target.partition("#")
        resolved = (page.parent / file).resolve() if file else page
        assert resolved.is_relative_to(REPO), f"{page.name} links outside the repository: {target}"
        assert resolved.exists(), f"{page.name} links to a missing file: {target}"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{page.name} links to a missing heading: {target}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_page_names_a_folder_outside_the_repository(page):
    text = page.read_text()
    assert "shared/design" not in text
    assert "pipeline-spec.md" not in text, "the contract in the repository is docs/contract.md"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_no_page_calls_a_part_of_the_contract_planned(page):
    """Everything the loader and the CLI accept is implemented: nothing is '(planned)'."""
    assert "(planned)" not in page.read_text()


# --- keys and defaults ---------------------------------------------------------------


def loader_keys() -> set[str]:
    """Every key path the loader accepts; `uid`'s rules and the registry's auth and tls
    are documented as one row each, so they stand for their children."""
    groups = {"": contract.TOP_KEYS, "source": contract_source.SOURCE_KEYS,
              "source.kafka": contract_source.KAFKA_KEYS, "source.registry": contract_source.REGISTRY_KEYS,
              "transform": contract.TRANSFORM_KEYS, "target": contract.TARGET_KEYS,
              "target.dedup_horizon": contract.HORIZON_KEYS, "cdc": contract.CDC_KEYS,
              "dead_letter": contract.DEAD_LETTER_KEYS, "trigger": contract.TRIGGER_KEYS,
              "metrics": operations.METRICS_KEYS,
              "metrics.prometheus": operations.PROMETHEUS_KEYS, "maintenance": operations.MAINTENANCE_KEYS}
    keys = {f"{parent}.{key}".lstrip(".") for parent, children in groups.items() for key in children}
    return keys - set(groups)  # a section is its keys


def configuration_rows() -> dict[str, list[str]]:
    """The key table of configuration.md: key path -> the row's cells (type, default, notes)."""
    text = CONFIGURATION.read_text().split("## Pipeline keys", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        first = re.findall(r"`([^`]+)`", cells[0])
        parent = first[0].rsplit(".", 1)[0] if "." in first[0] else ""
        for key in first:  # `target.path` / `target.table`: the second written in full too
            rows[key if "." in key or not parent else key] = cells[1:]
    return rows


def test_configuration_documents_exactly_the_keys_the_loader_accepts():
    documented, accepted = set(configuration_rows()), loader_keys()
    assert documented - accepted == set(), "documented in configuration.md, refused by the loader"
    assert accepted - documented == set(), "accepted by the loader, missing from configuration.md"


MINIMAL = """\
name: defaults
source:
  kafka: {bootstrap_servers: "localhost:9092", topics: [t]}
  schema: "a STRING"
uid: {header: message-id}
target: {path: /tmp/t}
checkpoint: /tmp/c
"""


def shown(value) -> str:
    """A default as the table writes it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    if hasattr(value, "keys"):
        return "{}" if not value else str(dict(value))
    return str(value)


def defaults() -> dict[str, object]:
    """Defaults as the loader fills them in for a pipeline that leaves the key out."""
    p = loader.load_text(MINIMAL, environ={}).pipeline
    k = p.source.kafka
    return {
        "source.kafka.starting_offsets": k.starting_offsets,
        "source.kafka.max_offsets_per_trigger": k.max_offsets_per_trigger,
        "source.kafka.isolation_level": k.isolation_level,
        "source.kafka.allow_data_loss": k.allow_data_loss,
        "source.kafka.options": k.options,
        "source.format": p.source.format,
        "source.unknown_fields": p.source.unknown_fields,
        "dead_letter.max_share": p.dead_letter.max_share,
        "schema_evolution": p.schema_evolution,
        "target.mode": p.target.mode,
        "target.deletes": p.target.deletes,
        "target.history": p.target.history,
        "trigger.available_now": p.trigger.available_now,
        "trigger.processing_time": p.trigger.processing_time,
        "spark_conf": p.spark_conf,
        "maintenance.vacuum_retain": p.operations.maintenance.vacuum_retain,
        "maintenance.delete_log_retain": p.operations.maintenance.delete_log_retain,
        "table_threads": p.operations.table_threads,
        "on_data_loss": p.operations.on_data_loss,
    }


@pytest.mark.parametrize("key", sorted(defaults()))
def test_configuration_states_the_default_the_loader_uses(key):
    default_cell = configuration_rows()[key][1]
    first = re.match(r'`?"?([^`"]*)"?`?', default_cell).group(1)
    assert first == shown(defaults()[key]), f"configuration.md, {key}: default {default_cell!r}"


def yaml_paths(value, prefix: str = "") -> set[str]:
    if not isinstance(value, dict):
        return {prefix} if prefix else set()
    paths = set()
    for key, child in value.items():
        path = f"{prefix}.{key}".lstrip(".")
        if path in {"uid", "source.registry.auth", "source.registry.tls", "spark_conf",
                    "source.kafka.options", "source.schemas"} or not isinstance(child, dict) or not child:
            paths.add(path)
        else:
            paths |= yaml_paths(child, path)
    return paths


def test_the_contract_shows_only_keys_the_loader_accepts():
    accepted = loader_keys() | {"uid"}
    for language, block in FENCE.findall(CONTRACT.read_text()):
        if language == "yaml":
            unknown = yaml_paths(yaml.safe_load(block)) - accepted
            assert not unknown, f"contract.md shows keys the loader refuses: {sorted(unknown)}"


# --- commands, flags and exit codes -----------------------------------------------------


def subcommands() -> dict:
    parser = cli.build_parser()
    [action] = [a for a in parser._actions if a.dest == "command"]
    return action.choices


def flags(command) -> set[str]:
    return {option for action in command._actions for option in action.option_strings} - COMMON_FLAGS


def contract_commands() -> dict[str, tuple[set[str], str]]:
    """The contract's command table: command -> (its flags, its exit cell)."""
    text = CONTRACT.read_text().split("## Command line", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        usage = re.match(r"`ingest (\w+)", cells[0])
        if usage:
            rows[usage.group(1)] = (set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-X)\b", cells[0])), cells[-1])
    return rows


def test_the_contract_lists_every_command_with_every_flag():
    documented, actual = contract_commands(), subcommands()
    assert set(documented) == set(actual)
    for name, command in actual.items():
        assert documented[name][0] == flags(command), f"contract.md, ingest {name}: flags"


def test_the_contract_states_the_exit_codes_the_cli_returns():
    codes = {str(code) for code in (cli.OK, cli.CHECK_FAILED, cli.BAD_INPUT, 130)}
    for name, (_, exits) in contract_commands().items():
        stated = set(re.findall(r"\b\d+\b", exits))
        assert stated and stated <= codes, f"contract.md, ingest {name}: exit {exits!r}"
    summary = re.search(r"Exit codes: (.*?)\n\n", CONTRACT.read_text(), re.DOTALL).group(1)
    assert f"{cli.OK} " in summary and f"{cli.CHECK_FAILED} " in summary and f"{cli.BAD_INPUT} " in summary


def markdown(page: Path) -> str:
    """A page's text; a notebook's markdown cells."""
    if page.suffix != ".ipynb":
        return page.read_text()
    cells = json.loads(page.read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown") + "\n"


def shell_commands(page: Path) -> list[str]:
    """`ingest ...` lines of the page's sh/bash blocks, continuation lines joined, comments cut."""
    lines = []
    for language, block in FENCE.findall(markdown(page)):
        if language not in ("sh", "bash", "shell", "console"):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            for part in re.split(r"&&|;|\|", line.split(" #", 1)[0]):
                words = part.strip()
                if re.match(r"(\S*/)?ingest\s", words + " ") and not words.startswith("ingest/"):
                    lines.append(words)
    return lines


@pytest.mark.parametrize("page", PAGES + NOTEBOOKS, ids=page_id)
def test_every_command_in_a_shell_block_parses(page):
    parser = cli.build_parser()
    for line in shell_commands(page):
        words = shlex.split(line)[1:]
        try:
            parser.parse_args(words)
        except SystemExit as error:
            pytest.fail(f"{page.name}: `{line}` does not parse (exit {error.code})")


# docs/architecture.md is the map: its districts name every module of ingest/, and no
# page names a module path that has moved away.
ARCHITECTURE = REPO / "docs" / "architecture.md"
MODULE_PATH = re.compile(r"\bingest/(?:[\w]+/)*[\w]+\.py\b")
DISTRICT = re.compile(r"^- \*\*`(ingest/(?:[\w]+/)*)`\*\*:.*\n((?:  .*\n)+)", re.MULTILINE)


def districts_modules() -> set[str]:
    """`ingest/<district>/<module>.py` for every module listed under a district."""
    return {folder + name for folder, names in DISTRICT.findall(ARCHITECTURE.read_text())
            for name in re.findall(r"`([\w]+\.py)`", names)}


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_module_path_a_page_names_exists(page):
    missing = sorted({path for path in MODULE_PATH.findall(page.read_text()) if not (REPO / path).is_file()})
    assert not missing, f"{page_id(page)} names modules that do not exist: {missing}"


def test_the_architecture_map_lists_every_module_and_only_those():
    listed = districts_modules()
    modules = {str(path.relative_to(REPO)) for path in (REPO / "ingest").rglob("*.py")}
    assert not listed - modules, f"listed in docs/architecture.md, not in ingest/: {sorted(listed - modules)}"
    unlisted = {path for path in modules - listed if not path.endswith("/__init__.py") or path == "ingest/__init__.py"}
    assert not unlisted, f"modules docs/architecture.md does not list: {sorted(unlisted)}"


def test_the_first_pipeline_guide_shows_the_table_and_its_sql_as_plan_prints_them():
    """issue 54.4: the guide says how to read the table, with the absolute path `plan` prints."""
    from ingest.cli.plan import _where

    guide = (REPO / "docs" / "first-pipeline.md").read_text()
    shown = re.search(r"\n  (Delta table at (/\S+)\n  read it: .*)\n", guide)
    assert shown, "first-pipeline.md shows no table with its SQL"
    assert shown.group(1) == _where(shown.group(2), None).replace("\n", "\n  ")


def test_the_pages_agree_on_the_cdc_defaults_and_columns():
    """issue 54.5: what contract.md, the example pipeline and databricks.md said against cdc.md
    and the code."""
    from ingest.spec.columns import CHANGE_COLUMNS

    contract = CONTRACT.read_text()
    sequence_comment = next(line for line in contract.splitlines() if line.strip().startswith("sequence:"))
    assert "connector's own position" in sequence_comment and "else ts_ms" not in sequence_comment
    assert "_deleted" in CHANGE_COLUMNS
    assert "with soft deletes `_deleted` (hard deletes remove the row and have none)" in " ".join(contract.split())
    example = (REPO / "pipelines" / "customers_cdc.yaml").read_text()
    assert "MySQL has no lsn: ts_ms" not in example and "never ts_ms" in example
    databricks = " ".join((REPO / "docs" / "databricks.md").read_text().split())
    assert "treat serverless as not supported" not in databricks
