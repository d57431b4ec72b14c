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
    return done.stdout + done.stderr  # notes and errors are on stderr


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
    # three lines sent twice, then two good of wrong.jsonl: eight uids (the rest are dead letters)
    assert re.search(r"target rows\s+8\b", said), said[-2000:]
    # issue 54: one bad value, one misspelt field, one missing uid header, as the guide shows them
    dead = tmp_path / ".ingest" / "data" / "dead_letter" / "clicks"
    assert f"dead letters 1 (decode 1, transform 0, uid 0) in {dead}, filtered 0" in said, said[-3000:]
    assert ("1 record(s) with fields the schema does not name (e.g. pgae), merged without them "
            "(source.unknown_fields: warn)") in said
    assert (f"note: clicks batch 2: 1 dead letter(s) in {dead}; the most frequent reason (1 record): field ts: "
            "value 'yesterday' is not a TIMESTAMP (expected ISO 8601 text, e.g. \"2026-11-28T09:30:00Z\")") in said
    assert ("error: pipeline clicks batch 3: 3 of 3 records (100%) are dead letters, more than "
            "dead_letter.max_share 0.5; the most frequent reason (3 records): header 'message-id' missing or null "
            "(uid.header: the producer must set it on every record)") in said
    assert "ingest run exited 1" in said
    # paths to paste (issue 54.4): status names the target by its absolute path
    assert f"target      {tmp_path / '.ingest' / 'data' / 'tables' / 'clicks'}" in said
    # conf/local.yaml's DATA_ROOT, relative to the project folder
    assert (tmp_path / ".ingest" / "data" / "tables" / "clicks" / "_delta_log").is_dir()
