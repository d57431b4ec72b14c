"""`ingest-job`: `ingest run` as a scheduler's task (a Databricks python wheel
task, or any job runner that calls a console script).

The task's parameters are `ingest run`'s arguments, with or without the word
`run` first: `pipelines/orders.yaml --env databricks --once`. A run that
succeeds returns normally (some runners treat any SystemExit, even 0, as a
failure); one that fails raises SystemExit with `ingest run`'s exit code, so
the task fails.
"""

from __future__ import annotations

import sys

from ingest.cli import main


def job_arguments(argv: list[str]) -> list[str]:
    """`ingest run`'s command line from a task's parameters."""
    args = list(argv)
    if args[:1] == ["run"]:
        args = args[1:]
    return ["run", *args]


def run_job(argv: list[str] | None = None) -> None:
    code = main(job_arguments(sys.argv[1:] if argv is None else argv))
    if code != 0:
        raise SystemExit(code)


if __name__ == "__main__":
    run_job()
