"""What the simulated engine honours of a SamplingSpec (stop, ignore_eos, min_tokens, seed, logprobs), how the
coalescer carries logprobs into delta events, and how a run's prompt and sampling reach the engine request."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from generation.result import EngineFinishReason
from generation.sampling import SamplingSpec
from inference_workers.coalescer import DeltaCoalescer
from inference_workers.engine.base import EngineDead, GenerationDelta, GenerationRequest
from inference_workers.engine.simulated import SimulatedEngine
from inference_workers.prompting import build_run_prompt
from inference_workers.runtime import WorkerRuntime
from inference_workers.services import generate_run, run_generation_request
from runs.models import PromptMode, Run, RunStatus
from runs.streaming.contract import StreamEvent
from tests.factories import ChatFactory, MessageFactory, RunFactory
from tests.inference_workers.conftest import fast_sim_config, stream_of, text_after_last_reset
from tests.inference_workers.list_writer import ListWriter


def _generate(
    sampling: SamplingSpec, *, prompt: str = "Tell me a story.", max_tokens: int = 12
) -> list[GenerationDelta]:
    async def go() -> list[GenerationDelta]:
        engine = SimulatedEngine(fast_sim_config(sim_step_base_s=0.0, sim_step_per_seq_s=0.0))
        await engine.start()
        try:
            request = GenerationRequest(request_id="r", prompt=prompt, max_tokens=max_tokens, sampling=sampling)
            return [delta async for delta in engine.generate(request)]
        finally:
            await engine.shutdown()

    return asyncio.run(go())


def _text(deltas: list[GenerationDelta]) -> str:
    return "".join(d.text for d in deltas)


GREEDY = SamplingSpec(temperature=0.0)


# stop, ignore_eos, min_tokens


def test_the_text_ends_before_the_first_stop_string_with_finish_stop() -> None:
    full = _text(_generate(GREEDY))
    words = full.split(" ")
    stop = " " + words[4]  # a word in the middle of the answer
    deltas = _generate(dataclasses.replace(GREEDY, stop=(stop, "never-said")))
    text = _text(deltas)
    assert text == full[: full.index(stop)] and stop not in text
    assert deltas[-1].finish_reason == EngineFinishReason.STOP
    assert sum(d.new_tokens for d in deltas) < 12
    # A stop string that never comes changes nothing.
    assert _text(_generate(dataclasses.replace(GREEDY, stop=("never-said",)))) == full


def test_stop_strings_are_searched_only_after_min_tokens() -> None:
    tokens = [d.text for d in _generate(GREEDY)]
    stop = tokens[1]  # the second token: without min_tokens the answer would be one token long
    assert _text(_generate(dataclasses.replace(GREEDY, stop=(stop,)))) == tokens[0]
    text = _text(_generate(dataclasses.replace(GREEDY, stop=(stop,), min_tokens=5)))
    assert text.startswith("".join(tokens[:5]))


def test_ignore_eos_runs_to_max_tokens_and_min_tokens_postpones_the_end() -> None:
    natural = _generate(GREEDY, max_tokens=30)  # ends after SIM_OUTPUT_TOKENS (12), its stand-in for EOS
    assert sum(d.new_tokens for d in natural) == 12 and natural[-1].finish_reason == EngineFinishReason.STOP
    forced = _generate(dataclasses.replace(GREEDY, ignore_eos=True), max_tokens=30)
    assert sum(d.new_tokens for d in forced) == 30 and forced[-1].finish_reason == EngineFinishReason.LENGTH
    assert _text(forced).startswith(_text(natural))
    longer = _generate(dataclasses.replace(GREEDY, min_tokens=20), max_tokens=30)
    assert sum(d.new_tokens for d in longer) == 20 and longer[-1].finish_reason == EngineFinishReason.STOP


# seed


def test_a_seed_repeats_the_text_at_temperature_above_zero_and_another_seed_differs() -> None:
    hot = SamplingSpec(temperature=1.0)
    seeded = _text(_generate(hot.with_seed(7)))
    assert _text(_generate(hot.with_seed(7))) == seeded
    assert _text(_generate(hot.with_seed(8))) != seeded
    assert _text(_generate(hot)) != _text(_generate(hot))  # no seed: a new draw each call


def test_temperature_zero_is_deterministic_per_prompt_whatever_the_seed() -> None:
    greedy = _text(_generate(GREEDY))
    assert _text(_generate(GREEDY.with_seed(1))) == _text(_generate(GREEDY.with_seed(2))) == greedy
    assert _text(_generate(GREEDY, prompt="Another prompt.")) != greedy


# logprobs


@pytest.mark.parametrize("top", [0, 3, 20])
def test_logprobs_are_one_well_formed_entry_per_token(top: int) -> None:
    deltas = _generate(dataclasses.replace(GREEDY, logprobs=top))
    entries = [entry for d in deltas for entry in d.logprobs or []]
    assert len(entries) == sum(d.new_tokens for d in deltas) == 12
    assert "".join(e["token"] for e in entries) == _text(deltas)
    for entry in entries:
        assert entry["bytes"] == list(entry["token"].encode()) and entry["logprob"] <= 0
        ranked = entry["top_logprobs"]
        assert len(ranked) == top
        assert len({t["token"] for t in ranked}) == top
        assert [t["logprob"] for t in ranked] == sorted((t["logprob"] for t in ranked), reverse=True)
        if top:
            assert ranked[0]["token"] == entry["token"] and ranked[0]["logprob"] == entry["logprob"]
        assert all(t["bytes"] == list(t["token"].encode()) for t in ranked)


def test_no_logprobs_unless_asked() -> None:
    assert all(d.logprobs is None for d in _generate(GREEDY))


# the coalescer


def _lp(token: str) -> dict[str, Any]:
    return {"token": token, "logprob": -0.5, "bytes": list(token.encode()), "top_logprobs": []}


def test_delta_events_carry_the_logprobs_of_their_tokens() -> None:
    writer = ListWriter()
    coalescer = DeltaCoalescer(writer, interval_s=lambda: 60.0, max_tokens=3, logprobs=True)  # type: ignore[arg-type]
    coalescer.add("A", 1, [_lp("A")])
    assert writer.events == [{"text": "A", "tokens": 1, "logprobs": [_lp("A")]}]  # the first text at once
    coalescer.add("b", 1, [_lp("b")])
    coalescer.add("c", 1, [_lp("c")])
    assert len(writer.events) == 1
    coalescer.add("d", 1, [_lp("d")])
    assert writer.events[-1] == {"text": "bcd", "tokens": 3, "logprobs": [_lp("b"), _lp("c"), _lp("d")]}
    coalescer.add("", 1, [_lp("<eos>")])  # the end-of-sequence token: no text, but its logprob
    coalescer.flush()
    assert writer.events[-1] == {"text": "", "tokens": 1, "logprobs": [_lp("<eos>")]}
    for event in writer.events:
        assert len(event["logprobs"]) == event["tokens"]


def test_without_logprobs_the_events_stay_text_and_tokens() -> None:
    writer = ListWriter()
    coalescer = DeltaCoalescer(writer, interval_s=lambda: 60.0, max_tokens=4)  # type: ignore[arg-type]
    coalescer.add("A", 1, [_lp("A")])
    coalescer.add("", 1, [_lp("<eos>")])
    coalescer.drain()
    assert writer.events == [{"text": "A", "tokens": 1}]


def test_tokens_without_text_are_written_as_they_come_and_left_to_the_terminal_event_at_the_end() -> None:
    """Special tokens (an end-of-sequence token under ``ignore_eos``) have no text: vLLM's server still streams a chunk
    for them, and a client's first token is the first of them. The last text-less flush of an attempt is not written:
    the terminal event that follows counts its tokens."""
    writer = ListWriter()
    coalescer = DeltaCoalescer(writer, interval_s=lambda: 60.0, max_tokens=2)  # type: ignore[arg-type]
    coalescer.add("", 1)  # the first token: at once, text or not
    coalescer.add("", 1)
    coalescer.add("", 1)  # two buffered: max_tokens
    coalescer.add("A", 1)
    coalescer.add("", 1)
    coalescer.add("", 1)  # the end-of-sequence token, left to the terminal event
    coalescer.drain()
    assert writer.events == [{"text": "", "tokens": 1}, {"text": "", "tokens": 2}, {"text": "A", "tokens": 2}]


# runs: their prompt and their sampling


@pytest.mark.django_db
def test_a_runs_stored_sampling_becomes_its_engine_request() -> None:
    spec = SamplingSpec(temperature=0.3, top_p=0.9, stop=("END",), seed=5, logprobs=2, logit_bias={11: -5.0})
    run = RunFactory.create(temperature=0.3, top_p=0.9, sampling=spec.to_json(), max_tokens=40, priority=3)
    request = run_generation_request(run=run, request_id="x", prompt="p")
    assert request.sampling == spec
    assert (request.max_tokens, request.priority, request.prompt) == (40, 3, "p")


@pytest.mark.django_db
def test_a_raw_run_is_its_user_messages_text_exactly() -> None:
    chat = ChatFactory.create()
    MessageFactory.create(chat=chat, content="an earlier turn")
    content = "  The quick brown fox\njumps over"
    message = MessageFactory.create(chat=chat, content=content)
    run = RunFactory.create(chat=chat, user_message=message, prompt_mode=PromptMode.RAW)
    assert build_run_prompt(run=run) == content
    other = ChatFactory.create(owner=chat.owner)  # one active run per chat
    chat_run = RunFactory.create(chat=other, user_message=MessageFactory.create(chat=other, content=content))
    assert build_run_prompt(run=chat_run) != content  # a chat run goes through the template


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
TOOLS_TEMPLATE = (
    "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}\n{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:"
)


@pytest.fixture
def tools_tokenizer(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The model's tokenizer with a chat template that renders tools (SmolLM2's own ignores them)."""
    from deployments import tokenizer as tokenizer_module

    tokenizer = copy.copy(tokenizer_module.get_tokenizer())
    tokenizer.chat_template = TOOLS_TEMPLATE
    monkeypatch.setattr(tokenizer_module, "request_tokenizer", lambda: tokenizer)
    yield


@pytest.mark.django_db
def test_a_chat_runs_tools_reach_the_chat_template(tools_tokenizer: None) -> None:
    with_tools = RunFactory.create(tools=[TOOL])
    prompt = build_run_prompt(run=with_tools)
    assert prompt.startswith("TOOLS:get_weather;") and with_tools.user_message.content in prompt
    without = RunFactory.create()
    assert "TOOLS" not in build_run_prompt(run=without)


# a worker whose engine dies


class _DyingEngine(SimulatedEngine):
    """Dies (as vLLM's engine core can) on the first request."""

    async def generate(self, request: GenerationRequest) -> Any:  # type: ignore[override]
        raise EngineDead("engine core exited")
        yield  # pragma: no cover


@pytest.mark.django_db(transaction=True)
def test_a_dead_engine_leaves_the_run_to_the_reaper_and_stops_the_worker() -> None:
    from django.conf import settings

    from generation.worker_contract import run_lease_holders, worker_heartbeats

    exits: list[bool] = []
    config = fast_sim_config()
    runtime = WorkerRuntime(
        worker_name="dying@test",
        engine_config=config,
        worker_config=settings.WORKERS,
        engine=_DyingEngine(config),
        exit_process=lambda: exits.append(True),
        warm_up=False,  # it dies on its first request: that must be the run's
    )
    runtime.start()
    try:
        assert [b.worker for b in worker_heartbeats()] == ["dying@test"]
        run = RunFactory.create()
        assert generate_run(run_id=run.pk, runtime=runtime) is None
        run.refresh_from_db()
        assert run.status == RunStatus.STREAMING and run.attempts == 1  # not failed: the reaper requeues it
        assert run_lease_holders([run.pk])[run.pk] is None  # lease released, so the reaper need not wait
        assert exits == [True] and worker_heartbeats() == []
        # Any later run is refused before it is touched (its task goes back to the queue).
        later = RunFactory.create()
        with pytest.raises(EngineDead):
            generate_run(run_id=later.pk, runtime=runtime)
        assert Run.objects.get(pk=later.pk).status == RunStatus.QUEUED
        assert exits == [True]  # the process is told to stop once
    finally:
        runtime.stop()


@pytest.mark.django_db(transaction=True)
def test_a_run_with_logprobs_and_stop_on_the_simulated_worker(sim_runtime: WorkerRuntime) -> None:
    greedy = RunFactory.create(temperature=0.0, max_tokens=12)
    generate_run(run_id=greedy.pk, runtime=sim_runtime)
    greedy.refresh_from_db()
    assert greedy.assistant_message is not None
    full = greedy.assistant_message.content
    stop = " " + full.split(" ")[5]

    chat = ChatFactory.create(owner=greedy.user)
    message = MessageFactory.create(chat=chat, content=greedy.user_message.content)
    spec = SamplingSpec(temperature=0.0, stop=(stop,), logprobs=2)
    run = RunFactory.create(chat=chat, user_message=message, temperature=0.0, max_tokens=12, sampling=spec.to_json())
    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE
    run.refresh_from_db()
    assert run.assistant_message is not None
    assert run.assistant_message.content == full[: full.index(stop)]
    entries = stream_of(run)
    assert text_after_last_reset(entries) == run.assistant_message.content
    deltas = [e.data for e in entries if e.event == StreamEvent.DELTA]
    assert deltas and all(len(d["logprobs"]) == d["tokens"] for d in deltas)
    assert sum(d["tokens"] for d in deltas) == run.output_tokens
    assert all(len(entry["top_logprobs"]) == 2 for d in deltas for entry in d["logprobs"])
