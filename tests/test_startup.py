"""Worker start-up and light commands, as real subprocesses (``python -m newsmon.cli``) against the real Tansu
broker, a port where nothing listens, and real (unreachable) Redis and Qdrant addresses.

- A worker refuses to start, in one line naming the topic and what to run, when a topic is missing and
  creation is off, or has another partition count (issue "Deployable as built").
- A worker with no reachable broker (Redis, Qdrant server) exits non-zero within the start-up timeout with one
  line naming the address, no traceback, no librdkafka noise (issue "The first hour", item 4); with
  ``wait_for_dependencies`` it waits and answers /readyz with 503, the reason and the memory mode.
- ``newsmon topics create`` is idempotent and ``topics check`` agrees with it.
- ``--help``, ``settings`` and ``memory stats`` never import torch; ``memory stats`` on an empty home says what
  to run (item 5).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from newsmon.broker import free_port
from newsmon.shared.config import KafkaSettings
from newsmon.workers.topics import describe, ensure_topics

REPO = Path(__file__).resolve().parents[1]
#: the kinds of noise a clean failure must not print
NOISE = ("Traceback", "KafkaException", "embedded memory is locked", "FAIL", "Connection refused]")


def _env(tmp_path: Path, **settings: str) -> dict:
    """A clean environment for ``python -m newsmon.cli``: own home, no NEWSMON_* from outside, the settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEWSMON_")}
    env.update({"NEWSMON_HOME": str(tmp_path / "home"), "NEWSMON_WORKER__HTTP_PORT": str(free_port()),
                "COLUMNS": "80"}, **settings)
    return env


def _newsmon(args: list[str], env: dict, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "newsmon.cli", *args], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=timeout)
    return proc, time.monotonic() - t0


def _error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    out = proc.stdout + proc.stderr
    for noise in NOISE:
        assert noise not in out, out
    return [line for line in out.splitlines() if line.startswith("error:")]


def _topic_env(tansu, ns: str) -> dict:
    return {"NEWSMON_KAFKA__BOOTSTRAP_SERVERS": tansu.bootstrap,
            "NEWSMON_KAFKA__TOPIC_ARTICLES": f"articles-{ns}", "NEWSMON_KAFKA__TOPIC_PROPOSALS": f"proposals-{ns}",
            "NEWSMON_KAFKA__TOPIC_DECISIONS": f"decisions-{ns}", "NEWSMON_KAFKA__TOPIC_LABEL_EVENTS": f"labels-{ns}"}


# -- topics ---------------------------------------------------------------------------------------------------
def test_worker_refuses_a_missing_topic_when_creation_is_off(tansu, tmp_path):
    ns = uuid.uuid4().hex[:8]
    proc, took = _newsmon(["worker", "classifier"], _env(tmp_path, **_topic_env(tansu, ns)))
    assert proc.returncode == 1, proc.stderr
    [line] = _error_lines(proc)
    assert f"articles-{ns}" in line and "not exist" in line and "newsmon topics create" in line, line
    assert "NEWSMON_KAFKA__CREATE_TOPICS=true" in line
    assert took < 30


def test_worker_refuses_a_topic_with_another_partition_count(tansu, tmp_path):
    ns = uuid.uuid4().hex[:8]
    env = _env(tmp_path, **_topic_env(tansu, ns), NEWSMON_KAFKA__TOPIC_PARTITIONS="3")
    ensure_topics({"bootstrap.servers": tansu.bootstrap}, [f"articles-{ns}", f"proposals-{ns}",
                                                           f"articles-{ns}.dlq"], partitions=2)
    for creation in ("false", "true"):  # creating cannot fix it either (nor can Tansu add partitions)
        proc, _ = _newsmon(["worker", "classifier"], {**env, "NEWSMON_KAFKA__CREATE_TOPICS": creation})
        assert proc.returncode == 1, proc.stderr
        [line] = _error_lines(proc)
        assert f"topic articles-{ns} has 2 partitions but NEWSMON_KAFKA__TOPIC_PARTITIONS is 3" in line, line
        assert "NEWSMON_KAFKA__TOPIC_PARTITIONS=2" in line


def test_topics_create_is_idempotent_and_check_agrees(tansu, tmp_path):
    ns = uuid.uuid4().hex[:8]
    env = _env(tmp_path, **_topic_env(tansu, ns), NEWSMON_KAFKA__TOPIC_PARTITIONS="3",
               NEWSMON_KAFKA__REPLICATION_FACTOR="1", NEWSMON_KAFKA__MIN_INSYNC_REPLICAS="1")
    proc, _ = _newsmon(["topics", "check"], env)
    assert proc.returncode == 1 and "not exist" in _error_lines(proc)[0]
    first, _ = _newsmon(["topics", "create"], env)
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout)
    expected = {f"articles-{ns}", f"proposals-{ns}", f"decisions-{ns}", f"labels-{ns}", f"articles-{ns}.dlq",
                f"decisions-{ns}.dlq", f"labels-{ns}.dlq"}
    assert set(report["created"]) == expected
    assert {t: v["partitions"] for t, v in report["topics"].items()} == dict.fromkeys(expected, 3)
    again, _ = _newsmon(["topics", "create"], env)
    assert again.returncode == 0 and json.loads(again.stdout)["created"] == []
    check, _ = _newsmon(["topics", "check"], env)
    assert check.returncode == 0, check.stderr
    k = KafkaSettings(bootstrap_servers=tansu.bootstrap)
    assert {s.name: s.partitions for s in describe(k, sorted(expected), 10)} == dict.fromkeys(expected, 3)


# -- unreachable dependencies -----------------------------------------------------------------------------------
def test_worker_without_broker_exits_within_30_s_with_one_line(tmp_path):
    """Default start-up timeout: the whole run, interpreter start included, stays under 30 s."""
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    proc, took = _newsmon(["worker", "classifier"], _env(tmp_path, NEWSMON_KAFKA__BOOTSTRAP_SERVERS=address))
    assert proc.returncode == 1, proc.stderr
    assert took < 30, took
    [line] = _error_lines(proc)
    assert line.startswith(f"error: cannot reach Kafka at {address}") and "within 15 s" in line, line
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2, proc.stderr  # the start line and the error
    first = lines[0]  # the first log line names the knowledge memory's mode and path
    assert "newsmon worker starting" in first and "embedded" in first and str(tmp_path / "home" / "memory") in first


@pytest.mark.parametrize("dependency", ["redis", "qdrant"])
def test_worker_with_unreachable_redis_or_qdrant_names_it_without_credentials(tansu, tmp_path, dependency):
    ns = uuid.uuid4().hex[:8]
    port = free_port()
    setting = ({"NEWSMON_WORKER__REDIS_URL": f"redis://:s3cret@127.0.0.1:{port}/0"} if dependency == "redis" else
               {"NEWSMON_MEMORY__URL": f"http://admin:s3cret@127.0.0.1:{port}"})
    env = _env(tmp_path, **_topic_env(tansu, ns), NEWSMON_KAFKA__CREATE_TOPICS="true",
               NEWSMON_WORKER__STARTUP_TIMEOUT_S="5", **setting)
    proc, took = _newsmon(["worker", "memory-updater"], env)
    assert proc.returncode == 1, proc.stderr
    [line] = _error_lines(proc)
    where = f"Redis at redis://127.0.0.1:{port}/0" if dependency == "redis" else f"Qdrant server at http://127.0.0.1:{port}"
    assert f"cannot reach the {where}" in line or f"cannot reach {where}" in line, line
    assert "s3cret" not in proc.stdout + proc.stderr
    assert took < 30


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_worker_waits_and_reports_not_ready_when_told_to(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    env = _env(tmp_path, NEWSMON_KAFKA__BOOTSTRAP_SERVERS=address, NEWSMON_WORKER__WAIT_FOR_DEPENDENCIES="true",
               NEWSMON_WORKER__STARTUP_TIMEOUT_S="1", NEWSMON_MEMORY__URL="http://admin:s3cret@127.0.0.1:6333")
    port = env["NEWSMON_WORKER__HTTP_PORT"]
    proc = subprocess.Popen([sys.executable, "-m", "newsmon.cli", "worker", "classifier"], cwd=REPO, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline, status, body = time.monotonic() + 30, None, {}
        while time.monotonic() < deadline:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/readyz")
                if "waiting" in json.dumps(body):
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.3)
        else:
            pytest.fail(f"/readyz never reported the wait: {status} {body}")
        assert status == 503
        assert f"cannot reach Kafka at {address}" in body["workers"]["startup"]
        assert body["memory"] == {"mode": "server", "url": "http://127.0.0.1:6333"}
        assert proc.poll() is None  # still waiting
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "s3cret" not in err


# -- the embedded broker ------------------------------------------------------------------------------------------
def test_commands_that_need_a_shared_broker_refuse_to_run_without_one(tmp_path):
    """No NEWSMON_KAFKA__BOOTSTRAP_SERVERS: a single role and the topics commands end with one line saying what
    to set (an embedded broker would not be shared with the other process), before any model loads."""
    for args in (["worker", "classifier"], ["worker", "memory-updater"], ["topics", "create"], ["topics", "check"],
                 ["serve", "--no-workers"]):
        proc, took = _newsmon(args, _env(tmp_path))
        assert proc.returncode == 2, (args, proc.stderr)
        [line] = _error_lines(proc)
        assert "NEWSMON_KAFKA__BOOTSTRAP_SERVERS" in line, line
        assert took < 30


def test_worker_all_without_kafka_runs_on_an_embedded_broker(newsmon_home, tmp_path):
    """`newsmon worker all` with no Kafka configured starts the bundled Tansu on a loopback port, creates the
    topics, says where its messages are kept (the journal in the home), becomes ready, and ends cleanly on SIGTERM
    (the broker with it)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(newsmon_home / "models", target_is_directory=True)
    env = _env(tmp_path, NEWSMON_HOME=str(home), NEWSMON_MEMORY__PATH=str(tmp_path / "memory"),
               NEWSMON_KAFKA__SESSION_TIMEOUT_MS="6000")
    port = env["NEWSMON_WORKER__HTTP_PORT"]
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "newsmon.cli", "worker", "all"], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline, status, body = time.monotonic() + 180, None, {}
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, body = _get(f"http://127.0.0.1:{port}/readyz")
                if status == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"/readyz never 200: {status} {body} (exit {proc.poll()}):\n{log.read_text()[-3000:]}")
        assert set(body["workers"]) == {"classifier", "memory-updater"}, body
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = log.read_text()
    assert proc.returncode == 0, err
    assert "embedded Kafka broker (Tansu) on 127.0.0.1:" in err and f"kept in {home}/broker/journal.sqlite" in err, err
    assert not (home / "broker" / "broker.json").exists(), "the broker's state file outlived the broker"
    assert "Traceback" not in err


# -- light commands ---------------------------------------------------------------------------------------------
LIGHT = """
import atexit, sys
atexit.register(lambda: print("HEAVY=" + ",".join(m for m in ("torch", "transformers") if m in sys.modules),
                              file=sys.stderr))
sys.argv = ["newsmon", *sys.argv[1:]]
from newsmon.cli import main
main()
"""


@pytest.mark.parametrize("args", [["--help"], ["settings"], ["memory", "stats"], ["topics", "--help"]])
def test_light_commands_never_import_torch(tmp_path, args):
    proc = subprocess.run([sys.executable, "-c", LIGHT, *args], cwd=REPO, env=_env(tmp_path), text=True,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY=\n" in proc.stderr or proc.stderr.rstrip().endswith("HEAVY="), proc.stderr


def test_memory_stats_on_an_empty_home_says_what_to_run(tmp_path):
    proc, _ = _newsmon(["memory", "stats"], _env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "is empty" in proc.stdout and "newsmon memory build --data PATH --calibrate" in proc.stdout, proc.stdout
    assert str(tmp_path / "home" / "memory") in proc.stdout
    assert not (tmp_path / "home" / "models").exists()  # no model was imported either


# -- librdkafka's log lines -------------------------------------------------------------------------------------
def test_librdkafka_lines_go_through_structlog_with_levels_rate_limited():
    """A real producer against a port where nothing listens: librdkafka reports a refused connection about
    every reconnect backoff; through the bridge at most ``burst`` of them reach the log, at level error."""
    from confluent_kafka import Producer
    from structlog.testing import capture_logs

    from newsmon.shared.logs import RateLimitedLogBridge

    p = Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "reconnect.backoff.ms": 10,
                  "reconnect.backoff.max.ms": 50, "logger": RateLimitedLogBridge("kafka", burst=3, window_s=60)})
    with capture_logs() as logs:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            p.poll(0.1)
    refused = [e for e in logs if "Connection refused" in e["event"]]
    assert 1 <= len(refused) <= 3, logs
    assert {e["log_level"] for e in refused} == {"error"}


def test_log_bridge_counts_what_it_suppressed():
    from structlog.testing import capture_logs

    from newsmon.shared.logs import RateLimitedLogBridge

    bridge = RateLimitedLogBridge("kafka", burst=2, window_s=0.3)
    with capture_logs() as logs:
        for i in range(10):
            bridge.log(40, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", f"attempt {i}")
        bridge.log(20, "%s [%s] %s", "CONFWARN", "rdkafka#consumer-1", "other kind, own budget")
        time.sleep(0.35)
        bridge.log(40, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", "after the window")
    assert [e["event"].split()[-1] for e in logs] == ["0", "1", "budget", "window"]
    assert logs[-1]["suppressed"] == 8 and logs[0]["log_level"] == "error" and logs[2]["log_level"] == "info"


def test_memory_stats_counts_a_real_memory_without_torch(newsmon_home, tmp_path):
    """A real embedded collection of the default model's version (the imported checkpoint in the session home):
    counted per collection, labelled and pending, with torch and transformers never imported."""
    import numpy as np

    from newsmon.shared.classifier import model_identity
    from newsmon.shared.config import Settings
    from newsmon.shared.encoder import resolve_model
    from newsmon.shared.memory import EdgeMemory, collection_name

    resolve_model(Settings().encoder.model, newsmon_home)  # the checkpoint exists (imported once per home)
    s = Settings(home=newsmon_home, memory={"path": tmp_path / "memory"})
    version, dim = model_identity(s)
    name = collection_name(s.memory.collection_prefix, "sl", version)
    with EdgeMemory(tmp_path / "memory", name, dim) as mem:
        mem.upsert(["a1", "a2", "a3"], np.random.default_rng(0).normal(size=(3, dim)), [["x"], ["y"], []])
    env = _env(tmp_path, NEWSMON_HOME=str(newsmon_home), NEWSMON_MEMORY__PATH=str(tmp_path / "memory"))
    proc = subprocess.run([sys.executable, "-c", LIGHT, "memory", "stats"], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {name: {"labelled": 2, "pending": 1}}
    assert "HEAVY=\n" in proc.stderr or proc.stderr.rstrip().endswith("HEAVY="), proc.stderr


def test_worker_refuses_an_embedded_memory_held_by_another_process(tansu, newsmon_home, tmp_path):
    """This test process holds a real embedded collection; a memory updater started on the same directory
    stops at start-up with one line and the way out (the note is printed only when it is true)."""
    import numpy as np

    from newsmon.shared.classifier import model_identity
    from newsmon.shared.config import Settings
    from newsmon.shared.encoder import resolve_model
    from newsmon.shared.memory import EdgeMemory, collection_name

    resolve_model(Settings().encoder.model, newsmon_home)
    s = Settings(home=newsmon_home, memory={"path": tmp_path / "memory"})
    version, dim = model_identity(s)
    ns = uuid.uuid4().hex[:8]
    env = _env(tmp_path, **_topic_env(tansu, ns), NEWSMON_KAFKA__CREATE_TOPICS="true",
               NEWSMON_HOME=str(newsmon_home), NEWSMON_MEMORY__PATH=str(tmp_path / "memory"))
    with EdgeMemory(tmp_path / "memory", collection_name("newsmon", "sl", version), dim) as mem:
        mem.upsert(["a1"], np.ones((1, dim)), [["x"]])
        proc, took = _newsmon(["worker", "memory-updater"], env)
    assert proc.returncode == 1, proc.stderr
    [line] = _error_lines(proc)
    assert f"the embedded knowledge memory at {tmp_path / 'memory'} is open in another process" in line, line
    assert "newsmon worker all" in line and "NEWSMON_MEMORY__URL" in line
    from newsmon.workers.startup import check_embedded_memory

    check_embedded_memory(s)  # released: the same check passes (and leaves the memory closed)
    with EdgeMemory(tmp_path / "memory", collection_name("newsmon", "sl", version), dim) as mem:
        assert mem.count() == 1


def test_waiting_worker_starts_once_the_broker_comes_up(newsmon_home, tmp_path):
    """wait_for_dependencies: a memory updater waits (503) for a broker that is not there yet; once a real Tansu
    comes up on that address it creates its topics, starts and answers 200; SIGTERM then ends it with 0."""
    from newsmon.broker import TansuBroker

    port = free_port()
    env = _env(tmp_path, NEWSMON_KAFKA__BOOTSTRAP_SERVERS=f"127.0.0.1:{port}", NEWSMON_KAFKA__CREATE_TOPICS="true",
               NEWSMON_KAFKA__TOPIC_PARTITIONS="1", NEWSMON_WORKER__WAIT_FOR_DEPENDENCIES="true",
               NEWSMON_WORKER__STARTUP_TIMEOUT_S="1", NEWSMON_WORKER__PAUSE_BACKOFF_S="0.5",
               NEWSMON_HOME=str(newsmon_home), NEWSMON_MEMORY__PATH=str(tmp_path / "memory"))
    http = f"http://127.0.0.1:{env['NEWSMON_WORKER__HTTP_PORT']}/readyz"
    proc = subprocess.Popen([sys.executable, "-m", "newsmon.cli", "worker", "memory-updater"], cwd=REPO, env=env,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def wait_for(pred, what: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                status, body = _get(http)
                if pred(status, body):
                    return body
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.3)
        pytest.fail(f"timed out waiting for {what}")

    try:
        wait_for(lambda st, b: st == 503 and "waiting" in b["workers"].get("startup", ""), "503 while waiting")
        with TansuBroker(port=port):
            body = wait_for(lambda st, b: st == 200, "200 once the broker is up")
            assert body["workers"] == {"memory-updater": "ready"}
            assert body["memory"] == {"mode": "embedded", "path": str(tmp_path / "memory")}
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_a_worker_that_ends_by_itself_fails_the_process():
    """Runtime records why a worker thread ended (the CLI then exits 1); a lock taken after start-up gets the
    same one-line way out as at start-up."""
    from newsmon.shared.config import Settings
    from newsmon.shared.memory import MemoryLockedError
    from newsmon.workers.runtime import Runtime

    class Locked:
        name = "memory-updater"

        def run(self, stop):
            raise MemoryLockedError("held elsewhere")

    rt = Runtime(Settings())
    rt._run_one(Locked())
    assert rt.stop.is_set() and "open in another process" in rt.failed and "newsmon worker all" in rt.failed


def test_the_demo_api_takes_another_port_when_its_own_is_taken_without_a_bind_error():
    """A newcomer's demo printed uvicorn's "[Errno 98] ... address already in use" and a second server start when
    127.0.0.1:8080 was taken: the port is now checked before the server starts."""
    import socket

    from newsmon.broker import port_or_free

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        other = port_or_free(taken)
        assert other != taken and other > 0
    free = free_port()
    assert port_or_free(free) == free


@pytest.mark.parametrize(("args", "variable", "value"), [
    (["serve"], "NEWSMON_WORKER__ERROR_POLICY", "no_such_module_x:factory"),
    (["worker", "all"], "NEWSMON_WORKER__ERROR_POLICY", "no_such_module_x:factory"),
    (["serve"], "NEWSMON_ENCODER__MODEL", "/nonexistent/model"),
    (["serve"], "NEWSMON_WORKER__REDIS_URL", "http://user:pw-secret@127.0.0.1/0"),
])
def test_a_setting_that_cannot_be_used_ends_start_up_in_one_line(newsmon_home, tmp_path, args, variable, value):
    """Issue 39 item 5: an error policy naming a missing module printed a Python traceback from the worker's
    constructor (after the broker and the model had started); the encoder model and the Redis URL were the same
    kind. Now: one line naming the variable, exit status 2, nothing started, no secret shown."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "models").symlink_to(newsmon_home / "models", target_is_directory=True)
    proc, _s = _newsmon(args, _env(tmp_path, NEWSMON_HOME=str(home), **{variable: value}), timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and variable in lines[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "pw-secret" not in proc.stderr + proc.stdout
    assert not (home / "broker" / "broker.json").exists()
