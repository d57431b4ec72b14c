"""docs/first-pipeline.md, run as written: its shell blocks in order, in a fresh project
folder (the repository's conf/, the guide's pipeline file), against the broker its first
block starts. A guide that drifts from the code fails here."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.integration.processes import ROOT

GUIDE = ROOT / "docs" / "first-pipeline.md"


def guide_blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(\w+)\n(.*?)```", GUIDE.read_text(), re.S)


def run_block(script: str, folder: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-e", "-c", script], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"guide block failed:\n{script}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_first_pipeline_guide_runs_as_written(tmp_path):
    blocks = guide_blocks()
    shells = [body for kind, body in blocks if kind == "sh"]
    pipeline_yaml = next(body for kind, body in blocks if kind == "yaml" and body.startswith("name: clicks"))
    assert shells[0].strip() == "ingest broker --topic clicks:3"

    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "clicks.yaml").write_text(pipeline_yaml)
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP", "DATA_ROOT", "INGEST_FAULT")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the `ingest` script

    broker = subprocess.Popen(["bash", "-c", f"exec {shells[0].strip()}"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        export = broker.stdout.readline().strip()
        assert export.startswith("export KAFKA_BOOTSTRAP="), broker.stderr.read()
        env["KAFKA_BOOTSTRAP"] = export.split("=", 1)[1]
        outputs = [run_block(script, tmp_path, env) for script in shells[1:]]
    finally:
        broker.send_signal(signal.SIGINT)
        broker.wait(timeout=60)

    said = "\n".join(outputs)
    assert "OK pipelines/clicks.yaml" in said
    assert "clicks: done after" in said
    assert "verify clicks: OK" in said
    assert re.search(r"target rows\s+6\b", said), said[-2000:]  # three lines, sent twice: six uids
    # conf/local.yaml's DATA_ROOT, relative to the project folder
    assert (tmp_path / ".ingest" / "data" / "tables" / "clicks" / "_delta_log").is_dir()
