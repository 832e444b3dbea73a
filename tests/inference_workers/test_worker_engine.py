"""End to end through a real Celery worker (threads pool) driving the real vLLM engine with SmolLM2 on CPU: a
run's life on it (done, redelivered, prioritized, cancelled, its worker killed), its batches and its metrics.

One worker subprocess serves every test here and in ``test_worker_engine_sampling.py`` (the ``engine_worker``
fixture, :mod:`tests.inference_workers.vllm_worker`). Runs are created as rows and sent with ``send_to_worker``
(the dispatcher's job in production), so the worker sees committed data: these tests are transactional.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from bench.lib.processes import child_env
from chats.models import Message, MessageRole
from generation.worker_contract import worker_heartbeats
from runs.models import FinishReason, Recovery, Run, RunStatus
from runs.reaper import reap_orphaned_runs
from runs.routing import send_to_worker
from runs.services import run_cancel
from runs.streaming.contract import StreamEvent
from tests.inference_workers.conftest import stream_of, text_after_last_reset, wait_for, wait_terminal
from tests.inference_workers.vllm_worker import (
    LOG_PATH,
    METRICS_PORT,
    METRICS_PUBLISH_S,
    ROOT,
    SLOTS,
    queued_run,
    send_run,
)
from tests.monitoring.dashboard import dashboard_metric_names, exposed_sample_names

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


def test_prompt_ends_done_with_the_streamed_text_and_redelivery_adds_nothing(engine_worker: str) -> None:
    run = queued_run(content="What is the capital of France?", max_tokens=48)
    send_run(run)
    run = wait_terminal(run, timeout=120)

    assert run.status == RunStatus.DONE, run.error
    assert run.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    assert run.worker == engine_worker and run.attempts == 1
    assert run.assistant_message is not None
    entries = stream_of(run)
    assert run.assistant_message.content == text_after_last_reset(entries)
    assert "Paris" in run.assistant_message.content
    assert run.input_tokens > 10 and 0 < run.output_tokens <= 48
    assert run.assistant_message.token_count == run.output_tokens
    done = entries[-1]
    assert done.event == StreamEvent.DONE
    assert done.data["message_id"] == run.assistant_message.pk and done.data["status"] == "done"
    # Every token is counted; only the end-of-sequence token carries no text (and so no delta).
    assert run.output_tokens - 1 <= sum(e.data["tokens"] for e in entries if e.event == StreamEvent.DELTA)

    # The same task again (a redelivery after the run finished), then a fresh run behind it on the queue.
    send_run(run)
    follower = queued_run(content="Say hello.", max_tokens=8)
    send_run(follower)
    assert wait_terminal(follower, timeout=120).status == RunStatus.DONE
    assert Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT).count() == 1
    assert len(stream_of(run)) == len(entries)
    assert Run.objects.get(pk=run.pk).attempts == 1

    # vLLM's own Prometheus metrics, served by the worker process: they counted this run's tokens too.
    with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10) as resp:
        families = {f.name: f for f in text_string_to_metric_families(resp.read().decode())}
    generated = sum(s.value for s in families["vllm:generation_tokens"].samples if s.name.endswith("_total"))
    assert generated >= run.output_tokens + Run.objects.get(pk=follower.pk).output_tokens

    beats = [b for b in worker_heartbeats() if b.worker == engine_worker]
    wait_for(lambda: bool([b for b in worker_heartbeats() if b.worker == engine_worker]), timeout=5, what="beat")
    [beat] = beats or [b for b in worker_heartbeats() if b.worker == engine_worker]
    assert beat.model == settings.ENGINE.served_model_name and beat.max_slots == SLOTS
    assert beat.model_version not in ("", "unknown", "simulated")
    # vLLM's own prefix-cache counters reach the heartbeat: every prompt token was looked up in the cache.
    prompt_tokens = run.input_tokens + Run.objects.get(pk=follower.pk).input_tokens
    wait_for(
        lambda: any(b.worker == engine_worker and b.prefix_cache_queries >= prompt_tokens for b in worker_heartbeats()),
        timeout=10,
        what="the prefix-cache counters in the heartbeat",
    )


def _first_token_fields(run_id: int) -> dict[str, str]:
    """The ``key=value`` fields of the worker's ``first_token`` line for ``run_id`` (plain log format)."""
    log = LOG_PATH
    found: list[dict[str, str]] = []

    def line_is_there() -> bool:
        for line in log.read_text(errors="replace").splitlines():
            if "event=first_token " in line and f" run_id={run_id} " in line:
                found.append(dict(kv.split("=", 1) for kv in line.split() if "=" in kv))
                return True
        return False

    wait_for(line_is_there, timeout=10, what=f"run {run_id}'s first_token line in {log}")
    return found[0]


def test_the_dispatchers_priority_reaches_vllm_and_first_token_says_where_the_time_went(engine_worker: str) -> None:
    run = queued_run(content="Name one colour.", max_tokens=8)
    send_to_worker(run_id=run.pk, queue=run.tier.name, engine_priority=23)  # a band the dispatcher could choose
    run = wait_terminal(run, timeout=120)
    assert run.status == RunStatus.DONE, run.error

    fields = _first_token_fields(run.pk)
    assert fields["engine_priority"] == "23"  # the task's kwarg, not the run's stored tier priority (0)
    # vLLM's own per-request timestamps, split: to its core, in its waiting queue, prefill, back to the worker.
    names = ("engine_submit_s", "engine_waiting_s", "engine_prefill_s", "engine_output_s")
    parts = {k: float(fields[k]) for k in names}
    assert all(v >= 0 for v in parts.values()), parts
    assert parts["engine_prefill_s"] > 0  # a real prompt's prefill takes time on the engine
    assert fields["engine_preemptions"] == "0"
    assert run.first_token_at is not None and run.started_at is not None
    assert sum(parts.values()) <= (run.first_token_at - run.started_at).total_seconds() + 0.05


def _web_metrics() -> str:
    """The web tier's ``/metrics``, read through Django as any web replica serves it."""
    resp = Client().get("/metrics")
    assert resp.status_code == 200, resp.content
    return resp.content.decode()


def _generated_in_web_metrics(text: str, worker: str) -> float | None:
    samples = [
        s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:generation_tokens_total" and s.labels.get("worker") == worker
    ]
    return sum(s.value for s in samples) if samples else None


def test_the_engines_vllm_metrics_are_merged_into_the_webs_metrics(engine_worker: str) -> None:
    """One scrape target: the worker's ``vllm:*`` families come out of the web's ``/metrics`` with the labels
    ``worker`` and ``deployment``, and follow the engine within the publish interval plus one heartbeat."""
    bound_s = METRICS_PUBLISH_S + settings.WORKERS.heartbeat_interval_s + 2  # + Redis, the scrape, a busy CPU
    wait_for(
        lambda: _generated_in_web_metrics(_web_metrics(), engine_worker) is not None,
        timeout=bound_s,
        interval=0.2,
        what="the worker's vLLM metrics in the web's /metrics",
    )
    before = _generated_in_web_metrics(_web_metrics(), engine_worker)
    assert before is not None
    run = queued_run(content="Say hello.", max_tokens=8)
    send_run(run)
    run = wait_terminal(run, timeout=120)
    assert run.status == RunStatus.DONE and run.output_tokens > 0
    wait_for(
        lambda: (_generated_in_web_metrics(_web_metrics(), engine_worker) or 0) >= before + run.output_tokens,
        timeout=bound_s,
        interval=0.2,
        what="the run's tokens in the web's vllm:generation_tokens_total",
    )

    text = _web_metrics()
    lines = [line for line in text.splitlines() if line.startswith("vllm:generation_tokens_total")]
    print("\n" + "\n".join(lines) + f"\n({len(text)} characters of /metrics)")
    assert text.count("# TYPE vllm:generation_tokens_total counter") == 1
    [sample] = [
        s
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:generation_tokens_total" and s.labels.get("worker") == engine_worker
    ]
    assert sample.labels["deployment"] == f"{settings.ENGINE.served_model_name}@v1"  # the default deployment
    assert sample.value >= before + run.output_tokens

    # Every vLLM metric the Grafana dashboard queries is there (the chat_* ones: tests/monitoring/test_dashboard.py).
    wanted = {name for name in dashboard_metric_names() if name.startswith("vllm:")}
    missing = sorted(wanted - exposed_sample_names(text))
    assert not missing, f"the dashboard queries vLLM metrics the web's /metrics does not expose: {missing}"


PROMPTS = [
    "Write a short poem about the sea.",
    "Describe a sunny morning in a small town.",
    "Explain why the sky is blue.",
    "Tell me about elephants.",
    "Give me three tips for learning to cook.",
    "What makes a good friend?",
    "Describe the taste of an apple.",
    "Why do people like music?",
]


def _timed_batch(*, concurrent: bool, max_tokens: int) -> tuple[float, int]:
    runs = [queued_run(content=prompt, max_tokens=max_tokens) for prompt in PROMPTS]
    started = time.monotonic()
    if concurrent:
        for run in runs:
            send_run(run)
        finished = [wait_terminal(run, timeout=300) for run in runs]
    else:
        finished = []
        for run in runs:
            send_run(run)
            finished.append(wait_terminal(run, timeout=120))
    elapsed = time.monotonic() - started
    assert all(r.status == RunStatus.DONE for r in finished), [r.error for r in finished]
    return elapsed, sum(r.output_tokens for r in finished)


def test_concurrent_runs_share_the_engines_batches(engine_worker: str) -> None:
    sequential_s, sequential_tokens = _timed_batch(concurrent=False, max_tokens=24)
    concurrent_s, concurrent_tokens = _timed_batch(concurrent=True, max_tokens=24)
    print(
        f"\n8 runs sequential: {sequential_s:.1f} s ({sequential_tokens} tokens); "
        f"8 concurrent: {concurrent_s:.1f} s ({concurrent_tokens} tokens); "
        f"speed-up {sequential_s / concurrent_s:.2f}x"
    )
    assert concurrent_tokens >= 0.8 * sequential_tokens  # comparable work (greedy decoding, same prompts)
    assert concurrent_s < 0.6 * sequential_s


def test_cancel_mid_stream_keeps_partial_text_and_frees_the_slot(engine_worker: str) -> None:
    run = queued_run(content="Write a very long story about a dragon and a knight.", max_tokens=1000, temperature=0.7)
    send_run(run)
    wait_for(lambda: sum(e.event == StreamEvent.DELTA for e in stream_of(run)) >= 3, timeout=120, what="a few deltas")

    cancelled_at = time.monotonic()
    assert run_cancel(run=run).status == RunStatus.CANCELLING
    run = wait_terminal(run, timeout=30)
    print(f"\ncancel took {time.monotonic() - cancelled_at:.2f} s")

    assert run.status == RunStatus.CANCELLED and run.finish_reason == FinishReason.CANCELLED
    assert 0 < run.output_tokens < 1000
    assert run.assistant_message is not None and run.assistant_message.content
    entries = stream_of(run)
    assert run.assistant_message.content == text_after_last_reset(entries)
    assert entries[-1].event == StreamEvent.DONE and entries[-1].data["status"] == "cancelled"

    def idle() -> bool:
        beats = [b for b in worker_heartbeats() if b.worker == engine_worker]
        return bool(beats) and beats[0].running == 0 and beats[0].active_runs == 0

    wait_for(idle, timeout=10, what="the engine slot to be freed")
    follower = queued_run(content="Say hello.", max_tokens=8)
    send_run(follower)
    assert wait_terminal(follower, timeout=120).status == RunStatus.DONE


@pytest.mark.parametrize("requeue", [True, False], ids=["requeued-and-finished", "failed"])
def test_killed_workers_run_does_not_stay_streaming(
    engine_worker: str, requeue: bool, settings: Any, clean_redis: Any
) -> None:
    settings.WORKERS = dataclasses.replace(settings.WORKERS, orphan_grace_s=0.0, requeue_orphans=requeue)
    run = queued_run(content="What is the capital of France?", max_tokens=48)
    env = child_env(
        ENGINE_BACKEND="simulated",
        SIM_STEP_BASE_S="0.05",
        SIM_OUTPUT_TOKENS="5000",
        WORKER_HEARTBEAT_TTL_S="4",  # beats every second: three may be late before the lease lapses
        WORKER_NAME="doomed@h2",
    )
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("worker_process.py")), str(run.pk)], cwd=ROOT, env=env
    )
    try:
        wait_for(lambda: any(e.event == StreamEvent.DELTA for e in stream_of(run)), timeout=60, what="first delta")
        assert Run.objects.get(pk=run.pk).status == RunStatus.STREAMING
        assert reap_orphaned_runs() == []  # its worker is alive: hands off
    finally:
        proc.kill()  # SIGKILL: no cleanup, like a host that lost power
        proc.wait(10)

    wait_for(lambda: reap_orphaned_runs() == [run.pk], timeout=15, interval=0.5, what="the reaper")
    run.refresh_from_db()
    if not requeue:
        assert run.status == RunStatus.FAILED and "doomed@h2" in run.error
        assert stream_of(run)[-1].event == StreamEvent.ERROR
        return
    assert run.status == RunStatus.QUEUED and run.attempts == 1
    send_run(run)  # what the dispatcher does with a requeued run
    run = wait_terminal(run, timeout=120)
    assert run.status == RunStatus.DONE and run.attempts == 2 and run.worker == engine_worker
    entries = stream_of(run)
    # The second attempt went on from the text the killed one had streamed: no reset, nothing said twice.
    assert StreamEvent.RESET not in [e.event for e in entries]
    assert run.recovery == Recovery.CONTINUED and run.resumed_tokens > 0
    assert run.output_tokens > run.resumed_tokens
    assert run.assistant_message is not None
    assert run.assistant_message.content == text_after_last_reset(entries)
    assert Message.objects.filter(chat=run.chat, role=MessageRole.ASSISTANT).count() == 1
