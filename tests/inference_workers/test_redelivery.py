"""A Celery message redelivered after its run has ended changes nothing (real workers, simulated engine).

The broker redelivers a message that was never acknowledged once ``CELERY_VISIBILITY_TIMEOUT_S`` has passed: a
worker killed mid-run leaves its message behind. Here the run is finished by another attempt meanwhile (what
the reaper's requeue leads to: it continues from the tokens the killed worker had streamed), and then the old
message comes back to a fresh worker. That delivery must be a no-op: no second assistant message, no state
change, no stream event after the terminal one, the same counters.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings

from accounts.models import UsageDay
from bench.lib.processes import celery_worker_argv, child_env, stop_process_group
from chats.models import Message, MessageRole
from core.redis_client import get_redis
from generation.worker_contract import GENERATE_TASK, run_lease_holder
from inference_workers.services import generate_run
from runs.counters import METRICS_KEY
from runs.models import Recovery, Run, RunStatus
from runs.routing import send_to_worker
from runs.streaming.contract import StreamEvent
from tests.factories import ChatFactory, MessageFactory, RunFactory, UserFactory
from tests.inference_workers.conftest import running_sim_runtime, stream_of, wait_for, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "artifacts" / "redelivery"
VISIBILITY_TIMEOUT_S = 2
RECEIVED = re.compile(re.escape(GENERATE_TASK) + r"\[([0-9a-f-]+)\] received")


def _worker_env(*, output_tokens: int) -> dict[str, str]:
    return child_env(
        ENGINE_BACKEND="simulated",
        SIM_STEP_BASE_S="0.05",
        SIM_STEP_PER_SEQ_S="0.0",
        SIM_OUTPUT_TOKENS=str(output_tokens),
        STREAM_FLUSH_MAX_TOKENS="2",
        CELERY_VISIBILITY_TIMEOUT_S=str(VISIBILITY_TIMEOUT_S),
        WORKER_HEARTBEAT_TTL_S="2",  # the killed worker's lease vanishes quickly
        CHAT_AFFINITY="false",
    )


class Worker:
    def __init__(self, name: str, *, output_tokens: int) -> None:
        LOGS.mkdir(parents=True, exist_ok=True)
        self.log = LOGS / f"{name}.log"
        argv = celery_worker_argv(name=f"{name}-{os.getpid()}@redelivery", concurrency=1)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=_worker_env(output_tokens=output_tokens),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_log(self, pattern: str, *, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text())
            if found:
                return found
            if self.proc.poll() is not None:
                raise AssertionError(f"the worker exited ({self.proc.returncode}); see {self.log}")
            time.sleep(0.2)
        raise AssertionError(f"no {pattern!r} in {self.log} within {timeout:.0f} s")

    def kill(self) -> None:
        """SIGKILL, like a host that lost power: nothing is acknowledged or cleaned up."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        stop_process_group(self.proc)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    assert settings.CELERY_BROKER_URL.rsplit("/", 1)[-1] != "0", "this test flushes its broker db: never db 0"
    broker.flushdb()  # no stale tasks of earlier runs
    started: list[Worker] = []
    try:
        yield started
    finally:
        for worker in started:
            worker.stop()
        broker.flushdb()


def _snapshot(run: Run) -> dict[str, Any]:
    return {
        "run": Run.objects.filter(pk=run.pk).values().get(),
        "assistant_messages": list(
            Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT).values_list("pk", "content")
        ),
        "stream": [(e.seq, e.event, e.data) for e in stream_of(run)],
        "counters": get_redis().hgetall(METRICS_KEY),
        "usage": list(UsageDay.objects.filter(user=run.user).values("day", "runs", "input_tokens", "output_tokens")),
    }


def test_a_message_redelivered_after_its_run_ended_is_a_no_op(workers: list[Worker]) -> None:
    user = UserFactory.with_tier("pro")
    chat = ChatFactory.create(owner=user)
    run = RunFactory.create(
        chat=chat, user=user, user_message=MessageFactory.create(chat=chat), max_tokens=2000, priority=0
    )

    # 1. A worker takes the message and dies mid-run: the message stays unacknowledged in the broker.
    first = Worker("first", output_tokens=5000)  # minutes of generation: it is killed long before
    workers.append(first)
    first.wait_log(r"ready\.", timeout=120)
    send_to_worker(run_id=run.pk, queue="pro")
    task_id = first.wait_log(RECEIVED.pattern, timeout=60).group(1)
    wait_for(lambda: any(e.event == StreamEvent.DELTA for e in stream_of(run)), timeout=60, what="the first delta")
    first.kill()
    assert Run.objects.get(pk=run.pk).status == RunStatus.STREAMING

    # 2. Another attempt finishes the run once the dead worker's lease is gone.
    wait_for(lambda: run_lease_holder(run_id=run.pk) is None, timeout=10, what="the dead worker's lease to expire")
    with running_sim_runtime(worker_name="finisher@test") as runtime:
        assert generate_run(run_id=run.pk, runtime=runtime) == RunStatus.DONE
    run = wait_terminal(run, timeout=30)
    assert run.status == RunStatus.DONE and run.attempts == 2
    # It went on from what the killed worker had streamed, with no reset (test_continuation.py in depth).
    assert run.recovery == Recovery.CONTINUED and run.resumed_tokens > 0
    assert run.output_tokens == run.resumed_tokens + 12
    assert StreamEvent.RESET not in [e.event for e in stream_of(run)]
    before = _snapshot(run)
    assert len(before["assistant_messages"]) == 1
    assert before["stream"][-1][1] == StreamEvent.DONE

    # 3. The old message comes back (it is older than the visibility timeout) to a fresh worker: a no-op.
    time.sleep(VISIBILITY_TIMEOUT_S)
    # Short answers: were the delivery not a no-op, the run would be generated again within the wait below.
    second = Worker("second", output_tokens=12)
    workers.append(second)
    second.wait_log(re.escape(f"{GENERATE_TASK}[{task_id}] received"), timeout=120)
    second.wait_log(re.escape(f"{GENERATE_TASK}[{task_id}] succeeded"), timeout=60)
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    wait_for(lambda: broker.hlen("unacked") == 0, timeout=10, what="the redelivered message to be acknowledged")
    time.sleep(0.5)  # anything the delivery might have written after the ack

    after = _snapshot(run)
    assert after == before
    assert RECEIVED.findall(second.text()) == [task_id]  # the same message, delivered once more
