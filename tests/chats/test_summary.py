"""The rolling summary: when it is written and refreshed, by whom, and at what priority."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import threading
import time
from typing import Any

import pytest
import redis
from celery.exceptions import Retry
from django.conf import settings
from pytest_django.fixtures import DjangoCaptureOnCommitCallbacks, Settings

from accounts.models import Tier, User
from chats.models import Chat, Message, MessageRole
from chats.summary import (
    SummaryState,
    chat_budget,
    chat_summary_refresh,
    engine_has_room_for_background,
    summary_due,
    summary_threshold_tokens,
)
from chats.summary_schedule import chat_summary_schedule
from deployments.tokenizer import count_tokens
from generation.result import EngineFinishReason, GenerationResult
from generation.worker_contract import SUMMARIZE_TASK, summary_pending_key
from inference_workers.engine.base import EngineStats, GenerationRequest
from inference_workers.engine.host import EngineHost
from inference_workers.engine.simulated import SimulatedEngine
from inference_workers.runtime import WorkerRuntime
from inference_workers.summarize import generate_text
from inference_workers.tasks import chat_summarize
from runs.lifecycle import run_finish
from runs.models import RunStatus
from tests.chats.conversation import (
    Conversation,
    fast_simulated_engine_config,
    sentence_of,
    simulated_worker_runtime,
)
from tests.factories import ChatFactory, MessageFactory, RunFactory, UserFactory

__all__ = ["simulated_worker_runtime"]

pytestmark = pytest.mark.django_db


def _unsummarized_user_turns(chat: Chat) -> int:
    chat.refresh_from_db()
    messages = Message.objects.filter(chat=chat, role=MessageRole.USER)
    if chat.summary_through_id is not None:
        messages = messages.filter(id__gt=chat.summary_through_id)
    return messages.count()


def test_summary_is_created_past_the_threshold_and_refreshed_every_k_turns(
    user: User, settings: Settings, simulated_worker_runtime: WorkerRuntime
) -> None:
    config = settings.CONTEXT
    rng = random.Random(11)
    chat = ChatFactory.create(owner=user)
    threshold = summary_threshold_tokens(budget=chat_budget(chat=chat), config=config)
    conversation = Conversation(chat=chat, max_tokens=256, summarize=lambda pk: chat_summarize.apply(args=[pk]))

    written_at: list[int] = []
    history_tokens = 0
    for n in range(48):
        question, answer = sentence_of(rng, 25), sentence_of(rng, 90)
        history_tokens += count_tokens(question) + count_tokens(answer)
        record = conversation.turn(question, answer)
        if not written_at:
            # No summary until the verbatim history passes the threshold, then at once.
            assert record.summary_written == (history_tokens >= threshold), f"turn {n}"
        if record.summary_written:
            written_at.append(n)
            assert chat.summary and chat.summary_through_id is not None
            # The newest turns stay verbatim: exactly `keep` user turns after what the summary covers.
            assert _unsummarized_user_turns(chat) == config.summary_keep_recent_turns

    assert len(written_at) >= 4
    gaps = {b - a for a, b in itertools.pairwise(written_at)}
    assert gaps == {config.summary_refresh_every_turns}
    # Each refresh rewrote the summary (the model folded newer turns into it).
    summaries = [r.summary for r in conversation.records[written_at[0] + 1 :]] + [chat.summary]
    assert len(set(summaries)) == len(written_at) and all(summaries)


def test_smaller_tiers_are_summarized_sooner(settings: Settings) -> None:
    settings.ENGINE = dataclasses.replace(settings.ENGINE, max_model_len=8192)
    free, pro = UserFactory.with_tier("free"), UserFactory.with_tier("pro")
    free_budget, pro_budget = (
        chat_budget(chat=ChatFactory.create(owner=free)),
        chat_budget(chat=ChatFactory.create(owner=pro)),
    )
    assert free_budget < pro_budget
    assert free_budget == Tier.objects.get(name="free").context_limit_tokens - settings.CHAT_LIMITS.default_max_tokens

    state = SummaryState(has_summary=False, unsummarized_tokens=free_budget, unsummarized_user_turns=10)
    assert summary_due(state=state, budget=free_budget, config=settings.CONTEXT)
    assert not summary_due(state=state, budget=pro_budget, config=settings.CONTEXT)


def test_a_refresh_waits_for_k_turns_unless_the_verbatim_part_nears_the_budget(settings: Settings) -> None:
    config = dataclasses.replace(
        settings.CONTEXT,
        summary_refresh_every_turns=5,
        summary_keep_recent_turns=2,
        summary_threshold_fraction=0.5,
        summary_force_fraction=0.8,
    )

    def due(tokens: int, user_turns: int, *, has_summary: bool = True) -> bool:
        state = SummaryState(has_summary=has_summary, unsummarized_tokens=tokens, unsummarized_user_turns=user_turns)
        return summary_due(state=state, budget=1000, config=config)

    assert not due(499, 1, has_summary=False) and due(500, 1, has_summary=False)
    assert not due(700, 6) and due(700, 7)  # past the threshold: every K (= 5) turns after the 2 kept
    assert not due(400, 70)  # below the threshold nothing is due, however many turns
    assert due(800, 3)  # nearly full: refreshed before the verbatim turns would have to be dropped


def _long_chat(user: User, *, turns: int, words: int) -> Chat:
    rng = random.Random(turns)
    chat = ChatFactory.create(owner=user)
    for _ in range(turns):
        for role in (MessageRole.USER, MessageRole.ASSISTANT):
            content = sentence_of(rng, words)
            MessageFactory.create(chat=chat, role=role, content=content, token_count=count_tokens(content))
    return chat


def _broker_messages(queue: str) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    raw = [
        item for key in client.keys(f"{queue}*") if client.type(key) == b"list" for item in client.lrange(key, 0, -1)
    ]
    return [json.loads(item) for item in raw]


def _drain_broker(queue: str) -> None:
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    for key in client.keys(f"{queue}*"):
        client.delete(key)


def test_the_summary_task_goes_to_the_lowest_queue_once(user: User) -> None:
    queue = settings.CONTEXT.summary_queue
    assert settings.CELERY_TASK_QUEUES_ORDER[-1] == queue, "workers must drain the summary queue last"
    _drain_broker(queue)
    chat = _long_chat(user, turns=12, words=80)
    quiet = _long_chat(user, turns=2, words=10)
    try:
        assert chat_summary_schedule(chat_id=chat.pk)
        assert not chat_summary_schedule(chat_id=chat.pk), "a second task while one is pending"
        assert not chat_summary_schedule(chat_id=quiet.pk), "nothing is due in a short chat"

        sent = _broker_messages(queue)
        assert [(m["headers"]["task"], m["headers"]["argsrepr"]) for m in sent] == [(SUMMARIZE_TASK, f"[{chat.pk}]")]
    finally:
        _drain_broker(queue)


def test_finishing_a_run_schedules_the_summary_when_due(
    user: User, django_capture_on_commit_callbacks: DjangoCaptureOnCommitCallbacks
) -> None:
    queue = settings.CONTEXT.summary_queue
    _drain_broker(queue)
    chat = _long_chat(user, turns=12, words=80)
    run = RunFactory.create(chat=chat, status=RunStatus.STREAMING, attempts=1, worker="w1")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            run_finish(
                run_id=run.pk,
                attempt=1,
                result=GenerationResult(
                    text="ok", input_tokens=10, output_tokens=1, finish_reason=EngineFinishReason.STOP
                ),
            )
        assert [m["headers"]["task"] for m in _broker_messages(queue)] == [SUMMARIZE_TASK]
        chat.refresh_from_db()
        assert chat.last_worker == "w1"
    finally:
        _drain_broker(queue)


def test_the_task_writes_the_summary_with_the_engine_and_clears_its_pending_mark(
    user: User, simulated_worker_runtime: WorkerRuntime, clean_redis: redis.Redis
) -> None:
    chat = _long_chat(user, turns=12, words=80)
    clean_redis.set(summary_pending_key(chat.pk), "1")

    assert chat_summarize.apply(args=[chat.pk]).get() is True

    chat.refresh_from_db()
    assert chat.summary.strip() and chat.summary_through is not None
    assert chat.summary_through.role == MessageRole.ASSISTANT
    assert not clean_redis.exists(summary_pending_key(chat.pk))
    # Not due any more: running it again changes nothing.
    through = chat.summary_through_id
    assert chat_summarize.apply(args=[chat.pk]).get() is False
    chat.refresh_from_db()
    assert chat.summary_through_id == through


def test_a_summary_steps_aside_while_the_engine_is_busy(
    user: User,
    simulated_worker_runtime: WorkerRuntime,
    clean_redis: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Busy with interactive runs, the engine gets no summary request: the task is retried later instead."""
    chat = _long_chat(user, turns=12, words=80)
    clean_redis.set(summary_pending_key(chat.pk), "1")
    slots = simulated_worker_runtime.host.engine.max_num_seqs
    monkeypatch.setattr(simulated_worker_runtime.host, "stats", lambda: EngineStats(running=slots // 2, waiting=0))

    with pytest.raises(Retry):  # how a task run by a worker asks to be delivered again later
        chat_summarize.run(chat.pk)

    chat.refresh_from_db()
    assert chat.summary == "" and chat.summary_through_id is None
    assert clean_redis.exists(summary_pending_key(chat.pk)), "still pending: no second task meanwhile"

    monkeypatch.setattr(simulated_worker_runtime.host, "stats", lambda: EngineStats(running=slots // 2 - 1, waiting=0))
    assert chat_summarize.apply(args=[chat.pk]).get() is True


def test_background_room_needs_an_empty_queue_and_spare_slots() -> None:
    assert engine_has_room_for_background(running=0, waiting=0, slots=32, max_load=0.5)
    assert engine_has_room_for_background(running=15, waiting=0, slots=32, max_load=0.5)
    assert not engine_has_room_for_background(running=16, waiting=0, slots=32, max_load=0.5)
    assert not engine_has_room_for_background(running=1, waiting=1, slots=32, max_load=0.5)
    assert engine_has_room_for_background(running=0, waiting=0, slots=1, max_load=0.5)


def test_a_history_longer_than_the_window_is_folded_in_chunks(user: User, settings: Settings) -> None:
    """Each summarization prompt fits the engine's window, however long the unsummarized part has grown."""
    chat = _long_chat(user, turns=30, words=120)  # ~7k tokens of history against a 2048-token window
    prompts: list[int] = []

    def generate(prompt: str, max_tokens: int) -> str:
        prompts.append(count_tokens(prompt))
        return sentence_of(random.Random(len(prompts)), 60)

    assert chat_summary_refresh(chat_id=chat.pk, generate=generate)

    assert len(prompts) >= 4
    assert all(tokens + settings.CONTEXT.summary_max_tokens <= settings.ENGINE.max_model_len for tokens in prompts)


def test_summary_generation_never_delays_interactive_requests() -> None:
    """One engine slot: a summary waiting alongside an interactive request goes after it, whatever came first."""
    config = dataclasses.replace(fast_simulated_engine_config(), max_num_seqs=1, sim_output_tokens=30)
    host = EngineHost(config, SimulatedEngine(config))
    host.start()
    finished: list[str] = []
    try:
        interactive_priority = max(Tier.objects.values_list("priority", flat=True))
        assert settings.CONTEXT.summary_priority > interactive_priority

        def interactive(request_id: str) -> None:
            request = GenerationRequest(
                request_id=request_id, prompt="hi", max_tokens=30, priority=interactive_priority
            )
            for _ in host.stream(request):
                pass
            finished.append(request_id)

        def summary() -> None:
            generate_text(
                prompt="summarize", max_tokens=30, priority=settings.CONTEXT.summary_priority, host=host, request_id="s"
            )
            finished.append("summary")

        first = threading.Thread(target=interactive, args=("a",))
        first.start()
        time.sleep(0.02)  # "a" holds the only slot
        threads = [threading.Thread(target=summary), threading.Thread(target=interactive, args=("b",))]
        threads[0].start()
        time.sleep(0.01)  # the summary is waiting before "b" arrives
        threads[1].start()
        for thread in (first, *threads):
            thread.join(timeout=10)
    finally:
        host.shutdown()

    assert finished == ["a", "b", "summary"]
