"""What the wheel carries besides code, checked without building it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import ingest
from ingest import demo

REPO = Path(__file__).resolve().parents[2]


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_the_packaged_demo_pipeline_is_the_projects():
    assert demo.PACKAGED_PIPELINE.read_text() == (REPO / "pipelines" / "orders.yaml").read_text()


def test_the_demo_finds_its_pipeline_outside_a_project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert demo.find_pipeline_file(None) == demo.PACKAGED_PIPELINE


def test_the_pypi_page_has_no_link_pypi_cannot_follow():
    page = (REPO / project()["readme"]).read_text()
    links = re.findall(r"\]\(([^)]+)\)", page)
    assert all(link.startswith("https://") for link in links), links


def test_license_and_typing_marker():
    assert project()["license"] == "Apache-2.0"
    assert "Apache License" in (REPO / "LICENSE").read_text()[:200]
    assert (Path(ingest.__file__).parent / "py.typed").exists()
    assert re.fullmatch(r"\d+\.\d+\.\d+", ingest.__version__)


def test_the_spark_and_notebook_extras_bring_what_the_docs_use():
    """issue 54.7/8: `to_pandas()` needs pandas with the spark extra; the notebooks' runner
    (`jupyter execute`) comes with the notebook extra; the lock pins each."""
    extras = project()["optional-dependencies"]
    names = {extra: {re.split(r"[<>=\[]", item)[0] for item in items} for extra, items in extras.items()}
    assert "pandas" in names["spark"]
    assert {"ingest", "pandas", "nbclient", "ipykernel", "matplotlib"} <= names["notebook"]
    locked = {line.split("==")[0].lower() for line in (REPO / "requirements.lock").read_text().splitlines()
              if "==" in line}
    assert {"pandas", "nbclient", "nbformat", "ipykernel", "matplotlib"} <= locked
