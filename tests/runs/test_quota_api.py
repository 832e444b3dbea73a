"""The quota through the API: 429 with Retry-After and nothing written; refunds, usage, queue positions."""

from __future__ import annotations

import json

import pytest
import redis
from django.conf import settings
from rest_framework.test import APIClient

from accounts.limits import user_limits
from accounts.models import UsageDay, User, UserLimitOverride
from chats.models import Message
from generation.result import EngineFinishReason, GenerationResult
from runs.dispatcher_wiring import build_dispatcher
from runs.lifecycle import run_fail, run_finish, run_mark_streaming
from runs.models import Run, RunStatus
from runs.queueing import get_scheduler_store
from runs.quota import bucket_limits, get_token_buckets
from runs.routing import Dispatch
from runs.selectors import run_queue_positions
from runs.services import run_cancel
from runs.streaming.contract import read_after
from scheduling.token_bucket import run_member
from tests.factories import ChatFactory

pytestmark = pytest.mark.django_db(transaction=True)


def post(api: APIClient, user: User, content: str = "hello there", **body) -> tuple[int, dict, dict]:
    chat = ChatFactory.create(owner=user)
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": content, **body}, format="json")
    return resp.status_code, resp.json(), dict(resp.headers)


def bucket(user: User) -> float:
    return get_token_buckets().bucket_tokens(user_id=user.pk, limits=bucket_limits(user_limits(user=user)))


def test_token_budget_refusal_is_a_429_with_retry_after_and_writes_nothing(api: APIClient, user: User) -> None:
    UserLimitOverride.objects.create(user=user, bucket_capacity_tokens=300, bucket_refill_per_s=2.0)
    status, body, _ = post(api, user, max_tokens=200)
    assert status == 202, body
    messages, runs = Message.objects.count(), Run.objects.count()
    status, body, headers = post(api, user, max_tokens=200)
    assert status == 429
    assert body["error"]["code"] == "limit_tokens"
    assert "Token budget" in body["error"]["message"]
    # ~100 tokens left, 200+ needed at 2 tokens/s: about 50 s.
    assert 40 <= int(headers["Retry-After"]) <= 60
    assert (Message.objects.count(), Run.objects.count()) == (messages, runs)
    assert get_scheduler_store().queue_depth("free") == 1


def test_concurrency_cap_through_the_api(api: APIClient, user: User) -> None:
    UserLimitOverride.objects.create(user=user, max_concurrent_runs=2)
    assert post(api, user)[0] == 202
    assert post(api, user)[0] == 202
    status, body, headers = post(api, user)
    assert status == 429 and body["error"]["code"] == "limit_concurrency"
    assert "Too many runs" in body["error"]["message"] and int(headers["Retry-After"]) >= 1
    # Cancelling a queued run frees its slot at once (and it leaves the scheduler queue).
    run = Run.objects.filter(user=user).earliest("id")
    run_cancel(run=run)
    assert get_scheduler_store().queue_depth("free") == 1
    assert post(api, user)[0] == 202


def test_a_prompt_bigger_than_the_bucket_is_a_400(api: APIClient, user: User) -> None:
    UserLimitOverride.objects.create(user=user, bucket_capacity_tokens=50)
    status, body, _ = post(api, user, max_tokens=100)
    assert status == 400 and body["error"]["code"] == "prompt_too_large"
    assert Run.objects.count() == 0


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [(redis.TimeoutError("paused"), 503, "redis_unavailable"), (redis.ResponseError("OOM"), 503, "unavailable")],
)
def test_admission_that_fails_in_redis_is_a_503_with_the_configured_retry_and_writes_nothing(
    api: APIClient, user: User, monkeypatch: pytest.MonkeyPatch, error: redis.RedisError, status: int, code: str
) -> None:
    """Redis not answering during admission is the outage answer every endpoint gives (its code, the configured
    ``Retry-After``); Redis answering with an error is a 503 of admission's own, with the same ``Retry-After``."""

    def admit(**_: object) -> None:
        raise error

    monkeypatch.setattr(get_token_buckets(), "admit", admit)
    messages = Message.objects.count()
    got, body, headers = post(api, user)
    assert (got, body["error"]["code"]) == (status, code)
    assert headers["Retry-After"] == str(settings.OUTAGES.retry_after_s)
    assert (Message.objects.count(), Run.objects.count()) == (messages, 0)


def test_a_refused_transaction_gives_the_reservation_back(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    assert api.post(f"/api/chats/{chat.pk}/messages", {"content": "one"}, format="json").status_code == 202
    before = bucket(user)
    assert api.post(f"/api/chats/{chat.pk}/messages", {"content": "two"}, format="json").status_code == 409
    assert bucket(user) == pytest.approx(before, abs=1)
    assert len(get_token_buckets().reservations(user_id=user.pk)) == 1


def test_committed_run_is_queued_with_its_reservation(api: APIClient, user: User) -> None:
    _, body, _ = post(api, user, max_tokens=100)
    run = Run.objects.get(pk=body["run"]["id"])
    assert run.reserved_tokens > 100
    assert get_token_buckets().reservations(user_id=user.pk) == {run_member(run.pk): run.reserved_tokens}
    heads = get_scheduler_store().heads()
    assert heads["free"][user.pk].run_id == run.pk and heads["free"][user.pk].cost == run.reserved_tokens


def test_finished_run_refunds_unused_tokens_and_records_usage(api: APIClient, user: User) -> None:
    _, body, _ = post(api, user, max_tokens=200)
    run = Run.objects.get(pk=body["run"]["id"])
    store = get_scheduler_store()
    assert store.claim(store.heads()["free"][user.pk])
    run_mark_streaming(run_id=run.pk, worker="w1")
    full = user_limits(user=user).bucket_capacity_tokens
    assert bucket(user) < full - 200
    run_finish(
        run_id=run.pk,
        attempt=1,
        result=GenerationResult(text="hi", input_tokens=30, output_tokens=20, finish_reason=EngineFinishReason.STOP),
    )
    # 180 of the 200 reserved output tokens came back (the refill adds a little on top).
    prompt_tokens = run.reserved_tokens - 200
    assert bucket(user) == pytest.approx(full - prompt_tokens - 20, abs=full * 0.001 + 5)
    assert get_token_buckets().reservations(user_id=user.pk) == {}
    assert store.in_flight(now=9e9, ttl_s=1e12).total == 0
    assert store.take_refunds() == [("free", user.pk, 180.0)]  # the fair-share counter is corrected too
    usage = UsageDay.objects.get(user=user)
    assert (usage.runs, usage.input_tokens, usage.output_tokens) == (1, 30, 20)


def test_failed_run_ends_its_reservation(api: APIClient, user: User) -> None:
    _, body, _ = post(api, user)
    run_fail(run_id=body["run"]["id"], error="boom")
    assert get_token_buckets().reservations(user_id=user.pk) == {}
    assert get_scheduler_store().queue_depth("free") == 0


def test_queue_position_on_get_and_as_status_events(api: APIClient, user: User, clean_redis: redis.Redis) -> None:
    ids = [post(api, user)[1]["run"]["id"] for _ in range(2)]
    dispatcher = build_dispatcher()
    dispatcher.stats = lambda: []
    dispatcher.gate = type(dispatcher.gate)(
        gates=dispatcher.gate.gates, fallback_max_in_flight=0, idle_running_fraction=0.5
    )  # nothing may go: all stay queued
    dispatcher.tick()
    body = api.get(f"/api/runs/{ids[1]}").json()
    assert body["queue_position"] == 2 and body["status"] == "queued"
    assert "estimated_wait_s" in body
    events = read_after(ids[1], 0)
    assert events[-1].event == "status"
    assert events[-1].data["queue_position"] == 2 and events[-1].data["status"] == "queued"
    run_cancel(run=Run.objects.get(pk=ids[0]))
    dispatcher.refresh_positions()
    assert api.get(f"/api/runs/{ids[1]}").json()["queue_position"] == 1
    assert read_after(ids[1], 0)[-1].data["queue_position"] == 1
    assert api.get(f"/api/runs/{ids[0]}").json()["queue_position"] is None
    assert run_queue_positions(runs=[Run.objects.get(pk=ids[0])]) == {}
    assert json.loads(str(clean_redis.hget("sched:positions", str(ids[1]))))["queue_position"] == 1


def test_dispatcher_sends_queued_runs_to_their_tier_queue(api: APIClient, user: User, monkeypatch) -> None:
    sent: list[tuple[int, str, int | None]] = []
    deployments: list[str] = []

    batches: list[int] = []

    def send(dispatches: list[Dispatch]) -> list[tuple[Dispatch, Exception]]:
        batches.append(len(dispatches))
        for d in dispatches:
            sent.append((d.run_id, d.queue, d.engine_priority))
            deployments.append(d.deployment)
        return []

    monkeypatch.setattr("runs.dispatcher_wiring.send_to_workers", send)
    first, second = (post(api, user)[1]["run"]["id"] for _ in range(2))
    dispatcher = build_dispatcher()
    dispatcher.stats = lambda: []  # no worker: the fallback cap (8 in flight) lets both go
    dispatcher.tick()
    # vLLM's priority: the free tier's (2) x 10, then the user's band: no worker reports slots, so a user's
    # share is one run; nothing in flight is band 0, one run in flight already band 1.
    assert sent == [(first, "free", 20), (second, "free", 21)]
    assert batches == [2]  # the tick's runs in one batch: one routing query for both
    served = Run.objects.select_related("deployment").get(pk=first).deployment
    assert served is not None and deployments == [served.key] * 2  # each goes to its deployment's queues
    assert Run.objects.get(pk=first).status == RunStatus.QUEUED  # the worker marks it streaming


def test_runs_whose_push_was_lost_are_queued_again(api: APIClient, user: User) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from runs.reaper import requeue_lost_runs

    _in_flight, lost = (post(api, user)[1]["run"]["id"] for _ in range(2))
    store = get_scheduler_store()
    assert store.claim(store.heads()["free"][user.pk])  # the first was dispatched (the worker has not started it)
    assert store.remove(lost) == 1  # the second's push is lost (as if Redis had been down at commit)
    assert requeue_lost_runs() == []  # too recent: its push may still be on its way
    Run.objects.update(created_at=timezone.now() - timedelta(minutes=5))
    assert requeue_lost_runs() == [lost]  # the in-flight one is left alone
    assert store.heads()["free"][user.pk].run_id == lost
    assert requeue_lost_runs() == []
