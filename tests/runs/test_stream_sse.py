"""SSE streaming end to end: two real uvicorn web processes, a simulated worker writing the Redis Stream.

The worker side uses the real ``RunStreamWriter`` and writes the final Message/Run rows as the worker does;
the clients are plain HTTP clients (httpx) reading ``text/event-stream``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token

from accounts.models import User
from bench.lib.processes import celery_worker_argv, child_env, free_port, wait_http
from chats.models import Message, MessageRole
from generation.worker_contract import cancel_key
from runs.models import FinishReason, Run, RunStatus
from runs.streaming.contract import RunStreamWriter, StreamEvent, run_terminal_event, stream_key
from tests.factories import RunFactory, UserFactory

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "artifacts" / "test-stream-logs"
pytestmark = pytest.mark.django_db(transaction=True)


# -- web processes ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def web(django_db_setup: None, django_db_blocker: Any) -> Iterator[tuple[str, str]]:
    """Two uvicorn processes on the test database and the test Redis db; yields their base URLs."""
    env = child_env(STREAM_STATUS_POLL_S="0.2", STREAM_KEEPALIVE_S="1", LOG_LEVEL="WARNING")
    LOGS.mkdir(parents=True, exist_ok=True)
    ports = (free_port(), free_port())
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "chatproject.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-access-log",
                "--timeout-graceful-shutdown",
                "2",
            ],
            cwd=ROOT,
            env=env,
            stdout=(LOGS / f"web-{port}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        for port in ports
    ]
    urls = tuple(f"http://127.0.0.1:{port}" for port in ports)
    try:
        for url, proc in zip(urls, procs, strict=True):
            wait_http(f"{url}/healthz", proc, timeout_s=60, what=f"uvicorn (logs: {LOGS})")
        yield urls[0], urls[1]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


# -- an SSE client -----------------------------------------------------------------------------------------


@dataclass
class SseEvent:
    event: str
    data: dict[str, Any]
    id: int | None


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
    import json

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
        fields: dict[str, str] = {}
        for line in resp.iter_lines():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: no end after {timeout} s; got {[e.event for e in events]}")
            if line == "":
                if "event" in fields:
                    events.append(
                        SseEvent(
                            event=fields["event"],
                            data=json.loads(fields.get("data") or "{}"),
                            id=int(fields["id"]) if "id" in fields else None,
                        )
                    )
                    if stop_after is not None and len(events) >= stop_after:
                        break
                fields = {}
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            fields[name] = fields[name] + "\n" + value if name in fields and name == "data" else value
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


@pytest.fixture
def owner() -> User:
    return cast(User, UserFactory.create())


def make_run(owner: User) -> Run:
    return cast(Run, RunFactory.create(chat__owner=owner, status=RunStatus.QUEUED))


@pytest.fixture
def auth(owner: User) -> dict[str, str]:
    return {"Authorization": f"Token {Token.objects.create(user=owner).key}"}


def stream_url(base: str, run: Run) -> str:
    return f"{base}/api/runs/{run.pk}/stream"


# -- tests -----------------------------------------------------------------------------------------------------


def test_resume_on_the_other_process_while_live_is_exact(
    web: tuple[str, str], owner: User, auth: dict[str, str]
) -> None:
    """Read part of a live stream from A, hang up, resume on B with Last-Event-ID: nothing lost or doubled."""
    a, b = web
    rng = random.Random(4)
    for trial in range(12):
        run = make_run(owner)
        chunks = make_chunks(rng, rng.randint(20, 60))
        worker = in_thread(simulate_worker, run, chunks, delay_s=0.004)
        worker.start()
        try:
            cut = rng.randint(1, len(chunks))
            status, first = read_events(stream_url(a, run), headers=auth, stop_after=cut)
            assert status == 200 and first, trial
            assert Run.objects.get(pk=run.pk).status != RunStatus.CANCELLED  # hanging up is not a cancel
            status, rest = read_events(stream_url(b, run), headers=auth, last_event_id=last_id(first))
        finally:
            worker.join()
        if first[-1].event == StreamEvent.DONE:  # deltas coalesce: the cut fell after the end
            assert (status, rest) == (204, [])
        else:
            assert status == 200 and rest[-1].event == StreamEvent.DONE
        ids = [e.id for e in first + rest if e.id is not None]
        assert ids == sorted(set(ids)), "ids strictly increase across the reconnect"
        answer = Run.objects.select_related("assistant_message").get(pk=run.pk).assistant_message
        assert answer is not None
        assert reassemble(first + rest) == answer.content == "".join(chunks)
        assert not Run.objects.filter(pk=run.pk, status=RunStatus.CANCELLED).exists()
        assert not _redis().exists(cancel_key(run.pk))


def _redis() -> Any:
    from core.redis_client import get_redis

    return get_redis()


def test_resume_after_the_run_finished_every_cut_point(web: tuple[str, str], owner: User, auth: dict[str, str]) -> None:
    a, b = web
    rng = random.Random(7)
    run = make_run(owner)
    chunks = make_chunks(rng, 30)
    simulate_worker(run, chunks)
    status, full = read_events(stream_url(a, run), headers=auth)
    assert status == 200 and full[-1].event == StreamEvent.DONE
    assert full[-1].data["message_id"] == Run.objects.get(pk=run.pk).assistant_message_id
    for cut in range(1, len(full)):
        _, first = read_events(stream_url(a, run), headers=auth, stop_after=cut)
        _, rest = read_events(stream_url(b, run), headers=auth, last_event_id=last_id(first))
        assert reassemble(first + rest) == "".join(chunks), cut
        assert rest[-1].event == StreamEvent.DONE
    # A replay sends the buffered deltas coalesced, so the cuts above are few: resume from every id the
    # worker wrote (seq 1 is the status event, seq k >= 2 is chunks[k - 2]), alternating processes.
    for seq in range(0, len(chunks) + 2):
        _, rest = read_events(stream_url((a, b)[seq % 2], run), headers=auth, last_event_id=seq)
        assert "".join(chunks[: max(seq - 1, 0)]) + reassemble(rest) == "".join(chunks), seq
        assert [e.event for e in rest][-1] == StreamEvent.DONE
    # Resuming at the terminal event: nothing left, and 204 tells EventSource to stop reconnecting.
    status, events = read_events(stream_url(b, run), headers=auth, last_event_id=last_id(full))
    assert (status, events) == (204, [])


def test_resume_after_the_redis_buffer_expired_uses_postgres(
    web: tuple[str, str], owner: User, auth: dict[str, str]
) -> None:
    a, b = web
    rng = random.Random(11)
    run = make_run(owner)
    chunks = make_chunks(rng, 25)
    simulate_worker(run, chunks)
    for cut in (1, 3, 10, 20):
        _redis().delete(stream_key(run.pk))
        refill = RunStreamWriter(run.pk)  # the buffer as it was while the client read the first part
        for chunk in chunks:
            refill.append(StreamEvent.DELTA, {"text": chunk})
        _, first = read_events(stream_url(a, run), headers=auth, stop_after=cut)
        _redis().delete(stream_key(run.pk))
        status, rest = read_events(stream_url(b, run), headers=auth, last_event_id=last_id(first))
        assert status == 200
        assert [e.event for e in rest] == ["reset", "delta", "done"]
        assert all(e.id is not None and e.id > last_id(first) for e in rest)
        assert reassemble(first + rest) == "".join(chunks)
    # A fresh stream long after the run ended: the whole message as one delta, then done.
    status, events = read_events(stream_url(a, run), headers=auth)
    assert status == 200
    assert [(e.event, e.id) for e in events] == [("delta", 1), ("done", 2)]
    assert events[0].data == {"text": "".join(chunks)}
    assert events[1].data["finish_reason"] == "stop"


def test_query_parameter_form_of_last_event_id(web: tuple[str, str], owner: User, auth: dict[str, str]) -> None:
    a, b = web
    run = make_run(owner)
    chunks = make_chunks(random.Random(3), 20)
    simulate_worker(run, chunks)
    _, first = read_events(stream_url(a, run), headers=auth, stop_after=7)
    _, rest = read_events(stream_url(b, run), headers=auth, params={"lastEventId": str(last_id(first))})
    assert reassemble(first + rest) == "".join(chunks)
    _, again = read_events(stream_url(b, run), headers=auth, params={"lastEventId": f"run-{run.pk}:{last_id(first)}"})
    assert [e.id for e in again] == [e.id for e in rest]


def test_only_the_owner_can_read_the_stream(web: tuple[str, str], owner: User, auth: dict[str, str]) -> None:
    a, _ = web
    run = make_run(owner)
    simulate_worker(run, ["secret", " answer"])
    stranger = cast(User, UserFactory.create())
    stranger_auth = {"Authorization": f"Token {Token.objects.create(user=stranger).key}"}
    assert read_events(stream_url(a, run), headers=stranger_auth) == (404, [])
    assert read_events(f"{a}/api/runs/999999/stream", headers=auth) == (404, [])
    assert read_events(stream_url(a, run), headers={})[0] == 401
    assert read_events(stream_url(a, run), headers={"Authorization": "Token nope"})[0] == 401
    # The browser's EventSource: the session cookie.
    browser = Client()
    browser.force_login(owner)
    cookie = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"}
    status, events = read_events(stream_url(a, run), headers=cookie)
    assert status == 200 and reassemble(events) == "secret answer"
    browser.force_login(stranger)
    cookie = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"}
    assert read_events(stream_url(a, run), headers=cookie)[0] == 404
    assert read_events(stream_url(a, run), headers=auth, last_event_id=None, params={"lastEventId": "x"})[0] == 400


def test_a_queued_run_gets_status_events_until_it_starts(
    web: tuple[str, str], owner: User, auth: dict[str, str]
) -> None:
    a, _ = web
    run = make_run(owner)
    chunks = ["queued", " then", " served"]

    def start_later() -> None:
        time.sleep(0.8)
        simulate_worker(run, chunks, delay_s=0.01)

    worker = in_thread(start_later)
    started = time.monotonic()
    worker.start()
    try:
        status, events = read_events(stream_url(a, run), headers=auth)
    finally:
        worker.join()
    assert status == 200
    assert events[0].event == StreamEvent.STATUS and events[0].data == {"status": "queued"} and events[0].id is None
    assert time.monotonic() - started >= 0.8
    assert reassemble(events) == "queued then served"
    assert events[-1].event == StreamEvent.DONE


def test_a_run_cancelled_while_queued_ends_with_done_from_postgres(
    web: tuple[str, str], owner: User, auth: dict[str, str]
) -> None:
    """No worker ever writes this run's stream: the status poll notices the terminal state in Postgres."""
    _, b = web
    run = make_run(owner)

    def cancel_later() -> None:
        time.sleep(0.5)
        Run.objects.filter(pk=run.pk).update(
            status=RunStatus.CANCELLED, finish_reason=FinishReason.CANCELLED, finished_at=timezone.now()
        )

    canceller = in_thread(cancel_later)
    canceller.start()
    try:
        status, events = read_events(stream_url(b, run), headers=auth)
    finally:
        canceller.join()
    assert status == 200
    assert [e.event for e in events] == ["status", "done"]
    assert events[-1].data["finish_reason"] == "cancelled" and events[-1].data["message_id"] is None


def test_many_clients_on_one_process_each_get_the_whole_stream(
    web: tuple[str, str], owner: User, auth: dict[str, str]
) -> None:
    """Fan-out: clients joining at different points of one live run, all served by one process's reader."""
    a, _ = web
    run = make_run(owner)
    chunks = make_chunks(random.Random(5), 80)
    results: list[str] = []

    def client(delay: float) -> None:
        time.sleep(delay)
        _, events = read_events(stream_url(a, run), headers=auth)
        results.append(reassemble(events))

    clients = [in_thread(client, i * 0.05) for i in range(6)]
    for thread in clients:
        thread.start()
    simulate_worker(run, chunks, delay_s=0.005)
    for thread in clients:
        thread.join()
    assert results == ["".join(chunks)] * 6


# -- through the real worker path ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def worker(web: tuple[str, str], django_db_blocker: Any) -> Iterator[None]:
    """A Celery worker on the simulated engine (and the dispatcher), on the same database and Redis."""
    from accounts.models import Tier
    from accounts.tier_defaults import seed_default_tiers

    with django_db_blocker.unblock():
        seed_default_tiers(Tier)  # the dispatcher reads the tiers once, at start
    env = child_env(
        ENGINE_BACKEND="simulated",
        SIM_STEP_BASE_S="0.03",
        SIM_STEP_PER_SEQ_S="0.0",
        SIM_OUTPUT_TOKENS="60",
        STREAM_FLUSH_MAX_TOKENS="2",
    )
    LOGS.mkdir(parents=True, exist_ok=True)
    argv = {
        "worker": celery_worker_argv(name=f"sse-test-{os.getpid()}@%h", concurrency=4),
        "dispatcher": [sys.executable, str(ROOT / "manage.py"), "run_dispatcher"],
    }
    procs = {
        name: subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=(LOGS / f"{name}.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for name, cmd in argv.items()
    }
    try:
        deadline = time.monotonic() + 90
        while "ready." not in (LOGS / "worker.log").read_text(errors="replace"):
            if procs["worker"].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start; see {LOGS / 'worker.log'}")
            time.sleep(0.3)
        yield None
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def test_resume_across_processes_through_the_real_worker(
    web: tuple[str, str], worker: None, owner: User, auth: dict[str, str]
) -> None:
    """POST a prompt, read part of the answer from A while the worker generates it, hang up, resume on B."""
    a, b = web
    chat = httpx.post(f"{a}/api/chats", headers=auth, json={}, timeout=30)
    assert chat.status_code == 201, chat.text
    posted = httpx.post(
        f"{a}/api/chats/{chat.json()['id']}/messages", headers=auth, json={"content": "Tell me a story."}, timeout=60
    )
    assert posted.status_code == 202, posted.text
    run_id = posted.json()["run"]["id"]
    url = (
        f"{a}{posted.json()['stream_url']}"
        if posted.json()["stream_url"].startswith("/")
        else posted.json()["stream_url"]
    )
    _, first = read_events(url, headers=auth, stop_after=4, timeout=60)
    assert any(e.event == StreamEvent.DELTA for e in first), first
    status, rest = read_events(f"{b}/api/runs/{run_id}/stream", headers=auth, last_event_id=last_id(first), timeout=60)
    assert status == 200 and rest[-1].event == StreamEvent.DONE
    run = Run.objects.select_related("assistant_message").get(pk=run_id)
    assert run.status == RunStatus.DONE and run.assistant_message is not None
    assert rest[-1].data["message_id"] == run.assistant_message_id
    assert reassemble(first + rest) == run.assistant_message.content != ""
