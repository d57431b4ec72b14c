"""The package as a user gets it: the wheel built, installed into a fresh venv, run.

One test, marked `wheel` (`pytest -m "not wheel"` leaves it out): about five
minutes, most of it the demo. pip installs from its cache with the versions
pinned in requirements.lock.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
LOCK = PROJECT / "requirements.lock"
PIPELINE = """\
name: clicks
source:
  kafka: {bootstrap_servers: "${KAFKA_BOOTSTRAP}", topics: [clicks]}
  format: json
  schema: "page STRING, ts TIMESTAMP"
uid: {header: message-id}
target: {path: "${DATA_ROOT}/tables/clicks"}
checkpoint: ${DATA_ROOT}/checkpoints/clicks
"""


def sh(*command, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.wheel
def test_the_wheel_installs_validates_and_runs_the_demo(tmp_path):
    dist, venv, user = tmp_path / "dist", tmp_path / "venv", tmp_path / "user"
    user.mkdir()
    # Nothing of the checkout may leak in: with PYTHONPATH pointing at it, pip would
    # take `ingest` as installed already.
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "INGEST_FAULT", "INGEST_CONF_DIR")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    ok(sh(sys.executable, "-m", "pip", "wheel", PROJECT, "--no-deps", "-w", dist, "-q", cwd=tmp_path, env=env))
    [wheel] = dist.glob("ingest-*.whl")
    ok(sh("python3.11", "-m", "venv", venv, cwd=tmp_path, env=env))
    pip, ingest = venv / "bin" / "pip", venv / "bin" / "ingest"
    ok(sh(pip, "install", "-q", "-c", LOCK, wheel, cwd=tmp_path, env=env))

    # The user's folder: no checkout, no conf/, the package's code only.
    assert ok(sh(ingest, "--version", cwd=user, env=env)).strip().startswith("ingest ")
    (user / "pipelines").mkdir()
    (user / "pipelines" / "clicks.yml").write_text(PIPELINE)
    env_vars = {**env, "KAFKA_BOOTSTRAP": "localhost:9092", "DATA_ROOT": str(user / "data")}
    assert ok(sh(ingest, "validate", cwd=user, env=env_vars)) == "OK pipelines/clicks.yml\n"

    # Without the spark extra: a message and exit 2, not an ImportError.
    no_spark = sh(ingest, "status", "pipelines/clicks.yml", cwd=user, env=env_vars)
    assert (no_spark.returncode, no_spark.stdout) == (2, "")
    assert "pip install 'ingest[spark]'" in no_spark.stderr and "Traceback" not in no_spark.stderr
    strict = sh(ingest, "validate", "--strict", cwd=user, env=env_vars)
    assert strict.returncode == 2 and "--strict" in strict.stderr

    ok(sh(pip, "install", "-q", "-c", LOCK, f"{wheel}[spark]", cwd=tmp_path, env=env))
    demo = sh(ingest, "demo", "--data-root", user / "demo", cwd=user, env=env, timeout=1800)
    out = ok(demo)
    assert "exactly once: every uid once, nothing missing" in out
    assert "FAULT INJECTION ARMED" in (user / "demo" / "logs" / "run-1.log").read_text()
