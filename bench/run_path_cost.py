"""The worker's fixed cost per run, and Postgres's, with Django's client-side binding and with server-side binding.

A run's path on a worker is the same whatever its length: the lease, the claim (``run_mark_streaming``), the
prompt, the first token's time, the end (``run_finish``: the answer, the usage, the chat), the lease back and a
heartbeat. This times that path alone: ``generate_run`` in this process on the stand-in engine (``--tokens`` tokens a
run, a step of 0.5 ms), one run after another, each in a chat of its own (an OpenAI-compatible call's). It prints
the CPU of the process per run (every thread: the task path, the engine loop, the stream writer), Postgres's CPU per
run (the whole cluster, from ``/proc``) and the wall time per run.

Each side runs in a process of its own, ``DB_SERVER_SIDE_BINDING`` set for it, interleaved ``--rounds`` times on the
same database: ``client`` is Django's default (psycopg's ``ClientCursor``: every value quoted into the SQL text, which
Postgres parses and plans afresh each time); ``server`` sends the values apart and lets psycopg prepare a statement
run five times on a connection (``prepare_threshold``), so Postgres plans it once per pooled connection.

    source scripts/redis-env.sh
    .venv/bin/python bench/run_path_cost.py \\
        --database-url postgres://chat:chat@127.0.0.1:5432/chat_run_path --redis-url "$(redis_url 13)"

It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIDES = {"client": "false", "server": "true"}
"""``DB_SERVER_SIDE_BINDING`` of each side."""
WARM_UP_RUNS = 20
"""Runs before the measured ones: the pool's connections open and psycopg prepares what repeats."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="measured runs per side and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=4, help="output tokens of each run")
    parser.add_argument("--sides", default="client,server")
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--child", choices=sorted(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)
    from bench.lib.stack import ensure_database, flush_redis

    ensure_database(args.database_url)
    flush_redis(args.redis_url)
    sides = [side.strip() for side in args.sides.split(",") if side.strip()]
    print(f"{args.runs} runs of {args.tokens} tokens per side and round, {args.rounds} rounds, interleaved {sides}")
    for _ in range(args.rounds):
        for side in sides:
            env = {**os.environ, "DB_SERVER_SIDE_BINDING": SIDES[side]}
            cmd = [sys.executable, __file__, "--child", side, *(argv if argv is not None else sys.argv[1:])]
            out = subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
            figures = json.loads(out.strip().splitlines()[-1])
            print(
                f"{side:>6}: {figures['cpu_ms']:6.2f} ms CPU, Postgres {figures['postgres_ms']:5.2f} ms CPU, "
                f"{figures['wall_ms']:6.1f} ms wall per run"
            )
    return 0


def _child(args: argparse.Namespace) -> int:
    from bench.lib.stack import setup_django

    setup_django(DATABASE_URL=args.database_url, REDIS_URL=args.redis_url)
    from django.conf import settings

    from bench.lib import proc_cpu
    from bench.lib.stack import set_moderation, unlimited_user
    from chats.models import Chat, ChatOrigin, Message, MessageRole
    from deployments.selection import default_deployment
    from inference_workers.engine.simulated import SimulatedEngine
    from inference_workers.runtime import WorkerRuntime
    from inference_workers.services import generate_run
    from runs.models import Run, RunStatus

    bound = bool(settings.DATABASES["default"].get("OPTIONS", {}).get("server_side_binding"))
    assert bound == (args.child == "server"), "DB_SERVER_SIDE_BINDING did not reach the settings"
    set_moderation(on=False)  # the work of vLLM's own server: no moderation pass
    config = dataclasses.replace(
        settings.ENGINE,
        backend="simulated",
        max_num_seqs=8,
        sim_step_base_s=0.0005,
        sim_step_per_seq_s=0.0,
        sim_prefill_per_token_s=0.0,
        sim_output_tokens=args.tokens,
    )
    runtime = WorkerRuntime(
        worker_name=f"run-path-{args.child}@bench",
        engine_config=config,
        worker_config=settings.WORKERS,
        engine=SimulatedEngine(config),
        warm_up=False,
    )
    runtime.start()
    user = unlimited_user("run-path")
    deployment = default_deployment()

    def queued_run(n: int) -> int:
        chat = Chat.objects.create(owner=user, title=f"run path {n}", origin=ChatOrigin.API)
        message = Message.objects.create(chat=chat, role=MessageRole.USER, content=f"Tell me about the number {n}.")
        run = Run.objects.create(
            chat=chat,
            user=user,
            tier=user.tier,
            user_message=message,
            status=RunStatus.QUEUED,
            max_tokens=args.tokens,
            deployment_id=deployment.id if deployment is not None else None,
        )
        return run.pk

    for n in range(WARM_UP_RUNS):
        generate_run(run_id=queued_run(n), runtime=runtime)
    ids = [queued_run(WARM_UP_RUNS + n) for n in range(args.runs)]
    postgres = proc_cpu.named_seconds("postgres", with_reaped=True)
    pg0, cpu0, wall0 = postgres(), time.process_time(), time.monotonic()
    for run_id in ids:
        status = generate_run(run_id=run_id, runtime=runtime)
        if status != RunStatus.DONE:
            raise SystemExit(f"run {run_id} ended {status}")
    pg1, cpu1, wall1 = postgres(), time.process_time(), time.monotonic()
    runtime.stop()
    runs = len(ids)
    figures = {
        "cpu_ms": 1000 * (cpu1 - cpu0) / runs,
        "postgres_ms": 1000 * (pg1 - pg0) / runs,
        "wall_ms": 1000 * (wall1 - wall0) / runs,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
