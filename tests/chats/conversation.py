"""A long-conversation driver for the context and summary tests: turns as rows, prompts as token ids."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from django.conf import settings

from chats.context import PromptPlan
from chats.models import Chat, MessageRole
from chats.summary import chat_summary_is_due
from core.config import EngineConfig
from deployments.tokenizer import apply_chat_template, count_tokens, get_tokenizer
from inference_workers.engine.simulated import SimulatedEngine
from inference_workers.prompting import plan_run_prompt
from inference_workers.runtime import WorkerRuntime, start_runtime, stop_runtime
from runs.models import Run, RunStatus
from tests.factories import MessageFactory, RunFactory

_VOCABULARY = (
    "river mountain garden engine budget window summary python django celery redis token prompt cache "
    "worker queue stream answer question travel recipe tomato basil oven minutes music guitar chord "
    "history empire trade silk road merchant ship harbor storm lighthouse keeper island map compass"
).split()


def sentence_of(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_VOCABULARY) for _ in range(words)).capitalize() + "."


def prompt_ids(plan: PromptPlan) -> list[int]:
    """The token ids the engine sees: the messages rendered with the chat template, then tokenized."""
    ids: list[int] = get_tokenizer().encode(apply_chat_template(plan.messages), add_special_tokens=False)
    return ids


@dataclass
class TurnRecord:
    plan: PromptPlan
    ids: list[int]
    summary: str
    summary_through_id: int | None
    summary_written: bool = False


@dataclass
class Conversation:
    """Plays turns in one chat the way the serving path does, with ``summarize`` run whenever one is due."""

    chat: Chat
    max_tokens: int
    summarize: Callable[[int], object]
    records: list[TurnRecord] = field(default_factory=list)

    def turn(self, question: str, answer: str) -> TurnRecord:
        message = MessageFactory.create(
            chat=self.chat, role=MessageRole.USER, content=question, token_count=count_tokens(question)
        )
        run: Run = RunFactory.create(
            chat=self.chat,
            user=self.chat.owner,
            user_message=message,
            status=RunStatus.DONE,
            max_tokens=self.max_tokens,
        )
        run.chat.refresh_from_db()
        plan = plan_run_prompt(run=run)
        record = TurnRecord(
            plan=plan, ids=prompt_ids(plan), summary=run.chat.summary, summary_through_id=run.chat.summary_through_id
        )
        MessageFactory.create(
            chat=self.chat, role=MessageRole.ASSISTANT, content=answer, token_count=count_tokens(answer)
        )
        self.chat.refresh_from_db()
        if chat_summary_is_due(chat=self.chat):
            self.summarize(self.chat.pk)
            self.chat.refresh_from_db()
            record.summary_written = True
        self.records.append(record)
        return record


def fast_simulated_engine_config() -> EngineConfig:
    """The simulated engine (``ENGINE_BACKEND=simulated``) with steps short enough for tests."""
    return dataclasses.replace(
        settings.ENGINE,
        backend="simulated",
        max_num_seqs=4,
        sim_step_base_s=0.002,
        sim_step_per_seq_s=0.0005,
        sim_prefill_per_token_s=0.0,
        sim_output_tokens=40,
    )


@pytest.fixture(scope="module")
def simulated_worker_runtime() -> Iterator[WorkerRuntime]:
    """This process's worker runtime (what ``inference_workers.tasks.chat_summarize`` generates with), on the
    simulated engine."""
    config = fast_simulated_engine_config()
    runtime = start_runtime(worker_name="summary-sim@test", engine=SimulatedEngine(config))
    yield runtime
    stop_runtime()
