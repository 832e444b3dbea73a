"""Latency of the native prompt POST (``POST /api/chats/{id}/messages``): accepted at 1 request, and 429s under
16 free-tier users posting in a loop (issue 14's targets: p50 at most 15 ms; a 429's p99 at most 10 ms).

    DATABASE_URL=postgres://chat:chat@127.0.0.1:5432/chat_bench REDIS_URL=redis://.../13 \
        .venv/bin/python bench/post_latency.py --posts 300 --refusal-s 20

Starts one uvicorn web process (``chatproject.asgi:application``, the production entry point) on the given
database (migrated first) and Redis; no dispatcher, no worker: accepted runs stay queued. Then, with httpx
clients (``Authorization: Token``, keep-alive):

0. ``GET /healthz`` one at a time: the floor of any request through this process (uvicorn, Django's ASGI
   handler and middleware, a synchronous view), for scale;
1. ``--posts`` sequential prompts by one user with high limits, each to a chat of its own made beforehand (the
   run is cancelled after each timed POST, untimed, so the queue and the concurrency cap stay empty);
2. one free-tier user at its concurrency cap posting ``--posts`` prompts one at a time (each a 429): the cost of a
   refusal on its own;
3. 16 free-tier users posting in a loop for ``--refusal-s`` seconds (asyncio, one connection each): once a
   user has its 2 runs queued, every further prompt is a 429 (``limit_concurrency``).

Prints p50 / p99 / max of each, client-side, after ``--warmup`` untimed posts. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FREE_USERS = 16


def configure_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chatproject.settings.base")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


def prepare(posts: int) -> tuple[str, list[int], list[tuple[str, int]]]:
    """The fast user's token and ``posts`` fresh chats; 16 free users' tokens with a chat each."""
    from django.core.management import call_command
    from rest_framework.authtoken.models import Token

    from accounts.models import Tier, User, UserLimitOverride
    from chats.models import Chat
    from core.redis_client import get_redis
    from deployments.models import ModelDeployment
    from generation.worker_contract import deployment_ready_key
    from runs.models import ACTIVE_STATUSES, Run, RunStatus

    call_command("migrate", verbosity=0, interactive=False)
    call_command("prepare_model")  # the default deployment verified and ready, as a worker start leaves it
    get_redis().flushdb()  # this database's Redis: no reservation or queue entry left from an earlier round
    # No worker runs here (the POST alone is measured): the default deployment is listed as having a ready one,
    # the marker a worker's heartbeat writes, so prompts are accepted and stay queued instead of 503.
    default = ModelDeployment.objects.get(is_default=True)
    get_redis().zadd(deployment_ready_key(default.key), {"post-bench": time.time() + 3600})
    Run.objects.filter(status__in=ACTIVE_STATUSES).update(status=RunStatus.CANCELLED)
    fast, _ = User.objects.get_or_create(username="post-bench", defaults={"tier": Tier.objects.get(name="pro")})
    UserLimitOverride.objects.update_or_create(
        user=fast,
        defaults={"bucket_capacity_tokens": 10**9, "bucket_refill_per_s": 10**6, "max_concurrent_runs": 1000},
    )
    token, _ = Token.objects.get_or_create(user=fast)
    chats = Chat.objects.bulk_create([Chat(owner=fast, title="") for _ in range(posts)])
    free = Tier.objects.get(name="free")
    refused: list[tuple[str, int]] = []
    for i in range(FREE_USERS):
        user, _ = User.objects.get_or_create(username=f"post-bench-free-{i}", defaults={"tier": free})
        refused.append((Token.objects.get_or_create(user=user)[0].key, Chat.objects.create(owner=user).pk))
    return token.key, [chat.pk for chat in chats], refused


def percentiles(samples: list[float]) -> str:
    if not samples:
        return "none"
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"n={len(ordered)} p50 {statistics.median(ordered) * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms, "
        f"max {ordered[-1] * 1e3:.1f} ms"
    )


def sequential(base: str, token: str, chats: list[int], warmup: int) -> list[float]:
    import httpx

    times: list[float] = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=30) as client:
        for index, chat_id in enumerate(chats):
            start = time.perf_counter()
            resp = client.post(f"/api/chats/{chat_id}/messages", json={"content": f"Hello number {index}"})
            elapsed = time.perf_counter() - start
            if resp.status_code != 202:
                raise SystemExit(f"prompt {index}: {resp.status_code} {resp.text[:300]}")
            client.post(f"/api/runs/{resp.json()['run']['id']}/cancel")
            if index >= warmup:
                times.append(elapsed)
    return times


def sequential_refusals(base: str, token: str, chat_id: int, posts: int, warmup: int) -> list[float]:
    import httpx

    times: list[float] = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=30) as client:
        chats = [chat_id]
        for index in range(posts + warmup):
            start = time.perf_counter()
            resp = client.post(f"/api/chats/{chats[-1]}/messages", json={"content": "Are you there?"})
            elapsed = time.perf_counter() - start
            if resp.status_code == 202:  # filling the cap first
                chats.append(client.post("/api/chats", json={"title": ""}).json()["id"])
            elif resp.status_code != 429:
                raise SystemExit(f"refusal {index}: {resp.status_code} {resp.text[:300]}")
            elif index >= warmup:
                times.append(elapsed)
    return times


async def refusals(base: str, users: list[tuple[str, int]], seconds: float) -> tuple[list[float], list[float]]:
    import httpx

    refused: list[float] = []
    accepted: list[float] = []
    others: dict[int, int] = {}
    deadline = time.monotonic() + seconds

    async def loop(token: str, chat_id: int) -> None:
        async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Token {token}"}, timeout=30) as c:
            chats = [chat_id]
            while time.monotonic() < deadline:
                start = time.perf_counter()
                resp = await c.post(f"/api/chats/{chats[-1]}/messages", json={"content": "Are you there?"})
                elapsed = time.perf_counter() - start
                if resp.status_code == 429:
                    refused.append(elapsed)
                elif resp.status_code == 202:
                    accepted.append(elapsed)
                    made = await c.post("/api/chats", json={"title": ""})  # the next prompt needs a free chat
                    chats.append(made.json()["id"])
                else:
                    others[resp.status_code] = others.get(resp.status_code, 0) + 1

    await asyncio.gather(*(loop(token, chat_id) for token, chat_id in users))
    if others:
        print(f"  other answers: {others}")
    return refused, accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--posts", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--refusal-s", type=float, default=20.0)
    parser.add_argument("--port", type=int, default=8714)
    args = parser.parse_args()

    configure_django()
    token, chats, free_users = prepare(args.posts + args.warmup)
    from django.db import connection

    connection.close()
    web = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "chatproject.asgi:application",
            "--port",
            str(args.port),
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        stderr=subprocess.DEVNULL,  # a warning line per 429 (django.request): kept off the figures' output
    )
    base = f"http://127.0.0.1:{args.port}"
    try:
        import httpx

        for _ in range(300):
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        with httpx.Client(base_url=base, timeout=30) as client:
            floor = []
            for index in range(args.posts + args.warmup):
                start = time.perf_counter()
                client.get("/healthz")
                if index >= args.warmup:
                    floor.append(time.perf_counter() - start)
        print(f"GET /healthz, 1 at a time (the floor): {percentiles(floor)}")
        times = sequential(base, token, chats, args.warmup)
        print(f"POST accepted (202), 1 at a time: {percentiles(times)}")
        alone = sequential_refusals(base, *free_users[0], args.posts, args.warmup)
        print(f"429, 1 at a time (one free user at its cap): {percentiles(alone)}")
        refused, accepted = asyncio.run(refusals(base, free_users, args.refusal_s))
        print(f"16 free users in a loop for {args.refusal_s:g} s: 429 {percentiles(refused)}")
        print(f"  their 202s: {percentiles(accepted)}")
    finally:
        web.terminate()
        web.wait(10)


if __name__ == "__main__":
    main()
