"""`ingest-job`, the entry point of a Databricks python wheel task."""

import pytest

from ingest.entry import job_arguments, run_job


def test_task_parameters_are_ingest_runs_arguments_with_or_without_run():
    assert job_arguments(["p.yaml", "--once"]) == ["run", "p.yaml", "--once"]
    assert job_arguments(["run", "p.yaml"]) == ["run", "p.yaml"]


def test_a_run_that_succeeds_returns_and_one_that_fails_exits_with_its_code(tmp_path, capsys):
    assert run_job(["--help"]) is None  # some job runners take any SystemExit, even 0, as a failure
    with pytest.raises(SystemExit) as stop:
        run_job([str(tmp_path / "missing.yaml"), "--once"])
    assert stop.value.code == 2  # bad input
    assert "missing.yaml" in capsys.readouterr().err  # a diagnostic: stderr
