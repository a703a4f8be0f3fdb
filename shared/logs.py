"""structlog set-up: readable console lines for people, JSON lines for production log pipelines."""

from __future__ import annotations

import logging
import sys
import threading
import time

import structlog


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time of the call (test runners swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(fmt: str = "console", level: str = "INFO") -> None:
    """Route structlog (and the stdlib loggers of our libraries) to stderr as ``console`` or ``json``."""
    lvl = getattr(logging, level.upper(), logging.INFO)
    logging.basicConfig(level=lvl, stream=sys.stderr, format="%(message)s")
    for noisy in ("httpx", "urllib3", "transformers", "optuna"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    renderer = structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(
        colors=sys.stderr.isatty())
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),
        cache_logger_on_first_use=False,
    )


#: stdlib level -> structlog method name (librdkafka's syslog levels arrive mapped to these by confluent-kafka)
_LEVEL_METHODS = {logging.CRITICAL: "critical", logging.ERROR: "error", logging.WARNING: "warning",
                  logging.INFO: "info", logging.DEBUG: "debug"}


class RateLimitedLogBridge:
    """A ``logging.Logger`` stand-in that sends a library's log lines to structlog, with levels, at most
    ``burst`` lines per ``window_s`` seconds per (level, facility); the lines dropped are counted in the next
    line let through (``suppressed=N``).

    Made for confluent-kafka's ``logger`` client option: librdkafka calls ``log(level, "%s [%s] %s", fac,
    client name, message)`` with its syslog level mapped to a stdlib one, from the client's ``poll``. Without
    it librdkafka writes every line to stderr itself (about 290 ``FAIL ... Connection refused`` lines in 15 s
    against a broker that is down).

    Args:
        name: the structlog logger name (``kafka``); burst: lines per window and key; window_s: seconds.
    """

    def __init__(self, name: str = "kafka", burst: int = 3, window_s: float = 30.0):
        self._log = structlog.get_logger(name)
        self.burst, self.window_s = burst, window_s
        self._windows: dict[tuple[int, str], list] = {}  # key -> [window start, lines let through, suppressed]
        self._lock = threading.Lock()

    def log(self, level: int, msg: str, *args) -> None:
        """Format ``msg % args`` like the stdlib and emit it unless its key is over the limit."""
        text = msg % args if args else str(msg)
        facility = text.split(" ", 1)[0] if args else ""
        key = (level, facility)
        now = time.monotonic()
        with self._lock:
            win = self._windows.get(key)
            if win is None or now - win[0] >= self.window_s:
                suppressed = win[2] if win else 0
                win = self._windows[key] = [now, 0, 0]
            else:
                suppressed = 0
            if win[1] >= self.burst:
                win[2] += 1
                return
            win[1] += 1
        method = _LEVEL_METHODS.get(level, "warning" if level > logging.INFO else "debug")
        extra = {"suppressed": suppressed} if suppressed else {}
        getattr(self._log, method)(text, **extra)

    # the rest of the logging.Logger surface a library may touch
    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 - logging.Logger's name
        return True
