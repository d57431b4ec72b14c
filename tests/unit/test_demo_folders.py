"""The demo shares DATA_ROOT with conf/local.yaml: it empties the folders an earlier demo
made and nothing else."""

from pathlib import Path

import pytest
import yaml

from ingest.demo import MARKER, DemoError, DemoOptions, demo_environ, load_demo_pipeline, prepare_folders
from ingest.notebook import DEFAULT_ROOT as NOTEBOOK_ROOT

PROJECT = Path(__file__).resolve().parents[2]


def _pipeline(root: Path):
    return load_demo_pipeline(PROJECT / "pipelines" / "orders.yaml",
                              demo_environ(root, "localhost:9092", DemoOptions()))


def test_demo_and_conf_local_agree_on_data_root():
    from ingest.demo import DEFAULT_ROOT

    local_root = yaml.safe_load((PROJECT / "conf" / "local.yaml").read_text())["vars"]["DATA_ROOT"]
    assert Path(local_root) == DEFAULT_ROOT == NOTEBOOK_ROOT


def test_a_second_demo_empties_its_own_folders_and_keeps_yours(tmp_path):
    pipeline = _pipeline(tmp_path)
    prepare_folders(tmp_path, pipeline)
    for folder in ("tables/orders", "checkpoints/orders", "logs"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "old").write_text("from the first demo")
    (tmp_path / "tables" / "clicks").mkdir(parents=True)
    (tmp_path / "tables" / "clicks" / "part-0").write_text("yours")

    prepare_folders(tmp_path, pipeline)

    assert not (tmp_path / "tables" / "orders").exists()
    assert not (tmp_path / "logs" / "old").exists()
    assert (tmp_path / "tables" / "clicks" / "part-0").read_text() == "yours"
    assert "tables/orders" in (tmp_path / MARKER).read_text().split("\n")


def test_a_folder_the_demo_did_not_make_is_never_emptied(tmp_path):
    (tmp_path / "tables" / "orders").mkdir(parents=True)
    (tmp_path / "tables" / "orders" / "part-0").write_text("your orders table")

    with pytest.raises(DemoError, match=r"tables/orders exists and was not made by the demo"):
        prepare_folders(tmp_path, _pipeline(tmp_path))

    assert (tmp_path / "tables" / "orders" / "part-0").read_text() == "your orders table"
