"""What each client of a run's SSE stream gets, on two real uvicorn web processes: only the owner reads it, a
queued run sends status events until it starts, a run cancelled while queued ends from Postgres, and many clients
on one process each get the whole stream.

The shared client and simulated worker are in ``tests/runs/stream_helpers.py``.
"""

from __future__ import annotations

import random
import time
from typing import cast

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token

from accounts.models import User
from runs.models import FinishReason, Run, RunStatus
from runs.streaming.contract import StreamEvent
from tests.factories import UserFactory
from tests.runs.stream_helpers import (
    in_thread,
    make_chunks,
    make_run,
    read_events,
    reassemble,
    simulate_worker,
    stream_url,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


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
