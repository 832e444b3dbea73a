"""What the SSE stream tests share: an SSE client, a simulated worker writing a run's Redis Stream, and the runs.

The worker side uses the real ``RunStreamWriter`` and writes the final Message/Run rows as the worker does;
the client is a plain HTTP client (httpx) reading ``text/event-stream``. The two web processes they read from are
the ``web`` fixture (``tests/runs/conftest.py``).
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
from django.db import connection
from django.utils import timezone

from accounts.models import User
from chats.models import Message, MessageRole
from runs.models import FinishReason, Run, RunStatus
from runs.streaming.contract import RunStreamWriter, StreamEvent, run_terminal_event
from tests.factories import RunFactory

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "artifacts" / "test-stream-logs"


# -- an SSE client -----------------------------------------------------------------------------------------


@dataclass
class SseEvent:
    event: str
    data: dict[str, Any]
    id: int | None


def iter_events(resp: httpx.Response, *, deadline: float) -> Iterator[SseEvent]:
    """The events of an open ``text/event-stream`` response as they arrive (comments skipped), until it ends."""
    import json

    fields: dict[str, str] = {}
    for line in resp.iter_lines():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{resp.url}: no end in time")
        if line == "":
            if "event" in fields:
                yield SseEvent(
                    event=fields["event"],
                    data=json.loads(fields.get("data") or "{}"),
                    id=int(fields["id"]) if "id" in fields else None,
                )
            fields = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        fields[name] = fields[name] + "\n" + value if name in fields and name == "data" else value


def read_events(
    url: str,
    *,
    headers: dict[str, str],
    last_event_id: int | None = None,
    stop_after: int | None = None,
    params: dict[str, str] | None = None,
    timeout: float = 20.0,
) -> tuple[int, list[SseEvent]]:
    """Reads a stream until it ends (or ``stop_after`` events, then hangs up). Returns (status, events)."""
    headers = dict(headers)
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    events: list[SseEvent] = []
    deadline = time.monotonic() + timeout  # keep-alive comments would renew a per-read timeout forever
    with httpx.Client(timeout=timeout) as client, client.stream("GET", url, headers=headers, params=params) as resp:
        if resp.status_code != 200:
            return resp.status_code, events
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-request-id"]  # the stream route goes through the request-id middleware too
        for event in iter_events(resp, deadline=deadline):
            events.append(event)
            if stop_after is not None and len(events) >= stop_after:
                break
    return 200, events


def reassemble(events: list[SseEvent], text: str = "") -> str:
    for event in events:
        if event.event == StreamEvent.RESET:
            text = ""
        elif event.event == StreamEvent.DELTA:
            text += event.data["text"]
    return text


def last_id(events: list[SseEvent], default: int = 0) -> int:
    ids = [e.id for e in events if e.id is not None]
    return ids[-1] if ids else default


# -- a simulated worker ----------------------------------------------------------------------------------------

PIECES = [
    "Hello",
    " world",
    ",",
    " naïve",
    " café",
    " 🚀",
    "\n",
    "line two",
    " with  spaces",
    "\n\n",
    '{"json": 1}',
    " data: not a field",
    " end",
]


def make_chunks(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(PIECES) for _ in range(n)]


def finish_run(run: Run, text: str, *, status: str = RunStatus.DONE) -> Run:
    message = Message.objects.create(chat=run.chat, role=MessageRole.ASSISTANT, content=text, token_count=len(text))
    run.assistant_message = message
    run.status = status
    run.finish_reason = FinishReason.STOP if status == RunStatus.DONE else FinishReason.CANCELLED
    run.input_tokens, run.output_tokens = 12, len(text)
    run.finished_at = timezone.now()
    run.save()
    return run


def simulate_worker(run: Run, chunks: list[str], *, delay_s: float = 0.0) -> None:
    """Writes the run's stream like the worker (status, deltas, message row, terminal event)."""
    Run.objects.filter(pk=run.pk).update(status=RunStatus.STREAMING, started_at=timezone.now())
    writer = RunStreamWriter(run.pk)
    writer.append(StreamEvent.STATUS, {"status": "streaming"})
    for chunk in chunks:
        writer.append(StreamEvent.DELTA, {"text": chunk})
        if delay_s:
            time.sleep(delay_s)
    run.refresh_from_db()
    finish_run(run, "".join(chunks))
    event, data = run_terminal_event(run)
    writer.append(event, data)


def in_thread(target: Any, *args: Any, **kwargs: Any) -> threading.Thread:
    """A thread that closes its own database connection (the test database is dropped at the end)."""

    def body() -> None:
        try:
            target(*args, **kwargs)
        finally:
            connection.close()

    return threading.Thread(target=body)


def start_web(port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A uvicorn web process of the project on ``port`` (its log in :data:`LOGS`)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "uvicorn", "chatproject.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(
        [*argv, "--no-access-log", "--timeout-graceful-shutdown", "2"],
        cwd=ROOT,
        env=env,
        stdout=(LOGS / f"web-{port}.log").open("wb"),
        stderr=subprocess.STDOUT,
    )


def stop_all(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def make_run(owner: User) -> Run:
    return cast(Run, RunFactory.create(chat__owner=owner, status=RunStatus.QUEUED))


def stream_url(base: str, run: Run) -> str:
    return f"{base}/api/runs/{run.pk}/stream"
