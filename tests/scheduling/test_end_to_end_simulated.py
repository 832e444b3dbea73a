"""A prompt through admission, the scheduler queue, the dispatcher and the worker's generate path on the
simulated engine (Celery's hop replaced by a direct call), to the refund when the run ends."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from accounts.limits import user_limits
from accounts.models import UsageDay, User
from inference_workers.runtime import WorkerRuntime
from inference_workers.services import generate_run
from runs.dispatcher_wiring import build_dispatcher
from runs.models import Run, RunStatus
from runs.queueing import get_scheduler_store
from runs.quota import bucket_limits, get_token_buckets
from scheduling.policy import QueuedRun
from tests.factories import ChatFactory
from tests.inference_workers.conftest import sim_runtime  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)


def test_prompt_to_done_through_the_dispatcher(api: APIClient, user: User, sim_runtime: WorkerRuntime) -> None:  # noqa: F811
    chat = ChatFactory.create(owner=user)
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hello", "max_tokens": 100}, format="json")
    assert resp.status_code == 202, resp.content
    run_id = resp.json()["run"]["id"]
    limits = bucket_limits(user_limits(user=user))
    full = limits.bucket_capacity_tokens
    assert get_token_buckets().bucket_tokens(user_id=user.pk, limits=limits) < full - 100

    sim_runtime.beat()  # a fresh heartbeat: the gate sees an idle engine
    dispatcher = build_dispatcher()
    sent: list[int] = []

    def send(run: QueuedRun) -> None:
        sent.append(run.run_id)
        generate_run(run_id=run.run_id, runtime=sim_runtime)

    dispatcher.send = send
    dispatcher.send_batch = None  # each run through this test's send, not Celery
    dispatcher.tick()
    assert dispatcher.last_load is not None and dispatcher.last_load.fresh
    assert sent == [run_id]

    run = Run.objects.get(pk=run_id)
    assert run.status == RunStatus.DONE and run.output_tokens == 12
    # 88 of the 100 reserved output tokens came back; the prompt's tokens and the 12 produced stay spent.
    prompt_tokens = run.reserved_tokens - 100
    assert get_token_buckets().bucket_tokens(user_id=user.pk, limits=limits) == pytest.approx(
        full - prompt_tokens - 12, abs=5
    )
    assert get_token_buckets().reservations(user_id=user.pk) == {}
    store = get_scheduler_store()
    assert store.in_flight(now=9e9, ttl_s=1e12).total == 0
    assert store.take_refunds() == [("free", user.pk, 88.0)]
    usage = UsageDay.objects.get(user=user)
    assert (usage.runs, usage.output_tokens) == (1, 12) and usage.input_tokens == run.input_tokens > 0
