"""The real-engine Celery worker that the engine tests of this package share (the ``engine_worker`` fixture in
``conftest.py``: one worker subprocess for all of them, since starting vLLM costs ~1 minute), and the runs they
send it: created as rows and sent with ``send_to_worker`` (the dispatcher's job in production), so the worker
sees committed data and those tests are transactional."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from bench.lib.processes import free_port
from chats.models import MessageRole
from runs.models import Run
from runs.routing import send_to_worker
from tests.factories import ChatFactory, MessageFactory, RunFactory, UserFactory

ROOT = Path(__file__).resolve().parents[2]
WORKER_NAME = "enginetest@h2"
SLOTS = 8
METRICS_PORT = free_port()
METRICS_PUBLISH_S = 0.5
"""The worker copies its vLLM metrics to Redis on every heartbeat (each second) instead of every 5 s."""
LOG_PATH = ROOT / "artifacts" / "engine-worker.log"
"""The worker's output (tests read its log lines)."""


def stop_process(proc: subprocess.Popen[bytes], *, grace_s: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def queued_run(*, content: str, max_tokens: int, tier: str = "pro", temperature: float = 0.0) -> Run:
    user = UserFactory.with_tier(tier)
    chat = ChatFactory.create(owner=user)
    message = MessageFactory.create(chat=chat, role=MessageRole.USER, content=content)
    return RunFactory.create(
        chat=chat, user=user, user_message=message, max_tokens=max_tokens, temperature=temperature, priority=0
    )


def send_run(run: Run) -> None:
    send_to_worker(run_id=run.pk, queue=run.tier.name)
