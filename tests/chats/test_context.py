"""Prompt assembly within the context budget: the window bound, prefix stability, oversized messages."""

from __future__ import annotations

import dataclasses
import random

import pytest
from pytest_django.fixtures import Settings
from rest_framework.test import APIClient

from accounts.models import User
from chats.context import (
    SUMMARY_HEADING,
    PromptTooLong,
    Turn,
    cut_points,
    plan_prompt,
    prompt_budget,
    rendered_token_count,
)
from chats.models import Message
from chats.summary import transcript_line
from deployments.tokenizer import apply_chat_template, count_tokens
from inference_workers.runtime import WorkerRuntime
from inference_workers.tasks import chat_summarize
from runs.models import Run
from tests.chats.conversation import Conversation, sentence_of, simulated_worker_runtime
from tests.factories import ChatFactory

__all__ = ["simulated_worker_runtime"]


def _turns(count: int, words: int) -> list[Turn]:
    rng = random.Random(count)
    return [
        Turn(role="user" if i % 2 == 0 else "assistant", content=sentence_of(rng, words), tokens=0)
        for i in range(count)
    ]


# The pure planner, with the real tokenizer as its counter.


def test_plan_keeps_newest_turns_and_fits_the_budget() -> None:
    turns = _turns(120, 30)
    plan = plan_prompt(
        system_prompt="Be brief.",
        summary="The user asked about ships.",
        turns=turns,
        new_message="And then?",
        budget=900,
        count_tokens=rendered_token_count,
    )

    assert plan.prompt_tokens == rendered_token_count(plan.messages) <= 900
    assert 0 < plan.kept_turns < len(turns) and plan.dropped_turns == len(turns) - plan.kept_turns
    assert plan.messages[0]["role"] == "system"
    assert plan.messages[0]["content"].startswith("Be brief.") and SUMMARY_HEADING in plan.messages[0]["content"]
    kept = [{"role": t.role, "content": t.content} for t in turns[-plan.kept_turns :]]
    assert plan.messages[1:-1] == kept
    assert plan.messages[-1] == {"role": "user", "content": "And then?"}
    # The newest-first fill is tight: starting at the previous allowed cut (a user turn) would not fit.
    previous_cut = max(p for p in cut_points(turns, drop_step=1) if p < plan.dropped_turns)
    assert turns[previous_cut].role == "user"
    one_more = plan_prompt(
        system_prompt="Be brief.",
        summary="The user asked about ships.",
        turns=turns[previous_cut:],
        new_message="And then?",
        budget=10_000,
        count_tokens=rendered_token_count,
    )
    assert one_more.prompt_tokens > 900


def test_everything_fits_when_the_history_is_short() -> None:
    turns = _turns(6, 10)
    plan = plan_prompt(
        system_prompt="S", summary="", turns=turns, new_message="q", budget=2000, count_tokens=rendered_token_count
    )
    assert plan.kept_turns == 6 and plan.dropped_turns == 0 and not plan.summary_included
    assert SUMMARY_HEADING not in plan.messages[0]["content"]


def test_a_run_may_answer_a_tool_result_rendered_with_the_tool_role() -> None:
    calls = '[{"name": "get_weather", "parameters": {"city": "Paris"}}]'
    turns = [Turn(role="user", content="Weather in Paris?"), Turn(role="assistant", content=calls)]
    plan = plan_prompt(
        system_prompt="S",
        summary="",
        turns=turns,
        new_message='{"temp_c": 21}',
        new_role="tool",
        budget=2000,
        count_tokens=rendered_token_count,
    )
    assert [m["role"] for m in plan.messages] == ["system", "user", "assistant", "tool"]
    rendered = apply_chat_template(plan.messages)
    # the default model's template renders the calls and the result verbatim, and opens the assistant's turn after
    assert f'<|im_start|>assistant\n{calls}<|im_end|>\n<|im_start|>tool\n{{"temp_c": 21}}<|im_end|>' in rendered
    assert rendered.endswith("<|im_start|>assistant\n")
    assert transcript_line("tool", " 21 C ") == "Tool: 21 C"


def test_cut_points_are_fixed_positions_in_the_growing_history() -> None:
    turns = _turns(30, 3)
    points = cut_points(turns, drop_step=4)
    assert points[0] == 0 and points[-1] == len(turns)
    assert all(turns[p].role == "user" for p in points[1:-1])
    # Later turns only add cut points; the earlier ones stay where they were.
    grown = cut_points([*turns, *_turns(10, 3)], drop_step=4)
    assert grown[: len(points) - 1] == points[:-1]


def test_summary_is_dropped_before_the_new_message_is_refused() -> None:
    long_summary = sentence_of(random.Random(1), 400)
    plan = plan_prompt(
        system_prompt="S",
        summary=long_summary,
        turns=_turns(4, 10),
        new_message="q " * 50,
        budget=300,
        count_tokens=rendered_token_count,
    )
    assert not plan.summary_included and plan.prompt_tokens <= 300

    with pytest.raises(PromptTooLong) as excinfo:
        plan_prompt(
            system_prompt="S",
            summary="",
            turns=[],
            new_message="word " * 400,
            budget=300,
            count_tokens=rendered_token_count,
        )
    assert excinfo.value.budget == 300 and excinfo.value.tokens > 300


def test_budget_is_the_smaller_window_less_the_output() -> None:
    assert prompt_budget(context_limit_tokens=2048, max_model_len=8192, max_tokens=256) == 1792
    assert prompt_budget(context_limit_tokens=8192, max_model_len=2048, max_tokens=512) == 1536


# Whole chats, rows built with factories, summaries written by the model (the simulated engine).


@pytest.mark.django_db
def test_a_300_turn_chat_never_exceeds_the_window(
    user: User, settings: Settings, simulated_worker_runtime: WorkerRuntime
) -> None:
    rng = random.Random(300)
    chat = ChatFactory.create(owner=user)
    window = min(user.tier.context_limit_tokens, settings.ENGINE.max_model_len)
    max_tokens = 256
    conversation = Conversation(chat=chat, max_tokens=max_tokens, summarize=lambda pk: chat_summarize.apply(args=[pk]))

    for n in range(300):
        # Mostly ordinary turns, with now and then a very long question or answer (forces turns out).
        question = sentence_of(rng, rng.choice([5, 20, 60] if n % 37 else [900]))
        answer = sentence_of(rng, rng.choice([30, 80, 160] if n % 23 else [700]))
        record = conversation.turn(question, answer)

        assert len(record.ids) + max_tokens <= window, f"turn {n}: {len(record.ids)} prompt tokens"
        assert record.plan.messages[-1] == {"role": "user", "content": question}

    records = conversation.records
    assert sum(r.summary_written for r in records) >= 5
    assert any(r.plan.dropped_turns > 0 for r in records), "the overflow path was never exercised"
    assert records[-1].plan.summary_included
    assert Message.objects.filter(chat=chat).count() == 600 and Run.objects.filter(chat=chat).count() == 300


@pytest.mark.django_db
def test_between_refreshes_each_prompt_begins_with_the_whole_previous_prompt(
    user: User, settings: Settings, simulated_worker_runtime: WorkerRuntime
) -> None:
    settings.CONTEXT = dataclasses.replace(settings.CONTEXT, summary_refresh_every_turns=4)
    rng = random.Random(7)
    chat = ChatFactory.create(owner=user)
    conversation = Conversation(chat=chat, max_tokens=256, summarize=lambda pk: chat_summarize.apply(args=[pk]))
    for _ in range(40):
        conversation.turn(sentence_of(rng, rng.randint(20, 45)), sentence_of(rng, rng.randint(50, 110)))

    compared = 0
    for before, after in zip(conversation.records, conversation.records[1:], strict=False):
        if before.summary_written:
            continue  # a refresh happened between the two turns: the prefix legitimately changes once
        assert after.ids[: len(before.ids)] == before.ids
        compared += 1
    refreshes = sum(r.summary_written for r in conversation.records)
    assert refreshes >= 3 and compared >= 30
    # With a summary in place the prompt starts with it: system prompt, then the summary text.
    last = conversation.records[-1]
    assert last.summary and last.summary in last.plan.messages[0]["content"]


# An oversized message is refused when it is posted.


@pytest.mark.django_db
def test_a_message_that_cannot_fit_alone_gets_a_400(api: APIClient, user: User, settings: Settings) -> None:
    chat = ChatFactory.create(owner=user, title="")
    huge = sentence_of(random.Random(3), 2500)

    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": huge}, format="json")

    assert resp.status_code == 400, resp.content
    error = resp.json()["error"]
    assert error["code"] == "message_too_long"
    max_tokens = min(settings.CHAT_LIMITS.default_max_tokens, user.tier.max_output_tokens)
    budget = min(user.tier.context_limit_tokens, settings.ENGINE.max_model_len) - max_tokens
    assert f"{budget}-token prompt budget" in error["message"]
    assert f"{count_tokens(huge)} tokens long" in error["message"]
    assert not Message.objects.filter(chat=chat).exists() and not Run.objects.filter(chat=chat).exists()


@pytest.mark.django_db
def test_a_long_message_that_fits_is_accepted_with_its_token_count(api: APIClient, user: User) -> None:
    chat = ChatFactory.create(owner=user, title="")
    long = sentence_of(random.Random(4), 900)

    resp = api.post(f"/api/chats/{chat.pk}/messages", {"content": long}, format="json")

    assert resp.status_code == 202, resp.content
    assert Message.objects.get(chat=chat).token_count == count_tokens(long) > 900


@pytest.mark.django_db
def test_the_limit_depends_on_the_requested_output(api: APIClient, user: User) -> None:
    """Asking for a shorter answer leaves room for a longer message."""
    chat = ChatFactory.create(owner=user, title="")
    message = sentence_of(random.Random(5), 1700)
    assert 2048 - 512 < count_tokens(message) < 2048 - 16 - 64  # the free tier's window, less the answer

    refused = api.post(f"/api/chats/{chat.pk}/messages", {"content": message, "max_tokens": 512}, format="json")
    accepted = api.post(f"/api/chats/{chat.pk}/messages", {"content": message, "max_tokens": 16}, format="json")

    assert refused.status_code == 400 and refused.json()["error"]["code"] == "message_too_long"
    assert accepted.status_code == 202, accepted.content


@pytest.mark.django_db
def test_a_chats_own_system_message_replaces_the_default_system_prompt(settings: Settings) -> None:
    from chats.models import MessageRole
    from inference_workers.prompting import build_prompt_messages
    from tests.factories import MessageFactory, RunFactory

    chat = ChatFactory.create()
    MessageFactory.create(chat=chat, role=MessageRole.SYSTEM, content="Answer in French.")
    MessageFactory.create(chat=chat, role=MessageRole.USER, content="Hi")
    MessageFactory.create(chat=chat, role=MessageRole.ASSISTANT, content="Bonjour.")
    run = RunFactory.create(
        chat=chat, user=chat.owner, user_message=MessageFactory.create(chat=chat, content="Name a colour.")
    )
    assert build_prompt_messages(run=run) == [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Bonjour."},
        {"role": "user", "content": "Name a colour."},
    ]
    plain = RunFactory.create()
    assert build_prompt_messages(run=plain)[0] == {"role": "system", "content": settings.CONTEXT.system_prompt}


# Recalled memories (``memory``): after the stable prefix, inside the budget, left out when they do not fit.


def test_recalled_memories_go_before_the_new_message_and_keep_the_prefix() -> None:
    turns = _turns(8, 12)
    common = {"system_prompt": "Be brief.", "summary": "", "turns": turns, "new_message": "Lunch ideas?"}
    plain = plan_prompt(**common, budget=4000, count_tokens=rendered_token_count)  # type: ignore[arg-type]
    block = "What the user said in other chats:\n- My daughter is allergic to peanuts."
    planned = plan_prompt(**common, budget=4000, count_tokens=rendered_token_count, recalled=block)  # type: ignore[arg-type]

    assert planned.recalled and not plain.recalled
    assert planned.messages[:-1] == plain.messages[:-1]  # the prefix vLLM caches is the same
    assert planned.messages[-1] == {"role": "user", "content": f"{block}\n\nLunch ideas?"}
    assert planned.prompt_tokens == rendered_token_count(planned.messages) > plain.prompt_tokens


def test_memories_that_do_not_fit_are_left_out_rather_than_failing_the_prompt() -> None:
    alone = plan_prompt(
        system_prompt="S", summary="", turns=[], new_message="q", budget=4000, count_tokens=rendered_token_count
    )
    planned = plan_prompt(
        system_prompt="S",
        summary="",
        turns=[],
        new_message="q",
        budget=alone.prompt_tokens + 2,
        count_tokens=rendered_token_count,
        recalled="a memory far longer than the two tokens left in this budget",
    )
    assert not planned.recalled and planned.messages == alone.messages
