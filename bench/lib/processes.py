"""Starting, waiting for and stopping the project's own processes (uvicorn, Celery workers, the dispatcher).

Tests and benches both use these: a test's child processes run on the database pytest-django created
(:func:`child_env`), a bench overrides ``DATABASE_URL`` and the Redis URLs with its own.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    """The URL of the database Django is connected to (in a test: the one pytest-django created), so child
    processes see the committed rows."""
    db = connection.settings_dict
    user = quote(db["USER"] or "", safe="")
    password = quote(db["PASSWORD"] or "", safe="")
    return f"postgres://{user}:{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment pointed at the test database, Redis and broker, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(
        DJANGO_SETTINGS_MODULE="chatproject.settings.test",
        DATABASE_URL=test_database_url(),
        REDIS_URL=settings.REDIS_URL,
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def celery_worker_argv(*, name: str, concurrency: int, events: bool = False) -> list[str]:
    """The production worker command (threads pool, tier queues, prefetch 1), quieter cluster chatter."""
    argv = [
        str(ROOT / ".venv" / "bin" / "celery"),
        "-A",
        "chatproject",
        "worker",
        "-P",
        "threads",
        "-c",
        str(concurrency),
        "-Q",
        "pro,plus,free,batch",
        "--prefetch-multiplier",
        "1",
        "--without-gossip",
        "--without-mingle",
        "-n",
        name,
        "--loglevel",
        "INFO",
    ]
    if events:
        argv.append("-E")
    return argv


def stop_process_group(proc: subprocess.Popen[bytes], *, grace_s: float = 15) -> None:
    """SIGTERM to the process group started with ``start_new_session=True``, then SIGKILL after ``grace_s`` (a
    group already gone is not an error)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def guard_teardown(cleanup: Callable[[], None], *, after_s: float, log: Callable[[str], None]) -> threading.Timer:
    """For a bench that starts servers of its own: SIGTERM raises ``KeyboardInterrupt`` (so the caller's
    ``finally`` runs ``cleanup``), and a watchdog runs ``cleanup`` and ends the process (status 3) ``after_s`` from
    now, should a wait hang. The caller cancels the returned timer before its own ``cleanup``."""

    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    def watchdog() -> None:
        log("watchdog: the time limit passed long ago; tearing everything down")
        cleanup()
        os._exit(3)

    signal.signal(signal.SIGTERM, on_signal)
    timer = threading.Timer(after_s, watchdog)
    timer.daemon = True
    timer.start()
    return timer


def wait_http(
    url: str, proc: subprocess.Popen[bytes] | None, *, timeout_s: float = 60, what: str = "the process"
) -> None:
    """Waits until ``url`` answers 200. Raises ``RuntimeError`` when ``proc`` (if given) exits first or after
    ``timeout_s``; ``what`` names the process (and where its log is) in that message."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}) before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer {url} within {timeout_s:.0f} s")
        time.sleep(0.2)


def wait_worker_heartbeat(
    name: str, proc: subprocess.Popen[bytes], *, timeout_s: float = 300, what: str = "the worker"
) -> None:
    """Waits until the Celery worker ``name`` writes its first heartbeat (its engine is built and it consumes).
    Raises ``RuntimeError`` when ``proc`` exits first or after ``timeout_s``."""
    from generation.worker_contract import worker_heartbeats

    deadline = time.monotonic() + timeout_s
    while not any(b.worker == name for b in worker_heartbeats()):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}) before its first heartbeat")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} wrote no heartbeat within {timeout_s:.0f} s")
        time.sleep(1)


@contextlib.contextmanager
def web_process(*, log: Path, **env: str) -> Iterator[str]:
    """One uvicorn web process (the production entry point) on the test database and Redis, with ``env`` added;
    yields its base URL and stops it on exit. Its output goes to ``log``."""
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "uvicorn", "chatproject.asgi:application", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--no-access-log", "--lifespan", "off", "--timeout-graceful-shutdown", "2"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=child_env(**env), stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/healthz", proc, timeout_s=60, what=f"uvicorn (log: {log})")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
