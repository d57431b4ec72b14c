"""moto's S3 server on loopback, a stand-in speaking S3's protocol (`moto[server]` from PyPI),
and the test session's S3A settings to reach it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager

BUCKET = "ingest-tests"
# a bucket whose S3A settings turn conditional create off: a store without put-if-absent
PLAIN_BUCKET = "ingest-tests-plain"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def s3a_settings(endpoint: str) -> dict[str, str]:
    return {
        "fs.s3a.endpoint": endpoint,
        "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.access.key": "testing",
        "fs.s3a.secret.key": "testing",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.retry.limit": "2",
        "fs.s3a.attempts.maximum": "2",
        f"fs.s3a.bucket.{PLAIN_BUCKET}.create.conditional.enabled": "false",
    }


@contextmanager
def moto_server():
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                for bucket in (BUCKET, PLAIN_BUCKET):
                    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=10)


def submit_args(endpoint: str, given: str | None) -> str:
    """PYSPARK_SUBMIT_ARGS for a child `ingest` process: its S3A client pointed at the server too."""
    confs = " ".join(f"--conf spark.hadoop.{key}={value}" for key, value in s3a_settings(endpoint).items())
    given = given or "pyspark-shell"
    return given.replace("pyspark-shell", f"{confs} pyspark-shell")
