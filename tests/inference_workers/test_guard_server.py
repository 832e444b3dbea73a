"""The guard transport (``generation.guard_contract``) between ``deployments.guard`` and a worker's
:class:`~inference_workers.guard_server.GuardServer`, on the simulated engine in this process: one engine step per
prompt, answered on each caller's reply key. The real engine's answer is ``test_worker_engine_guard.py``'s."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from core.redis_client import get_redis
from deployments.guard import GuardFailed, next_token_logprobs
from deployments.selection import resolve_model
from generation.guard_contract import NextTokenRequest, guard_queue
from inference_workers.guard_server import GuardServer
from inference_workers.runtime import WorkerRuntime
from moderation.backends import ModerationUnavailable, backend_for
from tests.deployment_helpers import ensure_default_deployment

pytestmark = pytest.mark.django_db


@pytest.fixture
def served(sim_runtime: WorkerRuntime) -> Iterator[GuardServer]:
    key = ensure_default_deployment().key
    get_redis().delete(guard_queue(key))
    server = GuardServer(host=sim_runtime.host, deployment=key, client=get_redis(), max_prompts=4)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_each_prompt_gets_its_next_tokens_from_one_engine_step(served: GuardServer) -> None:
    deployment = resolve_model(None)
    answers = next_token_logprobs(["Is this safe?", "Another prompt"], deployment, top_logprobs=5, timeout_s=10)
    assert len(answers) == 2
    for tokens in answers:
        assert len(tokens) == 5  # what the engine listed: exactly the count asked for
        logprobs = [value for _, value in tokens]
        assert logprobs == sorted(logprobs, reverse=True) and all(value < 0 for value in logprobs)
    assert served.served_prompts == 2


def test_concurrent_callers_each_get_their_own_answer(served: GuardServer) -> None:
    deployment = resolve_model(None)
    results: dict[int, Any] = {}

    def call(index: int) -> None:
        prompts = [f"prompt {index}"] * (index + 1)
        results[index] = next_token_logprobs(prompts, deployment, top_logprobs=3, timeout_s=10)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert {i: len(answer) for i, answer in results.items()} == {i: i + 1 for i in range(6)}


def test_a_request_past_its_deadline_is_dropped_not_served(served: GuardServer) -> None:
    late = NextTokenRequest(prompts=["late"], top_logprobs=2, deadline=time.time() - 1)
    served.serve([late])
    assert get_redis().llen(late.reply_key) == 0 and served.served_prompts == 0


def test_too_many_prompts_are_refused_before_anything_is_sent() -> None:
    ensure_default_deployment()
    with pytest.raises(GuardFailed, match="At most 64 prompts"):
        next_token_logprobs(["x"] * 65, resolve_model(None), top_logprobs=2, timeout_s=1)


@pytest.mark.usefixtures("served")
def test_an_engine_that_lists_neither_label_is_unavailable_not_clean(settings: Any) -> None:
    """The simulated engine's tokens are words of a fixed list, never 'safe' or 'unsafe': the backend says it
    could not judge instead of inventing a score."""
    settings.MODERATION = dataclasses.replace(settings.MODERATION, guard_timeout_s=10)
    with pytest.raises(ModerationUnavailable, match="neither 'safe' nor 'unsafe'"):
        backend_for("guard").classify(["You are an idiot."])
