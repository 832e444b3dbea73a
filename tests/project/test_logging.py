"""Log formats (``core.logs``): JSON lines with the record's fields, plain lines that still show them, and
``LOG_FORMAT`` as the settings read it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.logs import JsonFormatter, PlainFormatter, RequestIdFilter, logging_config
from core.request_id import request_id_scope

ROOT = Path(__file__).resolve().parents[2]


def make_record(msg: str = "run 12 admitted", *, exc: bool = False, **extra: object) -> logging.LogRecord:
    """A record as ``logger.info(msg, extra=extra)`` (or ``logger.exception``) makes it."""
    exc_info = None
    if exc:
        try:
            1 / 0  # noqa: B018 - the exception under test
        except ZeroDivisionError:
            exc_info = sys.exc_info()
    logger = logging.getLogger("runs.events")
    return logger.makeRecord(logger.name, logging.INFO, __file__, 1, msg, (), exc_info, extra=extra)


def test_json_lines_hold_the_base_keys_and_every_field() -> None:
    record = make_record(event="admitted", run_id=12, user_id=3, tier="pro", worker="", when=datetime.now(tz=UTC))

    line = JsonFormatter().format(record)

    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "INFO" and entry["logger"] == "runs.events" and entry["message"] == "run 12 admitted"
    ts = datetime.fromisoformat(entry["ts"])
    assert ts.utcoffset() is not None and ts.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert abs(ts.timestamp() - record.created) < 0.001
    assert (entry["event"], entry["run_id"], entry["user_id"], entry["tier"], entry["worker"]) == (
        "admitted",
        12,
        3,
        "pro",
        "",
    )
    assert isinstance(entry["when"], str)  # what JSON cannot hold is written as its str
    assert "exception" not in entry and "args" not in entry and "msecs" not in entry


def test_json_lines_carry_the_exception_on_one_line() -> None:
    line = JsonFormatter().format(make_record("refund failed", exc=True, run_id=5))
    assert "\n" not in line
    entry = json.loads(line)
    assert "Traceback" in entry["exception"] and "ZeroDivisionError" in entry["exception"]
    assert entry["run_id"] == 5


def test_a_field_cannot_replace_a_base_key() -> None:
    entry = json.loads(JsonFormatter().format(make_record(level="forged", ts="then", logger="x")))
    assert (entry["level"], entry["logger"]) == ("INFO", "runs.events")
    assert entry["ts"] != "then"


def test_plain_lines_append_the_fields_lifecycle_first() -> None:
    record = make_record(reason="tokens", worker="", run_id=None, tier="free", event="refused", user_id=3)
    line = PlainFormatter().format(record)
    assert line.endswith(" INFO runs.events run 12 admitted event=refused user_id=3 tier=free reason=tokens")


def test_plain_lines_of_other_records_are_unchanged() -> None:
    line = PlainFormatter().format(logging.makeLogRecord({"name": "celery", "msg": "ready.", "levelname": "INFO"}))
    assert line.endswith(" INFO celery ready.")


def test_the_request_id_filter_adds_the_current_id_only_during_a_request() -> None:
    outside = make_record()
    RequestIdFilter().filter(outside)
    assert not hasattr(outside, "request_id")
    with request_id_scope("req-1"):
        inside = make_record()
        assert RequestIdFilter().filter(inside)
    assert json.loads(JsonFormatter().format(inside))["request_id"] == "req-1"


def test_an_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="LOG_FORMAT must be one of plain, json"):
        logging_config(log_format="xml", level="INFO")


def _process_log(log_format: str | None) -> subprocess.CompletedProcess[str]:
    """A fresh process on the project's settings with ``LOG_FORMAT`` (None: unset): what it writes to stderr."""
    code = (
        "import django, logging; django.setup(); "
        "logging.getLogger('runs.events').info('run 7 queued', extra={'event': 'queued', 'run_id': 7}); "
        "logging.getLogger('uvicorn.error').info('Started server process')"
    )
    env = {k: v for k, v in os.environ.items() if k != "LOG_FORMAT"} | {
        "DJANGO_SETTINGS_MODULE": "chatproject.settings.test"
    }
    if log_format is not None:
        env["LOG_FORMAT"] = log_format
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_log_format_json_makes_every_line_of_a_process_json() -> None:
    done = _process_log("json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(e["logger"], e["message"]) for e in lines] == [
        ("runs.events", "run 7 queued"),
        ("uvicorn.error", "Started server process"),
    ]
    assert (lines[0]["event"], lines[0]["run_id"]) == ("queued", 7)


def test_log_format_plain_is_the_default_and_a_typo_stops_the_process() -> None:
    done = _process_log(None)
    assert done.returncode == 0, done.stderr
    assert "INFO runs.events run 7 queued event=queued run_id=7" in done.stderr
    failed = _process_log("jsn")
    assert failed.returncode != 0 and "LOG_FORMAT must be one of plain, json, not 'jsn'" in failed.stderr
