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
import difflib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.processes import celery_worker_argv, free_port  # noqa: E402
from bench.lib.url_sweep import body_for, fill  # noqa: E402
from inference_workers.engine.lifeline import engine_processes  # noqa: E402

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
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
TERMINAL = {"done", "cancelled", "failed"}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Budget:
    """The suite's time bound: every wait asks what is left."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()

    def until(self, seconds: float) -> float:
        """A deadline ``seconds`` from now, but never past the suite's end (monotonic time)."""
        return min(time.monotonic() + seconds, self.end)


class OutOfTime(RuntimeError):
    pass


# -- processes -----------------------------------------------------------------------------------------------


class Supervisor:
    """Every process the suite starts, each in a process group of its own, with its log in ``log_dir``."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{name}.log").open("ab") as out:  # a restart appends to the same log
            proc = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        with self._lock:
            self.procs[name] = proc
        return proc

    def log_text(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def alive(self, name: str) -> bool:
        proc = self.procs.get(name)
        return proc is not None and proc.poll() is None

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        proc.wait(timeout=30)

    def kill_main(self, name: str) -> int:
        """SIGKILL to the process alone, not its group (what an outside ``kill -9 PID`` does); returns its pid."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        return proc.pid

    def stop(self, name: str, *, grace_s: float = 10) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def stop_all(self, names: list[str] | None = None) -> None:
        for name in list(self.procs) if names is None else names:
            self.stop(name)


def _run_quiet(argv: list[str], *, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}... failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout


class PrivatePostgres:
    """A Postgres cluster of the suite's own (``initdb`` in ``root``), on a free port and a socket in ``root``."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "pg"
        self.data = self.dir / "data"
        self.port = free_port()
        self.as_root = os.geteuid() == 0
        self.started = False

    def _cmd(self, *argv: str) -> list[str]:
        # As root, initdb and pg_ctl refuse to run: they run as the postgres user, on a directory it owns.
        return ["runuser", "-u", "postgres", "--", *argv] if self.as_root else list(argv)

    @property
    def url(self) -> str:
        return f"postgres://chat:chat@127.0.0.1:{self.port}/faults"

    def init(self) -> None:
        self.dir.mkdir(parents=True)
        if self.as_root:
            shutil.chown(self.dir, "postgres", "postgres")
        _run_quiet(
            self._cmd(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        )
        self.start()
        sql = "CREATE ROLE chat LOGIN PASSWORD 'chat'; CREATE DATABASE faults OWNER chat;"
        for statement in sql.split("; "):
            _run_quiet(
                self._cmd(
                    str(PG_BIN / "psql"), "-h", str(self.dir), "-p", str(self.port), "-U", "postgres", "-qc", statement
                )
            )

    def _pg_ctl(self, *args: str) -> None:
        _run_quiet(self._cmd(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", *args))

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c max_connections=200"
        self._pg_ctl("-l", str(self.dir / "postgres.log"), "-o", options, "start")
        self.started = True

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every session is cut, then the same server starts again."""
        self._pg_ctl("-m", "fast", "-l", str(self.dir / "postgres.log"), "restart")

    def stop(self) -> None:
        if self.started:
            try:
                self._pg_ctl("-m", "fast", "stop")
            except Exception:  # noqa: BLE001 - try harder: the directory is about to be deleted
                with contextlib.suppress(Exception):
                    self._pg_ctl("-m", "immediate", "stop")
            self.started = False


class PrivateRedis:
    """A ``redis-server`` of the suite's own with an append-only file in ``root``."""

    def __init__(self, root: Path, supervisor: Supervisor) -> None:
        self.dir = root / "redis"
        self.port = free_port()
        self.supervisor = supervisor

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5, decode_responses=True)

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir)]
        argv += ["--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--maxclients", "2000"]
        proc = self.supervisor.spawn("redis", argv, dict(os.environ))
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.client().ping():
                    return
            except redis.RedisError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start; see {self.supervisor.log_dir / 'redis.log'}")
            time.sleep(0.05)

    def shutdown(self) -> None:
        """SIGTERM, which Redis handles as ``SHUTDOWN``: it syncs its append-only file, then exits. (Not the
        command through redis-py, whose retries on the closed connection add seconds.)"""
        proc = self.supervisor.procs["redis"]
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)

    def stop(self) -> None:
        self.supervisor.stop("redis")


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
    out = _run_quiet([PYTHON, str(ROOT / "manage.py"), "shell", "-c", code], env=env)
    line = next(line for line in out.splitlines() if line.startswith("TOKENS="))
    return list(json.loads(line.removeprefix("TOKENS=")))


# -- clients ---------------------------------------------------------------------------------------------------


class Counters:
    """What every client of one fault saw, across threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.five_xx: list[str] = []

    def saw(self, response: httpx.Response, what: str) -> None:
        if response.status_code >= 500:
            with self.lock:
                self.five_xx.append(f"{what}: {response.status_code}")


def api_call(
    counters: Counters,
    method: str,
    url: str,
    *,
    token: str,
    deadline: float,
    body: dict[str, Any] | None = None,
    expect: tuple[int, ...] = (200, 201, 202),
) -> httpx.Response:
    """One API call, repeated (every 5xx counted) until it answers one of ``expect`` or ``deadline`` passes.
    Connection errors are retried too (the web process may be restarting)."""
    headers = {"Authorization": f"Token {token}"}
    last: str = ""
    while time.monotonic() < deadline:
        try:
            response = httpx.request(method, url, headers=headers, json=body, timeout=10)
        except httpx.TransportError as exc:
            last = repr(exc)
            time.sleep(0.25)
            continue
        counters.saw(response, f"{method} {re.sub(r'/[0-9]+', '/N', url.split('/', 3)[-1])}")
        if response.status_code in expect:
            return response
        last = f"{response.status_code} {response.text[:200]}"
        retry_after = float(response.headers.get("Retry-After", "0.5") or 0.5)
        time.sleep(min(max(retry_after, 0.25), 2.0))
    raise TimeoutError(f"{method} {url}: no answer in time ({last})")


@dataclass
class Cut:
    kind: str  # "events": hang up after this many events of a connection; "bytes": after this many bytes
    n: int


@dataclass
class Follow:
    """One client following one run."""

    run_id: int
    chat_id: int
    token: str
    cuts: list[Cut] = field(default_factory=list)
    text: str = ""
    last_id: int | None = None
    ended: str = ""  # "done", "error", "204", "gave up", or "" (still following)
    ended_at: float | None = None
    connections: int = 0
    planned_cuts: int = 0
    cut_kinds: list[str] = field(default_factory=list)  # per hang-up: "events", "bytes" or "mid-event"
    drops: int = 0  # connections that ended without a terminal event (server gone, connection reset)
    resets: int = 0
    workers: list[str] = field(default_factory=list)
    event_times: list[float] = field(default_factory=list)  # monotonic arrival time of every event with an id
    deltas: int = 0
    delta_times: list[float] = field(default_factory=list)  # monotonic arrival time of every delta
    reconnects: list[float] = field(default_factory=list)  # hang-up (or drop) to the next first event
    errors: list[str] = field(default_factory=list)

    @property
    def worker(self) -> str:
        return self.workers[-1] if self.workers else ""

    def events_after(self, t: float) -> int:
        return sum(1 for e in self.event_times if e > t)


def _parse_event(raw: bytes) -> tuple[str, int | None, dict[str, Any]] | None:
    event, event_id, data = "", None, ""
    for line in raw.decode().split("\n"):
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            event = value
        elif name == "id":
            event_id = int(value)
        elif name == "data":
            data = value if not data else data + "\n" + value
    if not event:
        return None
    return event, event_id, (json.loads(data) if data else {})


def follow_run(base_url: str, follow: Follow, counters: Counters, *, deadline: float) -> None:
    """Follows the run's stream to its end, hanging up at ``follow.cuts`` and reconnecting with Last-Event-ID
    after each hang-up or dropped connection."""
    url = f"{base_url}/api/runs/{follow.run_id}/stream"
    hung_up_at: float | None = None
    timeout = httpx.Timeout(10.0, read=30.0)
    while time.monotonic() < deadline:
        headers = {"Authorization": f"Token {follow.token}"}
        if follow.last_id is not None:
            headers["Last-Event-ID"] = str(follow.last_id)
        cut = follow.cuts.pop(0) if follow.cuts else None
        hung_up = resume_now = False
        buffer = b""
        try:
            with httpx.stream("GET", url, headers=headers, timeout=timeout) as response:
                follow.connections += 1
                counters.saw(response, "GET api/runs/N/stream")
                if response.status_code == 204:  # the id is at or past the end: nothing left to send
                    if hung_up_at is not None:
                        follow.reconnects.append(time.monotonic() - hung_up_at)
                    follow.ended, follow.ended_at = "204", time.monotonic()
                    return
                if response.status_code != 200:
                    follow.errors.append(f"stream answered {response.status_code}")
                    time.sleep(0.5)
                    continue
                seen, events_here = 0, 0
                for chunk in response.iter_raw():
                    if cut is not None and cut.kind == "bytes" and seen + len(chunk) >= cut.n:
                        chunk, hung_up = chunk[: cut.n - seen], True
                    seen += len(chunk)
                    buffer += chunk
                    while b"\n\n" in buffer:
                        raw, buffer = buffer.split(b"\n\n", 1)
                        parsed = _parse_event(raw)
                        if parsed is None:
                            continue
                        event, event_id, data = parsed
                        now = time.monotonic()
                        if hung_up_at is not None:
                            follow.reconnects.append(now - hung_up_at)
                            hung_up_at = None
                        if event == "reconnect":  # the web process is shutting down: resume elsewhere
                            resume_now = True
                            break
                        if event_id is not None:
                            follow.last_id = event_id
                            follow.event_times.append(now)
                        if event == "reset":
                            follow.text, follow.resets = "", follow.resets + 1
                        elif event == "delta":
                            follow.text += data["text"]
                            follow.deltas += 1
                            follow.delta_times.append(now)
                        elif event == "status" and data.get("worker"):
                            follow.workers.append(str(data["worker"]))
                        elif event in ("done", "error"):
                            follow.ended, follow.ended_at = event, now
                            if event == "error":
                                follow.errors.append(f"error event: {data}")
                            return
                        events_here += 1
                        if cut is not None and cut.kind == "events" and events_here >= cut.n:
                            hung_up = True
                            break
                    if hung_up or resume_now:
                        break
        except httpx.TransportError as exc:
            if hung_up_at is None:
                follow.drops += 1
                follow.errors.append(repr(exc)[:120])
                hung_up_at = time.monotonic()
            time.sleep(0.2)
            continue
        if hung_up:
            follow.planned_cuts += 1
            kind = cut.kind if cut is not None else "?"
            follow.cut_kinds.append("mid-event" if kind == "bytes" and buffer.strip(b"\n") else kind)
        else:
            follow.drops += 1
            if not resume_now:
                follow.errors.append("the stream ended without done or error")
        if hung_up_at is None:
            hung_up_at = time.monotonic()
    follow.ended = follow.ended or "gave up"


def post_prompt(base_url: str, token: str, counters: Counters, *, deadline: float, index: int) -> Follow:
    """A chat of its own and a prompt in it; returns the run to follow."""
    chat = api_call(counters, "POST", f"{base_url}/api/chats", token=token, deadline=deadline, body={})
    chat_id = int(chat.json()["id"])
    posted = api_call(
        counters,
        "POST",
        f"{base_url}/api/chats/{chat_id}/messages",
        token=token,
        deadline=deadline,
        body={"content": f"Fault suite prompt {index}: tell me about batching ({random.random():.6f})."},
    )
    return Follow(run_id=int(posted.json()["run"]["id"]), chat_id=chat_id, token=token)


# -- accounting ------------------------------------------------------------------------------------------------


@dataclass
class RunOutcome:
    run_id: int
    status: str
    attempts: int
    exact: bool
    lost: int
    duplicated: int
    duplicate_messages: int
    stuck: bool
    error: str
    client: dict[str, Any] = field(default_factory=dict)


def token_diff(stored: str, received: str) -> tuple[int, int]:
    """(tokens lost, tokens duplicated) of ``received`` against ``stored``; a token is one simulated word."""
    want, got = stored.split(), received.split()
    lost = duplicated = 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, want, got, autojunk=False).get_opcodes():
        if op in ("delete", "replace"):
            lost += i2 - i1
        if op in ("insert", "replace"):
            duplicated += j2 - j1
    return lost, duplicated


def account(base_url: str, follow: Follow, counters: Counters, *, deadline: float) -> RunOutcome:
    run = api_call(
        counters, "GET", f"{base_url}/api/runs/{follow.run_id}", token=follow.token, deadline=deadline
    ).json()
    messages = api_call(
        counters,
        "GET",
        f"{base_url}/api/chats/{follow.chat_id}/messages?limit=100",
        token=follow.token,
        deadline=deadline,
    ).json()["results"]
    assistant = [m for m in messages if m["role"] == "assistant"]
    stored = (run.get("assistant_message") or {}).get("content", "")
    # Tokens are counted against a stored answer; a run without one (stuck, failed) is counted as such.
    lost, duplicated = token_diff(stored, follow.text) if run["assistant_message"] is not None else (0, 0)
    exact = run["status"] == "done" and follow.ended in ("done", "204") and follow.text == stored
    return RunOutcome(
        run_id=follow.run_id,
        status=run["status"],
        attempts=int(run["attempts"]),
        exact=exact,
        lost=lost,
        duplicated=duplicated,
        duplicate_messages=max(0, len(assistant) - 1),
        stuck=run["status"] not in TERMINAL,
        error=run.get("error") or "",
        client={
            "ended": follow.ended,
            "connections": follow.connections,
            "planned_cuts": follow.planned_cuts,
            "drops": follow.drops,
            "resets": follow.resets,
            "workers": follow.workers,
            "deltas": follow.deltas,
            "chars": len(follow.text),
            "stored_chars": len(stored),
            "errors": follow.errors[:5],
        },
    )


@dataclass
class FaultResult:
    fault: str
    runs: int = 0
    exact: int = 0
    lost: int = 0
    duplicated: int = 0
    duplicate_messages: int = 0
    stuck: int = 0
    five_xx: int = 0
    recover_s: float | None = None
    recover_what: str = ""
    notes: list[str] = field(default_factory=list)
    outcomes: list[RunOutcome] = field(default_factory=list)
    skipped: str = ""

    def add(self, outcomes: list[RunOutcome]) -> None:
        self.outcomes += outcomes
        self.runs += len(outcomes)
        self.exact += sum(o.exact for o in outcomes)
        self.lost += sum(o.lost for o in outcomes)
        self.duplicated += sum(o.duplicated for o in outcomes)
        self.duplicate_messages += sum(o.duplicate_messages for o in outcomes)
        self.stuck += sum(o.stuck for o in outcomes)

    def summarize_outcomes(self) -> None:
        failed = [o for o in self.outcomes if o.status == "failed"]
        restarted = [o for o in self.outcomes if o.attempts > 1]
        if restarted:
            self.notes.append(
                f"{len(restarted)} runs were generated again (attempt 2+) and ended "
                + _counts(o.status for o in restarted)
            )
        for o in failed:
            self.notes.append(f"run {o.run_id} failed: {o.error}")
        for o in self.outcomes:
            if not o.exact and o.status != "failed":
                self.notes.append(
                    f"run {o.run_id} ({o.status}): text not exact, {o.lost} lost / {o.duplicated} duplicated"
                )


def _counts(values: Iterator[str] | list[str]) -> str:
    found: dict[str, int] = {}
    for value in values:
        found[value] = found.get(value, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(found.items()))


def run_clients(base_url: str, follows: list[Follow], counters: Counters, *, deadline: float) -> list[threading.Thread]:
    threads = [
        threading.Thread(target=follow_run, args=(base_url, f, counters), kwargs={"deadline": deadline}, daemon=True)
        for f in follows
    ]
    for thread in threads:
        thread.start()
    return threads


def join_all(threads: list[threading.Thread], deadline: float) -> None:
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()) + 1)


def wait_for(predicate: Callable[[], bool], *, deadline: float, step: float = 0.05) -> bool:
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def requeue_notes(supervisor: Supervisor, stack: Stack) -> list[str]:
    """The reaper's requeues and failures as the dispatcher logged them (``runs.events``)."""
    text = supervisor.log_text(stack.name("dispatcher"))
    notes = []
    reasons = re.findall(r"event=requeued .*?reason=(\w+)", text)
    notes.append("the reaper requeued " + (_counts(reasons) if reasons else "nothing"))
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
        notes.append("5xx answers: " + _counts(counters.five_xx))
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
            f"{len(kinds)} hang-ups at random points ({_counts(kinds)}; mid-event: inside an event, which the "
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
    out = _run_quiet([PYTHON, "-m", "bench.lib.url_sweep"], env=env, timeout=120)
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


# -- the report ------------------------------------------------------------------------------------------------

HEADER = (
    "| fault | runs tried | texts exact | tokens lost | tokens duplicated | duplicate assistant messages "
    "| runs stuck | 5xx seen by clients | time to recover |"
)


def table(results: list[FaultResult]) -> str:
    lines = [HEADER, "| --- " * 9 + "|"]
    for r in results:
        if r.skipped:
            lines.append(f"| {r.fault} | skipped: {r.skipped} |" + " |" * 7)
            continue
        recover = f"{r.recover_s:.1f} s" if r.recover_s is not None else "not recovered"
        lines.append(
            f"| {r.fault} | {r.runs} | {r.exact} | {r.lost} | {r.duplicated} | {r.duplicate_messages} | {r.stuck} "
            f"| {r.five_xx} | {recover} |"
        )
    return "\n".join(lines)


def notes(results: list[FaultResult]) -> str:
    out = []
    for r in results:
        if r.skipped:
            continue
        out.append(f"- **{r.fault}** (time to recover: {r.recover_what})")
        out += [f"  - {note}" for note in r.notes]
    return "\n".join(out)


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

    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)

    def cleanup() -> None:
        supervisor.stop_all()
        postgres.stop()
        shutil.rmtree(root, ignore_errors=True)

    # The watchdog: a wait that hangs past the bound still ends the suite, with everything stopped.
    def watchdog() -> None:
        log("watchdog: --max-seconds passed long ago; stopping everything")
        cleanup()
        os._exit(3)

    timer = threading.Timer(args.max_seconds + 90, watchdog)
    timer.daemon = True
    timer.start()
    try:
        log(f"servers: Postgres on {postgres.port}, Redis on {private_redis.port} (in {root})")
        postgres.init()
        private_redis.start()
        env = Stack(supervisor, label="setup", database_url=postgres.url, redis_url=private_redis.url(), env={}).env
        _run_quiet([PYTHON, str(ROOT / "manage.py"), "migrate", "--verbosity", "0"], env=env, timeout=300)
        # What every worker start runs first (scripts/worker.sh): verifies the default deployment, marks it ready.
        _run_quiet([PYTHON, str(ROOT / "manage.py"), "prepare_model"], env=env, timeout=300)
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
