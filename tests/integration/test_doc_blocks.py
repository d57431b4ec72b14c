"""Every shell block in README.md and docs/*.md runs as written, or says why not.

A block is run here, in document order, in a project folder like a fresh clone's (the
repository's conf/ and pipelines/, a topic `orders` with a few records on the session's
broker), unless the line before its fence is `<!-- not run: REASON -->` (a template, a
remote cluster or workspace, a long-running process another test drives) or its page is
run by a test of its own. The `ingest ...` lines run in this process on the test's
SparkSession, so a block costs no JVM start. A transcript (`$ ` lines, then output) must
print lines of the kinds the doc shows; its figures and paths may differ."""

from __future__ import annotations

import glob
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.integration.processes import ROOT

SHELLS = ("sh", "bash", "shell", "console")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(\S.*?)\s*-->")
# Pages whose every block a test of its own runs in order, as a reader would
RUN_ELSEWHERE = {"docs/first-pipeline.md": "tests/integration/test_first_pipeline.py"}
# `source .venv/bin/activate` puts `ingest` on the PATH: here `ingest` is cli.main already
ACTIVATE = "source .venv/bin/activate"


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    body: str
    not_run: str | None  # the reason given, if any

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def shell_blocks() -> list[Block]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    blocks = []
    for page in pages:
        lines = page.read_text().splitlines()
        number = 0
        while number < len(lines):
            fence = re.fullmatch(r"(\s*)```(\w*)\s*", lines[number])
            if not fence:
                number += 1
                continue
            end = next(i for i in range(number + 1, len(lines)) if lines[i].strip().startswith("```"))
            if fence.group(2) in SHELLS:
                before = lines[number - 1] if number else ""
                reason = NOT_RUN.search(before)
                body = "\n".join(line.removeprefix(fence.group(1)) for line in lines[number + 1:end])
                blocks.append(Block(str(page.relative_to(ROOT)), number + 1, body,
                                    reason.group(1) if reason else None))
            number = end + 1
    return blocks


@dataclass(frozen=True)
class Step:
    command: str
    output: tuple[str, ...]  # a transcript's lines after the command, else ()


def steps(block: Block) -> list[Step]:
    """The commands of a block; in a transcript only the `$ ` lines are commands."""
    lines = [line for line in block.body.splitlines() if line.strip()]
    if not any(line.startswith("$ ") for line in lines):
        return [Step(line, ()) for line in lines if not line.lstrip().startswith("#")]
    found: list[Step] = []
    for line in lines:
        if line.startswith("$ "):
            found.append(Step(line[2:], ()))
        else:
            assert found, f"output before any command: {line!r}"
            found[-1] = Step(found[-1].command, (*found[-1].output, line))
    return found


def runnable(command: str) -> bool:
    words = shlex.split(command, comments=True)
    return command.startswith(ACTIVATE) or words[:1] in (["ingest"], ["export"])


def test_every_shell_block_is_run_or_says_why_not():
    blocks = shell_blocks()
    assert len(blocks) > 10, "the block finder found too few: has the fence syntax changed?"
    unrunnable = [f"{block.where}: {step.command}" for block in blocks
                  if block.not_run is None and block.page not in RUN_ELSEWHERE
                  for step in steps(block) if not runnable(step.command)]
    assert not unrunnable, (
        "these lines run neither here nor elsewhere: make them run, or put "
        "`<!-- not run: REASON -->` on the line before the block's fence:\n" + "\n".join(unrunnable))


def line_kind(line: str) -> tuple[str, ...]:
    """The first words of a line, without its paths and figures: `target /data/t: optimize:
    48 files` and `target /tmp/x/t: optimize: 2 files` are the same kind."""
    words = [word for word in line.split() if "/" not in word and not re.search(r"\d", word)]
    return tuple(re.sub(r"\W", "", word) for word in words[:3])


def assert_output_like(documented: tuple[str, ...], printed: str, where: str) -> None:
    """Each documented line's kind is printed (in any order: notes go to stderr, the rest to
    stdout); `...` stands for more lines."""
    kinds = {line_kind(line) for line in printed.splitlines() if line.strip()}
    for line in documented:
        assert line.strip() == "..." or line_kind(line) in kinds, f"{where}: no line like {line!r} in:\n{printed}"


@pytest.fixture
def open_registry():
    """orders_avro.yaml's registry, which asks for no credentials: `validate` reads its subject."""
    from tests.schema_registry_stand_in import StandInRegistry

    stand_in = StandInRegistry().start()
    schema = (ROOT / "pipelines" / "schemas" / "order.avsc").read_text()
    stand_in.register("orders-avro-value", {"schema": schema})
    yield stand_in
    stand_in.stop()


@pytest.fixture
def project(kafka, open_registry, tmp_path, monkeypatch):
    """A fresh clone's project folder: conf/, the demo's pipelines, a topic `orders` of two
    partitions with five orders and one line that is not JSON (a dead letter), the Avro
    pipeline's registry."""
    import shutil

    from ingest.kafka.local_broker import ensure_topic

    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    shutil.copytree(ROOT / "pipelines", tmp_path / "pipelines")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KAFKA_BOOTSTRAP", kafka.bootstrap)
    monkeypatch.setenv("SCHEMA_REGISTRY_URL", open_registry.url)
    # conf/local.yaml's ./.ingest/data, made absolute: chdir moves this process, not the JVM
    # that started in the repository (test_first_pipeline.py runs the relative one)
    monkeypatch.setenv("DATA_ROOT", str(tmp_path / ".ingest" / "data"))
    for name in ("INGEST_FAULT", "MAX_OFFSETS_PER_TRIGGER"):
        monkeypatch.delenv(name, raising=False)
    ensure_topic(kafka.client_config(), "orders", partitions=2)
    producer = Producer({**kafka.client_config(), "enable.idempotence": True, "acks": "all"})
    for i in range(5):
        order = {"order_id": f"o{i}", "customer": "c1", "amount": 10.0 + i, "currency": "EUR",
                 "ts": "2026-11-24T08:00:00Z"}
        producer.produce("orders", value=json.dumps(order).encode(), partition=i % 2,
                         headers=[("message-id", f"doc-{i}".encode())])
    producer.produce("orders", value=b'{"order_id": ', partition=0, headers=[("message-id", b"doc-bad")])
    assert producer.flush(30) == 0
    return tmp_path


def run_line(command: str, capsys) -> tuple[int, str]:
    from ingest.cli import main

    words = shlex.split(command, comments=True)
    args = [match for word in words[1:] for match in (sorted(glob.glob(word)) if "*" in word else [word])]
    capsys.readouterr()
    code = main(args)
    printed = capsys.readouterr()
    return code, printed.out + printed.err


def run_block(block: Block, capsys, monkeypatch) -> None:
    with monkeypatch.context() as scoped:  # an export holds for the rest of its block
        for step in steps(block):
            words = shlex.split(step.command, comments=True)
            if step.command.startswith(ACTIVATE):
                continue
            if words[0] == "export":
                for assignment in words[1:]:
                    name, _, value = assignment.partition("=")
                    scoped.setenv(name, value)
                continue
            code, printed = run_line(step.command, capsys)
            assert code == 0, f"{block.where}: `{step.command}` exited {code}:\n{printed[-3000:]}"
            assert_output_like(step.output, printed, f"{block.where}: `{step.command}`")


def test_the_documented_blocks_run_as_written(spark, project, capsys, monkeypatch):
    blocks = [block for block in shell_blocks() if block.not_run is None and block.page not in RUN_ELSEWHERE]
    for block in blocks:
        run_block(block, capsys, monkeypatch)
    landed = spark.read.format("delta").load(str(project / ".ingest" / "data" / "tables" / "orders"))
    assert sorted(row._uid for row in landed.select("_uid").collect()) == [f"doc-{i}" for i in range(5)]
    ran = {block.page for block in blocks}
    assert {"README.md", "docs/operations.md", "docs/databricks.md"} <= ran, ran


def test_a_page_run_elsewhere_is_run_there():
    for page, test in RUN_ELSEWHERE.items():
        assert Path(page).name in (ROOT / test).read_text(), f"{test} does not read {page}"
