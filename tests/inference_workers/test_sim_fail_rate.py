"""``SIM_FAIL_RATE``: the simulated engine's forced failure (a simulation knob for failure-handling tests)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import cast

import pytest

from chats.models import Message, MessageRole
from core.config import engine_config_from_env
from inference_workers.engine.base import GenerationDelta, GenerationRequest
from inference_workers.engine.simulated import SimulatedEngine, SimulatedFailure, simulated_failure
from inference_workers.runtime import WorkerRuntime
from inference_workers.services import generate_run
from runs.models import RunStatus
from runs.streaming.contract import StreamEvent
from tests.factories import RunFactory
from tests.inference_workers.conftest import fast_sim_config, stream_of


def _generate(request_id: str, *, fail_rate: float) -> tuple[list[GenerationDelta], BaseException | None]:
    """The deltas the engine yields for one request, and what it raised (None: it ended normally)."""

    async def go() -> tuple[list[GenerationDelta], BaseException | None]:
        engine = SimulatedEngine(fast_sim_config(sim_step_base_s=0.0, sim_step_per_seq_s=0.0, sim_fail_rate=fail_rate))
        await engine.start()
        deltas: list[GenerationDelta] = []
        try:
            async for delta in engine.generate(GenerationRequest(request_id=request_id, prompt="Hi", max_tokens=8)):
                deltas.append(delta)
        except SimulatedFailure as exc:
            return deltas, exc
        finally:
            await engine.shutdown()
        return deltas, None

    return asyncio.run(go())


def test_the_rate_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SIM_FAIL_RATE", raising=False)
    assert engine_config_from_env().sim_fail_rate == 0.0
    monkeypatch.setenv("SIM_FAIL_RATE", "0.25")
    assert engine_config_from_env().sim_fail_rate == 0.25


def test_the_share_that_fails_follows_the_rate_deterministically_and_never_a_warm_up() -> None:
    ids = [f"run-{n}-1" for n in range(2000)]
    assert not any(simulated_failure(i, 0.0) for i in ids)
    assert all(simulated_failure(i, 1.0) for i in ids)
    picked = [i for i in ids if simulated_failure(i, 0.3)]
    assert 0.25 < len(picked) / len(ids) < 0.35
    assert picked == [i for i in ids if simulated_failure(i, 0.3)]  # the same requests every time
    assert set(picked) <= {i for i in ids if simulated_failure(i, 0.6)}  # a higher rate adds to those picked
    assert not simulated_failure("warm-up-0a1b2c3d", 1.0)


def test_a_picked_request_raises_just_after_its_first_delta() -> None:
    deltas, error = _generate("run-1-1", fail_rate=1.0)
    assert isinstance(error, SimulatedFailure) and "SIM_FAIL_RATE" in str(error)
    assert len(deltas) == 1 and deltas[0].text and deltas[0].finish_reason is None


def test_requests_not_picked_and_warm_ups_answer_in_full() -> None:
    for request_id, rate in (("run-1-1", 0.0), ("warm-up-0a1b2c3d", 1.0)):
        deltas, error = _generate(request_id, fail_rate=rate)
        assert error is None
        assert deltas[-1].finish_reason is not None and sum(d.new_tokens for d in deltas) == 8


@pytest.mark.django_db(transaction=True)
def test_the_run_fails_and_the_worker_goes_on_serving(sim_runtime: WorkerRuntime) -> None:
    engine = cast(SimulatedEngine, sim_runtime.host.engine)
    engine.config = dataclasses.replace(engine.config, sim_fail_rate=1.0)
    run = RunFactory.create()

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.FAILED

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and "SimulatedFailure" in run.error
    assert stream_of(run)[-1].event == StreamEvent.ERROR
    assert not Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT).exists()
    engine.config = dataclasses.replace(engine.config, sim_fail_rate=0.0)
    assert sim_runtime.host.dead is None
    assert generate_run(run_id=RunFactory.create().pk, runtime=sim_runtime) == RunStatus.DONE
