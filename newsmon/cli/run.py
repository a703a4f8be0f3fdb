"""``newsmon worker`` (production workers until SIGTERM), ``newsmon serve`` (the HTTP API) and ``newsmon demo``
(the main job, embedded).

Each command imports what it runs inside its function (deferred): at the top of the module these imports would
load scikit-learn, the Kafka, Qdrant and Redis clients for every ``newsmon`` call (``newsmon --help`` 3 s
instead of 0.3 s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from newsmon.cli.common import err, fail, settings_from_env
from newsmon.shared.config import BUNDLED_E5_SMALL, SettingError, Settings, redact_url, reveal


def check_settings(s: Settings) -> None:
    """Settings that validate but cannot be used end the command here, before a broker, a model or a worker
    starts: one line naming the variable (:class:`~newsmon.shared.config.SettingError`), exit status 2. Checked:
    the error policy's module, an encoder model other than the bundled one (its configuration read, no weights
    loaded) and the Redis URL's form (nothing is connected)."""
    import redis  # deferred: see the module docstring

    from newsmon.shared.classifier import model_identity
    from newsmon.workers.policy import load_error_policy

    try:
        load_error_policy(s)
        try:
            if s.encoder.model != BUNDLED_E5_SMALL:  # the bundled one comes with the package (imported on first use)
                model_identity(s)
        except (OSError, ValueError) as exc:
            raise SettingError(f"NEWSMON_ENCODER__MODEL={s.encoder.model!r} cannot be loaded: "
                               f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        if s.worker.redis_url is not None:
            try:
                redis.Redis.from_url(str(reveal(s.worker.redis_url)))
            except ValueError as exc:  # the URL's form; its password is never shown
                raise SettingError(f"NEWSMON_WORKER__REDIS_URL={redact_url(s.worker.redis_url)!r}: {exc}") from None
    except SettingError as exc:
        fail(str(exc))


def worker_cmd(
    role: Annotated[str, typer.Argument(help="classifier, memory-updater, or all (one process; embedded mode).")],
) -> None:
    """Run a production worker against the Kafka, Qdrant and Redis given by the settings, until SIGTERM.

    Without NEWSMON_KAFKA__BOOTSTRAP_SERVERS, `worker all` starts an embedded broker (its messages journalled in
    NEWSMON_HOME/broker and re-seeded at the next start: NEWSMON_KAFKA__EMBEDDED_STORAGE); a single role needs a
    configured one."""
    from newsmon.broker import (
        NO_KAFKA,
        kafka_or_embedded,  # deferred: see the module docstring
    )
    from newsmon.standalone import announced
    from newsmon.workers.base import StartupError
    from newsmon.workers.runtime import ROLES, run_until_signalled

    s = settings_from_env()
    roles = ROLES if role == "all" else (role,)
    if any(r not in ROLES for r in roles):
        fail(f"unknown role {role!r}; choose classifier, memory-updater or all")
    if not s.kafka.bootstrap_servers and role != "all":
        fail(f"{NO_KAFKA}; a single role shares its broker with the other role's process")
    check_settings(s)
    try:
        with kafka_or_embedded(s) as broker, announced(s, broker, f"worker {role}"):
            code = run_until_signalled(s, roles)
    except (StartupError, SettingError, RuntimeError) as exc:
        fail(str(exc), 1)
    raise typer.Exit(code)


def serve_cmd(
    host: Annotated[Optional[str], typer.Option(help="Bind address (default: NEWSMON_API__HOST).")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port (default: NEWSMON_API__PORT, 8080).")] = None,
    workers: Annotated[Optional[bool], typer.Option(
        "--workers/--no-workers", help="Also run both workers in this process (default: in embedded mode, "
        "without NEWSMON_MEMORY__URL, where only one process can open the memory, or without "
        "NEWSMON_KAFKA__BOOTSTRAP_SERVERS, where the broker is embedded).")] = None,
) -> None:
    """Serve the HTTP API (FastAPI under uvicorn) until SIGTERM: /v1/suggest, /v1/labels/..., /docs, /healthz,
    /readyz, /metrics. Label changes are published as LabelEvents to Kafka.

    Without NEWSMON_KAFKA__BOOTSTRAP_SERVERS it starts an embedded broker (its messages journalled in
    NEWSMON_HOME/broker and re-seeded at the next start) and runs both workers in this process: `newsmon memory
    build --calibrate` then `newsmon serve` is a working local service that a restart or a kill loses nothing of
    (label rules, renames, retirements, accepted articles and decisions)."""
    from newsmon.api.server import serve  # deferred: see the module docstring
    from newsmon.broker import kafka_or_embedded
    from newsmon.standalone import announced
    from newsmon.workers.base import StartupError

    s = settings_from_env()
    if host is not None:
        s.api.host = host
    if port is not None:
        s.api.port = port
    if s.api.token is None:
        err.print("[yellow]note:[/yellow] NEWSMON_API__TOKEN is not set: the API accepts every client")
    if not s.kafka.bootstrap_servers:
        if workers is False:
            fail("--no-workers needs a shared broker: set NEWSMON_KAFKA__BOOTSTRAP_SERVERS (without it `newsmon "
                 "serve` starts an embedded broker that only the workers of this process can reach)")
        workers = True
    check_settings(s)
    try:
        with kafka_or_embedded(s) as broker, announced(s, broker, "serve"):  # where `newsmon publish` finds it
            serve(s, workers, journal=broker.journal if broker is not None else None)
    except (StartupError, SettingError, RuntimeError) as exc:
        fail(str(exc), 1)


def demo_cmd(
    data: Annotated[Optional[Path], typer.Option(help="Corpus folder or JSONL (default: NEWSMON_DATA).")] = None,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Stream only the first N test articles.")] = None,
    show: Annotated[int, typer.Option(min=0, help="Print this many proposals in full.")] = 15,
    serve: Annotated[bool, typer.Option("--serve", help="Then keep the HTTP API, its moderation console (/console) "
                                        "and the workers running until Ctrl-C, the last --undecided test articles "
                                        "left for you to decide there.")] = False,
    undecided: Annotated[int, typer.Option(min=0, help="With --serve: test articles the demo's moderator leaves "
                                           "undecided, for you.")] = 10,
) -> None:
    """The main job on the embedded defaults: Tansu broker, embedded Qdrant, both workers, test articles in,
    proposals out, gold labels replayed as moderator decisions, metrics of the streamed proposals. With --serve
    the console stays open afterwards, with proposals left to decide."""
    from newsmon.demo import run_demo  # deferred: see the module docstring

    s = settings_from_env(data=data)
    s.worker.http_port = None
    check_settings(s)
    try:
        run_demo(s, s.data, limit=limit, show=show, serve=serve, undecided=undecided)
    except (FileNotFoundError, SettingError, RuntimeError) as exc:
        fail(str(exc), 1)
