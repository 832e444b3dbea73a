"""Fault suite: no single crash is an outage. Each fault is injected into a real stack on loopback and every
run is accounted for from the client's side.

    .venv/bin/python bench/fault_suite.py                        # every fault (about 6 minutes on 2 cores)
    .venv/bin/python bench/fault_suite.py --fault disconnects --runs 10
    .venv/bin/python bench/fault_suite.py --quick --max-seconds 600

The suite makes its own servers, in a temporary directory it deletes at the end: a Postgres cluster
(``initdb``; run as the ``postgres`` user when the suite runs as root) on a free port, migrated with
``manage.py migrate``, and a ``redis-server`` with an append-only file (``--appendonly yes --appendfsync
everysec``). For each fault it starts a fresh stack on them: one ``uvicorn`` web process, ``manage.py
run_dispatcher`` and one or two Celery workers with the simulated engine (``ENGINE_BACKEND=simulated``), each in
a process group of its own. Clients are plain HTTP clients (httpx, ``Authorization: Token``): each posts a
prompt in a chat of its own and follows the run's SSE stream, reconnecting with ``Last-Event-ID`` (the last
``id:`` it saw) whenever the connection ends before ``done`` or ``error``; ``reset`` empties its text, ``delta``
appends ``data.text``. Its text is then compared with the stored answer (``GET /api/runs/{id}``).

Faults:

- ``disconnects``: every client hangs up at random points (after a random number of events, or of bytes, so
  also in the middle of an event) and resumes;
- ``web_kill``: ``kill -9`` of the web process while every client streams, then the same command again;
- ``worker_kill``: two workers; ``kill -9`` of the one streaming more runs (and its time to next token). Its runs
  are requeued by the reaper (its leases vanish ``WORKER_HEARTBEAT_TTL_S`` after its last heartbeat) and finish on
  the other worker;
- ``redis_restart``: ``SHUTDOWN`` of the suite's Redis mid-stream (runs streaming and runs queued), a second
  down, then ``redis-server`` again on the same port with the same append-only file;
- ``postgres_restart``: ``pg_ctl restart -m fast`` of the suite's Postgres mid-stream;
- ``worker_kill_single``: one worker, ``kill -9`` of its main process, started again a second later: the time to
  next token of its runs (compare ``worker_kill``'s two workers);
- ``outage_sweep``: every URL pattern (a GET and a POST each) during a ``CLIENT PAUSE`` of Redis and a ``pg_ctl
  stop`` of Postgres; its 5xx column counts the answers of 500 or more other than 503.

Both worker faults kill the main process alone (an outside ``kill PID``), then run the engine-orphan check: no
process of its session, and none marked as its engine (``CHAT_ENGINE_OWNER``), may be left 5 s later.

For each fault it prints one row of a Markdown table (runs tried, texts exact, tokens lost, tokens duplicated,
duplicate assistant messages, runs stuck, 5xx seen by clients, time to recover) and notes on what happened
(restarted attempts, failed runs and why, requeues from the dispatcher's log, processes that died). Tokens
are the simulated engine's words; lost and duplicated ones come from a diff of the client's text against the
stored one. Time to recover: ``disconnects``, the longest reconnect (hang-up to the first event, or the end,
of the next connection); ``web_kill``, kill to the moment every client streams again; the other faults, the
fault to the moment the last run that was active at the fault has ended and its client holds the final text.

Bounded: ``--max-seconds`` for the whole suite (a fault that cannot finish in what is left counts its
unfinished runs as stuck; a watchdog stops everything shortly after the bound), a fixed number of runs per
fault (``--runs`` for the disconnects, ``--quick`` for smaller counts). Everything it starts is stopped at
the end (process groups, ``pg_ctl stop``), on an error or Ctrl-C too; process logs are kept in ``--log-dir``.
``--json PATH`` writes the figures for a program (the CI test reads them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.fault_servers import (  # noqa: E402
    Budget,
    PrivatePostgres,
    PrivateRedis,
    Supervisor,
    log,
    run_quiet,
)
from bench.lib.processes import celery_worker_argv, free_port, guard_teardown  # noqa: E402
from bench.lib.stream_clients import (  # noqa: E402
    TERMINAL,
    Counters,
    Cut,
    FaultResult,
    Follow,
    RunOutcome,
    account,
    api_call,
    counts_of,
    follow_run,
    join_all,
    notes,
    post_prompt,
    run_clients,
    table,
    wait_for,
)
from bench.lib.url_sweep import body_for, fill  # noqa: E402
from inference_workers.engine.lifeline import engine_processes  # noqa: E402

PYTHON = str(ROOT / ".venv" / "bin" / "python")
UVICORN = str(ROOT / ".venv" / "bin" / "uvicorn")
FAULTS = (
    "disconnects",
    "web_kill",
    "worker_kill",
    "worker_kill_single",
    "redis_restart",
    "postgres_restart",
    "outage_sweep",
)
USERS = 8


# -- the stack -------------------------------------------------------------------------------------------------

# The simulated engine at a pace where runs last a few seconds; deltas of two tokens, so a stream has many
# events (many cut points). Everything else is the default configuration.
BASE_ENV = {
    "ENGINE_BACKEND": "simulated",
    "SIM_STEP_BASE_S": "0.05",
    "SIM_STEP_PER_SEQ_S": "0.0",
    "SIM_OUTPUT_TOKENS": "48",
    "STREAM_FLUSH_MAX_TOKENS": "2",
    "LOG_LEVEL": "INFO",
}


class Stack:
    """One web process, the dispatcher and ``workers`` Celery workers on the suite's Postgres and Redis."""

    def __init__(
        self, supervisor: Supervisor, *, label: str, database_url: str, redis_url: str, env: dict[str, str]
    ) -> None:
        self.supervisor = supervisor
        self.label = label
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
        self.env.update(BASE_ENV)
        self.env.update(
            DJANGO_SETTINGS_MODULE="chatproject.settings.base",
            DATABASE_URL=database_url,
            REDIS_URL=redis_url,
            CELERY_BROKER_URL=redis_url,
            CELERY_BROKER_KEY_PREFIX=f"{label}:",
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
        )
        self.env.update(env)
        self.workers: list[str] = []

    def name(self, process: str) -> str:
        return f"{self.label}-{process}"

    def start_web(self, *, timeout_s: float = 90) -> float:
        """Starts (or starts again) the web process; returns when ``/healthz`` answers (monotonic time)."""
        argv = [UVICORN, "chatproject.asgi:application", "--host", "127.0.0.1", "--port", str(self.port)]
        proc = self.supervisor.spawn(self.name("web"), [*argv, "--timeout-graceful-shutdown", "2"], self.env)
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.base_url + "/healthz", timeout=2).status_code == 200:
                    return time.monotonic()
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the web process did not start; see {self.supervisor.log_dir}")
            time.sleep(0.05)

    def start_dispatcher(self) -> None:
        self.supervisor.spawn(self.name("dispatcher"), [PYTHON, str(ROOT / "manage.py"), "run_dispatcher"], self.env)

    def start_worker(self, index: int, *, slots: int) -> str:
        name = f"{self.label}-w{index}@faults"
        env = dict(self.env, ENGINE_MAX_NUM_SEQS=str(slots))
        self.supervisor.spawn(self.name(f"w{index}"), celery_worker_argv(name=name, concurrency=slots), env)
        self.workers.append(name)
        return name

    def wait_workers(self, *, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        for index in range(1, len(self.workers) + 1):
            proc_name = self.name(f"w{index}")
            while "ready." not in self.supervisor.log_text(proc_name):
                if not self.supervisor.alive(proc_name) or time.monotonic() > deadline:
                    raise RuntimeError(f"worker {index} did not start; see {self.supervisor.log_dir}/{proc_name}.log")
                time.sleep(0.2)

    def processes(self) -> list[str]:
        return [n for n in self.supervisor.procs if n.startswith(self.label + "-")]

    def stop(self) -> None:
        self.supervisor.stop_all(self.processes())


def create_users(env: dict[str, str], count: int) -> list[str]:
    """``count`` pro users with API tokens (a Django shell in a child process); returns their tokens."""
    code = (
        "import json\n"
        "from accounts.models import Tier, User\n"
        "from rest_framework.authtoken.models import Token\n"
        "pro = Tier.objects.get(name='pro')\n"
        "tokens = []\n"
        f"for i in range({count}):\n"
        "    user, _ = User.objects.get_or_create(username=f'fault-{i}', defaults={'tier': pro})\n"
        "    tokens.append(Token.objects.get_or_create(user=user)[0].key)\n"
        "print('TOKENS=' + json.dumps(tokens))\n"
    )
    out = run_quiet([PYTHON, str(ROOT / "manage.py"), "shell", "-c", code], env=env)
    line = next(line for line in out.splitlines() if line.startswith("TOKENS="))
    return list(json.loads(line.removeprefix("TOKENS=")))


def requeue_notes(supervisor: Supervisor, stack: Stack) -> list[str]:
    """The reaper's requeues and failures as the dispatcher logged them (``runs.events``)."""
    text = supervisor.log_text(stack.name("dispatcher"))
    notes = []
    reasons = re.findall(r"event=requeued .*?reason=(\w+)", text)
    notes.append("the reaper requeued " + (counts_of(reasons) if reasons else "nothing"))
    tracebacks = text.count("Traceback")
    if tracebacks:
        notes.append(f"dispatcher log: {tracebacks} tracebacks (" + _first_errors(text) + ")")
    return notes


def _first_errors(text: str, limit: int = 3) -> str:
    """The distinct exception lines of a log (the last line of each traceback)."""
    found: list[str] = []
    for match in re.finditer(r"^(\w+(?:\.\w+)*(?:Error|Exception)[^\n]*)$", text, re.M):
        line = match.group(1)[:160]
        if line not in found:
            found.append(line)
    return "; ".join(found[:limit]) or "see the log"


def _stream_heads(ctx: Context) -> dict[str, int]:
    """The last id of every run stream in the suite's Redis."""
    client = ctx.redis.client()
    heads = {}
    for key in client.scan_iter(match="run:*:events", count=500):
        last = client.xrevrange(key, count=1)
        if last:
            heads[str(key)] = int(str(last[0][0]).split("-")[1])
    return heads


def _entries_kept(ctx: Context, heads: dict[str, int]) -> tuple[int, int]:
    """(entries up to ``heads`` still in Redis, entries there were): what a restart kept of the streams."""
    client = ctx.redis.client()
    kept = 0
    for key, seq in heads.items():
        entries: list[Any] = client.xrange(key, "-", f"0-{seq}") or []  # type: ignore[assignment]
        kept += len(entries)
    return kept, sum(heads.values())


def worker_notes(supervisor: Supervisor, stack: Stack) -> list[str]:
    """How the workers rode the fault out, from their logs (``inference_workers.services`` and ``.coalescer``)."""
    text = "".join(supervisor.log_text(stack.name(f"w{i}")) for i in range(1, len(stack.workers) + 1))
    notes = []
    buffered = len(set(re.findall(r"run (\d+): its stream is unreachable", text)))
    if buffered:
        notes.append(
            f"{buffered} runs kept generating while Redis was down, their text buffered, and wrote it when it "
            f"answered again ({text.count('stream reachable again')} resumed, "
            f"{text.count('lost entries')} found entries missing, {text.count('reaper requeues')} gave up)"
        )
    retried = len(set(re.findall(r"run (\d+): [a-z ]+ failed \(.*\); retrying on a new connection", text)))
    if retried:
        notes.append(f"{retried} runs' writes to Postgres failed on the restart and went through when retried")
    return notes


def log_notes(supervisor: Supervisor, stack: Stack) -> list[str]:
    notes = []
    for name in stack.processes():
        text = supervisor.log_text(name)
        count = text.count("Traceback")
        if count and not name.endswith("dispatcher"):
            notes.append(f"{name.removeprefix(stack.label + '-')} log: {count} tracebacks ({_first_errors(text)})")
    return notes


# -- what a killed process leaves ------------------------------------------------------------------------------


def session_leftovers(sid: int) -> list[tuple[int, str, int]]:
    """(pid, command, RSS bytes) of every live process still in session ``sid`` (each process the suite starts
    leads a session of its own: its children stay in it, even once PID 1 adopts them)."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            rss = int((entry / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            left.append((int(entry.name), command[:60], rss))
    return left


def orphan_check(pid: int, *, within_s: float = 5.0) -> str:
    """The engine-orphan check after a worker's main process ``pid`` was killed: within ``within_s`` no process
    of its session may be left (vLLM's engine core and workers die with it: inference_workers/engine/lifeline.py),
    and none marked as its engine either. A note saying what was found."""
    deadline = time.monotonic() + within_s
    left = session_leftovers(pid)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = session_leftovers(pid)
    marker = [p for p in engine_processes() if p.owner.split(":")[0] == str(pid)]
    if not left and not marker:
        return f"engine-orphan check: nothing of the killed worker (pid {pid}) left {within_s:.0f} s after the kill"
    rss = sum(r for _, _, r in left) + sum(p.rss_bytes for p in marker)
    names = ", ".join(sorted({c for _, c, _ in left} | {p.name for p in marker}))
    count = len(left) + len(marker)
    return f"engine-orphan check FAILED: {count} processes of pid {pid} left ({rss / 1e9:.2f} GB): {names}"


def next_token_after(follows: list[Follow], t: float) -> list[float]:
    """Seconds from ``t`` to each client's first delta after it (runs that never got one are left out)."""
    gaps = []
    for f in follows:
        after = [d for d in f.delta_times if d > t]
        if after:
            gaps.append(after[0] - t)
    return sorted(gaps)


# -- the faults ------------------------------------------------------------------------------------------------


@dataclass
class Context:
    supervisor: Supervisor
    postgres: PrivatePostgres
    redis: PrivateRedis
    tokens: list[str]
    budget: Budget
    rng: random.Random
    quick: bool
    runs: int
    stacks: dict[str, int] = field(default_factory=dict)

    def new_stack(self, fault: str, *, workers: int, slots: int, env: dict[str, str] | None = None) -> Stack:
        with contextlib.suppress(redis.RedisError):  # a fresh start: no stream, queue or bucket of the last fault
            self.redis.client().flushall()
        label = fault.replace("_", "-")
        self.stacks[label] = self.stacks.get(label, 0) + 1
        if self.stacks[label] > 1:  # the same fault again (--fault a,a): logs of its own
            label += str(self.stacks[label])
        stack = Stack(
            self.supervisor,
            label=label,
            database_url=self.postgres.url,
            redis_url=self.redis.url(0),
            env=env or {},
        )
        for index in range(1, workers + 1):
            stack.start_worker(index, slots=slots)
        stack.start_dispatcher()
        stack.start_web()
        stack.wait_workers()
        return stack


def client_notes(follows: list[Follow], counters: Counters) -> list[str]:
    """What the clients saw go wrong: 5xx answers by request, and the first distinct connection errors."""
    notes = []
    if counters.five_xx:
        notes.append("5xx answers: " + counts_of(counters.five_xx))
    errors: list[str] = []
    for f in follows:
        for error in f.errors:
            if error not in errors:
                errors.append(error)
    if errors:
        notes.append("client errors (first distinct): " + "; ".join(errors[:4]))
    return notes


def _post_wave(ctx: Context, stack: Stack, counters: Counters, n: int, *, deadline: float) -> list[Follow]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [
            pool.submit(
                post_prompt, stack.base_url, ctx.tokens[i % len(ctx.tokens)], counters, deadline=deadline, index=i
            )
            for i in range(n)
        ]
        return [f.result() for f in futures]


def _account_all(stack: Stack, follows: list[Follow], counters: Counters, *, deadline: float) -> list[RunOutcome]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda f: account(stack.base_url, f, counters, deadline=deadline), follows))


def _wait_runs_ended(stack: Stack, follows: list[Follow], counters: Counters, *, deadline: float) -> None:
    """After the clients: until Postgres has every run terminal (or the deadline)."""

    def all_terminal() -> bool:
        for f in follows:
            try:
                status = httpx.get(
                    f"{stack.base_url}/api/runs/{f.run_id}", headers={"Authorization": f"Token {f.token}"}, timeout=5
                )
            except httpx.HTTPError:
                return False
            counters.saw(status, "GET api/runs/N")
            if status.status_code != 200 or status.json()["status"] not in TERMINAL:
                return False
        return True

    wait_for(all_terminal, deadline=deadline, step=0.5)


def close_fault(ctx: Context, stack: Stack, result: FaultResult, counters: Counters, follows: list[Follow]) -> None:
    """The end of every fault, whatever happened: the 5xx count and the notes read from the clients and the
    stack's logs, then the stack stopped."""
    result.five_xx = len(counters.five_xx)
    result.notes += client_notes(follows, counters)
    result.notes += requeue_notes(ctx.supervisor, stack) + log_notes(ctx.supervisor, stack)
    stack.stop()


def fault_disconnects(ctx: Context, result: FaultResult) -> None:
    stack = ctx.new_stack("disconnects", workers=1, slots=8)
    counters = Counters()
    follows: list[Follow] = []
    try:
        deadline = ctx.budget.until(60 + ctx.runs * 2.0)
        lock = threading.Lock()

        def one(i: int) -> None:
            follow = post_prompt(stack.base_url, ctx.tokens[i % len(ctx.tokens)], counters, deadline=deadline, index=i)
            rng = random.Random(ctx.rng.random())
            cuts = 1 + (rng.random() < 0.35)  # a second hang-up on a third of the runs
            for _ in range(cuts):
                if rng.random() < 0.5:
                    follow.cuts.append(Cut("events", rng.randint(1, 14)))
                else:
                    follow.cuts.append(Cut("bytes", rng.randint(1, 1200)))  # a stream is ~1.6 kB
            with lock:
                follows.append(follow)
            follow_run(stack.base_url, follow, counters, deadline=deadline)

        with ThreadPoolExecutor(max_workers=12) as pool:
            list(pool.map(one, range(ctx.runs)))
        _wait_runs_ended(stack, follows, counters, deadline=ctx.budget.until(30))
        result.add(_account_all(stack, follows, counters, deadline=ctx.budget.until(60)))
        kinds = [kind for f in follows for kind in f.cut_kinds]
        reconnects = sorted(r for f in follows for r in f.reconnects)
        result.recover_s = reconnects[-1] if reconnects else 0.0
        result.recover_what = "longest reconnect (hang-up to the first event, or the 204, of the next connection)"
        median = reconnects[len(reconnects) // 2] if reconnects else 0.0
        result.notes.append(
            f"{len(kinds)} hang-ups at random points ({counts_of(kinds)}; mid-event: inside an event, which the "
            f"client drops), each resumed with Last-Event-ID; reconnect p50 {median * 1000:.0f} ms; "
            f"{sum(f.drops for f in follows)} connections dropped by the server"
        )
    finally:
        close_fault(ctx, stack, result, counters, follows)


def fault_web_kill(ctx: Context, result: FaultResult) -> None:
    n = 8 if ctx.quick else 16
    stack = ctx.new_stack("web_kill", workers=1, slots=16, env={"SIM_OUTPUT_TOKENS": "120"})
    counters = Counters()
    follows: list[Follow] = []
    try:
        deadline = ctx.budget.until(120)
        follows += _post_wave(ctx, stack, counters, n, deadline=deadline)
        threads = run_clients(stack.base_url, follows, counters, deadline=deadline)
        wait_for(lambda: all(f.deltas >= 2 for f in follows), deadline=ctx.budget.until(30))
        killed_at = time.monotonic()
        active = [f for f in follows if not f.ended]
        ctx.supervisor.kill(stack.name("web"))
        log(f"web_kill: killed the web process with {len(active)} streams open")
        back_at = stack.start_web()
        wait_for(lambda: all(f.ended or f.events_after(back_at) > 0 for f in active), deadline=ctx.budget.until(60))
        resumed = [f for f in active if f.ended or f.events_after(back_at) > 0]
        streaming_at = [min([e for e in f.event_times if e > back_at] + [f.ended_at or float("inf")]) for f in resumed]
        result.recover_s = (max(streaming_at) - killed_at) if streaming_at and len(resumed) == len(active) else None
        result.recover_what = "kill to every client streaming again"
        result.notes.append(
            f"{len(active)} streams open at the kill; the web process answered again {back_at - killed_at:.1f} s "
            f"after it; {len(resumed)}/{len(active)} clients resumed"
        )
        join_all(threads, deadline)
        _wait_runs_ended(stack, follows, counters, deadline=ctx.budget.until(30))
        result.add(_account_all(stack, follows, counters, deadline=ctx.budget.until(60)))
    finally:
        close_fault(ctx, stack, result, counters, follows)


def fault_worker_kill(ctx: Context, result: FaultResult) -> None:
    n = 6 if ctx.quick else 8
    stack = ctx.new_stack("worker_kill", workers=2, slots=4, env={"SIM_OUTPUT_TOKENS": "160"})
    counters = Counters()
    follows: list[Follow] = []
    try:
        deadline = ctx.budget.until(150)
        follows += _post_wave(ctx, stack, counters, n, deadline=deadline)
        threads = run_clients(stack.base_url, follows, counters, deadline=deadline)
        wait_for(
            lambda: (
                len({f.worker for f in follows if f.deltas >= 3}) == 2 and sum(f.deltas >= 3 for f in follows) >= n - 1
            ),
            deadline=ctx.budget.until(40),
        )
        on = {w: [f for f in follows if f.worker == w and not f.ended] for w in stack.workers}
        victim = max(stack.workers, key=lambda w: len(on[w]))
        affected = on[victim]
        index = stack.workers.index(victim) + 1
        killed_at = time.monotonic()
        pid = ctx.supervisor.kill_main(stack.name(f"w{index}"))
        log(f"worker_kill: killed {victim} streaming {len(affected)} runs")
        result.notes.append(orphan_check(pid))
        join_all(threads, deadline)
        gaps = next_token_after(affected, killed_at)
        if gaps:
            result.notes.append(
                f"time to next token after the kill (two workers): {gaps[len(gaps) // 2]:.1f} s median, "
                f"{gaps[-1]:.1f} s max, over {len(gaps)}/{len(affected)} affected runs"
            )
        ends = [f.ended_at for f in affected if f.ended == "done" and f.ended_at is not None]
        result.recover_s = max(ends) - killed_at if ends and len(ends) == len(affected) else None
        result.recover_what = "kill to the last affected run done"
        restarts = [min([e for e in f.event_times if e > killed_at] or [float("inf")]) for f in affected]
        moved = sum(1 for f in affected if f.worker != victim and f.resets >= 1)
        result.notes.append(
            f"{len(affected)} runs on the killed worker: {moved} continued on the other one after a reset; "
            f"their first event after the kill came {min(restarts) - killed_at:.1f}-"
            f"{max(restarts) - killed_at:.1f} s after it"
        )
        _wait_runs_ended(stack, follows, counters, deadline=ctx.budget.until(30))
        result.add(_account_all(stack, follows, counters, deadline=ctx.budget.until(60)))
    finally:
        close_fault(ctx, stack, result, counters, follows)


def _restart_fault(ctx: Context, result: FaultResult, fault: str, restart: Callable[[], None]) -> None:
    """A wave of runs (some streaming, some queued behind them), the restart mid-stream, then a second wave
    posted once the server is back, to show that new prompts are served again."""
    n = 10 if ctx.quick else 16
    stack = ctx.new_stack(fault, workers=1, slots=8, env={"SIM_OUTPUT_TOKENS": "80"})
    counters = Counters()
    follows: list[Follow] = []
    try:
        deadline = ctx.budget.until(150)
        follows += _post_wave(ctx, stack, counters, n, deadline=deadline)
        threads = run_clients(stack.base_url, follows, counters, deadline=deadline)
        wait_for(lambda: sum(f.deltas >= 3 for f in follows) >= min(8, n) - 1, deadline=ctx.budget.until(40))
        active = [f for f in follows if not f.ended]
        live = [f for f in active if f.deltas]
        heads = _stream_heads(ctx) if fault.startswith("redis") else {}
        fault_at = time.monotonic()
        restart()
        back_at = time.monotonic()
        log(
            f"{fault}: restarted in {back_at - fault_at:.1f} s with {len(live)} runs streaming, "
            f"{len(active) - len(live)} waiting"
        )
        alive_after = {name: ctx.supervisor.alive(name) for name in stack.processes()}
        probe = _post_wave(ctx, stack, counters, 4, deadline=ctx.budget.until(60))
        follows += probe
        threads += run_clients(stack.base_url, probe, counters, deadline=deadline)
        wait_for(lambda: all(f.ended or f.events_after(back_at) for f in live), deadline=ctx.budget.until(60))
        flowing = [min([e for e in f.event_times if e > back_at] + [f.ended_at or float("inf")]) for f in live]
        result.recover_s = max(flowing) - fault_at if flowing and max(flowing) < float("inf") else None
        result.recover_what = "fault to every stream live at it delivering again"
        join_all(threads, deadline)
        ends = [f.ended_at for f in active if f.ended_at is not None]
        result.notes.append(
            f"{fault.split('_')[0]} was down {back_at - fault_at:.1f} s with {len(live)} runs streaming and "
            f"{len(active) - len(live)} queued; 4 prompts posted after it; the last run active at the fault ended "
            + (f"{max(ends) - fault_at:.1f} s after it" if len(ends) == len(active) else "never")
        )
        if heads:
            kept, had = _entries_kept(ctx, heads)
            result.notes.append(f"the runs' streams kept {kept} of the {had} entries they had before the restart")
        result.notes += worker_notes(ctx.supervisor, stack)
        died = [name.removeprefix(stack.label + "-") for name, up in alive_after.items() if not up]
        died += [
            name.removeprefix(stack.label + "-")
            for name in stack.processes()
            if not ctx.supervisor.alive(name) and name.removeprefix(stack.label + "-") not in died
        ]
        if died:
            result.notes.append("processes that died: " + ", ".join(died))
        _wait_runs_ended(stack, follows, counters, deadline=ctx.budget.until(30))
        result.add(_account_all(stack, follows, counters, deadline=ctx.budget.until(60)))
    finally:
        close_fault(ctx, stack, result, counters, follows)


def fault_redis_restart(ctx: Context, result: FaultResult) -> None:
    def restart() -> None:
        ctx.redis.shutdown()
        time.sleep(1.0)
        ctx.redis.start()

    _restart_fault(ctx, result, "redis_restart", restart)


def fault_redis_kill(ctx: Context, result: FaultResult) -> None:
    """Not in ``all``: ``kill -9`` of Redis, then the same command on the same append-only file. With
    ``appendfsync everysec`` up to a second of writes is lost (a crash, not a restart)."""

    def restart() -> None:
        ctx.supervisor.kill("redis")
        time.sleep(1.0)
        ctx.redis.start()

    _restart_fault(ctx, result, "redis_kill", restart)


def fault_postgres_restart(ctx: Context, result: FaultResult) -> None:
    _restart_fault(ctx, result, "postgres_restart", ctx.postgres.restart)


def fault_worker_kill_single(ctx: Context, result: FaultResult) -> None:
    """One worker, ``kill -9`` of its main process, started again a second later (supervisord's first backoff):
    the time to next token of its runs is the lease TTL, the restart and, on a real engine, the engine's build
    (about 40 s on these CPUs; the simulated engine builds at once). Compare ``worker_kill``'s two workers."""
    n = 4
    stack = ctx.new_stack("worker_kill_single", workers=1, slots=4, env={"SIM_OUTPUT_TOKENS": "160"})
    counters = Counters()
    follows: list[Follow] = []
    try:
        deadline = ctx.budget.until(150)
        follows += _post_wave(ctx, stack, counters, n, deadline=deadline)
        threads = run_clients(stack.base_url, follows, counters, deadline=deadline)
        wait_for(lambda: sum(f.deltas >= 3 for f in follows) >= n, deadline=ctx.budget.until(40))
        affected = [f for f in follows if not f.ended]
        killed_at = time.monotonic()
        pid = ctx.supervisor.kill_main(stack.name("w1"))
        log(f"worker_kill_single: killed the only worker streaming {len(affected)} runs")
        result.notes.append(orphan_check(pid))
        time.sleep(1.0)
        ctx.supervisor.spawn(
            stack.name("w1"),
            celery_worker_argv(name=stack.workers[0], concurrency=4),
            dict(stack.env, ENGINE_MAX_NUM_SEQS="4"),
        )
        join_all(threads, deadline)
        gaps = next_token_after(affected, killed_at)
        result.recover_s = gaps[-1] if gaps and len(gaps) == len(affected) else None
        result.recover_what = "kill to the last affected run's next token (one worker, restarted after 1 s)"
        if gaps:
            result.notes.append(
                f"time to next token after the kill (one worker, restarted): {gaps[len(gaps) // 2]:.1f} s median, "
                f"{gaps[-1]:.1f} s max, over {len(gaps)}/{len(affected)} affected runs"
            )
        _wait_runs_ended(stack, follows, counters, deadline=ctx.budget.until(30))
        result.add(_account_all(stack, follows, counters, deadline=ctx.budget.until(60)))
    finally:
        close_fault(ctx, stack, result, counters, follows)


def sweep_templates(env: dict[str, str]) -> list[tuple[str, str]]:
    """Every URL pattern as (method, template) (``bench.lib.url_sweep``, run with the stack's settings)."""
    out = run_quiet([PYTHON, "-m", "bench.lib.url_sweep"], env=env, timeout=120)
    return [(m, t) for m, t in json.loads(out)]


def outage_sweep(base_url: str, templates: list[tuple[str, str]], ids: dict[str, Any]) -> dict[str, int]:
    """One request per (method, template) with ``ids`` filled in; returns ``"METHOD template" -> status``
    (599: no answer within 30 s). A streaming answer (SSE) counts by its status line."""
    statuses = {}
    headers_of = {
        "Token": {"Authorization": f"Token {ids['token']}"},
        "Bearer": {"Authorization": f"Bearer {ids['token']}"},
    }
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for method, template in templates:
            path = fill(template, **ids)
            headers = headers_of["Bearer" if template.startswith("/v1/") else "Token"]
            body = body_for(template, model=ids["model"]) if method == "POST" else None
            try:
                with client.stream(method, path, json=body, headers=headers) as answer:
                    statuses[f"{method} {template}"] = answer.status_code
            except httpx.HTTPError:
                statuses[f"{method} {template}"] = 599
    return statuses


def fault_outage_sweep(ctx: Context, result: FaultResult) -> None:
    """Every URL pattern (GET and POST) while Redis is paused (``CLIENT PAUSE``: commands wait, only the socket
    timeout ends them) and while Postgres is stopped: each must answer a 4xx or 503, never another 5xx."""
    pause_s = 40
    stack = ctx.new_stack(
        "outage_sweep", workers=1, slots=4, env={"REDIS_SOCKET_TIMEOUT_S": "1", "DB_POOL_TIMEOUT_S": "2"}
    )
    counters = Counters()
    follows: list[Follow] = []
    try:
        deadline = ctx.budget.until(60)
        follows += _post_wave(ctx, stack, counters, 1, deadline=deadline)
        idle = api_call(
            counters, "POST", f"{stack.base_url}/api/chats", token=ctx.tokens[0], deadline=deadline, body={}
        )
        models = api_call(counters, "GET", f"{stack.base_url}/api/models", token=ctx.tokens[0], deadline=deadline)
        model = str(models.json().get("default") or "")
        ids = {"token": ctx.tokens[0], "chat_id": idle.json()["id"], "run_id": follows[0].run_id, "model": model}
        templates = sweep_templates(stack.env)
        bad: dict[str, list[str]] = {}
        counts: dict[str, dict[int, int]] = {}
        for outage in ("redis paused", "postgres stopped"):
            if outage == "redis paused":
                ctx.redis.client().execute_command("CLIENT", "PAUSE", str(pause_s * 1000))
            else:
                ctx.postgres.stop()
            started = time.monotonic()
            try:
                statuses = outage_sweep(stack.base_url, templates, ids)
            finally:
                if outage == "postgres stopped":
                    ctx.postgres.start()
                    wait_for(lambda: _web_ready(stack), deadline=ctx.budget.until(30), step=0.5)
            took = time.monotonic() - started
            bad[outage] = [f"{k} {v}" for k, v in statuses.items() if v >= 500 and v != 503]
            counts[outage] = {}
            for code in statuses.values():
                counts[outage][code] = counts[outage].get(code, 0) + 1
            result.notes.append(
                f"{outage}: {len(statuses)} requests in {took:.0f} s: "
                + ", ".join(f"{n}x {code}" for code, n in sorted(counts[outage].items()))
                + (f"; 5xx other than 503: {', '.join(bad[outage])}" if bad[outage] else "; no 5xx but 503")
            )
            if outage == "redis paused":
                wait_for(lambda: _redis_answers(ctx), deadline=ctx.budget.until(pause_s + 5), step=0.5)
        result.five_xx = sum(len(v) for v in bad.values())
        # The one run posted gives the sweep a run id; no client follows it, so it is not accounted as one.
        result.recover_what = "no figure: the sweep counts the 5xx other than 503 (the 5xx column)"
    finally:
        sweep_five_xx = result.five_xx
        close_fault(ctx, stack, result, counters, follows)
        # The column counts the sweep's 5xx other than 503; the clients' 503s while the outage lasted are expected.
        result.five_xx = sweep_five_xx


def _web_ready(stack: Stack) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(stack.base_url + "/readyz", timeout=5).status_code == 200
    return False


def _redis_answers(ctx: Context) -> bool:
    try:
        return bool(ctx.redis.client().ping())
    except redis.RedisError:
        return False


FAULT_FUNCTIONS: dict[str, Callable[[Context, FaultResult], None]] = {
    "disconnects": fault_disconnects,
    "web_kill": fault_web_kill,
    "worker_kill": fault_worker_kill,
    "redis_restart": fault_redis_restart,
    "postgres_restart": fault_postgres_restart,
    "redis_kill": fault_redis_kill,
    "worker_kill_single": fault_worker_kill_single,
    "outage_sweep": fault_outage_sweep,
}
MIN_SECONDS = {
    "disconnects": 40,
    "web_kill": 50,
    "worker_kill": 70,
    "redis_restart": 60,
    "postgres_restart": 60,
    "redis_kill": 60,
    "worker_kill_single": 60,
    "outage_sweep": 150,
}
"""A fault is skipped when less than this is left of ``--max-seconds``."""


# -- main ------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--fault", default="all", help=f"comma-separated, of {', '.join(FAULT_FUNCTIONS)} (default all: not redis_kill)"
    )
    parser.add_argument("--runs", type=int, default=None, help="runs of the disconnects fault (100; --quick 30)")
    parser.add_argument("--quick", action="store_true", help="smaller counts")
    parser.add_argument("--max-seconds", type=float, default=900, help="bound on the whole suite (default 900)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-dir", type=Path, default=ROOT / "artifacts" / "fault-suite")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    faults = list(FAULTS) if args.fault == "all" else [f.strip() for f in args.fault.split(",") if f.strip()]
    unknown = [f for f in faults if f not in FAULT_FUNCTIONS]
    if unknown:
        parser.error(f"unknown fault(s): {', '.join(unknown)}")
    runs = args.runs if args.runs is not None else (30 if args.quick else 100)

    started = time.monotonic()
    budget = Budget(args.max_seconds)
    shutil.rmtree(args.log_dir, ignore_errors=True)
    supervisor = Supervisor(args.log_dir)
    root = Path(tempfile.mkdtemp(prefix="fault-suite-"))
    root.chmod(0o755)  # the postgres user must reach its directory inside
    postgres = PrivatePostgres(root)
    private_redis = PrivateRedis(root, supervisor)
    results: list[FaultResult] = []

    def cleanup() -> None:
        supervisor.stop_all()
        postgres.stop()
        shutil.rmtree(root, ignore_errors=True)

    # A wait that hangs past the bound still ends the suite, with everything stopped.
    timer = guard_teardown(cleanup, after_s=args.max_seconds + 90, log=log)
    try:
        log(f"servers: Postgres on {postgres.port}, Redis on {private_redis.port} (in {root})")
        postgres.init()
        private_redis.start()
        env = Stack(supervisor, label="setup", database_url=postgres.url, redis_url=private_redis.url(), env={}).env
        run_quiet([PYTHON, str(ROOT / "manage.py"), "migrate", "--verbosity", "0"], env=env, timeout=300)
        # What every worker start runs first (scripts/worker.sh): verifies the default deployment, marks it ready.
        run_quiet([PYTHON, str(ROOT / "manage.py"), "prepare_model"], env=env, timeout=300)
        tokens = create_users(env, USERS)
        ctx = Context(supervisor, postgres, private_redis, tokens, budget, random.Random(args.seed), args.quick, runs)
        for fault in faults:
            result = FaultResult(fault=fault)
            results.append(result)
            if budget.left() < MIN_SECONDS[fault]:
                result.skipped = f"{budget.left():.0f} s left of --max-seconds"
                log(f"{fault}: skipped ({result.skipped})")
                continue
            log(f"{fault}: starting ({budget.left():.0f} s left)")
            t0 = time.monotonic()
            try:
                FAULT_FUNCTIONS[fault](ctx, result)
                result.summarize_outcomes()
            except Exception as exc:  # noqa: BLE001 - report it and go on with the next fault
                result.notes.append(f"the fault did not complete: {type(exc).__name__}: {exc}")
                result.summarize_outcomes()
                log(f"{fault}: {type(exc).__name__}: {exc}")
            log(f"{fault}: {time.monotonic() - t0:.0f} s")
    finally:
        timer.cancel()
        cleanup()
    print(table(results))
    print()
    print(notes(results))
    print(f"\n{time.monotonic() - started:.0f} s in all; logs in {args.log_dir}")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
