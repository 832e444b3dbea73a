"""``manage.py worker_drain`` (a worker pod's preStop hook): the worker stops consuming and its tasks end first."""

from __future__ import annotations

import os
from collections.abc import Iterator
from io import StringIO

import pytest
from celery import current_app
from django.core.management import call_command

from tests.inference_workers.test_redelivery import Worker

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.live]


@pytest.fixture
def worker() -> Iterator[Worker]:
    started = Worker("drain", output_tokens=4)
    try:
        started.wait_log(r"ready\.", timeout=120)
        yield started
    finally:
        started.stop()


def test_a_drained_worker_consumes_no_queue_and_reports_no_task_in_flight(worker: Worker) -> None:
    name = f"drain-{os.getpid()}@redelivery"
    before = current_app.control.inspect(destination=[name], timeout=5.0).active_queues() or {}
    assert {q["name"] for q in before.get(name, [])} >= {"pro", "plus", "free", "batch"}
    out = StringIO()
    call_command("worker_drain", worker=name, timeout=30, poll=0.5, stdout=out)
    assert f"{name} stopped consuming" in out.getvalue()
    assert f"{name} has no task in flight" in out.getvalue()
    after = current_app.control.inspect(destination=[name], timeout=5.0).active_queues() or {}
    assert after.get(name) == []


def test_an_absent_worker_is_reported_and_the_hook_still_succeeds() -> None:
    out = StringIO()
    call_command("worker_drain", worker="nobody@nowhere", timeout=0, stdout=out)
    assert "nobody@nowhere consumes nothing (or did not answer)" in out.getvalue()
