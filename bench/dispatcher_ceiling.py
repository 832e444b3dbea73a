"""The dispatcher's ceiling: dispatch decisions per second of one dispatcher process (issue 24: at least 1,000).

The real dispatcher (``runs.dispatcher_wiring.build_dispatcher``: the Redis queue store, the fair policy, the gate,
chat-affinity routing, Celery's publish, the figures, the housekeeping) against real Postgres and Redis, in this
process. ``--runs`` prompts are queued first with ``runs.services.run_create`` (what the POST does, over
``--users`` users, one chat each run), a stand-in worker heartbeat says the engines have room for all of them,
then the dispatcher ticks until every run is sent. Celery's messages pile up in the broker database (nobody
consumes them). The figure is runs sent per CPU second of this process during the ticks (and per wall second);
``--profile`` adds cProfile's top functions by own time.

    source scripts/redis-env.sh
    .venv/bin/python bench/dispatcher_ceiling.py --runs 2000 --users 50 \\
        --database-url postgres://chat:chat@127.0.0.1:5432/chat_dispatch \\
        --redis-url "$(redis_url 15)" --broker-url "$(redis_url 2)" [--profile]

The Redis databases given are flushed first.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib.stack import ensure_database, flush_redis, unlimited_user  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--broker-url", required=True)
    parser.add_argument("--profile", action="store_true", help="cProfile's top functions of the ticks")
    args = parser.parse_args(argv)

    os.environ.update(
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        DATABASE_URL=args.database_url,
        REDIS_URL=args.redis_url,
        CELERY_BROKER_URL=args.broker_url,
        LOG_LEVEL="WARNING",
    )
    for url in (args.redis_url, args.broker_url):
        flush_redis(url)
    ensure_database(args.database_url)

    import django

    django.setup()
    from chats.models import Chat
    from deployments.selection import default_deployment
    from generation.worker_contract import WorkerHeartbeat, write_heartbeat
    from runs.dispatcher_wiring import build_dispatcher
    from runs.models import Run, RunStatus
    from runs.services import run_create

    served = default_deployment()
    if served is None:
        raise SystemExit("no default deployment (prepare_model did not run?)")
    deployment = served.key

    def beat() -> None:
        from core.redis_client import get_redis

        now = time.time()
        write_heartbeat(
            WorkerHeartbeat(
                worker="bench-worker",
                model=deployment.split("@")[0],
                model_version=deployment.split("@")[-1],
                max_slots=10 * args.runs,
                running=0,
                waiting=0,
                kv_cache_usage=0.0,
                tpot_s=0.02,
                active_runs=0,
                updated_at=now,
                stats_at=now,
                deployment=deployment,
            ),
            ttl_s=30,
            client=get_redis(),
        )

    beat()  # a ready worker of the default deployment: run_create accepts prompts for it
    # The runs an earlier invocation queued on this database never ran (nobody consumes): out of the way.
    Run.objects.filter(status=RunStatus.QUEUED).update(status=RunStatus.CANCELLED)
    users = [unlimited_user("dispatch-bench") for _ in range(args.users)]
    t0 = time.monotonic()
    run_ids = []
    for i in range(args.runs):
        if i % 100 == 0:
            beat()  # (its heartbeat lives 30 s; queueing takes longer)
        user = users[i % len(users)]
        chat = Chat.objects.create(owner=user)
        run_ids.append(run_create(chat_id=chat.pk, user=user, content=f"question {i}: what is {i} + {i}?").pk)
    queued_s = time.monotonic() - t0
    print(f"{args.runs} runs queued by run_create in {queued_s:.1f} s, deployment {deployment!r}", file=sys.stderr)

    beat()
    dispatcher = build_dispatcher()
    phases = _time_phases(dispatcher)
    profiler = cProfile.Profile() if args.profile else None
    sent = 0
    ticks = 0
    cpu = 0.0
    wall = 0.0
    last_beat = time.monotonic()
    deadline = time.monotonic() + 600
    while sent < args.runs and time.monotonic() < deadline:
        if time.monotonic() - last_beat > 1.0:
            beat()  # (outside the measured ticks: the worker's work, not the dispatcher's)
            last_beat = time.monotonic()
        c0, w0 = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        batch = dispatcher.tick()
        if profiler is not None:
            profiler.disable()
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        sent += len(batch)
        ticks += 1
    print(
        f"sent {sent} of {args.runs} runs in {ticks} ticks: {cpu:.2f} CPU s, {wall:.2f} wall s; "
        f"{sent / cpu if cpu else 0:.0f} decisions per CPU second, {sent / wall if wall else 0:.0f} per wall second; "
        f"{1000 * cpu / max(sent, 1):.2f} ms of CPU per decision"
    )
    other = cpu - sum(phases.values())
    parts = ", ".join(f"{name} {1000 * spent / max(sent, 1):.2f}" for name, spent in [*phases.items(), ("rest", other)])
    print(f"CPU ms per decision by phase: {parts}")
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(40)
        print(out.getvalue())
    return 0 if sent == args.runs else 1


def _time_phases(dispatcher: Any) -> dict[str, float]:
    """Wraps the tick's phases so their CPU seconds add up in the returned dict: the claims (one script each), the
    sends (routing and Celery's publish), the queue positions' refresh, the housekeeping; the rest of a tick is
    the policy's choices, the gate and the tick's fixed reads."""
    spent = {"claims": 0.0, "sends": 0.0, "positions": 0.0, "housekeeping": 0.0}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.process_time() - start

        return wrapper

    dispatcher.store.claim_and_peek = timed("claims", dispatcher.store.claim_and_peek)
    dispatcher._send = timed("sends", dispatcher._send)
    dispatcher.refresh_positions = timed("positions", dispatcher.refresh_positions)
    if dispatcher.housekeeping is not None:
        dispatcher.housekeeping = timed("housekeeping", dispatcher.housekeeping)
    return spent


if __name__ == "__main__":
    sys.exit(main())
