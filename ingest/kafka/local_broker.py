"""A real single-node Apache Kafka broker (KRaft, transactions on) for the demo and tests.

Runs `kafka.Kafka` from its Maven Central jars on free loopback ports. The JVM
is tied to this process (PR_SET_PDEATHSIG), so an interrupted test run or demo
leaves no broker behind.
"""

from __future__ import annotations

import base64
import ctypes
import logging
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest.errors import IngestError
from ingest.platform import jars
from ingest.platform.files import tail

_PR_SET_PDEATHSIG = 1
# Its JVMs compile with C1 only: a broker for a laptop or a test session carries a few
# thousand records, and C2 compiling its hot paths cost more CPU than they ever ran (a
# test session's broker: 10 CPU-seconds to 7.5 over the same three matrix cells; idle, 2.1 to 1.9
# a minute), CPU that the Spark beside it on the same cores waits for.
C1_ONLY = "-XX:TieredStopAtLevel=1"


class BrokerError(IngestError):
    """The embedded broker did not start or stop as it should."""


@dataclass(frozen=True)
class SaslUser:
    name: str
    password: str


@dataclass
class LocalKafka:
    """Start with `start()` or as a context manager; `bootstrap` is host:port."""

    work_dir: Path | None = None
    sasl_users: tuple[SaslUser, ...] = ()
    extra_properties: dict[str, str] = field(default_factory=dict)
    start_timeout_s: float = 60.0
    port: int | None = None  # the client port; a free one when None
    bootstrap: str = ""
    _process: subprocess.Popen | None = None
    _owns_work_dir: bool = False
    _ports: tuple[int, int] | None = None

    def __enter__(self) -> LocalKafka:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def log_file(self) -> Path:
        return self._dir / "broker.log"

    @property
    def _dir(self) -> Path:
        assert self.work_dir is not None
        return self.work_dir

    def start(self) -> LocalKafka:
        if self.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="ingest-kafka-"))
            self._owns_work_dir = True
        self.work_dir = Path(self.work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self._ports is None:
            if self.port is not None and _port_open(self.port):
                raise BrokerError(f"port {self.port} on 127.0.0.1 is already in use")
            self._ports = (self.port or free_port(), free_port())
        self.bootstrap = f"127.0.0.1:{self._ports[0]}"
        classpath = ":".join(str(j) for j in jars.resolve_broker_jars())
        config = self._write_config()
        if not (self._dir / "data" / "meta.properties").exists():
            self._format_storage(classpath, config)
        self._launch(classpath, config)
        self._wait_ready()
        return self

    def stop(self) -> None:
        """Stop the broker; a restart with `start()` keeps its data and ports."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)

    def wait(self, timeout_s: float) -> bool:
        """True once the broker process has ended (on its own or stopped), else after `timeout_s`."""
        if self._process is None:
            return True
        try:
            self._process.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False

    def kill(self) -> None:
        """Hard stop (SIGKILL), as a crash would."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)
        self._process = None

    def close(self) -> None:
        self.stop()
        if self._owns_work_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def client_config(self, user: SaslUser | None = None) -> dict[str, str]:
        """confluent-kafka settings to reach this broker."""
        config = {"bootstrap.servers": self.bootstrap}
        if self.sasl_users:
            user = user or self.sasl_users[0]
            config.update({
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": user.name,
                "sasl.password": user.password,
            })
        return config

    def jaas_config(self, user: SaslUser | None = None) -> str:
        """The `sasl.jaas.config` value a pipeline's `source.kafka.options` needs for this broker."""
        user = user or self.sasl_users[0]
        return _plain_jaas(user.name, user.password)

    def _write_config(self) -> Path:
        broker_port, controller_port = self._ports
        protocol = "SASL_PLAINTEXT" if self.sasl_users else "PLAINTEXT"
        properties = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": f"BROKER://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"BROKER://127.0.0.1:{broker_port}",
            "listener.security.protocol.map": f"BROKER:{protocol},CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "BROKER",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(self._dir / "data"),
            "num.partitions": "1",
            # one node: every internal topic must live with one replica, or
            # init_transactions() waits for replicas that never come
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            # the log cleaner is on (Kafka's default); it looks for work every second, not
            # every 15, so a compacted test topic is cleaned within a test's time
            "log.cleaner.enable": "true",
            "log.cleaner.backoff.ms": "1000",
            **self._sasl_properties(),
            **self.extra_properties,
        }
        path = self._dir / "server.properties"
        path.write_text("".join(f"{k}={_property_value(v)}\n" for k, v in properties.items()))
        return path

    def _sasl_properties(self) -> dict[str, str]:
        if not self.sasl_users:
            return {}
        # The broker's own login (inter-broker) is the first user; `user_<name>` lines are the accounts.
        broker = self.sasl_users[0]
        accounts = " ".join(f"user_{u.name}={_quoted(u.password)}" for u in self.sasl_users)
        jaas = _plain_jaas(broker.name, broker.password).rstrip(";") + f" {accounts};"
        return {
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.broker.plain.sasl.jaas.config": jaas,
        }

    def _format_storage(self, classpath: str, config: Path) -> None:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        # `=`: an id may start with "-" (1 in 64), which argparse would take for an option
        command = ["java", C1_ONLY, "-cp", classpath, "kafka.tools.StorageTool", "format",
                   f"--cluster-id={cluster_id}", "-c", str(config)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise BrokerError(f"formatting Kafka storage failed:\n{done.stdout}{done.stderr}")

    def _launch(self, classpath: str, config: Path) -> None:
        log = open(self.log_file, "ab")
        command = ["java", "-Xmx512m", "-XX:+UseSerialGC", C1_ONLY,
                   "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                   "-cp", classpath, "kafka.Kafka", str(config)]
        self._process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        log.close()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        # A port probe first: the admin client logs every refused connection.
        while not _port_open(self._ports[0]):
            self._check_alive()
            if time.monotonic() > deadline:
                self._give_up()
            time.sleep(0.1)
        from confluent_kafka.admin import AdminClient

        config: dict[str, Any] = {**self.client_config(), "socket.timeout.ms": 2000, "logger": _QUIET}
        admin = AdminClient(config)
        while True:
            self._check_alive()
            try:
                admin.list_topics(timeout=2)
                return
            except Exception:  # KafkaException until the broker's metadata is up
                if time.monotonic() > deadline:
                    self._give_up()
                time.sleep(0.1)

    def _check_alive(self) -> None:
        if self._process.poll() is not None:
            raise BrokerError(f"Kafka exited with {self._process.returncode}; see {self.log_file}:\n"
                              + tail(self.log_file, 20))

    def _give_up(self) -> None:
        self.stop()
        raise BrokerError(f"Kafka did not answer within {self.start_timeout_s:.0f}s; "
                          f"see {self.log_file}:\n" + tail(self.log_file, 20))


_QUIET = logging.getLogger("ingest.kafka.local_broker.probe")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _quoted(value: str) -> str:
    """A JAAS quoted string: `"` and `\\` escaped with a backslash."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _property_value(value: str) -> str:
    """.properties reads a backslash as an escape: double it so JAAS escapes survive."""
    return value.replace("\\", "\\\\")


def _plain_jaas(name: str, password: str) -> str:
    return ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f"username={_quoted(name)} password={_quoted(password)};")


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel sends SIGTERM when our parent dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)



def create_topic(bootstrap_config: dict[str, str], name: str, partitions: int = 1,
                 settings: dict[str, str] | None = None) -> None:
    """`settings` are the topic's own configs, e.g. {"cleanup.policy": "compact"}."""
    from confluent_kafka.admin import AdminClient, NewTopic

    # librdkafka's informational lines (`%6|...|BGQUEUE| ... Purging 1 unserved events` as a
    # client closes) to a logger that drops them, as ingest's other clients do
    config: dict[str, Any] = {"logger": _QUIET, **bootstrap_config}
    admin = AdminClient(config)
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=dict(settings or {}))])
    futures[name].result(timeout=30)


def ensure_topic(bootstrap_config: dict[str, str], name: str, partitions: int = 1) -> bool:
    """Creates the topic unless it exists (a broker restarted on its --data-dir keeps its
    topics); True when it was created."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        create_topic(bootstrap_config, name, partitions)
    except KafkaException as error:
        if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        return False
    return True
