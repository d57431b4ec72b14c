"""A Spark Connect server in a process of its own, as Databricks' is to a job's client.

pyspark ships the server (`jars/spark-connect_2.13-*.jar`) and `bin/spark-submit`, but not
`sbin/start-connect-server.sh`; that script only runs `spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer` (through spark-daemon.sh), which
is what `start` does, in the foreground, with the Delta and Kafka jars and settings a
local classic session gets (`ingest.platform.session`). The server runs in a process group
of its own, so `kill` takes its JVM and the Python workers beside it down at once.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
HOST = "127.0.0.1"

SERVER_TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.databricks.delta.snapshotPartitions": "2",
}


# What pyspark leaves in the environment once a test module's fixture started a server in the
# test process (`remote("local[2]")`): its token and local mode. A process that inherits them
# sends that token to, or takes itself for, the in-process server.
IN_PROCESS_SERVER_VARIABLES = ("SPARK_CONNECT_AUTHENTICATE_TOKEN", "SPARK_LOCAL_REMOTE",
                               "SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def answers(port: int) -> bool:
    try:
        socket.create_connection((HOST, port), timeout=1).close()
        return True
    except OSError:
        return False


class ConnectServer:
    """`start` it, then clients connect to `url`; `kill` it as a crash would; `start` it again
    on the same port (and so the same url); `stop` it at the end."""

    def __init__(self, log: Path, port: int | None = None, conf: dict[str, str] | None = None):
        """`conf`: settings of this server's own, beside those of a local classic session."""
        self.log = log
        self.port = port or free_port()
        self.conf = conf or {}
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    def command(self) -> list[str]:
        import pyspark

        from ingest.platform.builder import DELTA_CONF, LOCAL_DEFAULTS, jar_conf

        settings = {**DELTA_CONF, **jar_conf("cache"), **LOCAL_DEFAULTS, **SERVER_TEST_CONF, **self.conf,
                    "spark.connect.grpc.binding.address": HOST,
                    "spark.connect.grpc.binding.port": str(self.port)}
        command = [str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--master", "local[2]",
                   "--name", "ingest-connect-server", "--class", SERVER_CLASS]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        return command

    def start(self, timeout: float = 300) -> None:
        import pyspark

        env = {**os.environ, "SPARK_HOME": str(Path(pyspark.__file__).parent), "SPARK_LOCAL_IP": HOST,
               # foreachBatch's worker runs beside the server: this interpreter, where ingest is installed
               "PYSPARK_PYTHON": sys.executable}
        for variable in (*IN_PROCESS_SERVER_VARIABLES, "PYSPARK_SUBMIT_ARGS"):  # a client's, not this server's
            env.pop(variable, None)
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(self.command(), env=env, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not answers(self.port):
            if self.process.poll() is not None:
                raise AssertionError(f"the Connect server exited ({self.process.returncode}) before its port "
                                     f"answered:\n{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"the Connect server's port {self.port} did not answer within {timeout:.0f}s:"
                                     f"\n{self.output()[-3000:]}")
            time.sleep(0.2)

    def kill(self) -> None:
        """SIGKILL to the server's group: its JVM and the batch function's Python worker die at once."""
        self._signal(signal.SIGKILL)
        self._wait(30)

    def stop(self) -> None:
        self._signal(signal.SIGTERM)
        if not self._wait(60):
            self.kill()

    def _signal(self, number: int) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, number)
            except ProcessLookupError:
                pass

    def _wait(self, seconds: float) -> bool:
        if self.process is None:
            return True
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        # Python workers left in the group (the JVM is gone, their pipe will close): none may outlive the test
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return True

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""
