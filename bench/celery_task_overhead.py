"""A Celery worker's own CPU per task: what the worker's consumer thread spends to take, run and acknowledge a task
that does nothing, with the project's Celery settings (late acknowledgement, task events for Flower, the threads
pool), on the real Redis broker.

Every run on a worker is one Celery task, so this is part of a worker's fixed cost per run
(``bench/serving_ceiling.py``). Each side is a worker process of its own (``app.worker_main``, ``-P threads -c 64
-E``), started with the broker transport of that side, idle first; then ``--tasks`` tasks (Celery's own
``celery.accumulate``) are queued at once and the worker's CPU (``/proc``) is read from before the first is queued
until the last is acknowledged (the broker's unacked index empty). Sides:

- ``kombu``: kombu's Redis transport as it ships (a ``redis.Redis`` object built for each command outside the
  consumer's connection: each acknowledgement, each event);
- ``project``: ``core.celery_redis`` (``CELERY_BROKER_TRANSPORT``, the default): one client object per channel.

The sides are interleaved ``--rounds`` times.

    source scripts/redis-env.sh
    .venv/bin/python bench/celery_task_overhead.py --redis-url "$(redis_url 15)" --broker-url "$(redis_url 12)"

It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.lib import proc_cpu  # noqa: E402
from bench.lib.stack import flush_redis  # noqa: E402

SIDES = {"kombu": "redis", "project": "core.celery_redis:Transport"}
QUEUE = "bench-overhead"


def _setup(args: argparse.Namespace) -> None:
    os.environ.update(
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        REDIS_URL=args.redis_url,
        CELERY_BROKER_URL=args.broker_url,
        LOG_LEVEL="WARNING",
    )
    import django

    django.setup()


def _worker(args: argparse.Namespace) -> int:
    _setup(args)
    from chatproject.celery import app

    app.conf.broker_transport = SIDES[args.worker]
    options = ["-P", "threads", "-c", "64", "-Q", QUEUE, "-E", "--without-gossip", "--without-mingle"]
    options += ["--prefetch-multiplier", "1", "--loglevel", "WARNING"]
    app.worker_main(["worker", *options, "-n", f"overhead-{args.worker}@bench"])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sides", default="kombu,project")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--broker-url", required=True)
    parser.add_argument("--worker", choices=sorted(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return _worker(args)
    _setup(args)
    import redis

    from chatproject.celery import app

    broker = redis.Redis.from_url(args.broker_url)
    prefix = str(app.conf.broker_transport_options.get("global_keyprefix") or "")
    sides = [side.strip() for side in args.sides.split(",") if side.strip()]
    print(f"{args.tasks} tasks per side and round, {args.rounds} rounds, interleaved {sides}")
    for _ in range(args.rounds):
        for side in sides:
            flush_redis(args.broker_url)
            cmd = [sys.executable, __file__, "--worker", side, *(argv if argv is not None else sys.argv[1:])]
            worker = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                cpu = proc_cpu.own_seconds(worker.pid)
                _send(app, 64)  # warm: the worker is up and has taken a task; its queue is declared
                _drain(broker, prefix, timeout_s=60)
                time.sleep(1.0)
                before, started = cpu(), time.monotonic()
                _send(app, args.tasks)
                _drain(broker, prefix, timeout_s=300)
                spent, wall = cpu() - before, time.monotonic() - started
            finally:
                worker.terminate()
                worker.wait(30)
            print(
                f"{side:>8}: {1000 * spent / args.tasks:.3f} ms of the worker's CPU per task "
                f"({args.tasks / wall:,.0f} tasks/s)"
            )
    flush_redis(args.broker_url)
    return 0


def _send(app: object, n: int) -> None:
    from celery import Celery

    assert isinstance(app, Celery)
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            app.send_task("celery.accumulate", args=(1,), queue=QUEUE, producer=producer)


def _drain(broker: object, prefix: str, *, timeout_s: float) -> None:
    """Until the queue is empty and nothing is unacknowledged (each task acknowledged after it ran)."""
    import redis

    assert isinstance(broker, redis.Redis)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if broker.llen(prefix + QUEUE) == 0 and broker.zcard(prefix + "unacked_index") == 0:
            return
        time.sleep(0.05)
    raise SystemExit(f"the worker did not drain {QUEUE} within {timeout_s} s")


if __name__ == "__main__":
    raise SystemExit(main())
