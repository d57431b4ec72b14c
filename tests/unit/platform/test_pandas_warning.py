"""Issue 57 (Low): every `ingest run` printed PySpark's "does not yet fully support pandas >=
3.0.0" FutureWarning. PySpark raises it itself, on paths every run takes: `functions.lit` (every
batch) imports `pyspark.testing.utils`, which checks the pandas version at import, and the
Connect client checks it at its first import (`pyspark.sql.connect.utils`). PySpark 4.2 asks for
pandas < 3 there, so the project pins it (pyproject.toml, requirements.lock)."""

from __future__ import annotations

import subprocess
import sys

import pytest

WARNING = "does not yet fully support pandas"

# What a run does in the client: F.lit (classic; without a SparkContext it raises after the
# import that warns), and on Connect the client's own check.
RUN_PATH = """
import importlib.util
from pyspark.sql import functions as F
try:
    F.lit(1)
except Exception:
    pass
if importlib.util.find_spec("grpc") is not None:
    import pyspark.sql.connect.session
"""


def test_a_run_path_prints_no_pandas_support_warning():
    pytest.importorskip("pandas")
    done = subprocess.run([sys.executable, "-W", "default", "-c", RUN_PATH], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert WARNING not in done.stderr, done.stderr[-3000:]
