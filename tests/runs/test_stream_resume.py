"""Resuming a run's SSE stream with ``Last-Event-ID`` across two real uvicorn web processes: while the run is live,
after it finished, after the Redis buffer expired (from Postgres), in the query-parameter form, and through the real
worker path (a Celery worker on the simulated engine and the dispatcher).

The shared client and simulated worker are in ``tests/runs/stream_helpers.py``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from accounts.models import User
from bench.lib.processes import celery_worker_argv, child_env
from generation.worker_contract import cancel_key
from runs.models import Run, RunStatus
from runs.streaming.contract import RunStreamWriter, StreamEvent, stream_key
from tests.runs.stream_helpers import (
    LOGS,
    ROOT,
    in_thread,
    last_id,
    make_chunks,
    make_run,
    read_events,
    reassemble,
    simulate_worker,
    stream_url,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


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
