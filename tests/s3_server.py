"""A stand-in for S3 on loopback: moto's standalone server (PyPI `moto[server]`), which speaks
the S3 API to hadoop-aws and the AWS SDK v2 as S3 would, in a process of its own.

It is not S3: one process, no replication, no eventual anything; what it does answer like S3
(checked with moto 5.2.5): PutObject and CompleteMultipartUpload with `If-None-Match: *` on a
key that exists get 412 PreconditionFailed, so a put-if-absent can be tested here.

The suite talks to it through per-bucket S3A settings (`fs.s3a.bucket.NAME.*`): the shared
session's other tests, and any other bucket, see no change.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ACCESS_KEY = "stand-in-access-key"  # moto accepts any credentials; S3A must be given some
SECRET_KEY = "stand-in-secret-key"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LocalS3:
    """moto_server on 127.0.0.1, started once per test session."""

    def __init__(self, log: Path):
        self.log = log
        self.process: subprocess.Popen | None = None
        self.endpoint = ""
        self.port = 0

    def start(self, timeout: float = 60) -> None:
        self.port = port = _free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"the S3 stand-in (moto_server) did not start on {self.endpoint}; "
                                       f"its log: {self.log}") from None
                time.sleep(0.1)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def client(self):
        """boto3's S3 client on the stand-in: to make buckets and look at objects directly."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def hadoop_conf(self, bucket: str, endpoint: str | None = None) -> dict[str, str]:
        """S3A settings for `bucket` on this server (or a relay to it at `endpoint`), without
        the `spark.hadoop.` prefix."""
        prefix = f"fs.s3a.bucket.{bucket}."
        return {prefix + key: value for key, value in {
            "endpoint": endpoint or self.endpoint,
            "endpoint.region": REGION,
            "path.style.access": "true",  # moto answers http://host:port/bucket/key
            "connection.ssl.enabled": "false",
            "access.key": ACCESS_KEY,
            "secret.key": SECRET_KEY,
            "aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        }.items()}

    def use_in(self, spark, bucket: str, endpoint: str | None = None) -> None:
        """Point a running session's S3A at this server for `bucket` only."""
        hadoop = spark._jsc.hadoopConfiguration()
        for key, value in self.hadoop_conf(bucket, endpoint).items():
            hadoop.set(key, value)

    def spark_defaults(self, folder: Path, bucket: str) -> Path:
        """A SPARK_CONF_DIR whose spark-defaults.conf points a child `ingest run`'s S3A at this
        server for `bucket`, as an operator would configure S3 for spark-submit (the children of
        test_s3_two_writers.py read it)."""
        folder.mkdir(parents=True, exist_ok=True)
        lines = [f"spark.hadoop.{key} {value}" for key, value in self.hadoop_conf(bucket).items()]
        (folder / "spark-defaults.conf").write_text("\n".join(lines) + "\n")
        return folder


class HeldPut:
    """A TCP relay in front of the stand-in that, once armed, holds the next PUT of a Delta log
    version (`_delta_log/<20 digits>.json`) until released: the moment between a writer's check that
    the version is free and its PUT landing, widened on purpose so that a second writer can
    commit inside it. Everything else passes through as it is."""

    LOG_PUT = re.compile(rb"PUT /\S*_delta_log/\d{20}\.json")

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.held = threading.Event()  # the PUT arrived and waits
        self.release = threading.Event()
        self._armed = False
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(self) -> None:
        self._armed = True

    def close(self) -> None:
        self._closed = True
        self.release.set()
        self._server.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while chunk := source.recv(65536):
                if from_client and self._armed and self.LOG_PUT.search(chunk):
                    self._armed = False
                    self.held.set()
                    self.release.wait(timeout=300)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
