"""The daemon's logs: JSON lines (for collectors) or text, with the run's context on every line.

A run binds its table, action, instant and run id with :func:`run_context`; every record
logged in that thread while it is bound — by the runner, by core's table services, by any
library — carries those fields, so one run's lines can be found with one filter.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import sys
import threading
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

CONTEXT_FIELDS = ("replica", "table", "action", "instant", "run_id")

_context: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("lakeward_log", default=None)


@contextlib.contextmanager
def run_context(**fields: str | None) -> Iterator[None]:
    """Bind fields (table=..., action=..., instant=..., run_id=...) to every log record of this thread."""
    merged = dict(_context.get() or {})
    merged.update({k: v for k, v in fields.items() if v is not None})
    token = _context.set(merged)
    try:
        yield
    finally:
        _context.reset(token)


class _ContextFilter(logging.Filter):
    def __init__(self, replica: str):
        super().__init__()
        self.replica = replica

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _context.get() or {}
        for name in CONTEXT_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, fields.get(name, self.replica if name == "replica" else None))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, context, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        progress = getattr(record, "progress", None)
        if progress is not None:
            entry["progress"] = progress
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """Human-readable lines with the run context in brackets."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ctx = " ".join(f"{n}={getattr(record, n)}" for n in CONTEXT_FIELDS[1:] if getattr(record, n, None))
        return f"{line} [{ctx}]" if ctx else line


def configure_logging(fmt: str = "json", level: str = "INFO", replica: str = "", stream: Any = None) -> None:
    """Route the root logger to one stream handler in the chosen format (replacing earlier handlers)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_ContextFilter(replica))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Libraries that are chatty at INFO: keep their warnings only.
    for name in ("kazoo", "py4j", "apscheduler.executors", "uvicorn.access", "httpx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # An uncaught error (any thread, or the program itself) becomes one record in that format, not a
    # plain multi-line traceback among the lines a collector parses.
    threading.excepthook = _log_uncaught_in_thread
    sys.excepthook = _log_uncaught


_uncaught = logging.getLogger("lakeward.uncaught")


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    name = args.thread.name if args.thread is not None else "unknown"
    _uncaught.error(
        "thread %s died of an uncaught exception", name, exc_info=(args.exc_type, args.exc_value, args.exc_traceback)
    )


def _log_uncaught(kind: type[BaseException], value: BaseException, traceback: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, traceback)
        return
    _uncaught.critical("the program died of an uncaught exception", exc_info=(kind, value, traceback))


__all__ = ["CONTEXT_FIELDS", "JsonFormatter", "TextFormatter", "configure_logging", "run_context"]
