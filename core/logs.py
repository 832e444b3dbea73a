"""Log formats: ``LOG_FORMAT=plain`` (readable lines, the default) or ``json`` (one JSON object per line).

One prompt crosses three processes (web, dispatcher, worker), so its log lines must be findable by their
fields, not by their wording: the run lifecycle logs its events with ``extra`` fields (``runs.events``) and
the request-id filter adds the current HTTP request's id (``core.request_id``). Both formatters write every
such field: the JSON one as keys, the plain one as ``key=value`` after the message. Stdlib only, so every
process (uvicorn, the dispatcher command, the Celery workers) can use it without a dependency.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from core.request_id import current_request_id

LOG_FORMATS = ("plain", "json")
PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",  # Python 3.12+
    "color_message",  # uvicorn's copy of the message with terminal colour codes
    "vllm_process_name",  # vLLM's record factory adds it to every record once vllm is imported (workers)
}
"""What every ``LogRecord`` has (and noise); anything else on a record came from ``extra`` (or a filter)."""

_LEADING_FIELDS = ("event", "run_id", "user_id", "tier", "deployment", "worker")
"""Shown first in plain lines, in this order, so the lines of one run line up."""

_BASE_KEYS = frozenset({"ts", "level", "logger", "message", "exception", "stack"})


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields ``record`` carries (its ``extra`` and what filters added), lifecycle fields first."""
    extra = {key: value for key, value in record.__dict__.items() if key not in _RECORD_ATTRIBUTES}
    leading = {key: extra.pop(key) for key in _LEADING_FIELDS if key in extra}
    return leading | extra


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (the HTTP request being served, ``core.request_id``) to records logged during one.

    Attached to the handler, so records of every logger get it; outside a request nothing is added.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        request_id = current_request_id()
        if request_id and not hasattr(record, "request_id"):
            record.__dict__["request_id"] = request_id
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (ISO-8601 UTC), ``level``, ``logger``, ``message``, ``exception`` and
    ``stack`` when there are any, then every structured field of the record. Values JSON cannot hold are
    written as their ``str``; a field may not replace one of the base keys."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            record.exc_text = record.exc_text or self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        for key, value in record_fields(record).items():
            if key not in _BASE_KEYS:
                entry[key] = value
        return json.dumps(entry, default=str, ensure_ascii=False)


class PlainFormatter(logging.Formatter):
    """``PLAIN_FORMAT`` followed by the record's structured fields as ``key=value`` (empty ones and values
    that are not plain scalars are left out), so ``make run``'s lines still say which run they are about."""

    def __init__(self, fmt: str = PLAIN_FORMAT, datefmt: str | None = None) -> None:
        super().__init__(fmt, datefmt)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        pairs = [
            f"{key}={value}"
            for key, value in record_fields(record).items()
            if isinstance(value, str | int | float) and value != ""
        ]
        return " ".join([line, *pairs]) if pairs else line


def logging_config(*, log_format: str, level: str) -> dict[str, Any]:
    """Django's ``LOGGING``: one stderr handler with the ``log_format`` formatter and the request-id filter.

    In ``json`` mode uvicorn's own loggers (its errors and access lines) go through that handler too, so every
    line a web process writes is JSON. Raises ``ValueError`` for an unknown format, when the settings load.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}, not {log_format!r}")
    config: dict[str, Any] = {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": RequestIdFilter}},
        "formatters": {"plain": {"()": PlainFormatter}, "json": {"()": JsonFormatter}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": log_format, "filters": ["request_id"]}},
        "root": {"handlers": ["console"], "level": level},
    }
    if log_format == "json":
        config["loggers"] = {
            name: {"handlers": ["console"], "propagate": False} for name in ("uvicorn", "uvicorn.access")
        }
    return config
