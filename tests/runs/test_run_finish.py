"""A run's end as the worker writes it: one statement for a run still this attempt's (``run_finish(claimed=...)``),
the locking read for every other case, with the same outcome either way."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.utils import timezone
from pytest_django.fixtures import DjangoAssertNumQueries
from rest_framework.test import APIClient

from accounts.limits import user_limits
from accounts.models import UsageDay, User
from chats.models import Chat, ChatOrigin, Message, MessageRole, Moderation
from generation.result import EngineFinishReason, GenerationResult
from runs.counters import read_run_metrics
from runs.lifecycle import run_finish, run_mark_first_token, run_mark_streaming
from runs.models import FinishReason, Revision, Run, RunStatus
from runs.queueing import get_scheduler_store
from runs.quota import bucket_limits, get_token_buckets
from runs.services import run_cancel
from runs.streaming.contract import RunStreamWriter, StreamEvent, read_after
from tests.factories import ChatFactory, MessageFactory, RunFactory

pytestmark = pytest.mark.django_db(transaction=True)

PASS = {"pass": "moderate_output", "decision": "pass", "checks": 2}


def _result(text: str, finish: EngineFinishReason = EngineFinishReason.STOP, tokens: int = 7) -> GenerationResult:
    return GenerationResult(text=text, input_tokens=11, output_tokens=tokens, finish_reason=finish, passes=(PASS,))


def _stored_answer(run: Run) -> Message:
    """The run's assistant message as Postgres holds it."""
    assert run.assistant_message_id is not None
    return Message.objects.get(pk=run.assistant_message_id)


def _claimed(run: Run) -> Run:
    claimed, changed = run_mark_streaming(run_id=run.pk, worker="w@host")
    assert changed and claimed.status == RunStatus.STREAMING
    return claimed


def test_a_claimed_run_ends_in_one_statement_with_its_message_chat_usage_and_terminal_event(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    # An OpenAI-compatible call's chat: no summary check after commit (a chat of the browser UI reads its chat and its
    # unsummarized messages for it; tests/inference_workers/test_run_query_count.py counts both kinds).
    run = RunFactory.create(
        chat=ChatFactory.create(origin=ChatOrigin.API), passes=[{"pass": "route", "decision": "kept"}]
    )
    claimed = _claimed(run)
    run_mark_first_token(run_id=run.pk, attempt=1)  # while it streams: the claim's copy does not have it
    text = "an answer with a NUL \x00 in it"
    with django_assert_num_queries(1):
        finished = run_finish(run_id=run.pk, attempt=1, result=_result(text), claimed=claimed)
    assert finished is claimed

    stored = Run.objects.select_related("assistant_message", "chat").get(pk=run.pk)
    assert (stored.status, stored.finish_reason) == (RunStatus.DONE, FinishReason.STOP)
    assert (stored.input_tokens, stored.output_tokens) == (11, 7)
    assert stored.finished_at == finished.finished_at is not None
    assert stored.first_token_at == finished.first_token_at is not None  # the metrics' TTFT reads it
    assert stored.passes == [{"pass": "route", "decision": "kept"}, PASS] == finished.passes
    message = stored.assistant_message
    assert message is not None and message.pk == finished.assistant_message_id
    assert (message.role, message.content, message.token_count) == (MessageRole.ASSISTANT, text, 7)
    assert (message.chat_id, message.superseded, message.moderation) == (run.chat_id, False, Moderation.NONE)
    assert list(Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT)) == [message]
    assert (stored.chat.updated_at, stored.chat.last_worker) == (stored.finished_at, "w@host")
    usage = UsageDay.objects.get(user=run.user)
    assert (usage.runs, usage.input_tokens, usage.output_tokens) == (1, 11, 7)

    end = read_after(run.pk, 0)[-1]
    assert end.event == StreamEvent.DONE
    assert end.data["message_id"] == message.pk and end.data["usage"]["output_tokens"] == 7


def test_the_days_usage_adds_up_over_runs_ended_either_way() -> None:
    chat = ChatFactory.create()
    for n, claimed in enumerate((True, False, True)):
        run = RunFactory.create(chat=chat, user_message=MessageFactory.create(chat=chat, content=f"q{n}"))
        mine = _claimed(run)
        run_finish(run_id=run.pk, attempt=1, result=_result(f"a{n}", tokens=n + 1), claimed=mine if claimed else None)
    usage = UsageDay.objects.get(user=chat.owner, day=timezone.now().date())
    assert (usage.runs, usage.input_tokens, usage.output_tokens) == (3, 33, 6)


def test_a_run_cancelled_after_its_claim_ends_cancelled_with_its_partial_text() -> None:
    run = RunFactory.create()
    claimed = _claimed(run)
    run_cancel(run=run)  # the worker's copy still says streaming
    finished = run_finish(run_id=run.pk, attempt=1, result=_result("half an"), claimed=claimed)
    assert finished is not None and finished.status == RunStatus.CANCELLED
    stored = Run.objects.select_related("assistant_message").get(pk=run.pk)
    assert stored.status == RunStatus.CANCELLED and stored.assistant_message is not None
    assert stored.assistant_message.content == "half an"
    assert Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT).count() == 1
    assert UsageDay.objects.get(user=run.user).runs == 1


def test_an_attempt_superseded_after_its_claim_writes_nothing() -> None:
    run = RunFactory.create()
    claimed = _claimed(run)
    chat_updated = Chat.objects.get(pk=run.chat_id).updated_at
    Run.objects.filter(pk=run.pk).update(attempts=2, worker="other@host")  # another attempt took it over
    assert run_finish(run_id=run.pk, attempt=1, result=_result("stale"), claimed=claimed) is None
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.assistant_message_id, stored.attempts) == (RunStatus.STREAMING, None, 2)
    assert not Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT).exists()
    assert not UsageDay.objects.filter(user=run.user).exists()
    assert Chat.objects.get(pk=run.chat_id).updated_at == chat_updated
    assert claimed.status == RunStatus.STREAMING  # the worker's copy is left as it was


def test_an_aborted_request_takes_the_locking_read_and_ends_cancelled(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    run = RunFactory.create(chat=ChatFactory.create(origin=ChatOrigin.API))
    claimed = _claimed(run)
    with django_assert_num_queries(7):  # BEGIN, the locking read, the message, the run, the usage, the chat, COMMIT
        finished = run_finish(
            run_id=run.pk, attempt=1, result=_result("cut", EngineFinishReason.ABORT), claimed=claimed
        )
    assert finished is not None and finished.status == RunStatus.CANCELLED


@pytest.mark.parametrize("claimed", [True, False])
def test_a_regenerated_answer_supersedes_the_one_it_replaces(claimed: bool) -> None:
    chat = ChatFactory.create()
    prompt = MessageFactory.create(chat=chat, content="the question")
    old = MessageFactory.create(chat=chat, role=MessageRole.ASSISTANT, content="the first answer")
    run = RunFactory.create(chat=chat, user_message=prompt, revision=Revision.REGENERATE, replaces=old)
    mine = _claimed(run)
    finished = run_finish(run_id=run.pk, attempt=1, result=_result("the second"), claimed=mine if claimed else None)
    assert finished is not None
    old.refresh_from_db()
    new = _stored_answer(finished)
    assert old.superseded and not new.superseded and new.content == "the second"


def test_a_continued_answer_stores_the_replaced_text_and_what_it_adds() -> None:
    chat = ChatFactory.create()
    prompt = MessageFactory.create(chat=chat, content="the question")
    old = MessageFactory.create(chat=chat, role=MessageRole.ASSISTANT, content="Once upon", token_count=2)
    run = RunFactory.create(chat=chat, user_message=prompt, revision=Revision.CONTINUE, replaces=old)
    finished = run_finish(run_id=run.pk, attempt=1, result=_result(" a time", tokens=3), claimed=_claimed(run))
    assert finished is not None
    new = _stored_answer(finished)
    assert (new.content, new.token_count) == ("Once upon a time", 5)
    old.refresh_from_db()
    assert old.superseded


def test_a_flagged_answer_is_stored_retracted() -> None:
    run = RunFactory.create()
    finished = run_finish(
        run_id=run.pk, attempt=1, result=_result("bad", EngineFinishReason.CONTENT_FILTER), claimed=_claimed(run)
    )
    assert finished is not None and finished.finish_reason == FinishReason.CONTENT_FILTER
    message = _stored_answer(finished)
    assert (message.content, message.token_count, message.moderation) == ("", 0, Moderation.RETRACTED)
    assert Run.objects.get(pk=run.pk).status == RunStatus.DONE


def test_a_claimed_end_refunds_what_was_not_used_with_the_claims_limits(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user)
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hello there", "max_tokens": 200}, format="json")
    assert resp.status_code == 202, resp.content
    run = Run.objects.get(pk=resp.json()["run"]["id"])
    store = get_scheduler_store()
    assert store.claim(store.heads()["free"][user.pk])
    claimed = _claimed(run)
    full = user_limits(user=user).bucket_capacity_tokens
    run_finish(run_id=run.pk, attempt=1, result=_result("hi", tokens=20), claimed=claimed)
    limits = bucket_limits(user_limits(user=user))
    prompt_tokens = run.reserved_tokens - 200
    assert get_token_buckets().bucket_tokens(user_id=user.pk, limits=limits) == pytest.approx(
        full - prompt_tokens - 20, abs=full * 0.001 + 5
    )
    assert get_token_buckets().reservations(user_id=user.pk) == {}
    assert store.take_refunds() == [("free", user.pk, 180.0)]


def test_a_runs_end_reaches_redis_in_one_round_trip_after_its_statement(
    api: APIClient, user: User, redis_round_trips: Callable[[], list[str]]
) -> None:
    """After commit, everything Redis learns of the end goes in one pipeline (it took six round trips): the run out
    of the in-flight set with its refund, its reservation settled, its counters, and its terminal event, numbered on
    from the stream's last entry with no read of it first."""
    chat = ChatFactory.create(owner=user, origin=ChatOrigin.API)
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hello there", "max_tokens": 200}, format="json")
    assert resp.status_code == 202, resp.content
    run = Run.objects.get(pk=resp.json()["run"]["id"])
    store = get_scheduler_store()
    assert store.claim(store.heads()["free"][user.pk])  # dispatched: in flight, charged in full
    claimed = _claimed(run)
    writer = RunStreamWriter(run.pk)
    for text in ("hi", " there"):
        writer.append(StreamEvent.DELTA, {"text": text, "tokens": 1})
    written = read_after(run.pk, 0)

    sent = redis_round_trips()
    run_finish(run_id=run.pk, attempt=1, result=_result("hi there", tokens=2), claimed=claimed)
    assert len(sent) == 1, sent
    commands = sent[0].split()
    assert commands[:2] == ["EVAL", "EVAL"] and commands[-3:] == ["XADD", "EXPIRE", "ZREM"], commands
    assert 3 <= len(commands[2:-3]) <= 9 and set(commands[2:-3]) == {"HINCRBY", "HINCRBYFLOAT"}, commands  # counters

    entries = read_after(run.pk, 0)
    assert entries[:-1] == written
    assert (entries[-1].seq, entries[-1].event) == (written[-1].seq + 1, StreamEvent.DONE)
    assert entries[-1].data["usage"]["output_tokens"] == 2
    assert not store.is_queued_or_in_flight(run.pk, "free")
    assert store.take_refunds() == [("free", user.pk, 198.0)]
    assert get_token_buckets().reservations(user_id=user.pk) == {}
    metrics = read_run_metrics()
    assert metrics.finished == {("free", RunStatus.DONE): 1} and metrics.output_tokens == {"free": 2}


def test_a_run_that_was_never_dispatched_gets_no_refund_of_the_fair_share_counter(api: APIClient, user: User) -> None:
    """The refund goes back only to a run the dispatcher charged: one cancelled while queued leaves the queue, and
    the fair-share counter, which never charged it, is credited nothing."""
    chat = ChatFactory.create(owner=user)
    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": "hello there", "max_tokens": 200}, format="json")
    assert resp.status_code == 202, resp.content
    run_id = resp.json()["run"]["id"]
    store = get_scheduler_store()
    assert store.is_queued_or_in_flight(run_id, "free")
    assert api.post(f"/api/runs/{run_id}/cancel").status_code in (200, 202)
    assert Run.objects.get(pk=run_id).status == RunStatus.CANCELLED
    assert not store.is_queued_or_in_flight(run_id, "free")
    assert store.take_refunds() == []
    assert read_after(run_id, 0)[-1].event == StreamEvent.DONE
    assert get_token_buckets().reservations(user_id=user.pk) == {}


def test_the_first_tokens_time_is_written_once_and_only_for_the_attempt_that_holds_the_run(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    run = RunFactory.create()
    _claimed(run)
    run_mark_first_token(run_id=run.pk, attempt=2)  # not the attempt that holds it: nothing written
    assert Run.objects.get(pk=run.pk).first_token_at is None

    before = timezone.now()
    with django_assert_num_queries(1):
        run_mark_first_token(run_id=run.pk, attempt=1)
    first = Run.objects.get(pk=run.pk).first_token_at
    assert first is not None and before <= first <= timezone.now()

    run_mark_first_token(run_id=run.pk, attempt=1)  # a second call keeps the first time
    assert Run.objects.get(pk=run.pk).first_token_at == first
