"""The analysts' notebooks run top to bottom on fresh demo output; they are committed executed,
with outputs cleaned of the run's own folders and times (tests/notebook_outputs.py)."""

import ast
import html
import os
import re
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from ingest.notebook import demo_tables
from tests.integration.conftest import PROJECT
from tests.notebook_outputs import MACHINE_PATHS, clean, output_text, run_times

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
PUBLIC_MODULES = {"ingest.notebook", "ingest.kafka.produce"}


def code_cells(path):
    return [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]


def test_there_are_five_notebooks():
    assert [p.stem for p in NOTEBOOKS] == ["01_explore", "02_trace_a_row", "03_dead_letters",
                                          "04_batches_chart", "05_history"]


def test_demo_tables_from_data_root_or_the_nearest_demo_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_ROOT", "s3://lake/ingest/")
    assert demo_tables().target == "s3://lake/ingest/tables/orders"
    assert demo_tables("dbfs:/demo").dead_letter == "dbfs:/demo/dead_letter/orders"
    monkeypatch.delenv("DATA_ROOT")
    (tmp_path / ".ingest" / "data").mkdir(parents=True)
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    assert demo_tables().checkpoint == f"{tmp_path.resolve()}/.ingest/data/checkpoints/orders"


def test_pipeline_tables_of_any_pipeline_file(tmp_path, monkeypatch):
    from ingest.notebook import pipeline_tables

    monkeypatch.setenv("DATA_ROOT", "s3://lake")
    monkeypatch.setenv("KAFKA_BOOTSTRAP", "broker:9092")
    (tmp_path / "clicks.yml").write_text(
        "name: clicks\nsource: {kafka: {bootstrap_servers: '${KAFKA_BOOTSTRAP}', topics: [clicks]}, "
        "format: string}\nuid: {header: id}\ntarget: {table: main.web.clicks}\n"
        "checkpoint: ${DATA_ROOT}/checkpoints/clicks\n")
    tables = pipeline_tables(tmp_path / "clicks.yml", conf_dir=tmp_path)
    assert (tables.pipeline, tables.target, tables.dead_letter, tables.checkpoint) == (
        "clicks", "main.web.clicks", "main.web.clicks_dead_letter", "s3://lake/checkpoints/clicks")


def test_pipeline_tables_from_the_project_folder_whatever_the_working_folder(tmp_path, monkeypatch):
    """The one edit a notebook asks for is PIPELINE: a relative path is read from the project
    folder (the working folder or one above it that holds it, else this checkout), and the
    file's relative locations (conf/local.yaml's DATA_ROOT: ./.ingest/data) are under it."""
    from ingest.notebook import pipeline_tables

    for name in ("DATA_ROOT", "INGEST_CONF_DIR", "KAFKA_BOOTSTRAP"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # outside any project: the checkout ingest runs from
    tables = pipeline_tables("pipelines/orders.yaml")
    assert (tables.file, tables.project) == (str(PROJECT / "pipelines" / "orders.yaml"), str(PROJECT))
    assert tables.target == str(PROJECT / ".ingest" / "data" / "tables" / "orders")
    monkeypatch.chdir(PROJECT / "notebooks")
    assert pipeline_tables("pipelines/orders.yaml").checkpoint == str(PROJECT / ".ingest/data/checkpoints/orders")

    mine = tmp_path / "mine"  # a project of one's own, the notebook in a folder of it
    for folder in ("conf", "pipelines", "notebooks"):
        (mine / folder).mkdir(parents=True)
    (mine / "conf" / "local.yaml").write_text("vars: {DATA_ROOT: ./lake, KAFKA_BOOTSTRAP: localhost:9092}\n")
    (mine / "pipelines" / "clicks.yml").write_text(
        "name: clicks\nsource: {kafka: {bootstrap_servers: '${KAFKA_BOOTSTRAP}', topics: [clicks]}, "
        "format: string}\nuid: {header: id}\ntarget: {path: '${DATA_ROOT}/tables/clicks'}\n"
        "checkpoint: ${DATA_ROOT}/checkpoints/clicks\n")
    monkeypatch.chdir(mine / "notebooks")
    tables = pipeline_tables("pipelines/clicks.yml")
    assert (tables.target, tables.dead_letter) == (str(mine / "lake/tables/clicks"),
                                                   str(mine / "lake/tables/clicks_dead_letter"))
    assert pipeline_tables(mine / "pipelines" / "clicks.yml").checkpoint == str(mine / "lake/checkpoints/clicks")
    with pytest.raises(FileNotFoundError, match="'pipelines/nope.yaml' not found"):
        pipeline_tables("pipelines/nope.yaml")


def test_show_uses_display_on_databricks(monkeypatch):
    import IPython

    from ingest.notebook import show

    shown = []
    shell = type("Shell", (), {"user_ns": {"display": shown.append}})()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    show("a DataFrame")
    assert shown == ["a DataFrame"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_executed_and_public_imports_only(path):
    """Committed with outputs (they read on a code host as they are), in order, none an error."""
    cells = code_cells(path)
    assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1)), path.name
    for cell in cells:
        assert not [o for o in cell.outputs if o.output_type == "error"], f"{path.name} has an error"
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.ImportFrom) and node.module.startswith("ingest"):
                assert node.module in PUBLIC_MODULES, f"{path.name} imports {node.module}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_opens_on_one_pipeline_file_named_at_the_top(path):
    """One edit makes a notebook read your pipeline: the first code cell is `PIPELINE = "..."`,
    a path from the project folder, and no cell reads an environment variable or leans on
    the notebook's working folder (`../`)."""
    cells = code_cells(path)
    first = ast.parse(cells[0].source).body
    assert len(first) == 1 and isinstance(first[0], ast.Assign), f"{path.name}: {cells[0].source!r}"
    assert [t.id for t in first[0].targets] == ["PIPELINE"]
    assert first[0].value.value.startswith("pipelines/"), cells[0].source
    for cell in cells:
        assert "os.environ" not in cell.source and "getenv" not in cell.source, f"{path.name}: {cell.source}"
        assert "../" not in cell.source, f"{path.name}: {cell.source}"
        assert ".show(" not in cell.source, f"{path.name} prints a table as text: {cell.source}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_outputs_are_clean_html_tables(path):
    """Nothing of the machine that ran them (temporary folders, home folders, the checkout),
    no execution times, and tables as HTML (pandas), not `.show()` text."""
    notebook = nbformat.read(path, as_version=4)
    text = output_text(notebook)
    assert not MACHINE_PATHS.search(text), f"{path.name}: {MACHINE_PATHS.search(text).group(0)!r} in an output"
    assert not [c for c in notebook.cells if "execution" in c.metadata], f"{path.name} keeps execution times"
    assert "<table" in text, f"{path.name} has no HTML table"
    assert not re.search(r"^\+-+\+", text, re.MULTILINE), f"{path.name} has a .show() table"


def run_customers_cdc(spark, kafka, root, topic: str = "shop.public.customers") -> None:
    """The example cdc pipeline (pipelines/customers_cdc.yaml, SCD2 history) into `root`,
    three batches of Debezium changes, some late: what 05_history reads."""
    from ingest.kafka.local_broker import create_topic
    from ingest.spec.loader import load_file
    from tests.integration.conftest import DebeziumChanges, run_once

    create_topic(kafka.client_config(), topic, partitions=1)
    pipeline = load_file(PROJECT / "pipelines" / "customers_cdc.yaml",
                         environ={"KAFKA_BOOTSTRAP": kafka.bootstrap, "DATA_ROOT": str(root)}).pipeline
    changes = DebeziumChanges(kafka, topic)
    batches = [
        [("r", 1, 100, "ann", "basic"), ("r", 2, 101, "bob", "basic"), ("r", 3, 102, "cy", "gold")],
        [("u", 1, 200, "ann", "silver"), ("u", 2, 210, "bob", "gold"), ("c", 4, 220, "dee", "basic"),
         ("d", 3, 230, None, None)],
        [("u", 1, 300, "ann", "gold"), ("u", 1, 150, "ann", "trial"),  # a late change, slotted in
         ("u", 4, 320, "dee", "silver"), ("u", 2, 330, "bob", "platinum")],
    ]
    for batch in batches:
        for op, key, lsn, name, tier in batch:
            changes.send(op, key, lsn, None if op == "d" else {"name": name, "email": f"{name}@shop.example",
                                                                  "tier": tier})
        changes.flush()
        run_once(spark, pipeline, timeout=900)


def for_committing(notebook, data_root: Path, since) -> None:
    """The executed notebook as it is committed: without the %reset cell, counted from 1 as
    a fresh kernel would (the kernel is shared, so its counts run on from the notebook
    before), its outputs cleaned of the run's folders and times."""
    notebook.cells.pop(0)
    clean(notebook, data_root, since)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    for number, cell in enumerate(code, start=1):
        cell.execution_count = number
        for output in cell.outputs:
            if output.output_type == "execute_result":
                output.execution_count = number


@pytest.fixture(scope="module")
def demo_with_cdc(demo_run, spark, kafka):
    run_customers_cdc(spark, kafka, demo_run.root)
    return demo_run


@pytest.fixture(scope="module")
def kernel(demo_with_cdc, tmp_path_factory):
    """One kernel (so one Spark JVM) for the five notebooks; each starts with %reset -f,
    so none can lean on another's names. Kernel "python3" with argv[0] "python" runs
    this interpreter (jupyter_client). It starts in a folder outside the project: the
    notebooks find their pipeline from the project folder whatever the working folder is.
    DATA_ROOT is the pipeline's own ${DATA_ROOT}, as a user would set it."""
    from jupyter_client.manager import KernelManager

    demo_run = demo_with_cdc
    assert demo_run.exit_code == 0, demo_run.output[-3000:]
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    env = {k: v for k, v in os.environ.items() if k not in ("INGEST_PIPELINE", "INGEST_CONF_DIR")}
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(cwd=str(elsewhere), env={**env, "DATA_ROOT": str(demo_run.root)})
    yield manager
    manager.shutdown_kernel(now=True)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_runs_top_to_bottom_on_the_demo_tables(path, demo_run, kernel):
    since = datetime.now(timezone.utc).date()
    notebook = nbformat.read(path, as_version=4)
    notebook.cells.insert(0, nbformat.v4.new_code_cell("%reset -f"))
    NotebookClient(notebook, km=kernel, timeout=600).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert str(demo_run.root) in output_text(notebook), "not the tables of the pipeline's DATA_ROOT"

    for_committing(notebook, demo_run.root, since)
    if os.environ.get("INGEST_WRITE_NOTEBOOKS") == "1":  # `make notebooks`: commit these outputs
        nbformat.write(notebook, path)
    text = output_text(notebook)
    assert not MACHINE_PATHS.search(text), MACHINE_PATHS.search(text).group(0)
    assert "/tmp/" not in text and str(demo_run.root) not in text and str(PROJECT) not in text
    assert not run_times(text, since), f"times of the run in the outputs: {run_times(text, since)}"
    tables = [o.data["text/html"] for o in outputs if "<table" in o.get("data", {}).get("text/html", "")]
    assert tables, "no table shown as HTML"
    assert not re.search(r"^\+-+\+", text, re.MULTILINE), "a table printed as .show() text"
    charts = sum(1 for o in outputs if "image/png" in o.get("data", {}))
    if path.stem == "04_batches_chart":
        assert charts >= 2, "no chart of the batches and the lag over time"
    if path.stem == "03_dead_letters":
        assert charts == 1, "no chart of the dead letters by stage"
        shown = html.unescape("".join(tables))
        # the demo's bad values, by field: the reason names the field, the value and the type
        assert "field amount: value '12,50 EUR' is not a DOUBLE" in shown, shown[-3000:]
        assert re.search(r"<td>amount</td>", shown), "no dead letters counted by field"
        # value_text whole, not cut at 60 characters: the end of a record without a uid header
        assert '"currency": "GBP", "ts": "2026-11-02T08:00:00Z"}' in shown, shown[-3000:]
    if path.stem == "05_history":  # the late change made a version between two others
        assert "trial" in text and "Delta version" in text, text[-3000:]
