"""The engine host hands a task thread its deltas in batches: once the caller says it will not flush before a
time (``hold_s``), the thread sleeps until then and takes what arrived meanwhile at once, instead of waking for every
token (a wake-up per token per run was most of a worker's CPU per token at GPU speeds)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from generation.sampling import SamplingSpec
from inference_workers.engine.base import EngineError, GenerationDelta, GenerationRequest
from inference_workers.engine.host import EngineHost
from inference_workers.engine.simulated import SimulatedEngine
from tests.inference_workers.conftest import fast_sim_config

TOKENS = 40


@pytest.fixture
def host() -> Iterator[EngineHost]:
    config = fast_sim_config(sim_step_base_s=0.01, sim_step_per_seq_s=0.0)
    engine_host = EngineHost(config, SimulatedEngine(config))
    engine_host.start(timeout=30)
    try:
        yield engine_host
    finally:
        engine_host.shutdown()


def _request(name: str) -> GenerationRequest:
    sampling = SamplingSpec(temperature=0.0, ignore_eos=True)
    return GenerationRequest(request_id=name, prompt="Tell me a story", max_tokens=TOKENS, sampling=sampling)


def _collect(host: EngineHost, request: GenerationRequest, hold: float) -> tuple[list[GenerationDelta], int]:
    """Every delta, and how many times the thread woke for one after a wait (hold_s is asked at each)."""
    wakes = 0

    def hold_s() -> float:
        nonlocal wakes
        wakes += 1
        return hold

    deltas = [d for d in host.stream(request, poll_s=lambda: 1.0, hold_s=hold_s) if d is not None]
    return deltas, wakes


def test_a_caller_that_holds_wakes_once_per_hold_and_loses_nothing(host: EngineHost) -> None:
    eager, eager_wakes = _collect(host, _request("eager"), 0.0)
    held, held_wakes = _collect(host, _request("held"), 0.1)
    text = "".join(d.text for d in eager)
    assert "".join(d.text for d in held) == text and text
    assert sum(d.new_tokens for d in held) == sum(d.new_tokens for d in eager) == TOKENS
    assert held[-1].finish_reason == eager[-1].finish_reason == "length"
    # 40 steps of 10 ms: a wake per token without holding, about one per 100 ms with it.
    assert eager_wakes >= TOKENS // 2, eager_wakes
    assert held_wakes <= TOKENS // 4, held_wakes


def test_a_lone_last_delta_is_not_held(host: EngineHost) -> None:
    request = GenerationRequest(request_id="short", prompt="Hi", max_tokens=1)
    started = time.monotonic()
    deltas, _ = _collect(host, request, 5.0)
    assert sum(d.new_tokens for d in deltas) == 1
    assert time.monotonic() - started < 5.0  # the one delta and the end arrive together: nothing to wait for


def test_an_end_that_comes_during_a_hold_cuts_it_short(host: EngineHost) -> None:
    """A short answer ends within a flush interval of its first token: its last tokens and the run's end are handed
    over when the engine is done, not when the hold would have run out (up to 0.5 s under load)."""
    sampling = SamplingSpec(temperature=0.0, ignore_eos=True)
    request = GenerationRequest(request_id="ends-in-hold", prompt="Hi", max_tokens=4, sampling=sampling)
    started = time.monotonic()
    deltas, wakes = _collect(host, request, 5.0)  # 4 steps of 10 ms, well inside the first hold
    assert sum(d.new_tokens for d in deltas) == 4 and deltas[-1].finish_reason == "length"
    assert time.monotonic() - started < 2.0
    assert wakes <= 2  # it still held: the first delta, then the rest at the end


def test_errors_are_not_held(host: EngineHost) -> None:
    request = GenerationRequest(request_id="short", prompt="Hi", max_tokens=1)
    host.dead = "gone"
    with pytest.raises(EngineError):
        next(iter(host.stream(request, hold_s=lambda: 5.0)))


def test_a_held_thread_takes_what_arrived_meanwhile_in_one_batch(host: EngineHost) -> None:
    """Each wake after a hold hands over what arrived meanwhile as one batch: 40 steps of 10 ms held 100 ms at a
    time come in a handful of batches, not 40."""
    holds: list[float] = []

    def hold_s() -> float:
        holds.append(time.monotonic())
        return 0.0 if len(holds) == 1 else 0.1  # the first token at once, as a coalescer's first flush

    batches = [b for b in host.stream_batches(_request("batched"), poll_s=lambda: 1.0, hold_s=hold_s) if b]
    assert sum(d.new_tokens for batch in batches for d in batch) == TOKENS
    assert batches[-1][-1].finish_reason == "length"
    assert len(batches) <= TOKENS // 4, [len(b) for b in batches]
    assert max(len(b) for b in batches) >= 5
