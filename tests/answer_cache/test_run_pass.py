"""The answer cache as a pass before the queue (``runs.passes.cache``), end to end through ``POST /api/chats/{id}/
messages``, the simulated engine's worker and the real embedding worker: a miss is generated and stored at its end,
a paraphrase is then answered from the cache through the same run and stream path (the run marked, no engine tokens
counted, never queued), and another user's identical prompt is not."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts.models import User
from answer_cache.models import CacheEntry
from answer_cache.selectors import forget_cached_cache_policies
from inference_workers.services import generate_run
from runs.models import FinishReason, Run, RunStatus
from runs.streaming.contract import StreamEvent, read_after
from tests.factories import ChatFactory, UserFactory
from tests.inference_workers.conftest import running_sim_runtime

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("embedding_worker")]

QUESTION = "What is the capital of France?"
PARAPHRASE = "What's the capital city of France?"


@pytest.fixture(autouse=True)
def fresh_policies() -> Any:
    forget_cached_cache_policies()
    yield
    forget_cached_cache_policies()


def ask(user: User, content: str, capture: Any) -> Run:
    client = APIClient()
    client.force_authenticate(user)
    chat = ChatFactory.create(owner=user)
    with capture(execute=True):  # what follows the commit: the hand-on (queue or cache answer), the stash
        resp = client.post(f"/api/chats/{chat.pk}/messages", {"content": content, "temperature": 0}, format="json")
    assert resp.status_code == 202, resp.content
    return Run.objects.get(pk=resp.json()["run"]["id"])


def cache_record(run: Run) -> dict[str, Any]:
    (record,) = [p for p in run.passes if p["pass"] == "cache"]
    return record


def test_a_paraphrase_is_answered_from_the_cache_and_another_user_is_not(
    django_capture_on_commit_callbacks: Any,
) -> None:
    owner, other = UserFactory.with_tier("pro"), UserFactory.with_tier("pro")
    first = ask(owner, QUESTION, django_capture_on_commit_callbacks)
    assert cache_record(first)["decision"] == "miss" and first.status == RunStatus.QUEUED
    with running_sim_runtime() as runtime, django_capture_on_commit_callbacks(execute=True):
        assert generate_run(run_id=first.pk, runtime=runtime) == RunStatus.DONE
    first.refresh_from_db()
    entry = CacheEntry.objects.get(user_id=owner.pk)
    assert entry.answer == first.assistant_message.content  # type: ignore[union-attr]

    again = ask(owner, PARAPHRASE, django_capture_on_commit_callbacks)

    again.refresh_from_db()
    record = cache_record(again)
    assert record["decision"] == "hit" and record["source"] == "own" and record["entry"] == entry.pk
    assert record["similarity"] >= 0.8 and record["source_run"] == first.pk
    assert (again.status, again.finish_reason, again.worker) == (RunStatus.DONE, FinishReason.STOP, "answer-cache")
    assert again.assistant_message.content == first.assistant_message.content  # type: ignore[union-attr]
    assert (again.input_tokens, again.output_tokens) == (0, 0)  # no engine tokens spent
    events = read_after(again.pk, 0)
    assert [e.event for e in events] == [StreamEvent.STATUS, StreamEvent.DELTA, StreamEvent.DONE]
    assert events[1].data["text"] == first.assistant_message.content  # type: ignore[union-attr]
    assert events[2].data["usage"]["output_tokens"] == 0

    theirs = ask(other, QUESTION, django_capture_on_commit_callbacks)

    assert cache_record(theirs)["decision"] == "miss" and theirs.status == RunStatus.QUEUED  # never crosses users
